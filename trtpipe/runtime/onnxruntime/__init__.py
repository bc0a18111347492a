"""ONNX Runtime: ONNX artifacts on the CPU provider by default, any installed provider on request."""

from trtpipe.runtime.capabilities import (
    ChecksLoads,
    GraphSessions,
    QuantizationTools,
    QuantizesAsPeer,
    ReportsInstallation,
    RunsOnnx,
    TritonFacts,
    Tunes,
    WordsErrors,
)
from trtpipe.runtime.entry import BackendEntry
from trtpipe.runtime.onnxruntime.settings import OnnxRuntimeSettings
from trtpipe.runtime.onnxruntime.triton import accelerator_options
from trtpipe.vocab import ArtifactKind, BackendKind

ENTRY = BackendEntry(
    BackendKind.ONNXRUNTIME, "trtpipe.runtime.onnxruntime.backend:OnnxRuntimeBackend", OnnxRuntimeSettings,
    runs=(ArtifactKind.ONNX,), library=str(BackendKind.ONNXRUNTIME), runs_on=None, title="ONNX Runtime",
    portability=0,
    can={RunsOnnx: "trtpipe.runtime.onnxruntime.executions",
         GraphSessions: "trtpipe.runtime.onnxruntime.sessions",
         ChecksLoads: "trtpipe.runtime.onnxruntime.loads",
         QuantizationTools: "trtpipe.runtime.onnxruntime.quantization",
         TritonFacts: TritonFacts("onnxruntime_onnx", "KIND_CPU", accelerator_options=accelerator_options),
         WordsErrors: "trtpipe.runtime.onnxruntime.errors",
         QuantizesAsPeer: "trtpipe.runtime.onnxruntime.peer",
         Tunes: "trtpipe.runtime.onnxruntime.tune",
         ReportsInstallation: "trtpipe.runtime.onnxruntime.installation"})

__all__ = ["ENTRY", "OnnxRuntimeSettings"]
