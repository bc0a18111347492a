"""Stage compile: a PyTorch model to an AOTInductor package (.pt2) with torch.export and Inductor, verified
against PyTorch FP32, with a manifest beside it."""

from trtpipe._lazy import lazy_exports
from trtpipe.compile.options import CompileOptions

__all__ = ["CompileOptions", "CompileResult", "compile_aoti"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "compile_aoti": "trtpipe.compile.stage:compile_aoti", "CompileResult": "trtpipe.compile.stage:CompileResult"})
