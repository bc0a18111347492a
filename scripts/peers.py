"""`make peers`: trtpipe's INT8 against the quantizers its users would pick instead, on real pretrained CNNs.

For each ImageNet-pretrained registry model that is installed (pip install 'trtpipe[pretrained]'), the same FP32
ONNX is quantized on the same 256 photo crops by every recipe, and every result is judged on the same 500 other
crops against the FP32 model's top-1 (agreement with FP32, not ImageNet accuracy):

- trtpipe INT8 for each target (tensorrt, cpu) and calibration method; then, on one method per target, what each
  algorithm adds alone (cross-layer equalization, AdaRound, bias correction) and all three together; the
  sensitivity fallback under a 5-point budget, plain and after AdaRound (FP32 nodes it needed); and trtpipe FP16;
- ONNX Runtime's quantize_static, QDQ per-channel MinMax: S8S8 symmetric (what TensorRT can take) and U8S8;
- AMD Quark's ONNX PTQ (S8S8 and U8S8, plain and with its CLE + AdaRound), run in its own environment
  (TRTPIPE_QUARK_PYTHON, which `make peers` builds); NVIDIA ModelOpt's ONNX PTQ (max calibration, its other
  defaults), likewise in its own environment (TRTPIPE_MODELOPT_PYTHON); NNCF, when installed (it says how to install
  it otherwise).

The two trained dense-prediction models that ship inside installed wheels (trtpipe's packaged models) get a section
each, because a classifier's top-1 says little about what INT8 does to a per-pixel map or a detector's boxes:
PP-PicoDet's document-layout detector (picodet_layout_cdla, 8 raw head outputs, judged by mAP@0.5 of its detections
against the FP32 model's own) on 16 calibration and 32 eval synthetic pages at its fixed 800x608, and PP-OCRv4's
DBNet text detector (ppocrv4_det, judged by the F1 of its probability map above 0.3 against FP32's) on 16
calibration and 24 eval photos with rendered text at 640x640 (its packaged size). Inputs are trtpipe's seeded
natural batches (seed 0 calibrates, seed 1 judges), so every run sees the same pixels. The counts keep both sections
near 20 minutes on 2 cores (see DenseSetup; AMD Quark's rows, where its environment exists, come on top; they are
not run on PicoDet, whose batch is fixed at 1, as scripts/quark_peer.py calibrates in batches of 8).
Every peer quantizes the same opset-13 FP32 ONNX (DBNet ships at opset 12, below per-channel Q/DQ), trtpipe's
``optimize`` the packaged file itself (its SHA-256 is how it finds the detector's decoder); the trtpipe rows use
optimize's default options besides precision, target and calibration data, so they measure whatever the default
recipe is (the manifest's record of what ran is shown beside them). Dense rows show p50 latency at batch 1 on both
CPU runtimes (ONNX Runtime and OpenVINO, 2 threads); the speed verdict times trtpipe's default cpu INT8 against
NNCF's on OpenVINO and against quantize_static U8S8 on ONNX Runtime in interleaved rounds, so that noise from
anything else on the machine falls on both sides of each ratio, and times the peer's file against a second session
of itself the same way: how far that ratio is from 1.00 is what the machine alone moves a ratio by.

`scripts/peers.py MODEL --only TEXT` re-runs the recipes whose name contains TEXT (``--only '!TEXT'``: not those)
and merges them into the last report; `--samples CAL,EVAL` sets the dense models' calibration and eval counts
(quick checks: 8,8). TensorRT-target files are judged with Q/DQ as float ops (TensorRT's arithmetic); their CPU
latency means nothing and is not shown. Writes reports/peers.md and reports/peers.json (`--table` re-renders
them). A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from trtpipe.artifact.records.manifest import read_manifest
from trtpipe.bench.timing import measure
from trtpipe.comparison import compare
from trtpipe.convert.stage import convert
from trtpipe.errors import BadInput, MissingDependency
from trtpipe.hardware import cpu_flags, cpu_model
from trtpipe.models.loader import LoadedModel, load_model
from trtpipe.models.packaged import (
    LAYOUT_DETECTOR,
    TEXT_DETECTOR,
    natural_batch,
    packaged_model,
    packaged_onnx,
)
from trtpipe.models.photos import photo_crops
from trtpipe.models.registry import ARCHITECTURES
from trtpipe.optimize.graph.opset import upgrade_for_precision
from trtpipe.optimize.judging.evaluate import logits, outputs
from trtpipe.optimize.options import OptimizeOptions
from trtpipe.optimize.stage import optimize
from trtpipe.runtime.base import Backend
from trtpipe.runtime.onnxruntime.backend import OnnxRuntimeBackend
from trtpipe.runtime.openvino.backend import OpenVinoBackend
from trtpipe.runtime.options import RunOptions
from trtpipe.vocab import CalibMethod, Precision, Target

WEIGHTED = ("Conv", "ConvTranspose", "Gemm", "MatMul")
FALLBACK_BUDGET_PP = 5.0  # the figure: the old schedule needed 46 nodes in FP32 for it
Row = dict[str, Any]


@dataclass(frozen=True)
class DenseSetup:
    """How many seeded natural inputs a packaged model is calibrated (seed 0) and judged (seed 1) on, and at what
    size: chosen so that both dense sections together take about 20 minutes on 2 cores. Measured on 2 cores that
    another job was also using: each PicoDet calibration page costs about 15 s over all recipes (trtpipe's INT8
    alone about 4.5 s per target: it calibrates, then checks itself on the calibration data) and each eval page
    about 9 s (seven recipes judged, two of them with Q/DQ as float ops), so 64 + 96 pages would take over 30
    minutes for the layout detector alone."""

    calibration: int
    evaluation: int
    size: tuple[int, int] | None = None  # (height, width); None: the model's fixed input


DENSE: dict[str, DenseSetup] = {
    LAYOUT_DETECTOR: DenseSetup(16, 32),  # fixed input 800x608, batch 1: about 12 minutes
    TEXT_DETECTOR: DenseSetup(16, 24, (640, 640)),  # dynamic H/W, at the packaged batches' size: about 8 minutes
}
THREADS = 2  # both CPU runtimes, every latency: the figure a 2-core machine can reproduce
LATENCY_S = 3.0  # timed seconds per p50 (after 2 warm-up calls: these models take 0.1-0.5 s a call)
# Interleaved rounds per speed pair and seconds each side per round: many short rounds, since a shared machine's
# speed shifts within seconds and a round's ratio holds only while both sides see the same machine (on PicoDet, 5
# rounds of 2.5 s put NNCF against itself at 1.011 and 16 of 0.7 s at 0.998-1.001).
SPEED_ROUNDS, SPEED_ROUND_S = 15, 1.0
TRTPIPE_INT8 = "trtpipe INT8 default"
ORT_S8S8 = "ORT quantize_static S8S8 sym, per-channel, MinMax"
ORT_U8S8 = "ORT quantize_static U8S8, per-channel, MinMax"
ORT_U8S8_PRE = "ORT quant_pre_process + quantize_static U8S8, per-channel, MinMax"
NNCF_PTQ = "NNCF PTQ"
QUARK_BATCH = 8  # scripts/quark_peer.py feeds calibration in batches of 8


def weighted_fp32(path: Path) -> str:
    """Weighted ops whose weights stay float: the layers a recipe left in FP32 (of all weighted ops)."""
    model = onnx.load(str(path))
    produced = {o: n for n in model.graph.node for o in n.output}
    ops = [n for n in model.graph.node if n.op_type in WEIGHTED]
    fp32 = [n for n in ops if len(n.input) > 1 and (produced.get(n.input[1]) is None
                                                   or produced[n.input[1]].op_type != "DequantizeLinear")]
    return f"{len(fp32)}/{len(ops)}"


class Reader:
    """ONNX Runtime's CalibrationDataReader over the calibration crops."""

    def __init__(self, name: str, images: np.ndarray, batch: int = 32) -> None:
        self.items = iter([{name: images[i : i + batch]} for i in range(0, len(images), batch)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.items, None)


def ort_static(source: Path, out: Path, calib: np.ndarray, *, signed: bool, batch: int = 32) -> Path:
    """ONNX Runtime's quantize_static; ``batch``: calibration batch (1 for a graph whose batch is fixed at 1). Its
    MinMax calibrator keeps only each batch's per-tensor minimum and maximum, so full-size pages fit in memory."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    quantize_static(str(source), str(out), Reader(onnx.load(str(source)).graph.input[0].name, calib, batch),
                    quant_format=QuantFormat.QDQ, per_channel=True, calibrate_method=CalibrationMethod.MinMax,
                    activation_type=QuantType.QInt8 if signed else QuantType.QUInt8, weight_type=QuantType.QInt8,
                    extra_options={"ActivationSymmetric": signed, "WeightSymmetric": True})
    return out


def ort_pre_processed(source: Path, out: Path, calib: np.ndarray, *, signed: bool, batch: int = 32) -> Path:
    """quantize_static after ONNX Runtime's own pre-processing (``python -m onnxruntime.quantization.preprocess``,
    which its documentation recommends: shape inference and ONNX Runtime's graph optimizations, BatchNorm folded
    into its convolutions). Where symbolic shape inference fails on the graph (PP-OCRv4's detector), it is skipped,
    as the tool's ``--skip_symbolic_shape`` would."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    prepared = out.with_suffix(".pre.onnx")
    with contextlib.chdir(out.parent):  # it leaves sym_shape_infer_temp.onnx in the working directory
        try:
            quant_pre_process(str(source), str(prepared))
        except Exception:  # SymbolicShapeInference raises a bare Exception ("Incomplete symbolic shape inference")
            quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
    return ort_static(prepared, out, calib, signed=signed, batch=batch)


def run_worker(package: str, venv: str, worker: str, source: Path, out: Path, calib: np.ndarray,
               *extra: str) -> Path:
    """A peer quantizer run by ``scripts/<worker>`` inside its own environment ``venv`` (whose interpreter
    TRTPIPE_<VENV>_PYTHON names; make peers builds it), on the same FP32 ONNX and calibration inputs (a .npy file
    beside ``out``) as every other recipe; its working directory is ``out``'s folder, as it writes files there."""
    variable = f"TRTPIPE_{venv.removeprefix('.venv-').upper()}_PYTHON"
    python = os.environ.get(variable)
    if not python or not Path(python).exists():
        raise MissingDependency(package, f"The {package} peer", f"make {venv}/.installed-stamp, then "
                                f"{variable}={venv}/bin/python (make peers does both)")
    calib_path = out.with_suffix(".calib.npy")
    np.save(calib_path, calib)
    script = Path(__file__).resolve().with_name(worker)
    # absolute: a relative interpreter path (make peers gives one) would be looked up from out's folder
    subprocess.run([os.path.abspath(python), str(script), str(source), str(out), str(calib_path), *extra],
                   check=True, stdout=subprocess.DEVNULL, cwd=out.parent)
    return out


def quark(source: Path, out: Path, calib: np.ndarray, *, signed: bool, algorithms: tuple[str, ...]) -> Path:
    """AMD Quark (scripts/quark_peer.py): it pins a newer onnx and brings datasets, pandas and pyarrow."""
    return run_worker("amd-quark", ".venv-quark", "quark_peer.py", source, out, calib, "s8s8" if signed else "u8s8",
                      *algorithms)


def modelopt(source: Path, out: Path, calib: np.ndarray) -> Path:
    """NVIDIA ModelOpt's ONNX PTQ (scripts/modelopt_peer.py): it pins an older onnx, and onnxruntime-gpu and cupy on
    Linux x86-64, so `make peers` builds .venv-modelopt with CPU onnxruntime instead."""
    return run_worker("nvidia-modelopt", ".venv-modelopt", "modelopt_peer.py", source, out, calib)


def nncf(source: Path, out: Path, calib: np.ndarray) -> Path:
    try:
        import nncf as nncf_module
    except ImportError:
        raise MissingDependency("nncf", "The NNCF peer", "pip install nncf") from None
    model = onnx.load(str(source))
    name = model.graph.input[0].name
    dataset = nncf_module.Dataset([calib[i : i + 1] for i in range(len(calib))], lambda x: {name: x})
    onnx.save(nncf_module.quantize(model, dataset, subset_size=len(calib)), str(out))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description="trtpipe's INT8 against its peers on real pretrained models.")
    parser.add_argument("models", nargs="*", help="registry classifiers and packaged dense models (default: every "
                        f"pretrained classifier installed, then {', '.join(DENSE)})")
    parser.add_argument("--only", action="append", default=[], metavar="TEXT",
                        help="re-run only the recipes whose name contains TEXT (!TEXT: leave those out); merged "
                        "into the last report")
    parser.add_argument("--samples", type=_counts, metavar="CAL,EVAL",
                        help="dense models: calibration and eval inputs instead of the defaults (quick checks)")
    parser.add_argument("--table", action="store_true", help="re-render reports/peers.md from reports/peers.json")
    args = parser.parse_intermixed_args()  # models and options in any order, as before
    if args.table:
        last = json.loads(Path("reports/peers.json").read_text())
        write(last["models"], last.get("dense", {}))
        return 0
    only: list[str] = args.only
    models = args.models or [*(a.name for a in ARCHITECTURES.values() if a.weights), *DENSE]
    report: dict[str, list[Row]] = {}
    dense: dict[str, dict[str, Any]] = {}
    for name in models:
        try:  # a packaged model: its file inside the installed wheel, SHA-256 checked
            loaded = packaged_onnx(name) if name in DENSE else load_model(name)
        except MissingDependency as missing:
            print(f"{name}: skipped ({missing.message})", flush=True)
            continue
        with tempfile.TemporaryDirectory(prefix="trtpipe-peers-") as folder:
            if isinstance(loaded, Path):
                report[name], dense[name] = compare_dense(name, loaded, Path(folder), only, args.samples)
            else:
                report[name] = compare_recipes(loaded, Path(folder), only)
    last_report = Path("reports/peers.json")
    if only and last_report.exists():  # re-run rows replace their namesakes in the last report; the others are kept
        last = json.loads(last_report.read_text())
        previous, previous_dense = last["models"], last.get("dense", {})
        for name, rows in report.items():
            fresh = {(r["recipe"], r["target"]): r for r in rows}
            kept = [fresh.pop((r["recipe"], r["target"]), r) for r in previous.get(name, [])]
            previous[name] = kept + list(fresh.values())
        for name, info in dense.items():
            last_info = previous_dense.setdefault(name, {})
            if last_info.get("samples", info["samples"]) != info["samples"]:
                print(f"{name}: warning: the re-run rows used {info['samples']} calibration and eval inputs, the "
                      f"others {last_info['samples']} (give the same --samples)", flush=True)
            for key in ("setup", "samples"):
                last_info.setdefault(key, info[key])
            pairs = {(pair["runtime"], pair["peer"]): pair for pair in [*last_info.get("speed", []), *info["speed"]]}
            last_info["speed"] = list(pairs.values())  # a pair not re-measured keeps its last figures
            last_info["failed"] = [*last_info.get("failed", []), *info.get("failed", [])]
        report, dense = previous, previous_dense
    write(report, dense)
    return 0


