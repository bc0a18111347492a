"""The ``build`` stage's thin layer over TensorRT's Python API: everything here needs TensorRT (and the builder a
GPU).

Planning, parsing, compatibility and precision rules live in pure modules beside this one and are tested on
any machine; this module only translates a plan into TensorRT calls. It works with TensorRT 10 (strong typing
via the STRONGLY_TYPED network flag) and 11 (networks are always strongly typed; the flag is gone).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from trtpipe.engine.specs import ProfileShapes
from trtpipe.errors import TrtpipeError
from trtpipe.runtime.tensorrt.loader import TensorRTLogger
from trtpipe.shapes import format_size
from trtpipe.vocab import HardwareCompat

_MEMORY_WORDS = ("insufficient memory", "out of memory", "workspace", "memory pool", "cudaMalloc", "allocation")


def progress_monitor(trt: ModuleType, on_phase: Any) -> Any:
    """A trt.IProgressMonitor forwarding (phase, step, total) to ``on_phase``; None where TensorRT lacks it."""
    if not hasattr(trt, "IProgressMonitor"):
        return None

    class Monitor(trt.IProgressMonitor):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            trt.IProgressMonitor.__init__(self)
            self._lock = threading.Lock()  # TensorRT calls from several threads
            self._totals: dict[str, int] = {}

        def phase_start(self, phase_name: str, parent_phase: str | None, num_steps: int) -> None:
            with self._lock:
                self._totals[phase_name] = num_steps
                on_phase(phase_name, 0, num_steps, parent_phase)

        def step_complete(self, phase_name: str, step: int) -> bool:
            with self._lock:
                on_phase(phase_name, step + 1, self._totals.get(phase_name, 0), None)
            return True  # False would cancel the build

        def phase_finish(self, phase_name: str) -> None:
            with self._lock:
                on_phase(phase_name, self._totals.get(phase_name, 0), self._totals.get(phase_name, 0), None)

    return Monitor()


@dataclass
class BuiltEngine:
    engine: bytes
    timing_cache: bytes | None
    seconds: float
    tensorrt_version: str
    inputs: list[dict[str, Any]] = field(default_factory=list)
    outputs: list[dict[str, Any]] = field(default_factory=list)
    layer_information: dict[str, Any] = field(default_factory=dict)


def build(
    trt: ModuleType,
    onnx_path: Path,
    profile: list[ProfileShapes],
    *,
    workspace: int | None,
    timing_cache: bytes | None,
    opt_level: int | None,
    hardware_compat: HardwareCompat,
    version_compat: bool,
    tf32: bool = False,
    on_phase: Any,
    on_note: Any = None,
) -> BuiltEngine:
    """Parse ``onnx_path``, configure the builder, build the serialized engine and describe it.

    The parser, the timing cache and the progress monitor stay referenced here until the function returns:
    TensorRT holds only pointers to them (the parser owns the weights the network reads)."""
    logger = TensorRTLogger(trt)
    builder = trt.Builder(logger.trt_logger)
    network, _parser = _parse_onnx(trt, builder, logger, onnx_path)  # held: it owns the network's weights
    config = _create_config(trt, builder, profile, workspace)
    _cache = _attach_timing_cache(config, timing_cache, on_note)  # held: the config points to it
    _set_build_flags(trt, config, tf32=tf32, opt_level=opt_level, hardware_compat=hardware_compat,
                     version_compat=version_compat)
    monitor = progress_monitor(trt, on_phase)
    if monitor is not None:
        config.progress_monitor = monitor
    engine_bytes, seconds = _build_serialized(builder, network, config, logger, workspace)
    cache_bytes = _timing_cache_bytes(config)
    inputs, outputs, layers = describe(trt, engine_bytes, profile, logger, version_compat=version_compat)
    return BuiltEngine(engine_bytes, cache_bytes, seconds, trt.__version__, inputs, outputs, layers)


def _parse_onnx(trt: ModuleType, builder: Any, logger: TensorRTLogger, onnx_path: Path) -> tuple[Any, Any]:
    """A strongly typed network read from ``onnx_path``, and the parser that owns its weights."""
    flags = 0
    creation_flags = getattr(trt, "NetworkDefinitionCreationFlag", None)
    strongly_typed = getattr(creation_flags, "STRONGLY_TYPED", None)
    if strongly_typed is not None:  # needed on TensorRT 10; accepted and ignored on 11 (always strongly typed)
        flags |= 1 << int(strongly_typed)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger.trt_logger)
    if not parser.parse_from_file(str(onnx_path)):
        raise TrtpipeError(parse_failure_message(onnx_path, [_parser_error(parser.get_error(i))
                                                             for i in range(parser.num_errors)]))
    return network, parser


def _create_config(trt: ModuleType, builder: Any, profile: list[ProfileShapes], workspace: int | None) -> Any:
    """The builder config: the workspace limit, if any, and the one optimisation profile."""
    config = builder.create_builder_config()
    if workspace is not None:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace)
    trt_profile = builder.create_optimization_profile()
    for shapes in profile:
        trt_profile.set_shape(shapes.name, shapes.min, shapes.opt, shapes.max)
    config.add_optimization_profile(trt_profile)
    return config


def _attach_timing_cache(config: Any, timing_cache: bytes | None, on_note: Any) -> Any:
    """Give ``config`` the timing cache read from disk, or a fresh one where TensorRT refuses it; the cache."""
    cache = config.create_timing_cache(timing_cache or b"")
    if timing_cache and (cache is None or not config.set_timing_cache(cache, False)):
        # Made on another GPU or TensorRT version (or damaged): TensorRT refuses a mismatched cache.
        if on_note:
            on_note("The timing cache was made for another GPU or TensorRT version: starting a fresh one.")
        cache = config.create_timing_cache(b"")
    if cache is not None:
        config.set_timing_cache(cache, False)
    return cache


def _set_build_flags(trt: ModuleType, config: Any, *, tf32: bool, opt_level: int | None,
                     hardware_compat: HardwareCompat, version_compat: bool) -> None:
    """The options that decide what the engine computes and where it runs, and detailed layer information."""
    if not tf32 and hasattr(trt.BuilderFlag, "TF32"):
        config.clear_flag(trt.BuilderFlag.TF32)  # FP32 layers compute in FP32 unless TF32 is asked for
    if opt_level is not None:
        config.builder_optimization_level = opt_level
    config.hardware_compatibility_level = getattr(trt.HardwareCompatibilityLevel, hardware_compat.tensorrt_name)
    if version_compat:
        config.set_flag(trt.BuilderFlag.VERSION_COMPATIBLE)
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED  # layer information names the ONNX nodes


def _build_serialized(builder: Any, network: Any, config: Any, logger: TensorRTLogger,
                      workspace: int | None) -> tuple[bytes, float]:
    """The serialized engine and the seconds TensorRT took; a failure explained from TensorRT's log."""
    start = time.perf_counter()
    serialized = builder.build_serialized_network(network, config)
    seconds = time.perf_counter() - start
    if serialized is None:
        raise TrtpipeError(build_failure_message(logger.errors(), workspace))
    return bytes(serialized), seconds


