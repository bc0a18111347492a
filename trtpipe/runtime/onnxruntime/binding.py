"""ONNX Runtime runs through IO binding: inputs and outputs in buffers ONNX Runtime does not allocate per call.

On a GPU this is what keeps a run on the device: inputs are copied once into device buffers (or already live
there), outputs stay in device memory until read, and, with the CUDA provider's ``enable_cuda_graph``, each input
shape gets buffers of its own at fixed addresses and a graph id (the ``gpu_graph_id`` run setting), so one session
replays one captured CUDA graph per batch shape. The same code runs on the CPU provider (device ``cpu``), where the
buffers are host memory: that is how it is tested without a GPU.

Graph ids are never reused. ONNX Runtime replays an id it has captured and does not capture it again, so an id
handed to a second shape would replay the first shape's graph into the first shape's buffers: the second shape's
outputs would never be written. Each new shape takes the next id (from 1: an unset ``gpu_graph_id`` means 0), and
a shape dropped to bound memory gives its captured graph back (``InferenceSession.release_captured_graph``, where
this ONNX Runtime has it) with its buffers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trtpipe import console
from trtpipe.vocab import Device

FIRST_GRAPH_ID = 1  # ONNX Runtime reads an unset gpu_graph_id as 0: no shape of ours shares that id


@dataclass
class _ShapeBuffers:
    """The fixed buffers of one input shape: bound once, refilled in place on every call."""

    binding: Any  # onnxruntime.IOBinding
    inputs: dict[str, Any]  # input name -> OrtValue
    outputs: list[Any] = field(default_factory=list)  # OrtValues, in output order; empty until the first run
    graph_id: int = -1  # the CUDA graph this shape replays (-1: none)
    run_options: Any = None  # onnxruntime.RunOptions carrying gpu_graph_id
    runs: int = 0  # runs with the graph id (ONNX Runtime captures the graph on one of the first)


class BoundSession:
    """Runs one ONNX Runtime session through IO binding on ``device``.

    ``fixed``: every input shape keeps its own buffers (required for CUDA graphs, whose captured launches read and
    write fixed addresses; also fewer allocations per call). ``graphs``: each shape replays its own CUDA graph.
    """

    def __init__(self, session: Any, device: Device, *, device_id: int = 0, fixed: bool = False, graphs: bool = False,
                 base_run_options: Any = None, max_shapes: int = 16) -> None:
        self.session = session
        self.device = str(device)  # ONNX Runtime's device names are the vocabulary's
        self.cpu = device is Device.CPU
        self.device_id = device_id
        self.fixed = fixed or graphs
        self.graphs = graphs
        self.base_run_options = base_run_options
        self.max_shapes = max_shapes
        self.output_names = [o.name for o in session.get_outputs()]
        self._shapes: dict[tuple[tuple[str, tuple[int, ...]], ...], _ShapeBuffers] = {}
        self._next_graph_id = FIRST_GRAPH_ID
        self.released_graphs: list[int] = []  # graph ids given back to ONNX Runtime, in order

    # -- plain runs (a new binding per call, outputs allocated by ONNX Runtime on ``device``) --------------------
    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The outputs of one run on host arrays, copied back to the host."""
        if self.fixed:
            buffers = self._buffers(feeds)
            for name, array in feeds.items():
                buffers.inputs[name].update_inplace(np.ascontiguousarray(array))
            self._run_bound(buffers)
            # On the CPU, numpy() is a view of the fixed buffer the next call overwrites: the caller gets a copy.
            return [value.numpy().copy() if self.cpu else value.numpy() for value in buffers.outputs]
        binding = self.session.io_binding()
        for name, array in feeds.items():
            binding.bind_ortvalue_input(name, self._value(np.ascontiguousarray(array)))
        for name in self.output_names:
            binding.bind_output(name, self.device, self.device_id)
        self.session.run_with_iobinding(binding, self.base_run_options)
        return binding.copy_outputs_to_cpu()

    def resident_call(self, feeds: dict[str, np.ndarray]) -> Callable[[], None]:
        """A call on inputs already in device memory whose outputs stay there: the latency without copies."""
        buffers = self._buffers(feeds) if self.fixed else None
        if buffers is not None:
            for name, array in feeds.items():
                buffers.inputs[name].update_inplace(np.ascontiguousarray(array))
            self._run_bound(buffers)  # the first run of a shape sizes its outputs
            return lambda: self._run_bound(buffers)
        binding = self.session.io_binding()
        for name, array in feeds.items():
            binding.bind_ortvalue_input(name, self._value(np.ascontiguousarray(array)))
        for name in self.output_names:
            binding.bind_output(name, self.device, self.device_id)

        def call() -> None:
            self.session.run_with_iobinding(binding, self.base_run_options)

        return call

    @property
    def captured_shapes(self) -> int:
        """How many input shapes have a CUDA graph id of their own."""
        return sum(1 for b in self._shapes.values() if b.graph_id >= 0)

    def graph_ids(self) -> dict[tuple[tuple[str, tuple[int, ...]], ...], int]:
        """Each kept input shape's CUDA graph id ({(input name, shape), ...}: id), oldest shape first."""
        return {key: buffers.graph_id for key, buffers in self._shapes.items() if buffers.graph_id >= 0}

    def close(self) -> None:
        """Give back every shape's buffers and captured graph; the session itself is the caller's."""
        for key in list(self._shapes):
            self._drop(key)

    # -- fixed buffers per input shape -------------------------------------------------------------------------
    def _buffers(self, feeds: dict[str, np.ndarray]) -> _ShapeBuffers:
        key = tuple(sorted((name, tuple(array.shape)) for name, array in feeds.items()))
        buffers = self._shapes.get(key)
        if buffers is not None:
            return buffers
        if len(self._shapes) >= self.max_shapes:  # bound memory: the oldest shape gives its buffers back
            self._drop(next(iter(self._shapes)))
        import onnxruntime as ort

        binding = self.session.io_binding()
        inputs = {}
        for name, array in feeds.items():
            value = self._value(np.ascontiguousarray(array))
            binding.bind_ortvalue_input(name, value)
            inputs[name] = value
        graph_id = -1
        run_options = self.base_run_options
        if self.graphs:
            graph_id, self._next_graph_id = self._next_graph_id, self._next_graph_id + 1
            run_options = ort.RunOptions()
            run_options.add_run_config_entry("gpu_graph_id", str(graph_id))
        buffers = _ShapeBuffers(binding, inputs, graph_id=graph_id, run_options=run_options)
        self._shapes[key] = buffers
        return buffers

    def _drop(self, key: tuple[tuple[str, tuple[int, ...]], ...]) -> None:
        """Forget one shape: its buffers go with it, and its captured graph is released where ONNX Runtime can
        (its id is never handed out again, so a graph that cannot be released only costs memory)."""
        buffers = self._shapes.pop(key)
        release = getattr(self.session, "release_captured_graph", None)  # ONNX Runtime 1.32 and later
        if buffers.graph_id < 0 or not buffers.runs or release is None:
            return
        try:
            release(buffers.graph_id)
        except Exception as error:  # ONNX Runtime raises its own types; a graph kept alive is memory, not a bug
            console.warn(f"ONNX Runtime could not release CUDA graph {buffers.graph_id} ({error}); it stays in "
                         "memory until the session closes.")
            return
        self.released_graphs.append(buffers.graph_id)

    def _run_bound(self, buffers: _ShapeBuffers) -> None:
        if not buffers.outputs:
            self._size_outputs(buffers)
        self.session.run_with_iobinding(buffers.binding, buffers.run_options)
        buffers.runs += 1

    def _size_outputs(self, buffers: _ShapeBuffers) -> None:
        """One plain run (no graph) tells the outputs' shapes; fixed output buffers are then bound in their place."""
        import onnxruntime as ort

        probe = self.session.io_binding()
        for name, value in buffers.inputs.items():
            probe.bind_ortvalue_input(name, value)
        for name in self.output_names:
            probe.bind_output(name, self.device, self.device_id)
        plain = ort.RunOptions()
        if self.graphs:
            plain.add_run_config_entry("gpu_graph_id", "-1")
        self.session.run_with_iobinding(probe, plain)
        for name, produced in zip(self.output_names, probe.get_outputs(), strict=True):
            value = ort.OrtValue.ortvalue_from_shape_and_type(produced.shape(), _numpy_type(produced.data_type()),
                                                              self.device, self.device_id)
            buffers.binding.bind_ortvalue_output(name, value)
            buffers.outputs.append(value)

    def _value(self, array: np.ndarray) -> Any:
        import onnxruntime as ort

        return ort.OrtValue.ortvalue_from_numpy(array, self.device, self.device_id)


def _numpy_type(onnx_type: str) -> type:
    """numpy's type for ONNX Runtime's ``tensor(float)`` spelling."""
    from trtpipe.vocab import dtype

    entry = dtype(onnx_name=onnx_type.removeprefix("tensor(").removesuffix(")"))
    if entry is None:
        raise ValueError(f"ONNX Runtime output type {onnx_type} has no numpy type")
    return np.dtype(entry.numpy).type