def _one_line(error: BaseException) -> str:
    """An exception as one line: its type and the last non-empty line of its message, at most 300 characters."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[-1] if lines else ''}"[:300]


def selected(recipe: str, only: list[str]) -> bool:
    """Whether ``--only`` asks for ``recipe``: its name contains one of the texts (all recipes when none is given)
    and none of the texts written ``!TEXT``."""
    wanted = [text for text in only if not text.startswith("!")]
    unwanted = [text[1:] for text in only if text.startswith("!")]
    return (not wanted or any(text in recipe for text in wanted)) and not any(text in recipe for text in unwanted)


def _counts(text: str) -> tuple[int, int]:
    """--samples CAL,EVAL."""
    try:
        calibration, evaluation = (int(n) for n in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not CAL,EVAL (two counts, e.g. 8,8)") from None
    if min(calibration, evaluation) < 1:
        raise argparse.ArgumentTypeError("both counts must be at least 1")
    return calibration, evaluation


def compare_recipes(loaded: LoadedModel, folder: Path, only: list[str]) -> list[dict[str, object]]:
    """Every recipe's row (with ``only``: the recipes whose name contains one of those texts)."""
    prep = loaded.extra["preprocessing"]
    calib = photo_crops("calibration", loaded.sample_shape, tuple(prep["mean"]), tuple(prep["std"]))
    evaluation = photo_crops("eval", loaded.sample_shape, tuple(prep["mean"]), tuple(prep["std"]))
    rows: list[dict[str, object]] = []
    source = folder / "fp32.onnx"
    convert(loaded, source)
    reference = logits(onnx.load(str(source)), evaluation)

    def row(recipe: str, target: str, make: Callable[[Path], Path], float_qdq: bool) -> None:
        if not selected(recipe, only):
            return
        out = folder / f"{len(rows)}-{abs(hash(recipe))}.onnx"
        start = time.perf_counter()
        try:
            path = make(out)
        except MissingDependency as missing:
            print(f"  {recipe}: not run ({missing.message})", flush=True)
            return
        seconds = time.perf_counter() - start
        result = compare(reference, openvino_outputs(path, evaluation)[0] if target == Target.OPENVINO
                         else logits(onnx.load(str(path)), evaluation,
                                     as_written=float_qdq))
        latency = None
        if not float_qdq:
            with OnnxRuntimeBackend(path, RunOptions(threads=2)) as backend:
                latency = float(np.median(measure(backend.bind(evaluation[:1]), warmup=5, iters=None,
                                                  duration_s=3)))
        rows.append({"recipe": recipe, "target": target, "top1_agreement": result.top1_agreement,
                     "mean_logit_err": result.mean_abs_err, "max_logit_err": result.max_abs_err,
                     "fp32_weighted_ops": weighted_fp32(path), "p50_ms_cpu": latency, "seconds": round(seconds, 1)})
        print(f"  {recipe} ({target}): top-1 agreement {100 * (result.top1_agreement or 0):.1f}%"
              + (f", p50 {latency:.2f} ms" if latency else ""), flush=True)

    print(f"{loaded.name}: {len(calib)} calibration and {len(evaluation)} eval crops", flush=True)
    row("FP32 (ONNX Runtime)", "cpu", lambda out: source, False)
    row("trtpipe FP16", "tensorrt", lambda out: optimize(source, out, OptimizeOptions(
        precision=Precision.FP16, calib="photos")).path, False)
    for target in Target:  # what a user gets: nothing set besides precision, target and the calibration data
        row(TRTPIPE_INT8, str(target), lambda out, t=target: optimize(source, out, OptimizeOptions(
            precision=Precision.INT8, target=t, calib="photos")).path, target is Target.TENSORRT)

    def trtpipe(target: Target, method: str, **extra: object) -> Callable[[Path], Path]:
        passes = ("fuse", "equalize") if extra.pop("equalize", False) else ("fuse",)
        cache = folder / f"{target}-{method}-{'-'.join(passes)}.calib.json"  # rows of one graph calibrate once
        return lambda out: optimize(source, out, OptimizeOptions(
            precision=Precision.INT8, target=target, calib="photos", calib_method=method, passes=passes,
            calib_cache=cache, **extra)).path  # type: ignore[arg-type]

    for target in (Target.TENSORRT, Target.CPU):  # the openvino flavour's methods are cpu's (its default row is above)
        for method in CalibMethod:
            row(f"trtpipe INT8 {method}", str(target), trtpipe(target, method), target is Target.TENSORRT)
    for target, method in ((Target.TENSORRT, CalibMethod.PERCENTILE), (Target.CPU, CalibMethod.MINMAX)):
        simulated = target is Target.TENSORRT
        row(f"trtpipe INT8 {method} + equalization", str(target), trtpipe(target, method, equalize=True), simulated)
        row(f"trtpipe INT8 {method} + AdaRound", str(target), trtpipe(target, method, adaround=True), simulated)
        row(f"trtpipe INT8 {method} + bias correction", str(target), trtpipe(target, method, bias_correction=True),
            simulated)
        row(f"trtpipe INT8 {method} + equalization + AdaRound + bias correction", str(target),
            trtpipe(target, method, equalize=True, adaround=True, bias_correction=True), simulated)
    for target, method in ((Target.TENSORRT, CalibMethod.PERCENTILE), (Target.CPU, CalibMethod.MINMAX)):
        for adaround in (False, True):
            recipe = f"trtpipe INT8 {method}{' + AdaRound' if adaround else ''}, sensitivity fallback"
            row(f"{recipe} (--max-accuracy-drop {FALLBACK_BUDGET_PP})", str(target),
                trtpipe(target, method, eval="photos", max_accuracy_drop=FALLBACK_BUDGET_PP, adaround=adaround),
                target is Target.TENSORRT)
    row("ORT quantize_static S8S8 sym, per-channel, MinMax", "tensorrt",
        lambda out: ort_static(source, out, calib, signed=True), True)
    row("ORT quantize_static U8S8, per-channel, MinMax", "cpu",
        lambda out: ort_static(source, out, calib, signed=False), False)
    for signed, target in ((True, "tensorrt"), (False, "cpu")):
        flavour = "S8S8 sym" if signed else "U8S8"
        row(f"AMD Quark {flavour}, per-channel, MinMax", target,
            lambda out, s=signed: quark(source, out, calib, signed=s, algorithms=()), signed)
        row(f"AMD Quark {flavour}, per-channel, MinMax + CLE + AdaRound", target,
            lambda out, s=signed: quark(source, out, calib, signed=s, algorithms=("cle", "adaround")), signed)
    row("NVIDIA ModelOpt ONNX PTQ (max)", "tensorrt", lambda out: modelopt(source, out, calib), True)
    row("NNCF PTQ", "cpu", lambda out: nncf(source, out, calib), False)
    row("NNCF PTQ", "openvino", lambda out: nncf(source, out, calib), False)
    return rows


