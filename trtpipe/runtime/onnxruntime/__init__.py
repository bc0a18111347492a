"""ONNX Runtime: ONNX artifacts on the CPU provider by default, any installed provider on request."""

from trtpipe.runtime.entry import BackendEntry, TritonFacts
from trtpipe.runtime.onnxruntime.errors import failed_node, refuses_data
from trtpipe.runtime.onnxruntime.hooks import check_execution, execution_settings, probe
from trtpipe.runtime.onnxruntime.settings import OnnxRuntimeSettings
from trtpipe.runtime.onnxruntime.triton import accelerator_options
from trtpipe.vocab import ArtifactKind, BackendKind, OnnxExecution

ENTRY = BackendEntry(
    BackendKind.ONNXRUNTIME, "trtpipe.runtime.onnxruntime.backend:OnnxRuntimeBackend", OnnxRuntimeSettings,
    runs=(ArtifactKind.ONNX,), library=str(BackendKind.ONNXRUNTIME),
    executions=(OnnxExecution.CPU, OnnxExecution.CUDA, OnnxExecution.TENSORRT),
    triton=TritonFacts("onnxruntime_onnx", "KIND_CPU", accelerator_options=accelerator_options),
    execution_settings=execution_settings, check_execution=check_execution, probe=probe, runs_on=None,
    refuses_data=refuses_data, failed_node=failed_node,
    peer="trtpipe.runtime.onnxruntime.peer:quantize_static_peer", title="ONNX Runtime", portability=0,
    tuner="trtpipe.runtime.onnxruntime.tune:tune_artifact",
    tuning_candidates="trtpipe.runtime.onnxruntime.tune:candidates",
    environment="trtpipe.runtime.onnxruntime.providers:environment",
    doctor="trtpipe.runtime.onnxruntime.providers:doctor_row")

__all__ = ["ENTRY", "OnnxRuntimeSettings"]
