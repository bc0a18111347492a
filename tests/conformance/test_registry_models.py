"""Real architectures through optimize pass TensorRT's rules: `make conformance` runs every registry model; the
suite runs two families (a residual CNN and a depthwise-separable one with squeeze-excitation)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_resnet18_and_mobilenet_v3_small_conform() -> None:
    result = subprocess.run([sys.executable, "scripts/conformance_registry.py", "resnet18", "mobilenet_v3_small"],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2 and all(line.count("0 errors") == 2 for line in lines), lines
