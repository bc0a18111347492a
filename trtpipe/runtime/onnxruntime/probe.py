"""The probe session: ONNX Runtime on the CPU running a graph exactly as it is written, to look inside it.

Calibration, equalization, AdaRound, bias correction, `trtpipe debug` and the converter's batch check all run a
model to read tensors (often intermediate ones, exposed as extra graph outputs), not to serve it. They share one
way of opening that session: the CPU provider, so the numbers do not depend on the machine's accelerators; no
graph rewrites, so every exposed tensor is computed as the graph says (a fused Q/DQ or a constant-folded cast would
hide the very rounding being measured); and ONNX Runtime's own log quiet, since the caller reports failures in one
line of its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import onnx

QUIET = 3  # ONNX Runtime log severity: errors only
SILENT = 4  # fatal only: for a caller that turns the failure into its own message


def with_outputs(model: onnx.ModelProto, names: Iterable[str]) -> onnx.ModelProto:
    """A copy of ``model`` whose graph also outputs ``names``."""
    import onnx

    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    existing = {o.name for o in exposed.graph.output}
    for name in names:
        if name not in existing:
            exposed.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    return exposed


def probe_session(model_or_path: onnx.ModelProto | Path | str, *, exposing: Iterable[str] = (),
                  log_level: int = QUIET) -> Any:  # an onnxruntime.InferenceSession (onnxruntime ships no types)
    """An ONNX Runtime CPU session over ``model_or_path`` with graph rewrites off, whose outputs are the graph's
    plus the tensors named in ``exposing``; ONNX Runtime's errors propagate as its own exception types."""
    import onnx
    import onnxruntime as ort

    names = list(exposing)
    source: str | bytes
    if isinstance(model_or_path, onnx.ModelProto):
        source = with_outputs(model_or_path, names).SerializeToString() if names else model_or_path.SerializeToString()
    elif names:
        source = with_outputs(onnx.load(str(model_or_path)), names).SerializeToString()
    else:
        source = str(model_or_path)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = log_level
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
