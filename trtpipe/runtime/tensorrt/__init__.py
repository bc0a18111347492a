"""TensorRT: engines run from their sidecar-checked files; the loader (loader.py) finds TensorRT and the GPU, and
gives every build and engine the process's one TensorRT logger."""

from trtpipe.runtime.capabilities import OpensUnrecorded, OwnStage, ProfilesLayers, TakesBenchFlags, TritonFacts
from trtpipe.runtime.entry import BackendEntry
from trtpipe.runtime.tensorrt.settings import TensorRTSettings
from trtpipe.vocab import ArtifactKind, BackendKind, Device

ENTRY = BackendEntry(
    BackendKind.TENSORRT, "trtpipe.runtime.tensorrt.backend:TensorRTBackend", TensorRTSettings,
    runs=(ArtifactKind.TENSORRT_ENGINE,), library=str(BackendKind.TENSORRT), optional=True, runs_on=Device.CUDA,
    title="TensorRT", portability=4,
    can={TritonFacts: TritonFacts("tensorrt_plan", "KIND_GPU"),
         OwnStage: OwnStage("engine"),
         # bench's --cuda-graph and --spin-wait are TensorRT's (ONNX Runtime's cuda_graph is chosen by its tuning)
         TakesBenchFlags: TakesBenchFlags(("cuda_graph", "spin_wait")),
         ProfilesLayers: ProfilesLayers(),
         # an engine without a sidecar (trtexec's) only on --trust-engine: TensorRT engines are executable code
         OpensUnrecorded: "trtpipe.runtime.tensorrt.unrecorded"})

__all__ = ["ENTRY", "TensorRTSettings"]
