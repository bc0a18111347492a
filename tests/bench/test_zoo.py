"""The model-zoo sweep (scripts/zoo.py, `make zoo`) on two of timm's small test models: every stage runs, the bench
gives both ratios with intervals, and the page has one row per model and the summary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_sweep_runs_two_small_models_through_every_stage(tmp_path: Path) -> None:
    pytest.importorskip("timm", reason="the sweep builds timm models: pip install 'trtpipe[zoo]'")
    page, rows = tmp_path / "zoo.md", tmp_path / "zoo.json"
    result = subprocess.run([sys.executable, "scripts/zoo.py", "timm:test_resnet", "timm:test_efficientnet",
                             "--input-shape", "1x3x64x64", "--rounds", "3", "--output", str(page), "--json", str(rows),
                             "--work", str(tmp_path / "work"), "--date", "2026-11-28"],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(rows.read_text())
    assert [row["model"] for row in found] == ["timm:test_resnet", "timm:test_efficientnet"]
    for row in found:
        assert set(row["stages"]) == {"convert", "fp16", "int8 cpu", "int8 tensorrt", "check"}
        assert row["stages"]["convert"] == "✓" and row["stages"]["int8 cpu"] == "✓", row["stages"]
        for ratio in ("int8_vs_fp32", "int8_vs_quantize_static", "quantize_static_vs_fp32"):
            entry = row["speed"][ratio]
            assert entry["interval"]["low"] <= entry["speedup"] <= entry["interval"]["high"]
        # The three ratios come from one sequence of rounds: each model's median time is the same in each pair.
        speed = row["speed"]
        assert speed["int8_vs_fp32"]["candidate_ms"] == speed["int8_vs_quantize_static"]["candidate_ms"]
        assert speed["int8_vs_fp32"]["reference_ms"] == speed["quantize_static_vs_fp32"]["reference_ms"]
        compared = speed["kernels_compared"]
        assert compared["same_ops"] == (not compared["ops_minus_quantize_static"])
    text = page.read_text()
    assert "Measured 2026-11-28 on " in text and "the 1-minute load average as each bench ended" in text
    assert "ONNX Runtime runs the same ops for trtpipe's file as for quantize_static's" in text
    assert text.count("| `timm:test_") == 2 and "median" in text
