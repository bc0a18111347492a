"""What a user sees on a machine without TensorRT or a GPU (every machine of this project's CI)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import error_line


def _has_full_tensorrt() -> bool:
    try:
        import tensorrt

        return hasattr(tensorrt, "Builder")
    except ImportError:
        return False


@pytest.mark.skipif(_has_full_tensorrt(), reason="TensorRT is installed here")
def test_build_says_what_is_missing_and_how_to_install_it(digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("build", digits_onnx, "-o", tmp_path / "m.plan")
    assert result.exit_code == 3  # a missing optional dependency; 2 is click's, for a malformed option
    line = error_line(result.output)
    assert "needs TensorRT, which is not installed" in line and "pip install 'trtpipe[gpu]'" in line
    assert not (tmp_path / "m.plan").exists()


def test_build_checks_options_before_looking_for_tensorrt(digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("build", digits_onnx, "-o", tmp_path / "m.plan", "--workspace", "lots")
    assert result.exit_code == 2 and "is not a size" in result.output
    result = run_cli("build", digits_onnx, "-o", tmp_path / "m.plan", "--workspace", "1e99GiB")
    assert result.exit_code == 2 and "larger than any GPU memory" in result.output and "Traceback" not in result.output
    result = run_cli("build", digits_onnx, "-o", tmp_path / "m.plan", "--max-shapes", "input:64x3x32x32")
    assert result.exit_code == 1 and "does not fit input 'input'" in error_line(result.output)
    result = run_cli("build", tmp_path / "missing.onnx", "-o", tmp_path / "m.plan")
    assert result.exit_code == 1 and "does not exist" in error_line(result.output)


def test_engine_without_sidecar_or_for_another_machine(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    engine = tmp_path / "m.plan"
    engine.write_bytes(b"not really an engine")
    result = run_cli("bench", "digits_resnet", engine, "--iters", "1")
    assert result.exit_code == 1 and "has no metadata sidecar" in error_line(result.output)
    sidecar = {"schema": "trtpipe.engine/1", "tensorrt_version": "10.13.0.35", "gpu_name": "NVIDIA H100",
               "compute_capability": "9.0", "engine_sha256": "0" * 64}
    Path(f"{engine}.json").write_text(json.dumps(sidecar))
    result = run_cli("bench", "digits_resnet", engine, "--iters", "1")
    assert result.exit_code == 1 and "does not match its sidecar" in error_line(result.output)


def test_doctor_reports_each_component(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("doctor")
    assert result.exit_code == 0
    for item in ("GPU", "NVIDIA driver", "torch CUDA", "TensorRT", "ONNX Runtime"):
        assert item in result.output
    assert "CPUExecutionProvider" in result.output


def test_gpu_onnx_backend_without_gpu_providers(digits_onnx: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("the CUDA provider is installed here")
    result = run_cli("bench", "digits_resnet", digits_onnx, "--backend", "onnxruntime-cuda", "--iters", "1")
    assert result.exit_code == 1
    assert "Requested ONNX Runtime providers CUDAExecutionProvider" in error_line(result.output)
    assert "pip install 'trtpipe[gpu]'" in result.output
