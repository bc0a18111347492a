"""ONNX Runtime's TensorRT provider gets the workspace limit and the caches trtpipe is told about."""

from __future__ import annotations

from pathlib import Path

import pytest

from trtpipe.runtime import RunOptions
from trtpipe.runtime.onnxruntime.providers import provider_list, with_tensorrt_options
from trtpipe.vocab import OnnxExecution


def _trt_options(providers: list | tuple) -> dict:  # type: ignore[type-arg]
    return next(p[1] for p in providers if not isinstance(p, str) and p[0] == "TensorrtExecutionProvider")


def test_workspace_and_caches_reach_the_tensorrt_provider(tmp_path: Path) -> None:
    providers = provider_list(OnnxExecution.TENSORRT, trt_profile=("input:1x3", "input:8x3", "input:64x3"),
                              trt_workspace=1 << 30, trt_cache_dir=tmp_path)
    options = _trt_options(providers)
    assert options["trt_max_workspace_size"] == 1 << 30
    assert options["trt_engine_cache_enable"] is True and options["trt_engine_cache_path"] == str(tmp_path)
    assert options["trt_timing_cache_enable"] is True and options["trt_timing_cache_path"] == str(tmp_path)
    assert options["trt_profile_opt_shapes"] == "input:8x3"
    # None means the provider's default: nothing is set.
    assert provider_list(OnnxExecution.TENSORRT)[0] == "TensorrtExecutionProvider"
    assert ("CUDAExecutionProvider", {"use_tf32": 0}) in provider_list(OnnxExecution.TENSORRT, trt_workspace=1 << 30)


def test_run_options_that_chose_their_providers_still_get_the_workspace(tmp_path: Path) -> None:
    chosen = RunOptions(providers=tuple(provider_list(OnnxExecution.TENSORRT, trt_profile=("a:1", "a:8", "a:32"))))
    given = RunOptions(providers=with_tensorrt_options(chosen.providers, workspace=2 << 30, cache_dir=tmp_path))
    options = _trt_options(given.providers)
    assert options["trt_max_workspace_size"] == 2 << 30 and options["trt_profile_min_shapes"] == "a:1"
    assert given.provider_names == chosen.provider_names
    cpu = RunOptions(providers=("CPUExecutionProvider",))
    assert with_tensorrt_options(cpu.providers, workspace=1 << 30) == cpu.providers


@pytest.mark.gpu
def test_onnxruntime_applies_the_workspace(digits_onnx: Path, tmp_path: Path) -> None:
    import onnxruntime

    if "TensorrtExecutionProvider" not in onnxruntime.get_available_providers():
        pytest.skip("ONNX Runtime's TensorRT provider is not installed here (onnxruntime-gpu and TensorRT 10)")
    providers = provider_list(OnnxExecution.TENSORRT, trt_workspace=1 << 30, trt_cache_dir=tmp_path)
    session = onnxruntime.InferenceSession(str(digits_onnx), providers=providers)
    if "TensorrtExecutionProvider" not in session.get_provider_options():
        # onnxruntime-gpu lists the provider whether or not TensorRT's libraries load; it then falls back unseen.
        pytest.skip("ONNX Runtime lists its TensorRT provider, but TensorRT 10's libraries did not load here")
    applied = session.get_provider_options()["TensorrtExecutionProvider"]
    assert int(applied["trt_max_workspace_size"]) == 1 << 30 and applied["trt_engine_cache_path"] == str(tmp_path)
