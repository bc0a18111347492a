"""Where a GPU is available, bench shows a TensorRT-target INT8 file's two figures side by side: the CPU simulation
(Q/DQ as float ops, FP16 rounded as on a GPU) and the file run natively on ONNX Runtime CUDA, each row named so
that a reader and ``select`` can tell them apart. Skipped with the reason elsewhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def _cuda_provider() -> bool:
    import onnxruntime
    import torch

    return torch.cuda.is_available() and "CUDAExecutionProvider" in onnxruntime.get_available_providers()


pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not _cuda_provider(), reason="needs a CUDA GPU and onnxruntime-gpu's "
                                 "CUDAExecutionProvider (pip install onnxruntime-gpu)")]


def test_the_simulation_and_the_gpu_run_are_two_rows(digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    trt, json_path, markdown = tmp_path / "trt.onnx", tmp_path / "bench.json", tmp_path / "bench.md"
    assert run_cli("optimize", digits_onnx, "-o", trt, "--precision", "int8", "--target", "tensorrt",
                   "--calib", "digits").exit_code == 0
    result = run_cli("bench", "digits_resnet", trt, "--backend", "onnxruntime,onnxruntime-cuda", "--device", "cuda",
                     "--batch", "8", "--iters", "5", "--warmup", "1", "--json", json_path, "--markdown", markdown)
    assert result.exit_code == 0, result.output
    rows = {r["variant"]: r for r in json.loads(json_path.read_text())["results"] if r["batch"] == 8}
    simulated, native = rows["onnxruntime-int8-trtsim (trt)"], rows["onnxruntime-cuda-int8-tensorrt (trt)"]
    assert simulated["simulated"] and simulated["device"] == "cpu" and "FP16 rounded" in simulated["note"]
    assert not native["simulated"] and native["device"] == "cuda"
    for row in (simulated, native):  # both figures are there, each on its own row
        assert row["agreement"] is not None and row["top1_accuracy"] is not None, row["variant"]
    text = markdown.read_text()
    assert "onnxruntime-int8-trtsim (trt)" in text and "onnxruntime-cuda-int8-tensorrt (trt)" in text
