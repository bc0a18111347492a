"""Model instances: one model opened several times, each run handed to the least busy copy (``--instances``).

Each instance is its own backend object: its own ONNX Runtime session or TensorRT execution context and, on a GPU,
its own CUDA stream and CUDA graphs, so several batches run on one device at once, as Triton's instance groups
do. A run goes to the instance with the fewest runs in progress; among equally busy ones, to the one that has run
least, so that every instance stays warm (not a blind round robin: a busy instance is never picked while another
is idle).

With more than one instance, opening them is checked against memory (footprint.py): the first instance is opened
and warmed up, the second is measured while it loads and runs a warm-up batch (what another copy costs, without
what the process pays once: libraries, a CUDA context), and the rest are opened only when all fit; otherwise the
server does not start, and one line says how many fit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from trtpipe import console
from trtpipe.embedding import Model
from trtpipe.serve.batching.footprint import MemoryBudget, UsageMeter, free_mib, memory_word, mib


class ModelInstances:
    """Loaded copies of one model; :meth:`predict_all` runs on the least busy one. ``on_run(index)`` is called
    after each run an instance finished (the server counts them per instance in /metrics)."""

    def __init__(self, models: list[Model], on_run: Callable[[int], None] | None = None) -> None:
        if not models:
            raise ValueError("ModelInstances needs at least one model")
        self.models = models
        self.on_run = on_run
        self.busy = [0] * len(models)  # runs in progress per instance
        self.started = [0] * len(models)  # runs started per instance
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.models)

    @property
    def first(self) -> Model:
        """The instance whose tensors describe them all (they are one artifact)."""
        return self.models[0]

    @contextmanager
    def acquire(self) -> Iterator[tuple[int, Model]]:
        """The least busy instance (ties: the one started least, then the lowest index), held busy meanwhile."""
        with self._lock:
            index = min(range(len(self.models)), key=lambda i: (self.busy[i], self.started[i], i))
            self.busy[index] += 1
            self.started[index] += 1
        try:
            yield index, self.models[index]
        finally:
            with self._lock:
                self.busy[index] -= 1

    def predict_all(self, inputs: Any) -> list[np.ndarray]:
        """Every output of one run on the least busy instance (see :meth:`Model.predict_all`)."""
        with self.acquire() as (index, model):
            outputs = model.predict_all(inputs)
        if self.on_run is not None:
            self.on_run(index)
        return outputs

    def close(self) -> None:
        for model in self.models:
            model.close()

    def __enter__(self) -> ModelInstances:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def warm_up_inputs(model: Model, rows: int) -> list[np.ndarray] | None:
    """Zeros for one run of ``rows`` (a dynamic batch axis; a fixed one keeps its size); None when another axis
    is dynamic (its size is the requests' to choose)."""
    arrays = []
    largest = model.backend.max_batch
    rows = min(rows, largest) if largest is not None else rows
    for tensor in model.inputs:
        given = [rows if axis == 0 and not isinstance(d, int) else d for axis, d in enumerate(tensor.shape)]
        shape = [d for d in given if isinstance(d, int)]
        if len(shape) != len(given):
            return None
        arrays.append(np.zeros(shape, dtype=tensor.dtype))
    return arrays


def _warm_up(model: Model, inputs: list[np.ndarray] | None, label: str) -> None:
    """One run, so that an instance holds what serving makes it hold (memory pools, workspaces, CUDA graphs)."""
    if inputs is None:
        return
    try:
        model.predict_all(inputs)
    except Exception as error:  # a model that refuses zeros still serves; its size is then what loading took
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        console.warn(f"{label}: the warm-up run failed ({first_line}); instances are measured after loading only.")


def open_instances(open_one: Callable[[], Model], count: int, *, rows: int, budget: MemoryBudget, label: str,
                   on_run: Callable[[int], None] | None = None) -> ModelInstances:
    """``count`` instances from ``open_one``; above one, each warmed up with a batch of ``rows`` and checked
    against memory (raises InstancesDoNotFit naming how many fit). One instance is opened as it always was: no
    warm-up, no check."""
    first = open_one()
    if count == 1:
        return ModelInstances([first], on_run)
    models = [first]
    try:
        inputs = warm_up_inputs(first, rows)
        if inputs is None:
            console.note(f"{label}: an input has a dynamic size besides the batch: instances are measured after "
                         "loading only.")
        _warm_up(first, inputs, label)
        device = first.backend.device
        with UsageMeter(device) as meter:
            free = free_mib(device)
            models.append(open_one())
            _warm_up(models[1], inputs, label)
            size = meter.read()
        if size is None or (free is None and budget.limit_mib is None):
            console.warn(f"{label}: the {memory_word(device)} memory an instance takes cannot be read here: "
                         f"{count} instances are opened unchecked.")
        else:
            size = max(size, _file_mib(first))  # an instance holds its weights at least
            budget.check(label, count, size, free, device)
            console.note(f"{label}: {count} instances of ~{mib(size)} MiB of {memory_word(device)} memory each")
        for _ in range(count - 2):
            models.append(open_one())
            _warm_up(models[-1], inputs, label)
    except BaseException:
        for model in models:
            model.close()
        raise
    return ModelInstances(models, on_run)


def _file_mib(model: Model) -> float:
    path = Path(model.source)
    return path.stat().st_size / (1 << 20) if path.is_file() else 0.0
