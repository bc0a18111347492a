"""The backend interface every engine kind implements.

Subclasses fill in ``_run``, describe their tensors and declare the run settings they honour; :meth:`Backend.run`
does the checks every caller needs once, so a wrong dtype or shape is reported the same way by the CLI, by bench
and by the server. Timing loops and servers that run the same checked inputs many times use :meth:`Backend.bind`.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, ClassVar

import numpy as np

from trtpipe.artifact.tensors import TensorInfo
from trtpipe.errors import BadInput
from trtpipe.inputs import Batch, concat, count, take
from trtpipe.runtime.batch_axes import BatchAxes, from_graph, from_runs, from_static, join
from trtpipe.runtime.options import RunOptions
from trtpipe.vocab import BackendKind, Device, Precision

Inputs = np.ndarray | Mapping[str, np.ndarray] | Sequence[np.ndarray]


class Backend(ABC):
    """A loaded model that maps numpy inputs to numpy outputs."""

    kind: ClassVar[BackendKind]
    settings_type: ClassVar[type]  # the dataclass of run settings it receives (its folder's settings.py)
    settings: ClassVar[frozenset[str]]  # that type's fields: the RunOptions fields this backend honours
    concurrent: ClassVar[bool] = False  # whether one loaded model may run calls from several threads at once
    precision: Precision = Precision.FP32
    device: Device = Device.CPU
    _inputs: list[TensorInfo]  # set by each backend when it loads the artifact
    _outputs: list[TensorInfo]
    _batch_axes: BatchAxes | None = None  # each output's batch axis, found on the first chunked run

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "settings_type" in cls.__dict__:
            cls.settings = frozenset(f.name for f in dataclasses.fields(cls.settings_type))

    @property
    def inputs(self) -> list[TensorInfo]:
        return self._inputs

    @property
    def outputs(self) -> list[TensorInfo]:
        return self._outputs

    @classmethod
    def accept(cls, options: Any) -> Any:
        """This backend's own settings (its ``settings_type``) from ``options``: given as that type, taken out of a
        RunOptions (refused in one line where a changed setting is not one of this backend's), or the defaults."""
        if isinstance(options, cls.settings_type):
            return options
        return (options or RunOptions()).only(cls.settings_type, cls.kind)

    @abstractmethod
    def _run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]: ...

    def run(self, inputs: Inputs) -> list[np.ndarray]:
        """Run the model; a bare array goes to the single input. Returns outputs in ``self.outputs`` order."""
        return self._run(self.feeds(inputs))

    def bind(self, inputs: Inputs) -> Callable[[], list[np.ndarray]]:
        """A call that runs the model on ``inputs``, named and checked once now: what a timing loop repeats, so
        it times the model and not the checks."""
        feeds = self.feeds(inputs)
        return lambda: self._run(feeds)

    def device_resident_call(self, feeds: dict[str, np.ndarray]) -> Callable[[], None] | None:
        """On a GPU, a call on inputs already in device memory (outputs left there): the latency without
        host-device copies. None where there are no transfers (the CPU) or the backend cannot keep them."""
        return None

    def replays_cuda_graph(self, feeds: dict[str, np.ndarray]) -> bool | None:
        """Whether runs of ``feeds``' shapes replay a captured CUDA graph (bench's rows say so); None where the
        backend does not report it (CPU runtimes; PyTorch, whose CUDA-graph rows say so in their name)."""
        return None

    def profile_layers(self, feeds: dict[str, np.ndarray], runs: int) -> dict[str, Any] | None:
        """Every layer's time over ``runs`` runs of ``feeds``' shapes, from the engine's own profiler, taken apart
        from the timed runs; None where the engine cannot profile its layers (only TensorRT's can)."""
        return None

    def feeds(self, inputs: Inputs) -> dict[str, np.ndarray]:
        """Name and check the inputs (:meth:`bind` does it once for repeated runs)."""
        expected = self.inputs
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        if not isinstance(inputs, Mapping):
            if len(inputs) != len(expected):
                raise BadInput(f"The model takes {len(expected)} inputs "
                               f"({', '.join(t.name for t in expected)}); got {len(inputs)}.")
            inputs = {info.name: array for info, array in zip(expected, inputs, strict=True)}
        names = {t.name for t in expected}
        missing, extra = names - set(inputs), set(inputs) - names
        if missing or extra:
            raise BadInput(f"Inputs do not match the model: missing {sorted(missing) or 'none'}, "
                           f"unexpected {sorted(extra) or 'none'}.")
        feeds = {}
        for info in expected:
            array = np.asarray(inputs[info.name])
            info.check(array)
            feeds[info.name] = array
        return feeds

    def run_chunked(self, data: Batch, chunk: int,
                    on_samples: Callable[[int], None] | None = None) -> list[np.ndarray]:
        """Every output over ``data`` (an array for the only input, or {input name: array}), in ``self.outputs``
        order and **samples first**, run in chunks of at most ``chunk`` samples (the model's static batch, else
        within an engine profile's maximum). Each output's chunks are joined on its own batch axis
        (:meth:`batch_axes`: a time-major ``[T, N, C]`` output comes back ``[N, T, C]``); an output without one is
        kept once where every chunk gives the same (refused in one line where not). A static batch drops the
        remainder that does not fill one. ``on_samples``: told how many samples each chunk ran (a progress bar)."""
        fixed = self.static_batch
        total = count(data)
        size = fixed or min(chunk, self.max_batch or chunk)
        usable = total - total % size if fixed else total
        if usable == 0:
            raise BadInput(f"{total} samples do not fill one batch of the model's static batch size {fixed}.")
        parts = []
        for start in range(0, usable, size):
            parts.append(self.run(take(data, start, start + size)))
            if on_samples is not None:
                on_samples(min(size, usable - start))
        axes = self.batch_axes(data, parts[0])
        return [join(chunks, axis, info.name)
                for chunks, axis, info in zip(zip(*parts, strict=True), axes.axes, self.outputs, strict=True)]

    def batch_axes(self, data: Batch, first: Sequence[np.ndarray] | None = None) -> BatchAxes:
        """Which axis of each output holds the batch (trtpipe.runtime.batch_axes): from the graph's shapes, else
        from runs of one and two samples of ``data`` (with a static batch: the axis of that size in ``first``, the
        outputs of one full batch); found once per loaded model."""
        known = self._batch_axes
        if known is None:
            known = from_graph(self.inputs, self.outputs)
            fixed = self.static_batch or (1 if self.max_batch == 1 else None)
            if known is None and fixed:
                outputs = first if first is not None else self.run(take(data, 0, fixed))
                known = from_static(outputs, fixed)
            elif known is None:
                one = take(data, 0, 1)
                known = from_runs(self.run(one), self.run(concat([one, one])))
            self._batch_axes = known
        return known

    @property
    def thread_safe(self) -> bool:
        """Whether calls may run from several threads at once on this loaded model (its kind's rule, unless the
        way it was opened says otherwise)."""
        return self.concurrent

    @property
    def max_batch(self) -> int | None:
        """The largest batch the backend accepts (a TensorRT profile's maximum); None: no limit."""
        return None

    @property
    def static_batch(self) -> int | None:
        """The first input's fixed batch size, or None when the batch axis is dynamic."""
        first = self.inputs[0].shape[0] if self.inputs and self.inputs[0].shape else None
        return first if isinstance(first, int) else None

    def close(self) -> None:
        """Release the engine's resources (sessions, device memory, threads)."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
