"""TensorRT: engines run from their sidecar-checked files; the loader finds TensorRT and the GPU."""

from trtpipe.runtime.tensorrt.loader import (
    INSTALL_TENSORRT,
    TensorRTLogger,
    import_tensorrt,
    import_tensorrt_runtime,
    require_cuda_gpu,
)
from trtpipe.runtime.tensorrt.sidecar import EngineSidecar, read_sidecar, sidecar_path

__all__ = ["INSTALL_TENSORRT", "EngineSidecar", "TensorRTLogger", "import_tensorrt", "import_tensorrt_runtime",
           "read_sidecar", "require_cuda_gpu", "sidecar_path"]