def _timing_cache_bytes(config: Any) -> bytes | None:
    """The timing cache after the build (with what it measured), to save for the next build."""
    built_cache = config.get_timing_cache()
    return bytes(built_cache.serialize()) if built_cache is not None else None


def describe(trt: ModuleType, engine_bytes: bytes, profile: list[ProfileShapes], logger: TensorRTLogger | None = None,
             *, version_compat: bool = False) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """IO tensors and the engine inspector's layer information (with the opt shapes set, so formats are known)."""
    logger = logger or TensorRTLogger(trt)
    runtime = trt.Runtime(logger.trt_logger)
    if version_compat:  # a version-compatible engine carries its own runtime code, which must be allowed to load
        runtime.engine_host_code_allowed = True
    engine = runtime.deserialize_cuda_engine(engine_bytes)
    if engine is None:
        raise TrtpipeError(f"TensorRT built the engine but cannot load it back to describe it: "
                           f"{'; '.join(logger.errors()) or 'no message'}")
    context = engine.create_execution_context()
    if context is None:
        raise TrtpipeError(f"TensorRT cannot create an execution context for the new engine: "
                           f"{'; '.join(logger.errors()) or 'no message'}")
    for shapes in profile:
        if not context.set_input_shape(shapes.name, shapes.opt):
            raise TrtpipeError(f"TensorRT refused the profile's opt shape {shapes.opt} for '{shapes.name}'.")
    inputs, outputs = [], []
    for index in range(engine.num_io_tensors):
        name = engine.get_tensor_name(index)
        entry = {"name": name, "dtype": str(engine.get_tensor_dtype(name)).split(".")[-1].lower(),
                 "shape": list(engine.get_tensor_shape(name))}
        (inputs if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT else outputs).append(entry)
    inspector = engine.create_engine_inspector()
    inspector.execution_context = context
    layers = json.loads(inspector.get_engine_information(trt.LayerInformationFormat.JSON))
    return inputs, outputs, layers


def _parser_error(error: Any) -> dict[str, str]:
    def safe(method: str) -> str:
        try:
            return str(getattr(error, method)())
        except Exception:  # older parsers lack node_name/node_operator
            return ""

    return {"node": safe("node_name") or safe("node"), "op": safe("node_operator"), "reason": safe("desc")}


def parse_failure_message(onnx_path: Path, errors: list[dict[str, str]]) -> str:
    """One line naming each failing node: TensorRT's parser cannot read these."""
    if not errors:
        return f"TensorRT's ONNX parser rejected {onnx_path} without saying why: check it with 'onnx.checker'."
    listed = "; ".join(f"{e['node'] or '?'} ({e['op'] or '?'}): {e['reason']}" for e in errors[:5])
    more = f"; and {len(errors) - 5} more" if len(errors) > 5 else ""
    return (f"TensorRT cannot parse {onnx_path}: {len(errors)} failing node(s): {listed}{more}. Replace or "
            "re-export those operators (e.g. another --opset).")


def build_failure_message(errors: list[str], workspace: int | None) -> str:
    text = " ".join(errors)
    if any(word.lower() in text.lower() for word in _MEMORY_WORDS):
        have = format_size(workspace) if workspace else "the default"
        suggest = format_size(workspace * 2) if workspace else "4GiB"
        return (f"The TensorRT build ran out of workspace memory ({have}): retry with --workspace {suggest} "
                "or more.")
    detail = errors[-1] if errors else "TensorRT gave no error message"
    return f"The TensorRT build failed: {detail}"
