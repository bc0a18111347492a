"""The inputs every variant of one bench run shares: one timing batch per size, and one agreement set.

The agreement set is the held-out split for a model with a bundled data set (with its labels), else seeded random
inputs; every variant is fed the same arrays, as its caller would feed them (:func:`fed`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trtpipe.bench.reference import OnnxReference
from trtpipe.inputs import Batch, fed_as, random_batch, resize
from trtpipe.models.loader import LoadedModel
from trtpipe.runtime.base import Backend

RANDOM_AGREEMENT_SAMPLES = 32
RANDOM_WEIGHTS = "random weights: accuracy not measured"


@dataclass
class Samples:
    """Inputs shared by every variant: one timing batch per size, one agreement set."""

    timing: dict[int, Batch]  # a batch: one array, or {input name: array} for a model of several inputs
    agreement: Batch
    labels: np.ndarray | None
    description: str
    # Why the task's agreement would mean nothing on these samples (random weights on random inputs), or None.
    unmeasured: str | None = None


def draw_samples(loaded: LoadedModel | OnnxReference, batches: tuple[int, ...]) -> Samples:
    """The model's evaluation data where it has some, else seeded random inputs of every input's kind."""
    data = loaded.evaluation_data()
    if data is not None:
        timing = {b: resize(data.images, b) for b in batches}
        return Samples(timing, data.images, data.labels, data.description)
    rng = np.random.default_rng(0)
    timing = {b: random_batch(loaded.inputs, b, rng) for b in batches}
    agreement = random_batch(loaded.inputs, RANDOM_AGREEMENT_SAMPLES, rng)
    # A registry network without data of its own has seeded random weights: its "classes" on noise are no answer
    # an optimization could keep or lose, so only the output errors are reported.
    unmeasured = RANDOM_WEIGHTS if loaded.source_kind == "registry" else None
    plain = len(loaded.inputs) == 1 and loaded.inputs[0].dtype == "float32" and loaded.inputs[0].value_range is None
    drawn = "" if plain else f": {'; '.join(s.describe_random() for s in loaded.inputs)}"
    return Samples(timing, agreement, None, f"{RANDOM_AGREEMENT_SAMPLES} seeded random inputs (no labels{drawn})",
                   unmeasured)


def fed(backend: Backend, batch: Batch) -> Batch:
    """The samples as the artifact takes them: float inputs in FP16 for an artifact with FP16 inputs
    (optimize --no-keep-io-fp32), as its caller feeds it."""
    return fed_as(batch, [(t.name, t.dtype) for t in backend.inputs])