def compare_dense(name: str, original: Path, folder: Path, only: list[str],
                  counts: tuple[int, int] | None) -> tuple[list[Row], dict[str, Any]]:
    """A packaged dense model's rows (with ``only``: the recipes whose name contains one of those texts), and its
    section's setup line and speed pairs. ``original``: the packaged file, which trtpipe's optimize is given (its
    SHA-256 finds the detector's decoder); every peer gets the same FP32 graph upgraded to opset 13."""
    packaged, setup = packaged_model(name), DENSE[name]
    n_calib, n_eval = counts or (setup.calibration, setup.evaluation)
    calib = natural_batch(name, n_calib, seed=0, size=setup.size)
    evaluation = natural_batch(name, n_eval, seed=1, size=setup.size)
    calib_path = folder / "calibration.npy"  # trtpipe reads the same pixels the peers are handed
    np.save(calib_path, calib.inputs)
    source = folder / "fp32.onnx"
    fp32, _ = upgrade_for_precision(onnx.load(str(original)), Precision.INT8)
    onnx.save(fp32, str(source))
    fixed_batch = _static_batch(fp32)
    decoder = packaged.decoder()
    reference = outputs(fp32, evaluation.inputs, batch=1)
    sample = evaluation.inputs[:1]
    rows: list[Row] = []
    failed: list[str] = []
    made: dict[tuple[str, str], Path] = {}  # (recipe, target) -> file, for the speed pairs

    def row(recipe: str, target: str, make: Callable[[Path], Path], *, simulated: bool,
            not_run: str | None = None) -> None:
        if not selected(recipe, only):
            return
        if not_run:
            print(f"  {recipe}: not run ({not_run})", flush=True)
            return
        out = folder / f"{len(rows)}-{target}-{abs(hash(recipe))}.onnx"
        start = time.perf_counter()
        try:
            path = make(out)
            seconds = time.perf_counter() - start
            judged = openvino_outputs(path, evaluation.inputs) if target == Target.OPENVINO else outputs(
                onnx.load(str(path)), evaluation.inputs, batch=1,
                as_written=simulated)
            result = compare(reference, judged, task=packaged.task, decoder=decoder)
        except MissingDependency as missing:
            print(f"  {recipe}: not run ({missing.message})", flush=True)
            return
        except Exception as error:  # a recipe that crashes, or whose model does not run, is a result, not the end
            failed.append(f"{recipe} ({target}): failed: {_one_line(error)}")
            print(f"  {failed[-1]}", flush=True)
            return
        made[recipe, target] = path
        notes: list[str] = []
        on_ort = None if simulated else p50(path, ONNXRUNTIME, sample, notes)
        on_openvino = None if simulated else p50(path, OPENVINO, sample, notes)
        entry: Row = {"recipe": recipe, "target": target, "measure": result.agreement_name,
                      "agreement": result.agreement, "min_cosine": result.cosine,
                      "fp32_weighted_ops": weighted_fp32(path), "p50_ms_onnxruntime": on_ort,
                      "p50_ms_openvino": on_openvino, "seconds": round(seconds, 1), "notes": notes}
        ran = trtpipe_recipe(path)
        if ran is not None:
            entry["int8_recipe"] = ran
        rows.append(entry)
        print(f"  {recipe} ({target}): {result.agreement_name} {100 * (result.agreement or 0):.1f}%"
              + (f", p50 {on_ort:.1f} ms on ONNX Runtime" if on_ort else "")
              + (f", {on_openvino:.1f} ms on OpenVINO" if on_openvino else "")
              + f" (made in {seconds:.0f} s, row in {time.perf_counter() - start:.0f} s)", flush=True)

    def trtpipe(precision: Precision, target: Target | None = None) -> Callable[[Path], Path]:
        """optimize's default recipe: nothing set besides precision, target and the calibration file."""
        return lambda out: optimize(original, out, OptimizeOptions(precision=precision, target=target,
                                                                   calib=str(calib_path))).path

    print(f"{name}: {calib.source} to calibrate, {evaluation.source} to judge", flush=True)
    row("FP32", "cpu", lambda out: source, simulated=False)
    row("trtpipe FP16", "tensorrt", trtpipe(Precision.FP16), simulated=False)
    for target in Target:
        row(TRTPIPE_INT8, str(target), trtpipe(Precision.INT8, target), simulated=target is Target.TENSORRT)
    row(ORT_S8S8, "tensorrt", lambda out: ort_static(source, out, calib.inputs, signed=True, batch=1),
        simulated=True)
    row(ORT_U8S8, "cpu", lambda out: ort_static(source, out, calib.inputs, signed=False, batch=1), simulated=False)
    row(ORT_U8S8_PRE, "cpu", lambda out: ort_pre_processed(source, out, calib.inputs, signed=False, batch=1),
        simulated=False)
    quark_refused = (f"scripts/quark_peer.py calibrates in batches of {QUARK_BATCH}; this graph's batch is fixed "
                     f"at {fixed_batch}" if fixed_batch is not None and fixed_batch < QUARK_BATCH else None)
    for signed, target in ((True, "tensorrt"), (False, "cpu")):
        flavour = "S8S8 sym" if signed else "U8S8"
        row(f"AMD Quark {flavour}, per-channel, MinMax", target,
            lambda out, s=signed: quark(source, out, calib.inputs, signed=s, algorithms=()), simulated=signed,
            not_run=quark_refused)
        row(f"AMD Quark {flavour}, per-channel, MinMax + CLE + AdaRound", target,
            lambda out, s=signed: quark(source, out, calib.inputs, signed=s, algorithms=("cle", "adaround")),
            simulated=signed, not_run=quark_refused)
    row("NVIDIA ModelOpt ONNX PTQ (max)", "tensorrt", lambda out: modelopt(source, out, calib.inputs), simulated=True)
    row(NNCF_PTQ, "cpu", lambda out: nncf(source, out, calib.inputs), simulated=False)
    row(NNCF_PTQ, "openvino", lambda out: nncf(source, out, calib.inputs), simulated=False)
    measure_name = next((str(r["measure"]) for r in rows if r.get("measure")), "task measure")
    about = (f"{measure_name} of each recipe's outputs against the opset-13 FP32 graph's own, on {evaluation.source}; "
             f"calibration: {calib.source}; latency: p50 at batch 1, {THREADS} threads")
    return rows, {"setup": about, "samples": [n_calib, n_eval], "speed": speed_pairs(made, sample),
                  "failed": failed}


