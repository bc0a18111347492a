"""``trtpipe demo``: ``trtpipe run`` on the bundled pipeline files (trtpipe/pipeline/examples/*.toml).

digits.toml takes the trained digits model through fused FP32, FP16 and INT8 for both targets, calibrated and
judged on its real data; resnet50.toml measures ResNet-50 (random weights) in fused FP32 and CPU INT8.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from trtpipe import console
from trtpipe.pipeline.config import load_pipeline
from trtpipe.pipeline.run import run_pipeline

PIPELINES_DIR = Path(__file__).parent / "examples"
DEMO_PIPELINES = ("digits.toml", "resnet50.toml")


def run_demo(repository: Path, reports: Path, pipelines: tuple[Path, ...] | None = None,
             overrides: list[str] | None = None) -> list[dict[str, object]]:
    start = time.perf_counter()
    runs = []
    for path in pipelines or tuple(PIPELINES_DIR / name for name in DEMO_PIPELINES):
        pipeline = load_pipeline(path, overrides)
        pipeline.output = replace(pipeline.output, repository=repository, reports=reports)
        runs.append(run_pipeline(pipeline))
    console.success(f"Demo finished in {time.perf_counter() - start:.0f} s: models in {repository}/, reports in "
                    f"{reports}/<model>/report.html")
    return runs
