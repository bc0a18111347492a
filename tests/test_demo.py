"""The demo writes a Triton-style repository with optimized variants and reports (small model only here)."""

from __future__ import annotations

import json
from pathlib import Path

from trtpipe import demo
from trtpipe.optimize import OptimizeOptions


def test_demo_writes_repository_and_reports(tmp_path: Path) -> None:
    models = [demo.DemoModel("digits_resnet", (1, 2), {
        "int8_cpu": OptimizeOptions(precision="int8", target="cpu", calib="digits", calib_samples=32)})]
    written = demo.run_demo(tmp_path / "models", tmp_path / "reports", duration_s=0.1, models=models)
    for name in ("digits_resnet", "digits_resnet_int8_cpu"):
        assert tmp_path / "models" / name / "1" / "model.onnx" in written
        assert (tmp_path / "models" / name / "1" / "model.manifest.json").is_file()
    report = json.loads((tmp_path / "reports" / "bench_digits_resnet.json").read_text())
    assert {(r["backend"], r["precision"]) for r in report["results"]} == {
        ("torch", "fp32"), ("onnxruntime", "fp32"), ("onnxruntime", "int8")}
    assert (tmp_path / "reports" / "bench_digits_resnet.md").read_text().startswith("### digits_resnet")