def _static_batch(model: onnx.ModelProto) -> int | None:
    """The first input's batch size where the graph fixes it (PicoDet's export: 1), else None."""
    dims = model.graph.input[0].type.tensor_type.shape.dim
    return dims[0].dim_value if dims and dims[0].HasField("dim_value") and dims[0].dim_value > 0 else None


def trtpipe_recipe(path: Path) -> dict[str, Any] | None:
    """What trtpipe's INT8 recipe was, as its manifest records it: the recipe (or quality) name where the INT8 section
    or the options carry one, and the calibration and algorithm options that ran. The defaults are changing, so the
    row says which one it measured; None for a file without a trtpipe INT8 manifest."""
    manifest = read_manifest(path)
    section = manifest.details.get("int8") if manifest is not None else None
    if manifest is None or not isinstance(section, dict):
        return None
    options = manifest.details.get("options") or {}
    named = {key: source[key] for key in ("recipe", "quality") for source in (options, section) if key in source}
    ran = {key: options[key] for key in ("calib_method", "passes", "adaround", "bias_correction", "max_accuracy_drop")
           if key in options}
    return {**named, **ran, "fp32_layers": len(section.get("fp32_layers") or [])}


def _recipe_text(ran: dict[str, Any]) -> str:
    """A manifest's recipe record in a few words, for the table: the recipe name, then what was switched on."""
    name = ran.get("recipe", ran.get("quality"))
    if isinstance(name, dict):  # the INT8 section's recipe record: its quality and the steps it did not keep
        dropped = [str(m["step"]).replace("_", " ") for m in name.get("measured", []) if m.get("kept") is False]
        name = f"{name.get('quality')}" + (f", {' and '.join(dropped)} not kept" if dropped else "")
    words = [str(name)] if name is not None else []
    words += [f"calib {ran['calib_method']}"] if ran.get("calib_method") else []
    words += [f"passes {','.join(ran['passes']) if isinstance(ran['passes'], list) else ran['passes']}"] \
        if ran.get("passes") else []
    words += [key.replace("_", " ") for key in ("adaround", "bias_correction") if ran.get(key)]
    words += [f"{ran['fp32_layers']} layers FP32"] if ran.get("fp32_layers") else []
    return "; ".join(words)


