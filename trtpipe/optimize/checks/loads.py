"""Whether a written file loads in the default session of each runtime it is meant for.

trtpipe's own loader may run a file with some graph optimisations off (a TensorRT-flavoured Q/DQ file is measured
that way), but a user's plain ``onnxruntime.InferenceSession(path)`` runs all of them, and ONNX Runtime's optimiser
can fuse a pattern into a kernel whose type check then fails (FP16 scales into QLinearConcat). So after writing,
optimize opens the file the way a user would: ONNX Runtime with all optimisations on its CPU provider, and OpenVINO
(read and compiled for its CPU plugin) where it is installed and the file is meant for it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trtpipe.vocab import BackendKind, Precision, Target

ONNXRUNTIME = BackendKind.ONNXRUNTIME
OPENVINO = BackendKind.OPENVINO


@dataclass(frozen=True)
class LoadCheck:
    """One runtime's default session on the written file: whether it loaded, and its first error line if not."""

    runtime: str
    loaded: bool
    error: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {"runtime": self.runtime, "loaded": self.loaded, **({"error": self.error} if self.error else {})}


def runtimes_for(precision: Precision, target: Target) -> tuple[str, ...]:
    """The runtimes a file is meant for: ONNX Runtime always (trtpipe.load and serve run every file there); OpenVINO
    for the float files and the openvino INT8 flavour, where it is installed."""
    meant = [ONNXRUNTIME]
    if (precision is not Precision.INT8 or target is Target.OPENVINO) and importlib.util.find_spec(OPENVINO.value):
        meant.append(OPENVINO)
    return tuple(meant)


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else type(error).__name__


def onnxruntime_loads(path: Path) -> LoadCheck:
    """ONNX Runtime's default session (all graph optimisations, CPU provider) on ``path``."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    try:
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as error:  # ONNX Runtime raises its own (Fail, InvalidGraph, NotImplemented...) types
        return LoadCheck(ONNXRUNTIME, False, _first_line(error))
    return LoadCheck(ONNXRUNTIME, True)


def openvino_loads(path: Path) -> LoadCheck:
    """OpenVINO's default: the file read and compiled for its CPU plugin."""
    import openvino as ov

    try:
        core = ov.Core()
        core.compile_model(core.read_model(str(path)), "CPU")
    except Exception as error:  # OpenVINO raises RuntimeError and its own types alike
        return LoadCheck(OPENVINO, False, _first_line(error))
    return LoadCheck(OPENVINO, True)


CHECKS: dict[str, Callable[[Path], LoadCheck]] = {ONNXRUNTIME: onnxruntime_loads, OPENVINO: openvino_loads}


def check_loads(path: Path, runtimes: tuple[str, ...]) -> list[LoadCheck]:
    """Each of ``runtimes``' default session on ``path``."""
    return [CHECKS[runtime](path) for runtime in runtimes]
