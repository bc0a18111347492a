"""`make peers`: trtpipe's INT8 against the quantizers its users would pick instead, on real pretrained CNNs.

For each ImageNet-pretrained registry model that is installed (pip install 'trtpipe[pretrained]'), the same FP32
ONNX is quantized on the same 256 photo crops by every recipe, and every result is judged on the same 500 other
crops against the FP32 model's top-1 (agreement with FP32, not ImageNet accuracy):

- trtpipe INT8 for each target (tensorrt, cpu) and calibration method; then, on one method per target, what each
  algorithm adds alone (cross-layer equalization, AdaRound, bias correction) and all three together; the
  sensitivity fallback under a 5-point budget, plain and after AdaRound (FP32 nodes it needed); and trtpipe FP16;
- ONNX Runtime's quantize_static, QDQ per-channel MinMax: S8S8 symmetric (what TensorRT can take) and U8S8;
- AMD Quark's ONNX PTQ (S8S8 and U8S8, plain and with its CLE + AdaRound), run in its own environment
  (TRTPIPE_QUARK_PYTHON, which `make peers` builds); NVIDIA ModelOpt's ONNX PTQ and NNCF, when installed (each
  says how to install it otherwise).

`scripts/peers.py MODEL --only TEXT` re-runs the recipes whose name contains TEXT and merges them into the last
report. TensorRT-target files are judged with Q/DQ as float ops (TensorRT's arithmetic); their CPU latency means nothing
and is not shown. Writes reports/peers.md and reports/peers.json. A benchmark, not a test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

from trtpipe.bench.timing import measure
from trtpipe.comparison import compare
from trtpipe.convert.stage import convert
from trtpipe.errors import MissingDependency
from trtpipe.hardware import cpu_flags, cpu_model
from trtpipe.models.loader import LoadedModel, load_model
from trtpipe.models.photos import photo_crops
from trtpipe.models.registry import ARCHITECTURES
from trtpipe.optimize.evaluate import logits
from trtpipe.optimize.options import OptimizeOptions
from trtpipe.optimize.stage import optimize
from trtpipe.runtime.onnxruntime.backend import OnnxRuntimeBackend
from trtpipe.runtime.options import RunOptions
from trtpipe.vocab import CalibMethod, GraphOptimization, Precision, Target

WEIGHTED = ("Conv", "ConvTranspose", "Gemm", "MatMul")
FALLBACK_BUDGET_PP = 5.0  # the figure: the old schedule needed 46 nodes in FP32 for it


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


def ort_static(source: Path, out: Path, calib: np.ndarray, *, signed: bool) -> Path:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    quantize_static(str(source), str(out), Reader(onnx.load(str(source)).graph.input[0].name, calib),
                    quant_format=QuantFormat.QDQ, per_channel=True, calibrate_method=CalibrationMethod.MinMax,
                    activation_type=QuantType.QInt8 if signed else QuantType.QUInt8, weight_type=QuantType.QInt8,
                    extra_options={"ActivationSymmetric": signed, "WeightSymmetric": True})
    return out


def quark(source: Path, out: Path, calib: np.ndarray, *, signed: bool, algorithms: tuple[str, ...]) -> Path:
    """AMD Quark in its own environment (scripts/quark_peer.py), on the same ONNX and calibration crops."""
    python = os.environ.get("TRTPIPE_QUARK_PYTHON")
    if not python or not Path(python).exists():
        raise MissingDependency("amd-quark", "The AMD Quark peer", "make .venv-quark/.installed-stamp, then "
                                "TRTPIPE_QUARK_PYTHON=.venv-quark/bin/python (make peers does both)")
    calib_path = out.with_suffix(".calib.npy")
    np.save(calib_path, calib)
    worker = Path(__file__).with_name("quark_peer.py")
    subprocess.run([python, str(worker), str(source), str(out), str(calib_path), "s8s8" if signed else "u8s8",
                    *algorithms], check=True, stdout=subprocess.DEVNULL)
    return out


def modelopt(source: Path, out: Path, calib: np.ndarray) -> Path:
    try:
        from modelopt.onnx.quantization import quantize
    except ImportError:
        raise MissingDependency("nvidia-modelopt", "The ModelOpt peer", "pip install 'nvidia-modelopt[onnx]' "
                                "(in its own environment: it pins onnx and onnxruntime-gpu)") from None
    quantize(onnx_path=str(source), quantize_mode="int8", calibration_data=calib, calibration_method="max",
             output_path=str(out))
    return out


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
    if sys.argv[1:] == ["--table"]:
        write(json.loads(Path("reports/peers.json").read_text())["models"])
        return 0
    args = sys.argv[1:]
    only = [args.pop(i + 1) for i in reversed(range(len(args))) if args[i] == "--only"]
    args = [a for a in args if a != "--only"]
    models = args or [a.name for a in ARCHITECTURES.values() if a.weights]
    report: dict[str, list[dict[str, object]]] = {}
    for name in models:
        try:
            loaded = load_model(name)
        except MissingDependency as missing:
            print(f"{name}: skipped ({missing.message})", flush=True)
            continue
        with tempfile.TemporaryDirectory(prefix="trtpipe-peers-") as folder:
            report[name] = compare_recipes(loaded, Path(folder), only)
    if only:  # re-run rows replace their namesakes in the last report; the others are kept
        previous = json.loads(Path("reports/peers.json").read_text())["models"]
        for name, rows in report.items():
            fresh = {(r["recipe"], r["target"]): r for r in rows}
            kept = [fresh.pop((r["recipe"], r["target"]), r) for r in previous.get(name, [])]
            previous[name] = kept + list(fresh.values())
        report = previous
    write(report)
    return 0


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
        if only and not any(text in recipe for text in only):
            return
        out = folder / f"{len(rows)}-{abs(hash(recipe))}.onnx"
        start = time.perf_counter()
        try:
            path = make(out)
        except MissingDependency as missing:
            print(f"  {recipe}: not run ({missing.message})", flush=True)
            return
        seconds = time.perf_counter() - start
        result = compare(reference, logits(onnx.load(str(path)), evaluation,
                                           optimization=GraphOptimization.DISABLE if float_qdq
                                           else GraphOptimization.ALL))
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
    def trtpipe(target: Target, method: str, **extra: object) -> Callable[[Path], Path]:
        passes = ("fuse", "equalize") if extra.pop("equalize", False) else ("fuse",)
        cache = folder / f"{target}-{method}-{'-'.join(passes)}.calib.json"  # rows of one graph calibrate once
        return lambda out: optimize(source, out, OptimizeOptions(
            precision=Precision.INT8, target=target, calib="photos", calib_method=method, passes=passes,
            calib_cache=cache, **extra)).path  # type: ignore[arg-type]

    for target in Target:
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
    return rows


def verdicts(rows: list[dict[str, object]]) -> list[str]:
    """Per target: trtpipe's best INT8 recipe with no weighted op in FP32 against the best peer recipe."""
    lines = []
    for target in Target:
        mine = [r for r in rows if r["target"] == target and str(r["recipe"]).startswith("trtpipe INT8")
                and str(r["fp32_weighted_ops"]).startswith("0/")]
        theirs = [r for r in rows if r["target"] == target and not str(r["recipe"]).startswith(("trtpipe", "FP32"))]
        if mine and theirs:
            best, peer = (max(group, key=lambda r: float(r["top1_agreement"] or 0)) for group in (mine, theirs))
            lines.append(f"- `{target}`: trtpipe {100 * float(best['top1_agreement'] or 0):.1f} % ({best['recipe']}) "
                         f"against the best peer's {100 * float(peer['top1_agreement'] or 0):.1f} % ({peer['recipe']})")
    return lines


def write(report: dict[str, list[dict[str, object]]]) -> None:
    """reports/peers.json and reports/peers.md (re-render the table alone: python scripts/peers.py --table)."""
    Path("reports").mkdir(exist_ok=True)
    Path("reports/peers.json").write_text(json.dumps({"cpu": cpu_model(), "models": report}, indent=2) + "\n")
    lines = [f"Machine: {cpu_model()} ({', '.join(cpu_flags())}). Top-1 agreement with PyTorch FP32 on 500 photo "
             "crops (calibration: 256 other crops); latency: ONNX Runtime CPU, batch 1, 2 threads.", ""]
    for name, rows in report.items():
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


if __name__ == "__main__":
    raise SystemExit(main())