@dataclass(frozen=True)
class CpuRuntime:
    """A CPU runtime the dense rows are timed on, opened with THREADS threads and its own defaults otherwise."""

    name: str
    backend: Callable[[Path, RunOptions], Backend]

    def open(self, path: Path) -> Backend:
        return self.backend(path, RunOptions(threads=THREADS))


ONNXRUNTIME = CpuRuntime("ONNX Runtime", OnnxRuntimeBackend)
OPENVINO = CpuRuntime("OpenVINO", OpenVinoBackend)


def openvino_outputs(path: Path, data: np.ndarray) -> list[np.ndarray]:
    """Every output of the file over ``data`` on OpenVINO: an ``openvino``-target file (and NNCF's, made for
    OpenVINO) is judged on the runtime it is made for, whose int8 arithmetic (oneDNN's kernels, its own fusions)
    is not ONNX Runtime's."""
    with OPENVINO.open(path) as opened:
        return opened.run_chunked(data, opened.static_batch or 32)


def p50(path: Path, runtime: CpuRuntime, sample: np.ndarray, notes: list[str]) -> float | None:
    """Median latency of one batch-1 call on ``runtime``; None, and why in ``notes``, where that runtime is missing
    or refuses the file: one runtime's failure does not cost the other figures, and the table says why a cell is
    empty."""
    try:
        with runtime.open(path) as opened:
            return float(np.median(measure(opened.bind(sample), warmup=2, iters=None, duration_s=LATENCY_S)))
    except (MissingDependency, BadInput) as error:
        notes.append(f"no {runtime.name} latency: {getattr(error, 'message', error)}")
        print(f"    {notes[-1]}", flush=True)
        return None


