"""TensorRT execution of a built engine, with device buffers and streams from torch's CUDA allocator.

Before TensorRT sees the engine, its sidecar (read by the artifact's description) is checked: the file's SHA-256,
the TensorRT version and the GPU's compute capability it was built for. An engine without a trtpipe sidecar is
deserialised only when the caller vouches for it (``trusted``, the CLI's ``--trust-engine``): TensorRT engines are
executable code. Inputs are copied from pinned host memory on a dedicated CUDA stream; the optimisation profile
whose range holds the request's shapes is selected (:mod:`.profiles`), ``set_input_shape`` sets the shapes, and
``execute_async_v3`` runs the engine. With ``cuda_graph=True`` a shape's launches are captured into a CUDA graph on
an execution context of its own and replayed (:mod:`.graphs` says when and why); ``spin_wait=True`` waits for a
run by polling a CUDA event instead of blocking in ``cudaStreamSynchronize``. :meth:`TensorRTBackend.profile_layers`
times every layer with TensorRT's profiler on a separate context.

Everything here calls TensorRT; the decisions (which profile, when to capture, how layer times add up) live in
pure modules beside it and are tested without a GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trtpipe.artifact.description import ArtifactDescription, describe_artifact
from trtpipe.artifact.records.engine import EngineSidecar, check_compatibility
from trtpipe.artifact.tensors import TensorInfo
from trtpipe.errors import BadInput, TrtpipeError
from trtpipe.runtime.base import Backend
from trtpipe.runtime.options import RunOptions
from trtpipe.runtime.tensorrt.graphs import BoundState, GraphCache, Launch
from trtpipe.runtime.tensorrt.layer_times import LayerTimes
from trtpipe.runtime.tensorrt.loader import (
    MESSAGES,
    TRUST_ENGINE_FLAG,
    EngineOrigin,
    engine_origin,
    import_tensorrt_runtime,
    require_cuda_gpu,
    tensorrt_logger,
)
from trtpipe.runtime.tensorrt.profiles import EngineProfile, choose_profile, covered_max_batch, profiles_from_table
from trtpipe.runtime.tensorrt.settings import TensorRTSettings
from trtpipe.runtime.tensorrt.versions import RUN_FEATURES, TrtFeature, require
from trtpipe.vocab import BackendKind, Device, Precision, dtype

ShapeKey = tuple[tuple[int, ...], ...]


class TensorRTBackend(Backend):
    kind = BackendKind.TENSORRT
    settings_type = TensorRTSettings
    device = Device.CUDA

    def __init__(self, artifact: Path | ArtifactDescription, options: RunOptions | TensorRTSettings | None = None, *,
                 trusted: bool = False) -> None:
        """``trusted``: deserialise an engine without a trtpipe sidecar (its IO, profiles and precision are then
        read from the engine itself); without it such an engine is refused before TensorRT reads it."""
        import torch

        own: TensorRTSettings = self.accept(options)
        description = (artifact if isinstance(artifact, ArtifactDescription) else
                       describe_engine(Path(artifact), trusted=trusted))
        self.path = Path(str(description.path))
        sidecar = _vouching_sidecar(self.path, description.engine, trusted)
        trt, lean = import_tensorrt_runtime("Running a TensorRT engine")
        _check_runs_here(trt, lean, sidecar, self.path)
        self.foreign = sidecar is None
        # An engine with host code (version-compatible) loads only where that is allowed: trtpipe's own when its
        # sidecar says so, and a trusted foreign one (the user vouched for the code in it).
        host_code = lean or self.foreign or bool(sidecar and sidecar.version_compatible)
        require([*RUN_FEATURES, *([TrtFeature.VERSION_COMPATIBLE] if host_code else [])],
                getattr(trt, "__version__", ""), f"Running {self.path.name}")
        self._trt, self._torch = trt, torch
        self._load_engine(trt, host_code)
        self._stream = torch.cuda.Stream()
        self._spin = own.spin_wait
        self._done = torch.cuda.Event(blocking=False) if self._spin else None  # polled by a spin wait
        self._buffers: dict[ShapeKey, _Buffers] = {}  # device buffers per input shape, allocated once
        self._bound = BoundState()  # what the shared context is set up for
        self._graphs: GraphCache[_GraphSlot] = GraphCache(_release_slot, enabled=own.cuda_graph)
        self._profile_of: dict[ShapeKey, int] = {}
        self._inputs, self._outputs = self._read_io(trt)
        self._profiles = self._read_profiles()
        self.precision = _io_precision([*self._inputs, *self._outputs]) if self.foreign else description.precision

    def _load_engine(self, trt: Any, host_code: bool) -> None:
        """Deserialise the engine (host code allowed only where ``host_code`` says) and create its shared execution
        context; TensorRT's own errors are said in the message when either fails."""
        # The process's one TensorRT logger: a second backend's errors reach its own scope, not "no message".
        self._runtime = trt.Runtime(tensorrt_logger(trt))
        if host_code:
            self._runtime.engine_host_code_allowed = True
        with MESSAGES.scope(f"load {self.path.name}") as log:
            self._engine = self._runtime.deserialize_cuda_engine(self.path.read_bytes())
            if self._engine is None:
                fix = ("it may be for another TensorRT version or GPU, or not a TensorRT engine" if self.foreign else
                       "rebuild it with 'trtpipe build' on this machine")
                raise TrtpipeError(f"TensorRT could not deserialise {self.path} ({_said(log.errors())}): {fix}.")
            self._context = self._engine.create_execution_context()
            if self._context is None:
                raise TrtpipeError(f"TensorRT could not create an execution context for {self.path} "
                                   f"({_said(log.errors())}): the GPU may be out of memory.")

    def _read_io(self, trt: Any) -> tuple[list[TensorInfo], list[TensorInfo]]:
        """The engine's IO tensors, in its order, as trtpipe exchanges them with numpy."""
        inputs: list[TensorInfo] = []
        outputs: list[TensorInfo] = []
        for index in range(self._engine.num_io_tensors):
            name = self._engine.get_tensor_name(index)
            trt_dtype = self._engine.get_tensor_dtype(name)
            entry = dtype(tensorrt=str(trt_dtype).rsplit(".", 1)[-1])
            if entry is None:
                raise BadInput(f"{self.path}: IO tensor '{name}' has TensorRT type {trt_dtype}, which trtpipe cannot "
                               "exchange with numpy: rebuild with FP32/FP16/INT8/INT32/INT64/BOOL inputs and outputs.")
            shape = tuple(None if d < 0 else int(d) for d in self._engine.get_tensor_shape(name))
            is_input = self._engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
            (inputs if is_input else outputs).append(TensorInfo(name, entry.numpy, shape))
        return inputs, outputs

    def _read_profiles(self) -> list[EngineProfile]:
        """Every optimisation profile's range for every input, as the engine reports them (an input without a
        dynamic dimension has its one shape in every profile)."""
        count = max(1, int(self._engine.num_optimization_profiles))
        table = []
        for index in range(count):
            entry = {}
            for info in self._inputs:
                if all(isinstance(d, int) for d in info.shape):
                    fixed = tuple(int(d) for d in info.shape if isinstance(d, int))
                    entry[info.name] = (fixed, fixed, fixed)
                else:
                    low, opt, high = self._engine.get_tensor_profile_shape(info.name, index)
                    entry[info.name] = (tuple(low), tuple(opt), tuple(high))
            table.append(entry)
        return profiles_from_table(table)

    @property
    def max_batch(self) -> int | None:
        """The largest batch that chunks of a long run can take: every batch up to it fits some profile."""
        return covered_max_batch(self._profiles)

    @property
    def profiles(self) -> list[EngineProfile]:
        """The engine's optimisation profiles, as read from it."""
        return list(self._profiles)

    def _key(self, feeds: dict[str, np.ndarray]) -> ShapeKey:
        return tuple(tuple(int(d) for d in feeds[i.name].shape) for i in self._inputs)

    def _profile_for(self, key: ShapeKey) -> int:
        profile = self._profile_of.get(key)
        if profile is None:
            shapes = {info.name: shape for info, shape in zip(self._inputs, key, strict=True)}
            profile = self._profile_of[key] = choose_profile(self._profiles, shapes, self.path.name)
        return profile

    def _bind(self, context: Any, state: BoundState, key: ShapeKey) -> _Buffers:
        """Set ``context`` up for ``key`` (profile, input shapes, buffer addresses), only where that changed since
        it was last set up, and return the key's device buffers (allocated once, on first use, so a captured
        graph's addresses stay valid for every replay)."""
        profile = self._profile_for(key)
        buffers = self._buffers.get(key)
        switch = state.needs_profile(profile)
        if buffers is not None and not switch and not state.needs_binding(key):
            return buffers
        state.forget()  # until every call below succeeded
        with MESSAGES.scope(f"bind {self.path.name}") as log:
            # The profile first: "setOptimizationProfileAsync() must be called before calling setInputShape()".
            if switch and not context.set_optimization_profile_async(profile, self._stream.cuda_stream):
                raise TrtpipeError(f"TensorRT refused optimisation profile {profile} of {self.path} "
                                   f"({_said(log.errors())}).")
            for info, shape in zip(self._inputs, key, strict=True):
                if not context.set_input_shape(info.name, shape):
                    raise BadInput(f"TensorRT refused shape {shape} for input '{info.name}' of {self.path} in "
                                   f"profile {profile} ({_said(log.errors())}).")
            if buffers is None:
                buffers = self._buffers[key] = self._allocate(context, key)
            refused = [name for name, tensor in {**buffers.inputs, **buffers.outputs}.items()
                       if not context.set_tensor_address(name, tensor.data_ptr())]
        if refused:  # set_tensor_address returns False for an unknown name or a misaligned address
            raise TrtpipeError(f"TensorRT refused the device buffer of {', '.join(refused)} for {self.path} "
                               f"({_said(log.errors())}): the engine's IO tensors are "
                               f"{', '.join(i.name for i in [*self._inputs, *self._outputs])}.")
        state.bound(key, profile)
        return buffers

    def _allocate(self, context: Any, key: ShapeKey) -> _Buffers:
        """Device inputs of the key's shapes and outputs of the shapes TensorRT infers from them."""
        torch, device = self._torch, str(Device.CUDA)
        inputs = {info.name: torch.empty(shape, dtype=getattr(torch, info.dtype), device=device)
                  for info, shape in zip(self._inputs, key, strict=True)}
        outputs = {info.name: torch.empty(tuple(context.get_tensor_shape(info.name)),
                                          dtype=getattr(torch, info.dtype), device=device)
                   for info in self._outputs}
        return _Buffers(inputs, outputs)

    def _buffers_for(self, key: ShapeKey) -> _Buffers:
        return self._buffers.get(key) or self._bind(self._context, self._bound, key)

    def _execute(self, context: Any) -> None:
        with MESSAGES.scope(f"run {self.path.name}") as log:
            ran = context.execute_async_v3(self._stream.cuda_stream)
        if not ran:
            raise TrtpipeError(f"TensorRT failed to run {self.path}: {_said(log.errors())}")

    def _launch(self, key: ShapeKey) -> None:
        """Run the engine for ``key`` on the stream: replay its graph, capture one, or launch plainly."""
        launch = self._graphs.plan(key)
        if launch is Launch.REPLAY:
            with self._torch.cuda.stream(self._stream):
                self._graphs.slot(key).graph.replay()
            return
        if launch is Launch.CAPTURE and self._capture(key):
            return
        self._bind(self._context, self._bound, key)
        self._execute(self._context)

    def _capture(self, key: ShapeKey) -> bool:
        """Give ``key`` an execution context of its own, run it once (this call's outputs; TensorRT's first enqueue
        may allocate and initialise, which must stay out of the graph), then capture its graph. False, with nothing
        run, where no context can be made; a failed capture is reported once and the shape runs plainly after."""
        context = self._engine.create_execution_context()
        if context is None:
            self._capture_failed(key, "TensorRT could not create another execution context (GPU memory?)")
            return False
        self._bind(context, BoundState(), key)
        self._execute(context)
        self._stream.synchronize()
        try:
            graph = self._record(context)
        except Exception as error:  # capture is not supported for every engine (e.g. data-dependent shapes)
            self._capture_failed(key, str(error).splitlines()[0] if str(error) else type(error).__name__)
            return True
        self._graphs.captured(key, _GraphSlot(graph, context))
        return True

    def _record(self, context: Any) -> Any:
        """One enqueue of ``context`` captured on the stream; thread-local capture mode, as trtexec's TrtCudaGraph
        (cudaStreamCaptureModeThreadLocal): other threads' CUDA calls do not break it."""
        torch = self._torch
        graph = torch.cuda.CUDAGraph()
        with MESSAGES.scope(f"capture {self.path.name}") as log, \
                torch.cuda.graph(graph, stream=self._stream, capture_error_mode="thread_local"):
            if not context.execute_async_v3(self._stream.cuda_stream):
                # TensorRT returns False when the engine holds work a capture may not contain.
                raise TrtpipeError(f"execute_async_v3 failed under capture ({_said(log.errors())})")
        return graph

    def _capture_failed(self, key: ShapeKey, reason: str) -> None:
        if self._graphs.failed(key, reason):
            from trtpipe import console

            shapes = ", ".join("x".join(map(str, shape)) for shape in key)
            console.warn(f"CUDA graph capture failed for {self.path.name} at {shapes} ({reason}): running it without "
                         "a CUDA graph.")

    def _wait(self) -> None:
        """Wait for the stream's work: by polling a CUDA event (spin wait, trtexec's --useSpinWait: the thread
        never sleeps, so it sees the end at once), else in cudaStreamSynchronize."""
        if self._done is None:
            self._stream.synchronize()
            return
        self._done.record(self._stream)
        while not self._done.query():
            pass

    def _upload(self, buffers: _Buffers, feeds: dict[str, np.ndarray]) -> None:
        torch = self._torch
        with torch.cuda.stream(self._stream):
            for name, device in buffers.inputs.items():
                host = torch.from_numpy(np.ascontiguousarray(feeds[name])).pin_memory()
                device.copy_(host, non_blocking=True)

    def _run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        key = self._key(feeds)
        buffers = self._buffers_for(key)
        self._upload(buffers, feeds)
        self._launch(key)
        with self._torch.cuda.stream(self._stream):
            host = [buffers.outputs[o.name].to(str(Device.CPU), non_blocking=True) for o in self._outputs]
        self._wait()
        return [tensor.numpy() for tensor in host]

    def device_resident_call(self, feeds: dict[str, np.ndarray]) -> Callable[[], None]:
        """A call that runs the engine on inputs already on the GPU: latency without host-device copies."""
        key = self._key(feeds)
        buffers = self._buffers_for(key)
        self._upload(buffers, feeds)
        self._stream.synchronize()

        def run() -> None:
            self._launch(key)
            self._wait()

        return run

    def replays_graph(self, feeds: dict[str, np.ndarray]) -> bool:
        """Whether runs of these inputs' shapes replay a captured CUDA graph now."""
        return self._graphs.replays(self._key(feeds))

    def replays_cuda_graph(self, feeds: dict[str, np.ndarray]) -> bool | None:
        return self.replays_graph(feeds)

    def profile_layers(self, feeds: dict[str, np.ndarray], runs: int) -> dict[str, Any]:
        """Time every layer over ``runs`` runs of ``feeds``' shapes with TensorRT's profiler, and return the
        summary (:meth:`LayerTimes.summary`).

        The runs use an execution context of their own, without a CUDA graph, after one warm-up run: a profiler
        adds per-layer events and synchronisation ("The e2e network timing is not reported since it is inaccurate
        due to the extra synchronizations when the profiler is enabled", trtexec 10; trtexec 11 always profiles in
        a separate run), so the contexts that are timed never get one. As trtexec does, the profiler is attached
        with ``enqueue_emits_profile = False`` and ``report_to_profiler()`` is called after each run."""
        key = self._key(feeds)
        self._upload(self._buffers_for(key), feeds)
        self._stream.synchronize()
        context = self._engine.create_execution_context()
        if context is None:
            raise TrtpipeError(f"TensorRT could not create an execution context to profile {self.path} (GPU "
                               "memory?).")
        self._bind(context, BoundState(), key)
        self._execute(context)  # warm-up: a first enqueue may allocate and initialise
        self._stream.synchronize()
        times = LayerTimes()
        profiler = _profiler(self._trt, times)
        context.profiler = profiler
        context.enqueue_emits_profile = False
        for _ in range(runs):
            self._execute(context)
            self._stream.synchronize()
            with MESSAGES.scope(f"profile {self.path.name}") as log:
                if not context.report_to_profiler():
                    raise TrtpipeError(f"TensorRT could not report layer times for {self.path} "
                                       f"({_said(log.errors())}).")
            times.run_done()
        del context, profiler
        return times.summary()

    def close(self) -> None:
        graphs = self.__dict__.get("_graphs")
        if graphs is not None:
            graphs.clear()
        self.__dict__.get("_buffers", {}).clear()
        for attribute in ("_context", "_engine", "_runtime"):
            self.__dict__.pop(attribute, None)


