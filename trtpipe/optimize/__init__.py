"""Stage 2, optimize: fusion, FP16 and INT8 (Q/DQ) written into the ONNX graph, with accuracy figures."""

from trtpipe._lazy import lazy_exports
from trtpipe.optimize.options import OptimizeOptions

__all__ = ["OptimizeOptions", "OptimizeResult", "optimize"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "optimize": "trtpipe.optimize.stage:optimize", "OptimizeResult": "trtpipe.optimize.stage:OptimizeResult"})