def interleaved(runtime: CpuRuntime, first: Path, second: Path, sample: np.ndarray) -> tuple[float, float, float]:
    """Each file's median latency over SPEED_ROUNDS rounds, both open at once and timed in alternating order (A B,
    B A, A B...), and the median of the rounds' ratios first / second: whatever else loads the machine meanwhile
    falls on both sides of each round's ratio, and a slow drift does not favour the one timed first."""
    with runtime.open(first) as a, runtime.open(second) as b:
        calls = (a.bind(sample), b.bind(sample))
        for call in calls:
            measure(call, warmup=2, iters=1, duration_s=None)
        medians: tuple[list[float], list[float]] = ([], [])
        for round_ in range(SPEED_ROUNDS):
            for side in (0, 1) if round_ % 2 == 0 else (1, 0):
                samples = measure(calls[side], warmup=1, iters=None, duration_s=SPEED_ROUND_S)
                medians[side].append(float(np.median(samples)))
    ratios = [mine / theirs for mine, theirs in zip(*medians, strict=True)]
    return float(np.median(medians[0])), float(np.median(medians[1])), float(np.median(ratios))


def speed_pairs(made: dict[tuple[str, str], Path], sample: np.ndarray) -> list[dict[str, Any]]:
    """The speed verdict: trtpipe's default INT8 for each CPU runtime (target openvino, target cpu) against NNCF's on
    OpenVINO and against quantize_static U8S8 (as called, and after ONNX Runtime's recommended pre-processing) on
    ONNX Runtime, each pair measured interleaved in this run, on this machine (a ratio from two runs would carry
    whatever else the machine was doing in each)."""
    pairs = []
    for runtime, peer, target in ((OPENVINO, NNCF_PTQ, Target.OPENVINO), (ONNXRUNTIME, ORT_U8S8, Target.CPU),
                                  (ONNXRUNTIME, ORT_U8S8_PRE, Target.CPU)):
        mine, theirs = made.get((TRTPIPE_INT8, str(target))), made.get((peer, str(Target.CPU)))
        if mine is None or theirs is None:
            print(f"  speed on {runtime.name}: not measured (needs both {TRTPIPE_INT8} ({target}) and {peer} in this "
                  "run)")
            continue
        try:
            mine_ms, theirs_ms, ratio = interleaved(runtime, mine, theirs, sample)
            # The same protocol on the peer's file against a second session of itself: a ratio this far from 1.00
            # measures nothing but the machine (which session opened first, what else ran meanwhile).
            _, _, same = interleaved(runtime, theirs, theirs, sample)
        except (MissingDependency, BadInput) as error:
            print(f"  speed on {runtime.name}: not measured ({getattr(error, 'message', error)})", flush=True)
            continue
        pair = {"runtime": runtime.name, "trtpipe": f"{TRTPIPE_INT8} ({target})", "peer": peer, "trtpipe_ms": mine_ms,
                "peer_ms": theirs_ms, "ratio": ratio, "peer_vs_itself": same, "rounds": SPEED_ROUNDS,
                "round_s": SPEED_ROUND_S, "threads": THREADS, "machine": cpu_model()}
        print(f"  {speed_line(pair)}", flush=True)
        pairs.append(pair)
    return pairs


