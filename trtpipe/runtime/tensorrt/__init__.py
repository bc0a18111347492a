"""TensorRT: engines run from their sidecar-checked files; the loader finds TensorRT and the GPU, and gives every
build and engine the process's one TensorRT logger."""

from trtpipe.runtime.tensorrt.loader import (
    INSTALL_TENSORRT,
    MESSAGES,
    LogScope,
    TensorRTMessages,
    import_tensorrt,
    import_tensorrt_runtime,
    require_cuda_gpu,
    tensorrt_logger,
)
from trtpipe.runtime.tensorrt.sidecar import EngineSidecar, read_sidecar, sidecar_path

__all__ = ["INSTALL_TENSORRT", "MESSAGES", "EngineSidecar", "LogScope", "TensorRTMessages", "import_tensorrt",
           "import_tensorrt_runtime", "read_sidecar", "require_cuda_gpu", "sidecar_path", "tensorrt_logger"]
