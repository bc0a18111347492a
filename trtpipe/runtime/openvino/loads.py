"""Whether a written ONNX file loads in OpenVINO's default (capability ``ChecksLoads``): the file read and compiled
for its CPU plugin. Meant for it: the float files and the openvino INT8 flavour (the other flavours' Q/DQ are made
for another runtime's arithmetic). Light at import."""

from __future__ import annotations

from pathlib import Path

from trtpipe.vocab import Precision, Target


def meant_for(precision: Precision, target: Target) -> bool:
    """The float files, and INT8 written for OpenVINO."""
    return precision is not Precision.INT8 or target is Target.OPENVINO


def loads(path: Path) -> str | None:
    """None where OpenVINO reads and compiles ``path`` for its CPU plugin, else its error's first line."""
    import openvino as ov

    try:
        core = ov.Core()
        core.compile_model(core.read_model(str(path)), "CPU")
    except Exception as error:  # OpenVINO raises RuntimeError and its own types alike
        text = str(error).strip()
        return text.splitlines()[0][:300] if text else type(error).__name__
    return None
