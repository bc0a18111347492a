"""The ``build`` stage's thin layer over TensorRT's Python API: everything here needs TensorRT (and the builder a
GPU).

Planning, parsing, compatibility and precision rules live in pure modules beside this one and are tested on
any machine; this module only translates a plan into TensorRT calls. It works with TensorRT 10 (strong typing
via the STRONGLY_TYPED network flag) and 11 (networks are always strongly typed; the flag is gone).
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from trtpipe.artifact.records.engine import HardwareCompat
from trtpipe.engine import timing_cache as cache_file
from trtpipe.engine.specs import ProfileShapes
from trtpipe.errors import TrtpipeError
from trtpipe.runtime.tensorrt.loader import MESSAGES, LogScope, tensorrt_logger
from trtpipe.shapes import format_size

# TensorRT's own words, matched narrowly so no other failure is blamed on the workspace:
# - a build that found no tactic within the workspace: "Could not find any implementation for node {...} due to
#   insufficient workspace. See verbose log for requested sizes." (TensorRT 8.6 and 10.x, as users report it in
#   NVIDIA/TensorRT issues), and TensorRT 7/8.0's "try increasing the workspace size with
#   IBuilder(Config)::setMaxWorkspaceSize()";
# - a build that succeeded without the tactics the limit excluded (INFO): "Some tactics do not have sufficient
#   workspace memory to run. Increasing workspace size will enable more tactics, please check verbose output for
#   requested sizes." (8.5+; 7.x/8.0 ended "may increase performance, please check verbose output.");
# - tactics skipped because the GPU itself lacked memory (WARNING, one per tactic): "Tactic Device request: 9385MB
#   Available: 7649MB. Device memory is insufficient to use tactic." and "Skipping tactic 3 due to insufficient
#   memory on requested size of 9385 detected for tactic 0x...".
WORKSPACE_FAILURE = re.compile(r"due to insufficient workspace|try increasing the workspace size", re.IGNORECASE)
WORKSPACE_SKIPPED = re.compile(r"tactics do not have sufficient workspace memory", re.IGNORECASE)
DEVICE_MEMORY_SKIPPED = re.compile(r"Device memory is insufficient to use tactic|Skipping tactic .* due to "
                                   r"insuf+icient memory", re.IGNORECASE)


def progress_monitor(trt: ModuleType, on_phase: Any) -> Any:
    """A trt.IProgressMonitor forwarding (phase, step, total) to ``on_phase``; None where TensorRT lacks it."""
    if not hasattr(trt, "IProgressMonitor"):
        return None

    base: Any = trt.IProgressMonitor  # from the module passed in: a class the checker cannot see

    class Monitor(base):
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
    profiles: list[list[ProfileShapes]],
    *,
    workspace: int | None,
    timing_cache: Path | None,
    opt_level: int | None,
    hardware_compat: HardwareCompat,
    version_compat: bool,
    tf32: bool = False,
    on_phase: Any,
    on_note: Any = None,
) -> BuiltEngine:
    """Parse ``onnx_path``, configure the builder, build the serialized engine and describe it; ``timing_cache``
    (a file, read at the start) gets this build's measurements merged in at the end (see :func:`save_timing_cache`).

    The parser, the timing cache and the progress monitor stay referenced here until the function returns:
    TensorRT holds only pointers to them (the parser owns the weights the network reads). TensorRT's messages are
    collected for this build only, from the process's one logger."""
    with MESSAGES.scope(f"build {onnx_path.name}", hide=DEVICE_MEMORY_SKIPPED) as log:
        builder = trt.Builder(tensorrt_logger(trt))
        network, _parser = _parse_onnx(trt, builder, onnx_path)  # held: it owns the network's weights
        config = _create_config(trt, builder, profiles, workspace, log)
        cache_in = cache_file.read(timing_cache)
        _cache = _attach_timing_cache(config, cache_in, on_note)  # held: the config points to it
        _set_build_flags(trt, config, tf32=tf32, opt_level=opt_level, hardware_compat=hardware_compat,
                         version_compat=version_compat)
        monitor = progress_monitor(trt, on_phase)
        if monitor is not None:
            config.progress_monitor = monitor
        engine_bytes, seconds = _build_serialized(builder, network, config, log, workspace)
        for note in skipped_tactics_notes(log, workspace):
            if on_note:
                on_note(note)
        cache_bytes = save_timing_cache(config, timing_cache, on_note, cache_in) if timing_cache else None
        inputs, outputs, layers = describe(trt, engine_bytes, profiles[0], log, version_compat=version_compat)
    return BuiltEngine(engine_bytes, cache_bytes, seconds, trt.__version__, inputs, outputs, layers)


