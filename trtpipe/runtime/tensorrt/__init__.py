"""TensorRT: engines run from their sidecar-checked files; the loader (loader.py) finds TensorRT and the GPU, and
gives every build and engine the process's one TensorRT logger."""

from trtpipe.runtime.entry import BackendEntry, TritonFacts
from trtpipe.runtime.tensorrt.settings import TensorRTSettings
from trtpipe.vocab import ArtifactKind, BackendKind, Device

ENTRY = BackendEntry(
    BackendKind.TENSORRT, "trtpipe.runtime.tensorrt.backend:TensorRTBackend", TensorRTSettings,
    runs=(ArtifactKind.TENSORRT_ENGINE,), library=str(BackendKind.TENSORRT),
    triton=TritonFacts("tensorrt_plan", "KIND_GPU"), optional=True, runs_on=Device.CUDA)

__all__ = ["ENTRY", "TensorRTSettings"]
