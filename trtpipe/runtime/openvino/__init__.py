"""OpenVINO execution of ONNX artifacts (optional extra: pip install 'trtpipe[openvino]')."""

from trtpipe.runtime.capabilities import ChecksLoads, QuantizesAsPeer, RunsOnnx, TritonFacts
from trtpipe.runtime.entry import BackendEntry
from trtpipe.runtime.openvino.settings import OpenVinoSettings
from trtpipe.runtime.openvino.triton import parameters
from trtpipe.vocab import ArtifactKind, BackendKind

ENTRY = BackendEntry(
    BackendKind.OPENVINO, "trtpipe.runtime.openvino.backend:OpenVinoBackend", OpenVinoSettings,
    runs=(ArtifactKind.ONNX,), library=str(BackendKind.OPENVINO), optional=True, title="OpenVINO", portability=1,
    can={RunsOnnx: "trtpipe.runtime.openvino.onnx_files",
         ChecksLoads: "trtpipe.runtime.openvino.loads",
         TritonFacts: TritonFacts("", "KIND_CPU", backend=str(BackendKind.OPENVINO), parameters=parameters),
         QuantizesAsPeer: "trtpipe.runtime.openvino.peer"})

__all__ = ["ENTRY", "OpenVinoSettings"]