def _vouching_sidecar(path: Path, sidecar: EngineSidecar | None, trusted: bool) -> EngineSidecar | None:
    """The sidecar that vouches for the engine at ``path``: the description's; for a description without one that
    the caller does not trust, the file's own, checked first (an engine without a good one is refused before
    TensorRT reads it). None only for a trusted engine from elsewhere."""
    if sidecar is None and not trusted:  # a description without a sidecar: the engine must have a good one
        engine_origin(path, trusted=False)
        sidecar = describe_artifact(path).engine
    return sidecar


def _check_runs_here(trt: Any, lean: bool, sidecar: EngineSidecar | None, path: Path) -> None:
    """Refuse, before TensorRT reads it, an engine this machine cannot run: no CUDA GPU; with a sidecar, one built
    without --version-compat where only the lean runtime is installed, or for another TensorRT version or GPU."""
    if sidecar is not None:
        if lean and not sidecar.version_compatible:
            raise BadInput(f"{path} was not built with --version-compat, and only TensorRT's lean runtime is "
                           "installed here (it runs version-compatible engines only): install TensorRT or "
                           "rebuild with 'trtpipe build --version-compat'.")
        gpu_name, capability = require_cuda_gpu("Running a TensorRT engine")
        check_compatibility(sidecar, tensorrt_version=trt.__version__, compute_capability=capability,
                            gpu_name=gpu_name)
    else:
        require_cuda_gpu("Running a TensorRT engine")


