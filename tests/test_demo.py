"""The demo is `trtpipe run` on pipeline files: here on a small one, into a Triton-style repository."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

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


def test_demo_writes_repository_and_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "small.toml").write_text(SMALL)
    runs = demo.run_demo(tmp_path / "models", tmp_path / "reports", pipelines=(tmp_path / "small.toml",))
    said = " ".join(capsys.readouterr().err.split())
    assert re.search(r"demo: model 1 of 1 \(digits_resnet\), \d+ s so far", said)  # where it is
    assert "s left" not in said  # no estimate before a first run here
    assert runs[0]["model"] == "digits_resnet"
    for name in ("digits_resnet", "digits_resnet_int8_cpu"):
        assert (tmp_path / "models" / name / "1" / "model.onnx").is_file()
        assert (tmp_path / "models" / name / "1" / "model.manifest.json").is_file()
    report = json.loads((tmp_path / "reports" / "digits_resnet" / "bench.json").read_text())
    assert {(r["backend"], r["precision"]) for r in report["results"]} == {
        ("torch", "fp32"), ("onnxruntime", "fp32"), ("onnxruntime", "int8")}
    assert (tmp_path / "reports" / "digits_resnet" / "report.html").is_file()
    # A second run says how long the last runs here took: the time left, by this machine's own figures.
    demo.run_demo(tmp_path / "models", tmp_path / "reports", pipelines=(tmp_path / "small.toml",))
    assert "s left by the last runs here" in " ".join(capsys.readouterr().err.split())


def test_a_first_demo_says_the_time_left_from_the_measured_runs(tmp_path: Path) -> None:
    """No run of its own recorded yet: the shipped demo files' measured times give the time left (in minutes, said
    to be from a busy 2-core machine); a pipeline the demo does not ship gives none."""
    from dataclasses import replace

    paths = tuple(demo.PIPELINES_DIR / name for name in demo.DEMO_PIPELINES)
    pipelines = []
    for path in paths:
        pipeline = demo.load_pipeline(path, None)
        pipelines.append(replace(pipeline, output=replace(pipeline.output, reports=tmp_path)))
    said = demo._time_left(pipelines, paths)
    minutes = round(sum(demo.MEASURED_SECONDS.values()) / 60)
    assert said == (f", about {minutes} min left by a first demo on a busy 2-core machine (less on a quiet or "
                    "larger one)")
    assert demo._time_left(pipelines[:1], (tmp_path / "mine.toml",)) == ""
