"""Stage 1, convert: PyTorch -> ONNX with a dynamic batch, verified against PyTorch FP32."""

from trtpipe._lazy import lazy_exports
from trtpipe.convert.options import ConvertOptions

__all__ = ["ConvertOptions", "ConvertResult", "convert", "verify"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "convert": "trtpipe.convert.stage:convert", "verify": "trtpipe.convert.stage:verify",
    "ConvertResult": "trtpipe.convert.stage:ConvertResult"})
