"""OpenVINO execution of ONNX artifacts (optional extra: pip install 'trtpipe[openvino]')."""

from trtpipe.runtime.entry import BackendEntry, TritonFacts
from trtpipe.runtime.openvino.settings import OpenVinoSettings
from trtpipe.runtime.openvino.triton import parameters
from trtpipe.vocab import ArtifactKind, BackendKind, OnnxExecution, Target

ENTRY = BackendEntry(
    BackendKind.OPENVINO, "trtpipe.runtime.openvino.backend:OpenVinoBackend", OpenVinoSettings,
    runs=(ArtifactKind.ONNX,), library=str(BackendKind.OPENVINO), executions=(OnnxExecution.OPENVINO,),
    triton=TritonFacts("", "KIND_CPU", backend=str(BackendKind.OPENVINO), parameters=parameters),
    optional=True, peer_tools=("nncf",), peer="trtpipe.runtime.openvino.peer:nncf_peer", title="OpenVINO",
    # a TensorRT-target INT8 file's Q/DQ are made for TensorRT: OpenVINO's integer kernels would not run its arithmetic
    foreign_int8_targets=(Target.TENSORRT,), portability=1)

__all__ = ["ENTRY", "OpenVinoSettings"]
