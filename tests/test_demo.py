"""The demo writes a Triton-style repository and reports (run here on the small model only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trtpipe import demo


def test_demo_writes_repository_and_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo, "DEMO_MODELS", {"digits_resnet": (1, 2)})
    written = demo.run_demo(tmp_path / "models", tmp_path / "reports", duration_s=0.1)
    assert tmp_path / "models" / "digits_resnet" / "1" / "model.onnx" in written
    assert (tmp_path / "models" / "digits_resnet" / "1" / "model.manifest.json").is_file()
    report = json.loads((tmp_path / "reports" / "bench_digits_resnet.json").read_text())
    assert {r["backend"] for r in report["results"]} == {"torch", "onnxruntime"}
    assert (tmp_path / "reports" / "bench_digits_resnet.md").read_text().startswith("### digits_resnet")