def _parse_onnx(trt: ModuleType, builder: Any, onnx_path: Path) -> tuple[Any, Any]:
    """A strongly typed network read from ``onnx_path``, and the parser that owns its weights."""
    flags = 0
    creation_flags = getattr(trt, "NetworkDefinitionCreationFlag", None)
    strongly_typed = getattr(creation_flags, "STRONGLY_TYPED", None)
    if strongly_typed is not None:  # needed on TensorRT 10; accepted and ignored on 11 (always strongly typed)
        flags |= 1 << int(strongly_typed)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, tensorrt_logger(trt))
    if not parser.parse_from_file(str(onnx_path)):
        raise TrtpipeError(parse_failure_message(onnx_path, [_parser_error(parser.get_error(i))
                                                             for i in range(parser.num_errors)]))
    return network, parser


def _create_config(trt: ModuleType, builder: Any, profiles: list[list[ProfileShapes]], workspace: int | None,
                   log: LogScope) -> Any:
    """The builder config: the workspace limit, if any, and the optimisation profiles, in order (their index in
    the engine is their place in ``profiles``, which the sidecar records and the backend chooses among)."""
    config = builder.create_builder_config()
    if workspace is not None:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace)
    for number, profile in enumerate(profiles):
        trt_profile = builder.create_optimization_profile()
        for shapes in profile:
            trt_profile.set_shape(shapes.name, shapes.min, shapes.opt, shapes.max)
        index = config.add_optimization_profile(trt_profile)
        if index < 0:  # TensorRT returns -1 for a profile it finds invalid (and logs why)
            raise TrtpipeError(profile_failure_message(profile, log.errors(), number, len(profiles)))
    return config


def profile_failure_message(profile: list[ProfileShapes], errors: list[str], number: int = 0, count: int = 1) -> str:
    """add_optimization_profile returned -1: name the profile (which one, of several) and TensorRT's reason."""
    which = f"optimisation profile {number} of {count}" if count > 1 else "the optimisation profile"
    shapes = ", ".join(f"{p.name} min {p.min} opt {p.opt} max {p.max}" for p in profile) or "no inputs"
    reason = "; ".join(errors) or "TensorRT logged no reason"
    flags = "--profiles" if count > 1 else "--shapes/--min-shapes/--opt-shapes/--max-shapes"
    return f"TensorRT rejected {which} ({shapes}): {reason}. Check {flags} against the ONNX inputs."


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


def _build_serialized(builder: Any, network: Any, config: Any, log: LogScope,
                      workspace: int | None) -> tuple[bytes, float]:
    """The serialized engine and the seconds TensorRT took; a failure explained from TensorRT's log."""
    start = time.perf_counter()
    serialized = builder.build_serialized_network(network, config)
    seconds = time.perf_counter() - start
    if serialized is None:
        raise TrtpipeError(build_failure_message(log.errors(), workspace))
    return bytes(serialized), seconds


def save_timing_cache(config: Any, path: Path, on_note: Any = None, read_at_start: bytes | None = None) -> bytes | None:
    """Write the build's timing cache to ``path`` without losing what other builds saved there meanwhile: under a
    lock, the cache now on disk is combined into this build's (``ITimingCache.combine(..., ignore_mismatch=True)``,
    as Polygraphy's EngineBytesFromNetwork does), then written atomically. Returns the bytes written.
    ``read_at_start``: the cache the build began with (a refusal of that one was already reported)."""
    built_cache = config.get_timing_cache()
    if built_cache is None:
        return None

    def merge(current: bytes | None) -> bytes:
        if current:
            try:
                previous = config.create_timing_cache(current)
            except Exception:  # not a timing cache at all (Polygraphy treats it the same way)
                previous = None
            merged = previous is not None and built_cache.combine(previous, True)
            if not merged and on_note and current != read_at_start:  # written meanwhile, by another version
                on_note(f"The timing cache {path} was rewritten during this build by another TensorRT version (or "
                        "damaged): this build's cache replaces it.")
        return bytes(built_cache.serialize())

    return cache_file.update(path, merge)


