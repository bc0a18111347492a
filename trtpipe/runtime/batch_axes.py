"""Which axis of each output holds the samples of a batch, so that runs in chunks join their outputs on it.

Most outputs are batch-first, but not all: a CRNN's CTC logits are ``[T, N, C]`` (time first, as PyTorch's CTC loss
takes them), and a detector may emit a batch-free output (its anchors, a prior grid). The batch axis is read from
the graph first: the output's axes named as the first input's batch axis (a symbolic dimension they share), or,
with a static batch, the axes of exactly that size. Where the names do not tell (exporters often name every output
axis afresh), the model is run on batches of one and two samples and the axis that doubled is the batch axis; an
output whose shape does not follow the batch has none.

Outputs are then handed on **samples first** (:func:`samples_first`): every measure reads a sample per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trtpipe.artifact.tensors import TensorInfo
from trtpipe.errors import BadInput


@dataclass(frozen=True)
class BatchAxes:
    """Each output's batch axis (None: the output has none), and how it was found (for the record)."""

    axes: tuple[int | None, ...]
    how: str  # "the graph's shapes" or "runs of 1 and 2 samples"

    def describe(self, names: Sequence[str]) -> str | None:
        """One line naming the outputs (``names``, in order) whose batch is not their first axis, or None where
        every one's is."""
        unusual = [f"'{name}' on axis {axis}" if axis is not None else f"'{name}' has none"
                   for name, axis in zip(names, self.axes, strict=True) if axis != 0]
        return f"the batch axis of {', '.join(unusual)} (from {self.how})" if unusual else None

    def record(self, names: Sequence[str]) -> dict[str, object]:
        """What the manifest keeps: each output's batch axis (None: none) and how it was found."""
        return {"axes": dict(zip(names, self.axes, strict=True)), "found_from": self.how}


def from_graph(inputs: Sequence[TensorInfo], outputs: Sequence[TensorInfo]) -> BatchAxes | None:
    """The outputs' batch axes as the graph's shapes tell them, or None where they do not tell every one."""
    if not inputs or not inputs[0].shape:
        return None
    batch = inputs[0].shape[0]
    found: list[int | None] = []
    for info in outputs:
        if isinstance(batch, str):
            matching = [axis for axis, dim in enumerate(info.shape) if dim == batch]
            if len(matching) != 1:  # not named alike (or named twice): the runs decide
                return None
            found.append(matching[0])
        elif isinstance(batch, int):
            matching = [axis for axis, dim in enumerate(info.shape) if dim == batch]
            if any(not isinstance(dim, int) for dim in info.shape):
                return None  # a free axis of a static-batch model: nothing says which is the batch's
            # A static batch: the only axis of that size, the first where several are (a batch of 1 in [1, 1, C])
            found.append(0 if 0 in matching else matching[0] if matching else None)
        else:
            return None
    return BatchAxes(tuple(found), "the graph's shapes")


def from_runs(one: Sequence[np.ndarray], two: Sequence[np.ndarray]) -> BatchAxes:
    """The batch axes the outputs of a run on one sample (``one``) and on two (``two``) show: the axis that doubled
    (1 to 2, or rows per sample: k to 2k), the first where several did; none where the shape did not change."""
    found: list[int | None] = []
    for single, double in zip(one, two, strict=True):
        grown = [axis for axis, (a, b) in enumerate(zip(single.shape, double.shape, strict=False)) if b == 2 * a > 0]
        found.append(grown[0] if grown and single.ndim == double.ndim else None)
    return BatchAxes(tuple(found), "runs of 1 and 2 samples")


def join(chunks: Sequence[np.ndarray], axis: int | None, name: str) -> np.ndarray:
    """One output's chunks joined on its batch axis, samples first. An output without a batch axis is the same in
    every chunk (a detector's anchors) and is kept once; one that changes from chunk to chunk is refused in one line,
    as it cannot be told apart sample by sample."""
    if axis is not None:
        return samples_first(np.concatenate(chunks, axis=axis) if len(chunks) > 1 else chunks[0], axis)
    if any(c.shape != chunks[0].shape or not np.array_equal(c, chunks[0], equal_nan=True) for c in chunks[1:]):
        raise BadInput(f"Output '{name}' (shaped {list(chunks[0].shape)}) has no batch axis, yet its values change "
                       "with the samples in a batch: it cannot be read sample by sample. Run the model with one batch "
                       "that holds every sample (a static batch of that size), or export it with a per-sample output.")
    return chunks[0]


def samples_first(array: np.ndarray, axis: int | None) -> np.ndarray:
    """``array`` with its batch axis first (as it is where ``axis`` is 0 or None)."""
    return array if not axis else np.moveaxis(array, axis, 0)


def from_static(outputs: Sequence[np.ndarray], batch: int) -> BatchAxes:
    """The batch axes the outputs of one run on a static batch of ``batch`` samples show: the axis of that size
    (the first where several are); none where no axis is."""
    found = [0 if o.shape[:1] == (batch,) else next((a for a, d in enumerate(o.shape) if d == batch), None)
             for o in outputs]
    return BatchAxes(tuple(found), f"the outputs of a static batch of {batch}")
