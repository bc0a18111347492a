"""ONNX Runtime execution of an ONNX artifact; CPU by default, any installed provider on request."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from trtpipe.errors import BadInput
from trtpipe.runtime.artifacts import ArtifactDescription, describe_artifact, describe_model
from trtpipe.runtime.base import Backend, TensorInfo
from trtpipe.runtime.onnxruntime.float_weights import fold_float_convolution_weights, needs_folding
from trtpipe.runtime.onnxruntime.providers import check_active, check_providers
from trtpipe.runtime.options import RunOptions
from trtpipe.vocab import BackendKind, Device, GraphOptimization, dtype

# ONNX Runtime's GraphOptimizationLevel member for each level.
_LEVELS = {GraphOptimization.DISABLE: "ORT_DISABLE_ALL", GraphOptimization.BASIC: "ORT_ENABLE_BASIC",
           GraphOptimization.EXTENDED: "ORT_ENABLE_EXTENDED", GraphOptimization.ALL: "ORT_ENABLE_ALL"}


class OnnxRuntimeBackend(Backend):
    kind = BackendKind.ONNXRUNTIME
    settings = frozenset({"threads", "spinning", "optimization", "providers", "release_memory"})

    def __init__(self, artifact: Path | onnx.ModelProto | ArtifactDescription,
                 options: RunOptions | None = None) -> None:
        """``artifact``: a file, its description, or a model held in memory (optimize's candidates, which run
        without touching the disk). ``options`` are used as given (open_artifact adds what the artifact needs)."""
        import onnxruntime as ort

        options = self.accept(options)
        if isinstance(artifact, onnx.ModelProto):
            description, source, label = describe_model(artifact), artifact.SerializeToString(), "the in-memory model"
        else:
            description = artifact if isinstance(artifact, ArtifactDescription) else describe_artifact(artifact)
            source = label = str(description.path)
        self.path = description.path
        self.precision = description.precision
        self.providers = list(options.providers or ["CPUExecutionProvider"])
        names = check_providers(self.providers)
        self.folded_weights = 0
        if names == ["CPUExecutionProvider"]:
            source, self.folded_weights = _with_float_weights(artifact, source)
        session_options = ort.SessionOptions()
        session_options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _LEVELS[options.optimization])
        session_options.log_severity_level = 3  # warnings about unused initialisers etc. are noise to a user
        if options.threads:
            session_options.intra_op_num_threads = options.threads
            session_options.inter_op_num_threads = 1
        if not options.spinning:  # a server needs the CPU between requests: idle pool threads must sleep, not spin
            session_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.optimization = options.optimization
        self.threads = options.threads
        self.run_options = ort.RunOptions()
        if options.release_memory:
            # ONNX Runtime keeps the arena a large batch grew for the life of the session; a server under a memory
            # limit that once answered such a batch (or refused it for memory) would then fail every allocation
            # after it, in ONNX Runtime, gRPC's message buffers or the HTTP parser. Shrinking after each run gives
            # the unused chunks back.
            devices = ["cpu:0"] + (["gpu:0"] if any(p.startswith("CUDA") for p in names) else [])
            self.run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", ";".join(devices))
        try:
            self.session = ort.InferenceSession(source, session_options, providers=self.providers)
        except Exception as error:  # ORT raises its own Fail/InvalidGraph/NotImplemented types
            message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise BadInput(f"ONNX Runtime cannot load {label}: {message}") from None
        check_active(self.providers, self.session.get_providers(), label)
        self.device = Device.CUDA if any(p.startswith(("CUDA", "Tensorrt")) for p in names) else Device.CPU
        self._inputs = [_info(i) for i in self.session.get_inputs()]
        self._outputs = [_info(o) for o in self.session.get_outputs()]
        self._output_names = [o.name for o in self._outputs]

    def _run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.session.run(self._output_names, feeds, self.run_options)

    def close(self) -> None:
        # Dropping the session stops its thread pool, so it cannot spin against the next thing measured.
        self.__dict__.pop("session", None)


MAX_IN_MEMORY_BYTES = 1_800_000_000  # protobuf cannot serialize 2 GiB: a larger model is loaded as it is


def _with_float_weights(artifact: Path | onnx.ModelProto | ArtifactDescription,
                        source: str | bytes) -> tuple[str | bytes, int]:
    """``source`` with the weights of the convolutions the CPU provider runs in float dequantized once (see
    :mod:`float_weights`: exact, and up to 1.45x faster on a Q/DQ detector), and how many were folded; ``source``
    as it is where there are none."""
    from trtpipe.onnx_info import load_onnx

    if isinstance(artifact, onnx.ModelProto):
        if not needs_folding(artifact):
            return source, 0
        model = onnx.ModelProto()
        model.CopyFrom(artifact)
    else:
        path = Path(source)  # type: ignore[arg-type]
        if not needs_folding(load_onnx(path, load_weights=False)):
            return source, 0
        model = load_onnx(path)
    if model.ByteSize() > MAX_IN_MEMORY_BYTES:
        return source, 0
    folded = fold_float_convolution_weights(model)
    return (model.SerializeToString(), folded) if folded else (source, 0)


def _info(node: object) -> TensorInfo:
    ort_type = node.type  # type: ignore[attr-defined]
    shape = tuple(d if isinstance(d, int) else (d or None) for d in node.shape)  # type: ignore[attr-defined]
    entry = dtype(onnx_name=ort_type.removeprefix("tensor(").removesuffix(")"))
    return TensorInfo(node.name, entry.numpy if entry else ort_type, shape)  # type: ignore[attr-defined]
