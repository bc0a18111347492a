"""``trtpipe demo``: the whole foundation on this machine, from the bundled model to a bench report.

It converts the bundled digits model and ResNet-50 into a Triton-style repository
(``<repository>/<name>/1/model.onnx``), verifies each against PyTorch FP32, and benches them on the CPU.
"""

from __future__ import annotations

import time
from pathlib import Path

from trtpipe import console
from trtpipe.bench import BenchSettings, run_benchmark
from trtpipe.bench.report import print_table, write_reports
from trtpipe.convert import convert
from trtpipe.models.loader import load_model

DEMO_MODELS = {"digits_resnet": (1, 8, 32), "resnet50": (1, 8)}
MODEL_VERSION = "1"


def run_demo(repository: Path, reports: Path, *, duration_s: float = 3.0) -> list[Path]:
    start = time.perf_counter()
    reports.mkdir(parents=True, exist_ok=True)
    written = []
    for name, batches in DEMO_MODELS.items():
        console.err.rule(f"[bold]{name}")
        loaded = load_model(name)
        version_dir = repository / name / MODEL_VERSION
        version_dir.mkdir(parents=True, exist_ok=True)
        result = convert(loaded, version_dir / "model.onnx")
        report = run_benchmark(loaded, [result.path], BenchSettings(batches=batches, duration_s=duration_s))
        print_table(report)
        json_path, markdown_path = reports / f"bench_{name}.json", reports / f"bench_{name}.md"
        write_reports(report, json_path, markdown_path)
        written += [result.path, json_path, markdown_path]
    console.success(f"Demo finished in {time.perf_counter() - start:.0f} s: models in {repository}/, reports in "
                    f"{reports}/")
    return written