def describe(trt: ModuleType, engine_bytes: bytes, profile: list[ProfileShapes], log: LogScope,
             *, version_compat: bool = False) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """IO tensors and the engine inspector's layer information (with the opt shapes set, so formats are known)."""
    runtime = trt.Runtime(tensorrt_logger(trt))
    if version_compat:  # a version-compatible engine carries its own runtime code, which must be allowed to load
        runtime.engine_host_code_allowed = True
    engine = runtime.deserialize_cuda_engine(engine_bytes)
    if engine is None:
        raise TrtpipeError(f"TensorRT built the engine but cannot load it back to describe it: "
                           f"{'; '.join(log.errors()) or 'TensorRT logged no error'}")
    context = engine.create_execution_context()
    if context is None:
        raise TrtpipeError(f"TensorRT cannot create an execution context for the new engine: "
                           f"{'; '.join(log.errors()) or 'TensorRT logged no error'}")
    for shapes in profile:
        if not context.set_input_shape(shapes.name, shapes.opt):
            raise TrtpipeError(f"TensorRT refused the profile's opt shape {shapes.opt} for '{shapes.name}'.")
    inputs: list[dict[str, Any]] = []
    outputs: list[dict[str, Any]] = []
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
    """One line for a failed build. Only TensorRT's own workspace wording (:data:`WORKSPACE_FAILURE`) is blamed on
    the workspace; TensorRT's first error is the cause (the ones after it say the engine could not be made)."""
    if not errors:
        return "The TensorRT build failed and TensorRT logged no error: rerun with the same options and report it."
    cause = next((e for e in errors if WORKSPACE_FAILURE.search(e)), errors[0])
    more = f" (and {len(errors) - 1} more error(s))" if len(errors) > 1 else ""
    if not WORKSPACE_FAILURE.search(cause):
        return f"The TensorRT build failed: {cause}{more}"
    if workspace is not None:
        return (f"The TensorRT build found no implementation within the workspace limit of {format_size(workspace)}: "
                f"retry with --workspace {format_size(workspace * 2)} or more, or without --workspace (TensorRT then "
                f"allows the GPU's whole memory). TensorRT said: {cause}{more}")
    return ("The TensorRT build found no implementation for a node even with TensorRT's default workspace (the "
            "GPU's whole memory): free GPU memory held by other processes, lower --max-shapes, or this GPU has no "
            f"kernel for the node. TensorRT said: {cause}{more}")


def skipped_tactics_notes(log: LogScope, workspace: int | None) -> list[str]:
    """Warnings for a build that succeeded without some tactics: the workspace limit excluded them (TensorRT's INFO
    notice, :data:`WORKSPACE_SKIPPED`), or the GPU lacked the memory (:data:`DEVICE_MEMORY_SKIPPED`, one line per
    tactic, summarised here). Either way the engine may be slower than it could be."""
    notes = []
    if log.matching(WORKSPACE_SKIPPED):
        if workspace is not None:
            notes.append(f"TensorRT skipped some tactics that need more than the {format_size(workspace)} "
                         f"workspace: the engine may be slower than it could be; try --workspace "
                         f"{format_size(workspace * 2)} (or leave it out: TensorRT then allows the GPU's memory).")
        else:
            notes.append("TensorRT skipped some tactics for lack of workspace memory: the engine may be slower than "
                         "it could be; free GPU memory held by other processes and rebuild.")
    device = log.matching(DEVICE_MEMORY_SKIPPED)
    if device:
        first = device[0].splitlines()[0]
        notes.append(f"TensorRT skipped tactics because the GPU had too little free memory ({len(device)} "
                     f"message(s), e.g. '{first}'): free GPU memory held by other processes and rebuild for a "
                     "faster engine.")
    return notes
