"""What ONNX Runtime's registry entry offers besides opening a file: the settings that run an ONNX file one way
(an execution's providers), the check that those providers exist here, and the probe session that runs a graph as
written to read tensors inside it. Other layers reach these through runtime/registry.py, never by this module's
name. Light at import: ONNX Runtime, ONNX and NumPy are imported when a hook is called."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtpipe.runtime.onnxruntime.probe import QUIET, SILENT, probe_session
from trtpipe.runtime.onnxruntime.providers import check_providers, provider_list
from trtpipe.vocab import OnnxExecution

if TYPE_CHECKING:
    import onnx


def execution_settings(execution: OnnxExecution, trt_profile: tuple[str, str, str] | None,
                       workspace: int | None) -> dict[str, Any]:
    """The RunOptions keywords that run an ONNX file as ``execution``: its providers, with their options."""
    return {"providers": tuple(provider_list(execution, trt_profile=trt_profile, trt_workspace=workspace))}


def check_execution(execution: OnnxExecution) -> None:
    """BadInput naming what is missing where ``execution``'s providers are not installed here."""
    check_providers(provider_list(execution))


def probe(model_or_path: onnx.ModelProto | Path | str, exposing: tuple[str, ...], silent: bool,
          round_fp16: bool) -> Any:
    """The CPU probe session over the graph (probe.py), exposing ``exposing``; with ``round_fp16`` every FP16
    tensor is rounded where it is written, as a GPU computes it (fp16_rounding.py)."""
    level = SILENT if silent else QUIET
    if not round_fp16:
        return probe_session(model_or_path, exposing=exposing, log_level=level)
    import onnx

    from trtpipe.runtime.onnxruntime.fp16_rounding import round_fp16_tensors
    from trtpipe.runtime.onnxruntime.probe import with_outputs

    model = model_or_path if isinstance(model_or_path, onnx.ModelProto) else onnx.load(str(model_or_path))
    return probe_session(round_fp16_tensors(with_outputs(model, exposing))[0], log_level=level)
