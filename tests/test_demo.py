"""The demo is `trtpipe run` on pipeline files: here on a small one, into a Triton-style repository."""

from __future__ import annotations

import json
from pathlib import Path

from trtpipe.pipeline import demo

SMALL = """\
[model]
source = "digits_resnet"

[[variants]]
name = "int8_cpu"
precision = "int8"
target = "cpu"
calib = "digits"
calib_samples = 32

[bench]
batches = [1, 2]
iters = 2
warmup = 0
"""


def test_demo_writes_repository_and_reports(tmp_path: Path) -> None:
    (tmp_path / "small.toml").write_text(SMALL)
    runs = demo.run_demo(tmp_path / "models", tmp_path / "reports", pipelines=(tmp_path / "small.toml",))
    assert runs[0]["model"] == "digits_resnet"
    for name in ("digits_resnet", "digits_resnet_int8_cpu"):
        assert (tmp_path / "models" / name / "1" / "model.onnx").is_file()
        assert (tmp_path / "models" / name / "1" / "model.manifest.json").is_file()
    report = json.loads((tmp_path / "reports" / "digits_resnet" / "bench.json").read_text())
    assert {(r["backend"], r["precision"]) for r in report["results"]} == {
        ("torch", "fp32"), ("onnxruntime", "fp32"), ("onnxruntime", "int8")}
    assert (tmp_path / "reports" / "digits_resnet" / "report.html").is_file()
