"""``trtpipe demo``: the pipeline on this machine, from the bundled model to bench reports.

For the bundled digits model and ResNet-50 it converts to ONNX in a Triton-style repository
(``<repository>/<name>/1/model.onnx``), verifies against PyTorch FP32, optimizes (FP16 and INT8 for the digits
model, calibrated and judged on its real data; CPU INT8 for ResNet-50, which has random weights, so its INT8 is
calibrated on noise and is a speed test only), and benches every variant against PyTorch FP32 eager.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from trtpipe import console
from trtpipe.bench import BenchSettings, run_benchmark
from trtpipe.bench.report import print_table, write_reports
from trtpipe.convert import convert
from trtpipe.models.loader import load_model
from trtpipe.optimize import OptimizeOptions, optimize

MODEL_VERSION = "1"


@dataclass(frozen=True)
class DemoModel:
    name: str
    batches: tuple[int, ...]
    variants: dict[str, OptimizeOptions] = field(default_factory=dict)


def _digits_int8(target: str) -> OptimizeOptions:
    return OptimizeOptions(precision="int8", target=target, calib="digits", eval="digits", max_accuracy_drop=0.5)


DEMO_MODELS = [
    DemoModel("digits_resnet", (1, 8, 32), {
        "fp16": OptimizeOptions(precision="fp16", calib="digits", eval="digits"),
        "int8_cpu": _digits_int8("cpu"),
        "int8_tensorrt": _digits_int8("tensorrt"),
    }),
    DemoModel("resnet50", (1, 8), {
        "int8_cpu": OptimizeOptions(precision="int8", target="cpu", calib="random", calib_samples=32),
    }),
]


def _artifact(repository: Path, name: str) -> Path:
    version_dir = repository / name / MODEL_VERSION
    version_dir.mkdir(parents=True, exist_ok=True)
    return version_dir / "model.onnx"


def run_demo(repository: Path, reports: Path, *, duration_s: float = 3.0,
             models: list[DemoModel] | None = None) -> list[Path]:
    start = time.perf_counter()
    reports.mkdir(parents=True, exist_ok=True)
    written = []
    for demo in models or DEMO_MODELS:
        console.err.rule(f"[bold]{demo.name}")
        loaded = load_model(demo.name)
        artifacts = [convert(loaded, _artifact(repository, demo.name)).path]
        for suffix, options in demo.variants.items():
            console.err.rule(f"{demo.name}: {suffix}", style="dim")
            artifacts.append(optimize(artifacts[0], _artifact(repository, f"{demo.name}_{suffix}"), options).path)
        report = run_benchmark(loaded, artifacts, BenchSettings(batches=demo.batches, duration_s=duration_s))
        print_table(report)
        json_path, markdown_path = reports / f"bench_{demo.name}.json", reports / f"bench_{demo.name}.md"
        write_reports(report, json_path, markdown_path)
        written += [*artifacts, json_path, markdown_path]
    console.success(f"Demo finished in {time.perf_counter() - start:.0f} s: models in {repository}/, reports in "
                    f"{reports}/")
    return written
