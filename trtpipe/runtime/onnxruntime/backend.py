"""ONNX Runtime execution of an ONNX artifact; CPU by default, any installed provider on request.

On the CUDA provider it runs at its best by default: inputs and outputs bound on the device (IO binding), so the
no-copy latency can be measured and a server copies once; with ``cuda_graph``, one captured CUDA graph per batch
shape (a graph that cannot be captured, e.g. a node placed on the CPU, falls back to plain launches with one
warning); ``prefer_nhwc`` and the cuDNN search mode as the caller or the artifact's tuned settings say
(:mod:`trtpipe.artifact.records.tuned`). ONNX Runtime's own log lines stay out of the terminal unless
``TRTPIPE_ORT_LOG`` names a level (verbose, info, warning, error).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from trtpipe import console
from trtpipe.artifact.description import ArtifactDescription, describe_artifact, describe_model
from trtpipe.artifact.tensors import TensorInfo
from trtpipe.errors import BadInput
from trtpipe.runtime.base import Backend
from trtpipe.runtime.onnxruntime.binding import BoundSession
from trtpipe.runtime.onnxruntime.float_weights import fold_float_convolution_weights, needs_folding
from trtpipe.runtime.onnxruntime.fp16_rounding import round_fp16_tensors
from trtpipe.runtime.onnxruntime.installation import check_active, check_providers, preload_cuda_libraries
from trtpipe.runtime.onnxruntime.providers import with_run_settings, without_cuda_graph
from trtpipe.runtime.onnxruntime.settings import GraphOptimization, OnnxRuntimeSettings
from trtpipe.runtime.options import RunOptions
from trtpipe.vocab import BackendKind, Device, dtype

# ONNX Runtime's GraphOptimizationLevel member for each level.
_LEVELS = {GraphOptimization.DISABLE: "ORT_DISABLE_ALL", GraphOptimization.BASIC: "ORT_ENABLE_BASIC",
           GraphOptimization.EXTENDED: "ORT_ENABLE_EXTENDED", GraphOptimization.ALL: "ORT_ENABLE_ALL"}


# ONNX Runtime's logging severities; by default only fatal messages reach the terminal (errors become exceptions
# that trtpipe reports in one line; the CUDA provider logs fallbacks it recovers from as errors).
_LOG_LEVELS = {"verbose": 0, "info": 1, "warning": 2, "error": 3, "fatal": 4}


def log_severity() -> int:
    """The severity ONNX Runtime logs from: TRTPIPE_ORT_LOG's level, else fatal only."""
    return _LOG_LEVELS.get(os.environ.get("TRTPIPE_ORT_LOG", "").strip().lower(), 4)