def speed_line(pair: dict[str, Any]) -> str:
    same = pair.get("peer_vs_itself")  # reports written before the noise floor was measured lack it
    floor = f"; the peer against itself: {same:.3f}" if same is not None else ""
    return (f"Speed on {pair['runtime']} CPU ({pair['threads']} threads, batch 1): {pair['trtpipe']} "
            f"{pair['trtpipe_ms']:.1f} ms vs {pair['peer']} {pair['peer_ms']:.1f} ms p50, ratio "
            f"{pair['ratio']:.3f} (trtpipe / peer, median of {pair['rounds']} interleaved rounds' ratios; below 1: "
            f"trtpipe faster{floor}) on {pair['machine']}")


def verdicts(rows: list[Row]) -> list[str]:
    """Per target: trtpipe's best INT8 recipe against the best peer recipe, by the section's measure. A classifier's
    trtpipe rows count only with no weighted op in FP32 (its fallback rows buy accuracy with FP32 layers); a dense
    section's one trtpipe row per target is its default recipe, whatever it keeps in FP32, so both sides' FP32
    counts are named."""
    dense = any("agreement" in r for r in rows)
    key = "agreement" if dense else "top1_agreement"
    lines = []
    for target in Target:
        mine = [r for r in rows if r["target"] == target and str(r["recipe"]).startswith("trtpipe INT8")
                and (dense or str(r["fp32_weighted_ops"]).startswith("0/"))]
        # openvino: the peers judged on OpenVINO (NNCF's), else, in a report from before they were, the cpu rows
        on_runtime = [r for r in rows if r["target"] == target and not str(r["recipe"]).startswith(("trtpipe", "FP32"))]
        peer_target = Target.CPU if target is Target.OPENVINO and not on_runtime else target
        theirs = [r for r in rows if r["target"] == peer_target
                  and not str(r["recipe"]).startswith(("trtpipe", "FP32"))]
        if mine and theirs:
            best, peer = (max(group, key=lambda r: float(r[key] or 0)) for group in (mine, theirs))
            if dense:
                lines.append(f"- `{target}`: trtpipe {100 * float(best[key] or 0):.1f} % {best['measure']} "
                             f"({best['recipe']}, weighted ops in FP32 {best['fp32_weighted_ops']}) against the best "
                             f"peer's {100 * float(peer[key] or 0):.1f} % ({peer['recipe']}, weighted ops in FP32 "
                             f"{peer['fp32_weighted_ops']})")
            else:
                lines.append(f"- `{target}`: trtpipe {100 * float(best[key] or 0):.1f} % ({best['recipe']}) "
                             f"against the best peer's {100 * float(peer[key] or 0):.1f} % ({peer['recipe']})")
            default = next((r for r in mine if r["recipe"] == TRTPIPE_INT8), None)
            if default is not None and not dense:  # a dense section's only trtpipe row is the default already
                mark = "at or above" if float(default[key] or 0) >= float(peer[key] or 0) else "below"
                lines.append(f"  - `{target}` default recipe: {100 * float(default[key] or 0):.1f} %, {mark} the "
                             f"best peer")
    return lines