def describe_engine(path: Path, *, trusted: bool, flag: str = TRUST_ENGINE_FLAG) -> ArtifactDescription:
    """An engine's description before TensorRT reads it: from its sidecar, checked against the file; for an engine
    without one, or whose sidecar does not match it, refused unless ``trusted`` (the command's ``flag``), and then
    described by what the engine itself will say once loaded (a mismatched sidecar is said in one warning, as
    ``trtpipe inspect`` does: a sidecar proves the pair was written together, not who wrote it)."""
    if engine_origin(path, trusted=trusted, flag=flag) is EngineOrigin.TRUSTED:
        return foreign_engine_description(path)
    try:
        return describe_artifact(path)
    except BadInput as error:
        if not trusted:
            raise
        from trtpipe import console

        console.warn(f"{error.message} Loading it as an engine from elsewhere, as {flag} asks.")
        return foreign_engine_description(path)


def foreign_engine_description(path: Path) -> ArtifactDescription:
    """The description of an engine without a trtpipe sidecar, before it is loaded: its IO, profiles and IO types
    are read from the engine by :class:`TensorRTBackend` (``trusted=True``); what it computes in is not recorded."""
    from trtpipe.vocab import ArtifactKind

    return ArtifactDescription(Path(path), ArtifactKind.TENSORRT_ENGINE, Precision.FP32,
                               size_bytes=Path(path).stat().st_size, note=FOREIGN_NOTE)