class OnnxRuntimeBackend(Backend):
    kind = BackendKind.ONNXRUNTIME
    settings_type = OnnxRuntimeSettings
    concurrent = True

    def __init__(self, artifact: Path | onnx.ModelProto | ArtifactDescription,
                 options: RunOptions | OnnxRuntimeSettings | None = None) -> None:
        """``artifact``: a file, its description, or a model held in memory (optimize's candidates, which run
        without touching the disk). ``options`` are used as given (open_artifact adds what the artifact needs)."""
        import onnxruntime as ort

        own: OnnxRuntimeSettings = self.accept(options)
        description, source, label = _source_of(artifact)
        self.path = description.path
        self.precision = description.precision
        self.providers = with_run_settings(own.providers or ("CPUExecutionProvider",), own)
        names = check_providers(self.providers)
        gpu = any(p.startswith(("CUDA", "Tensorrt")) for p in names)
        _check_settings_fit_providers(own, names, gpu)
        self.folded_weights = self.rounded_fp16 = 0
        if names == ["CPUExecutionProvider"]:
            if own.round_fp16:
                artifact, source, self.rounded_fp16 = _with_fp16_rounding(artifact, source)
            source, self.folded_weights = _with_float_weights(artifact, source)
        session_options = _session_options(ort, own)
        if gpu:
            preload_cuda_libraries()  # before the first CUDA session: a process need not have imported torch
        self.optimization = own.optimization
        self.threads = own.threads
        self.run_options = _run_options(ort, own, names)
        self.cuda_graph = own.cuda_graph
        self.session = self._open_session(ort, source, session_options, label)
        check_active(self.providers, self.session.get_providers(), label)
        self.device = Device.CUDA if gpu else Device.CPU
        self._inputs = [_info(i) for i in self.session.get_inputs()]
        self._outputs = [_info(o) for o in self.session.get_outputs()]
        self._output_names = [o.name for o in self._outputs]
        self.io_binding = gpu if own.io_binding is None else own.io_binding
        self.prefer_nhwc, self.cudnn_search = own.prefer_nhwc, own.cudnn_search
        self._bound = BoundSession(self.session, Device.CUDA if gpu else Device.CPU, fixed=self.cuda_graph,
                                   graphs=self.cuda_graph, base_run_options=self.run_options) \
            if self.io_binding else None

    def _open_session(self, ort: Any, source: str | bytes, session_options: Any, label: str) -> Any:
        """The InferenceSession for ``source``. A CUDA graph needs every node on the CUDA provider and ONNX Runtime
        refuses the session otherwise: then, with one warning, the session is opened again without the graph (and
        ``cuda_graph`` and ``providers`` say so). A session that cannot load is the user's problem, in one line."""
        try:
            return ort.InferenceSession(source, session_options, providers=self.providers)
        except Exception as error:  # ORT raises its own Fail/InvalidGraph/NotImplemented types
            if not self.cuda_graph:
                raise BadInput(f"ONNX Runtime cannot load {label}: {_first_line(error)}") from None
            # A CUDA graph needs every node on the CUDA provider; ONNX Runtime refuses the session otherwise.
            console.warn(f"{label}: no CUDA graph ({_first_line(error)}); it runs with plain launches.")
            self.cuda_graph = False
            self.providers = without_cuda_graph(self.providers)  # prefer_nhwc and the cuDNN search stay as asked
            try:
                return ort.InferenceSession(source, session_options, providers=self.providers)
            except Exception as again:
                raise BadInput(f"ONNX Runtime cannot load {label}: {_first_line(again)}") from None

    def _run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        if self._bound is not None:
            return self._bound.run(feeds)
        return self.session.run(self._output_names, feeds, self.run_options)

    def device_resident_call(self, feeds: dict[str, np.ndarray]) -> Callable[[], None] | None:
        """On a GPU provider, a call on inputs already in device memory with outputs left there (IO binding; the
        shape's CUDA graph where there is one). None on the CPU, where there are no transfers."""
        if self.device is not Device.CUDA:
            return None
        bound = self._bound or BoundSession(self.session, Device.CUDA, base_run_options=self.run_options)
        return bound.resident_call(feeds)

    @property
    def thread_safe(self) -> bool:
        """A session is, unless it runs through fixed buffers (a CUDA graph's): two calls would fill them at once."""
        return self._bound is None or not self._bound.fixed

    @property
    def replays_graph(self) -> bool:
        """Whether runs replay a captured CUDA graph per input shape."""
        return self.cuda_graph

    def replays_cuda_graph(self, feeds: dict[str, np.ndarray]) -> bool | None:
        """On a GPU provider, whether runs replay a captured CUDA graph (per input shape); None on the CPU."""
        return self.cuda_graph if self.device is Device.CUDA else None

    def close(self) -> None:
        """Give back the captured CUDA graphs, the bound buffers and the session (its thread pool, so it cannot
        spin against the next thing measured, and its memory arena): nothing of this backend holds them after."""
        bound: BoundSession | None = getattr(self, "_bound", None)
        if bound is not None:
            bound.close()
        self._bound = None
        self.__dict__.pop("session", None)


def _source_of(artifact: Path | onnx.ModelProto | ArtifactDescription) -> tuple[ArtifactDescription, str | bytes, str]:
    """What a session is opened on: the artifact's description, the session's source (a file's path, or the bytes of
    a model held in memory) and how messages name it."""
    if isinstance(artifact, onnx.ModelProto):
        return describe_model(artifact), artifact.SerializeToString(), "the in-memory model"
    description = artifact if isinstance(artifact, ArtifactDescription) else describe_artifact(artifact)
    return description, str(description.path), str(description.path)


def _check_settings_fit_providers(options: OnnxRuntimeSettings, names: list[str], gpu: bool) -> None:
    """Refuse a setting the run's providers cannot honour, before anything is loaded: a CUDA graph without IO binding
    or without a GPU provider, FP16 rounding on anything but the CPU provider alone."""
    if options.cuda_graph and options.io_binding is False:
        raise BadInput("The cuda_graph setting needs io_binding (ONNX Runtime replays a graph into the buffers it "
                       "was captured with; set by you or by the artifact's .tuned.json): drop io_binding=False, "
                       "or pass cuda_graph=False with it.")
    if options.cuda_graph and not gpu:
        raise BadInput("The cuda_graph setting needs a GPU provider (CUDAExecutionProvider); this run has "
                       f"{', '.join(names)}.")
    if options.round_fp16 and names != ["CPUExecutionProvider"]:
        raise BadInput("The round_fp16 setting is for ONNX Runtime's CPU provider (a GPU rounds FP16 itself); "
                       f"this run has {', '.join(names)}.")


