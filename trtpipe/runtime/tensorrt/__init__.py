"""TensorRT: engines run from their sidecar-checked files; the loader (loader.py) finds TensorRT and the GPU, and
gives every build and engine the process's one TensorRT logger."""

from trtpipe.runtime.entry import BackendEntry, TritonFacts
from trtpipe.runtime.tensorrt.loader import EngineOrigin
from trtpipe.runtime.tensorrt.settings import TensorRTSettings
from trtpipe.vocab import ArtifactKind, BackendKind, Device

ENTRY = BackendEntry(
    BackendKind.TENSORRT, "trtpipe.runtime.tensorrt.backend:TensorRTBackend", TensorRTSettings,
    runs=(ArtifactKind.TENSORRT_ENGINE,), library=str(BackendKind.TENSORRT),
    triton=TritonFacts("tensorrt_plan", "KIND_GPU"), stage="engine", optional=True, runs_on=Device.CUDA,
    # bench's --cuda-graph and --spin-wait are TensorRT's (ONNX Runtime's cuda_graph is chosen by its tuning)
    bench_flags=("cuda_graph", "spin_wait"),
    # an engine without a sidecar (trtexec's) only on --trust-engine: TensorRT engines are executable code
    describe_unrecorded="trtpipe.runtime.tensorrt.backend:describe_engine",
    unrecorded_label=str(EngineOrigin.TRUSTED), title="TensorRT", portability=4)

__all__ = ["ENTRY", "TensorRTSettings"]
