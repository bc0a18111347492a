"""How ONNX Runtime runs ONNX files (capability ``RunsOnnx``): its executions (CPU, CUDA, and TensorRT through its
provider), the settings that run a file one way (an execution's providers) and the check that those providers
exist here. Other layers reach these through runtime/registry.py, never by this module's name. Light at import:
ONNX Runtime is imported when a function is called."""

from __future__ import annotations

from typing import Any

from trtpipe.runtime.onnxruntime.installation import check_providers
from trtpipe.runtime.onnxruntime.providers import execution_for, provider_list
from trtpipe.vocab import OnnxExecution, Target

executions: tuple[OnnxExecution, ...] = (OnnxExecution.CPU, OnnxExecution.CUDA, OnnxExecution.TENSORRT)
gpu_executions: tuple[OnnxExecution, ...] = (OnnxExecution.CUDA, OnnxExecution.TENSORRT)
__all__ = ["check_execution", "execution_for", "execution_settings", "executions", "foreign_int8_targets",
           "gpu_executions"]
foreign_int8_targets: tuple[Target, ...] = ()  # it runs every INT8 flavour's Q/DQ (as float ops where it must)


def execution_settings(execution: OnnxExecution, trt_profile: tuple[str, str, str] | None,
                       workspace: int | None) -> dict[str, Any]:
    """The RunOptions keywords that run an ONNX file as ``execution``: its providers, with their options."""
    return {"providers": tuple(provider_list(execution, trt_profile=trt_profile, trt_workspace=workspace))}


def check_execution(execution: OnnxExecution) -> None:
    """BadInput naming what is missing where ``execution``'s providers are not installed here."""
    check_providers(provider_list(execution))
