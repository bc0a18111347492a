"""How OpenVINO runs ONNX files (capability ``RunsOnnx``): one execution, its CPU plugin, which needs no settings
beyond its own and no check beyond its library. A TensorRT-flavour INT8 file's Q/DQ are made for TensorRT:
OpenVINO's integer kernels would not run its arithmetic. Light at import."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trtpipe.vocab import OnnxExecution, Target

executions: tuple[OnnxExecution, ...] = (OnnxExecution.OPENVINO,)
gpu_executions: tuple[OnnxExecution, ...] = ()  # its CPU plugin only
foreign_int8_targets: tuple[Target, ...] = (Target.TENSORRT,)


def execution_for(names: Sequence[str]) -> OnnxExecution | None:
    """None: OpenVINO takes no execution providers (its plugin is its setting)."""
    return None


def execution_settings(execution: OnnxExecution, trt_profile: tuple[str, str, str] | None,
                       workspace: int | None) -> dict[str, Any]:
    """None to add: OpenVINO's own settings (threads, its precision hint) run each file."""
    return {}


def check_execution(execution: OnnxExecution) -> None:
    """Nothing beyond its library, which opening a file checks."""