def write(report: dict[str, list[Row]], dense: dict[str, dict[str, Any]]) -> None:
    """reports/peers.json and reports/peers.md (re-render the table alone: python scripts/peers.py --table)."""
    Path("reports").mkdir(exist_ok=True)
    Path("reports/peers.json").write_text(json.dumps({"cpu": cpu_model(), "models": report, "dense": dense},
                                                     indent=2) + "\n")
    header = f"Machine: {cpu_model()} ({', '.join(cpu_flags())})."
    if any(name not in DENSE for name in report):
        header += (" Top-1 agreement with PyTorch FP32 on 500 photo crops (calibration: 256 other crops); latency: "
                   "ONNX Runtime CPU, batch 1, 2 threads.")
    lines = [header, ""]
    for name, rows in report.items():
        if name in DENSE:
            lines += dense_table(name, rows, dense.get(name, {}))
            continue
        lines += [f"**{name}**", "", "| Recipe | Target | Top-1 agreement | Mean / max logit error "
                  "| Weighted ops in FP32 | p50 ms (CPU) |", "|---|---|---:|---:|---:|---:|"]
        for r in rows:
            latency = f"{r['p50_ms_cpu']:.2f}" if r["p50_ms_cpu"] else "–"
            quantized = any(word in str(r["recipe"]) for word in ("INT8", "quantize_static", "PTQ"))
            lines.append(f"| {r['recipe']} | {r['target']} | {100 * float(r['top1_agreement'] or 0):.1f} % | "
                         f"{float(r['mean_logit_err']):.3f} / {float(r['max_logit_err']):.2f} | "
                         f"{r['fp32_weighted_ops'] if quantized else '–'} | {latency} |")
        lines += ["", *verdicts(rows), ""]
    Path("reports/peers.md").write_text("\n".join(lines))
    print("\n".join(lines))


def dense_table(name: str, rows: list[Row], info: dict[str, Any]) -> list[str]:
    """A packaged dense model's section: its setup, one row per recipe with the task's own measure, the accuracy
    verdict per target and the interleaved speed pairs."""
    measure_name = next((str(r["measure"]) for r in rows if r.get("measure")), "Task measure")

    def ms(value: object) -> str:
        return f"{float(value):.1f}" if isinstance(value, int | float) and value else "–"

    lines = [f"**{name}** ({info.get('setup', 'setup not recorded')})", "",
             f"| Recipe | Target | {measure_name} | Lowest output cosine | Weighted ops in FP32 | p50 ms ONNX Runtime "
             "CPU | p50 ms OpenVINO CPU | Seconds |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        recipe = str(r["recipe"])
        if isinstance(r.get("int8_recipe"), dict) and (ran := _recipe_text(r["int8_recipe"])):
            recipe += f" ({ran})"
        quantized = any(word in recipe for word in ("INT8", "quantize_static", "PTQ", "Quark"))
        lines.append(f"| {recipe} | {r['target']} | {100 * float(r['agreement'] or 0):.1f} % | "
                     f"{float(r['min_cosine']):.4f} | {r['fp32_weighted_ops'] if quantized else '–'} | "
                     f"{ms(r['p50_ms_onnxruntime'])} | {ms(r['p50_ms_openvino'])} | {r['seconds']} |")
    notes = [f"- {r['recipe']} ({r['target']}): {note}" for r in rows for note in r.get("notes") or []]
    notes += [f"- {line}" for line in info.get("failed", [])]
    speed = [f"- {speed_line(pair)}" for pair in info.get("speed", [])]
    return [*lines, "", *notes, *verdicts(rows), *speed, ""]


if __name__ == "__main__":
    raise SystemExit(main())
