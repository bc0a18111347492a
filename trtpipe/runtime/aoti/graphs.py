"""CUDA graphs for an AOTInductor package on a GPU.

AOTInductor launches every kernel itself on each call and does not capture CUDA graphs; a small batch on a fast
GPU is then bound by launches. So each input shape's call is captured once and replayed, as PyTorch documents for
CUDA graphs (torch.cuda.CUDAGraph, torch.cuda.graph): warm up on a side stream, capture into static input tensors
(the outputs the capture allocated are the static outputs), then copy each call's inputs in and replay. The
package must be loaded with ``run_single_threaded=True``: its default runner's locking and stream handling cannot
be recorded in a graph. A capture that fails is said once, in a warning, and every later call runs the package
directly. Replayed outputs are overwritten by the next replay: callers copy them (to the host) before that.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from trtpipe import console
from trtpipe.runtime.torch.backend import flatten_outputs

WARMUP_RUNS = 3  # on a side stream before a capture, as PyTorch's CUDA-graph recipe does
Key = tuple[tuple[tuple[int, ...], torch.dtype], ...]


@dataclass(frozen=True)
class _Captured:
    graph: torch.cuda.CUDAGraph
    inputs: tuple[torch.Tensor, ...]  # the static buffers the graph reads
    outputs: list[torch.Tensor]  # the buffers it writes


class CudaGraphs:
    """One CUDA graph per input shape of a package's ``runner``, captured on its first call."""

    def __init__(self, runner: Callable[..., object], label: str) -> None:
        self._runner = runner
        self._label = label
        self._captured: dict[Key, _Captured] = {}
        self.failed: str | None = None  # why capturing failed (every call then runs the package directly)

    @property
    def replays(self) -> bool:
        return self.failed is None

    def run(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The outputs of ``tensors`` (on the device), replayed from their shape's graph."""
        captured = self._graph(tensors)
        if captured is None:
            return flatten_outputs(self._runner(*tensors))
        for static, given in zip(captured.inputs, tensors, strict=True):
            if static.data_ptr() != given.data_ptr():
                static.copy_(given)
        captured.graph.replay()
        return captured.outputs

    def bound(self, tensors: Sequence[torch.Tensor]) -> Callable[[], list[torch.Tensor]]:
        """A call that replays ``tensors``' graph on its own input buffers, ``tensors`` copied into them once now:
        what a timing loop repeats to time the model alone. Without a graph, the package run on ``tensors``."""
        captured = self._graph(tensors)
        if captured is None:
            return lambda: flatten_outputs(self._runner(*tensors))
        for static, given in zip(captured.inputs, tensors, strict=True):
            static.copy_(given)

        def replay() -> list[torch.Tensor]:
            captured.graph.replay()
            return captured.outputs

        return replay

    def _graph(self, tensors: Sequence[torch.Tensor]) -> _Captured | None:
        if self.failed is not None:
            return None
        key = tuple((tuple(t.shape), t.dtype) for t in tensors)
        captured = self._captured.get(key)
        if captured is None:
            try:
                captured = self._captured[key] = self._capture(tensors)
            except RuntimeError as error:  # CUDA reports an operation it cannot capture as a RuntimeError
                self.failed = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
                console.warn(f"{self._label}: a CUDA graph could not be captured ({self.failed}); it runs without "
                             "one.")
                torch.cuda.synchronize()
                return None
        return captured

    def _capture(self, tensors: Sequence[torch.Tensor]) -> _Captured:
        static = tuple(t.clone() for t in tensors)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_RUNS):
                self._runner(*static)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs = flatten_outputs(self._runner(*static))
        return _Captured(graph, static, outputs)