def _session_options(ort: Any, options: OnnxRuntimeSettings) -> Any:
    """ONNX Runtime's SessionOptions for ``options``: graph optimization level, log severity (set process-wide too),
    thread pool size, and sleeping rather than spinning pool threads where asked."""
    session_options = ort.SessionOptions()
    session_options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _LEVELS[options.optimization])
    ort.set_default_logger_severity(log_severity())
    session_options.log_severity_level = log_severity()
    if options.threads:
        session_options.intra_op_num_threads = options.threads
        session_options.inter_op_num_threads = 1
    if not options.spinning:  # a server needs the CPU between requests: idle pool threads must sleep, not spin
        session_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return session_options


def _run_options(ort: Any, options: OnnxRuntimeSettings, names: list[str]) -> Any:
    """ONNX Runtime's RunOptions every run passes: with ``release_memory``, the memory arenas shrunk after each run."""
    run_options = ort.RunOptions()
    if options.release_memory:
        # ONNX Runtime keeps the arena a large batch grew for the life of the session; a server under a memory
        # limit that once answered such a batch (or refused it for memory) would then fail every allocation
        # after it, in ONNX Runtime, gRPC's message buffers or the HTTP parser. Shrinking after each run gives
        # the unused chunks back.
        devices = ["cpu:0"] + (["gpu:0"] if any(p.startswith("CUDA") for p in names) else [])
        run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", ";".join(devices))
    return run_options


MAX_IN_MEMORY_BYTES = 1_800_000_000  # protobuf cannot serialize 2 GiB: a larger model is loaded as it is


def _with_fp16_rounding(artifact: Path | onnx.ModelProto | ArtifactDescription,
                        source: str | bytes) -> tuple[Path | onnx.ModelProto | ArtifactDescription, str | bytes, int]:
    """``artifact`` and ``source`` rewritten so the CPU provider rounds every FP16 tensor as a GPU does (see
    :mod:`fp16_rounding`), and how many tensors it rounds; as they are where nothing is FP16."""
    from trtpipe.onnx_info import load_onnx

    model = artifact if isinstance(artifact, onnx.ModelProto) else load_onnx(_file_of(artifact))
    rounded, count = round_fp16_tensors(model)
    if not count:
        return artifact, source, 0
    if rounded.ByteSize() > MAX_IN_MEMORY_BYTES:
        name = source if isinstance(source, str) else "The model"
        console.warn(f"{name} is too large to rewrite in memory: its FP16 tensors are not rounded as a GPU rounds "
                     "them (ONNX Runtime's CPU provider runs FP16 chains in FP32), so its accuracy here is optimistic.")
        return artifact, source, 0
    return rounded, rounded.SerializeToString(), count


def _with_float_weights(artifact: Path | onnx.ModelProto | ArtifactDescription,
                        source: str | bytes) -> tuple[str | bytes, int]:
    """``source`` with the weights of the convolutions the CPU provider runs in float dequantized once (see
    :mod:`float_weights`: exact, and faster on a Q/DQ detector), and how many were folded; ``source``
    as it is where there are none."""
    from trtpipe.onnx_info import load_onnx

    if isinstance(artifact, onnx.ModelProto):
        if not needs_folding(artifact):
            return source, 0
        model = onnx.ModelProto()
        model.CopyFrom(artifact)
    else:
        path = _file_of(artifact)
        if not needs_folding(load_onnx(path, load_weights=False)):
            return source, 0
        model = load_onnx(path)
    if model.ByteSize() > MAX_IN_MEMORY_BYTES:
        return source, 0
    folded = fold_float_convolution_weights(model)
    return (model.SerializeToString(), folded) if folded else (source, 0)


def _file_of(artifact: Path | ArtifactDescription) -> Path:
    """The file an artifact not held in memory is read from (the session's ``source``)."""
    return Path(str(artifact.path)) if isinstance(artifact, ArtifactDescription) else Path(artifact)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _info(node: Any) -> TensorInfo:
    """``node``: an onnxruntime.NodeArg (onnxruntime ships no types)."""
    ort_type = node.type
    shape = tuple(d if isinstance(d, int) else (d or None) for d in node.shape)
    entry = dtype(onnx_name=ort_type.removeprefix("tensor(").removesuffix(")"))
    return TensorInfo(node.name, entry.numpy if entry else ort_type, shape)