FOREIGN_NOTE = ("an engine without a trtpipe sidecar, loaded on --trust-engine: its IO and profiles were read from "
                "the engine; its precision is that of its IO tensors (nothing records what its layers compute in)")


def _io_precision(tensors: list[TensorInfo]) -> Precision:
    """A foreign engine's precision as far as its IO tells: the first floating-point IO tensor's type."""
    floats = {"float32": Precision.FP32, "float16": Precision.FP16, "bfloat16": Precision.BF16}
    return next((floats[t.dtype] for t in tensors if t.dtype in floats), Precision.FP32)


def _profiler(trt: Any, times: LayerTimes) -> Any:
    """A ``trt.IProfiler`` forwarding each layer's time to ``times`` (the Python API's documented pattern: a
    subclass that calls ``IProfiler.__init__`` and overrides ``report_layer_time``)."""

    class Profiler(trt.IProfiler):
        def __init__(self) -> None:
            trt.IProfiler.__init__(self)

        def report_layer_time(self, layer_name: str, ms: float) -> None:
            times.add(layer_name, ms)

    return Profiler()


def _release_slot(slot: _GraphSlot) -> None:
    """Free a captured graph, then its context (the graph's kernels point into the context's memory)."""
    slot.graph.reset()
    slot.context = None


def _said(errors: list[str]) -> str:
    """TensorRT's errors in one line, or a plain statement that it gave none."""
    return "; ".join(errors) or "TensorRT logged no error"


@dataclass
class _Buffers:
    inputs: dict[str, Any]
    outputs: dict[str, Any]


@dataclass
class _GraphSlot:
    """A captured CUDA graph and the execution context, set up for one shape only, it was captured from."""

    graph: Any
    context: Any
