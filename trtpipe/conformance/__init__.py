"""TensorRT (and CPU) conformance of an ONNX graph, checked without TensorRT: one rule per file in rules/."""

from trtpipe._lazy import lazy_exports
from trtpipe.conformance.options import CheckOptions

__all__ = ["CheckOptions", "CheckReport", "check_file", "check_model"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "check_model": "trtpipe.conformance.check:check_model", "check_file": "trtpipe.conformance.check:check_file",
    "CheckReport": "trtpipe.conformance.findings:CheckReport"})
