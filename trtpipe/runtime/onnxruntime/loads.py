"""Whether a written ONNX file loads in a user's default ONNX Runtime session (capability ``ChecksLoads``): all
graph optimisations on its CPU provider, where its optimiser can fuse a pattern into a kernel whose type check then
fails (FP16 scales into QLinearConcat). Every file trtpipe writes is meant for it (trtpipe.load and serve run every
file there). Light at import."""

from __future__ import annotations

from pathlib import Path

from trtpipe.vocab import Precision, Target


def meant_for(precision: Precision, target: Target) -> bool:
    """Every file: ONNX Runtime runs each precision and INT8 flavour."""
    return True


def loads(path: Path) -> str | None:
    """None where ONNX Runtime's default session opens ``path``, else its error's first line."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    try:
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as error:  # ONNX Runtime raises its own (Fail, InvalidGraph, NotImplemented...) types
        return first_line(error)
    return None


def first_line(error: BaseException) -> str:
    """An error's first line (at most 300 characters), or its type's name where it says nothing."""
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else type(error).__name__
