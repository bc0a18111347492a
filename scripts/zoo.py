"""The model-zoo sweep (``make zoo``): CNN architectures from timm and torchvision with seeded random weights, each
through convert -> FP16 -> INT8 cpu -> INT8 tensorrt -> check, then a short paired bench of the FP32 file, trtpipe's
cpu INT8 file and ONNX Runtime's ``quantize_static`` (QDQ, per-channel, U8S8) on the same FP32 ONNX; one row per
model with each stage's result (✓, or its one-line refusal) and the speeds as ratios with their intervals. Writes
docs/results/model-zoo.md (or --output) and, with --json, the rows.

Each stage is the trtpipe command a user would type, run as a subprocess (a failure is that model's row, not the
sweep's end). Timings are paired and interleaved in one process (optimize/checks/speed_check.py), so a busy
machine's load falls on every variant alike; read them as ratios. Calibration is random noise (random weights have
no data of their own): the INT8 files are for speed, their accuracy figures are agreement with FP32 on held-out
random draws.

    python scripts/zoo.py                       # every model, as many as --budget-minutes allows
    python scripts/zoo.py timm:resnet18 tv:r3d_18 --output /tmp/zoo.md
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FACTORIES = ROOT / "scripts" / "zoo_models.py"
IMAGE = "1x3x224x224"
VIDEO = "1x3x8x112x112"
CALIB_SAMPLES = 32
STAGES = ("convert", "fp16", "int8 cpu", "int8 tensorrt", "check")
NOT_RUN = "not run"  # a stage left out with --stages


@dataclass(frozen=True)
class Model:
    """One sweep entry: where it comes from (timm or tv), its name, what it is, its input shape."""

    source: str
    name: str
    family: str
    shape: str = IMAGE

    @property
    def key(self) -> str:
        return f"{self.source}:{self.name}"


def _m(key: str, family: str, shape: str = IMAGE) -> Model:
    source, name = key.split(":")
    return Model(source, name, family, shape)


# In the order the sweep runs them: the blocks issue 57 names first (squeeze-excite, grouped, depthwise,
# attention-like), then one or more of every other family, segmentation, 3D-convolution video and optical flow.
MODELS: tuple[Model, ...] = (
    _m("timm:seresnext26d_32x4d", "squeeze-excite, grouped"),
    _m("timm:efficientnet_b0", "depthwise, squeeze-excite, SiLU"),
    _m("timm:mobilenetv3_large_100", "depthwise, squeeze-excite, hard-swish"),
    _m("timm:resnext26ts", "grouped"),
    _m("timm:regnety_008", "grouped, squeeze-excite"),
    _m("timm:fastvit_t8", "attention-like (reparameterised token mixer)"),
    _m("timm:efficientvit_b0", "attention-like (linear attention)"),
    _m("timm:mobilevit_xxs", "attention (transformer blocks)"),
    _m("timm:convnext_atto", "depthwise 7x7, LayerNorm, GELU"),
    _m("timm:resnet18", "residual"),
    _m("timm:resnet50d", "residual, ResNet-D"),
    _m("timm:nf_resnet26", "normalizer-free"),
    _m("timm:res2net50_26w_4s", "multi-scale residual"),
    _m("timm:resnest14d", "split attention"),
    _m("timm:regnetx_008", "grouped"),
    _m("timm:mobilenetv2_100", "depthwise, inverted residual"),
    _m("timm:mnasnet_100", "depthwise (NAS)"),
    _m("timm:ghostnet_100", "ghost modules, squeeze-excite"),
    _m("timm:lcnet_100", "depthwise, hard-swish (PP-LCNet)"),
    _m("timm:mixnet_s", "mixed depthwise kernels"),
    _m("timm:tinynet_e", "depthwise (EfficientNet scaled down)"),
    _m("timm:rexnet_100", "depthwise, squeeze-excite"),
    _m("timm:hrnet_w18_small", "multi-resolution"),
    _m("timm:densenet121", "dense concatenation"),
    _m("timm:dla34", "deep layer aggregation"),
    _m("timm:dpn68", "dual path, grouped"),
    _m("timm:cspresnet50", "cross-stage partial"),
    _m("timm:repvgg_a0", "plain, reparameterised"),
    _m("timm:gernet_s", "GPU-efficient"),
    _m("timm:selecsls42b", "selective"),
    _m("timm:hardcorenas_a", "depthwise, squeeze-excite (NAS)"),
    _m("timm:efficientformer_l1", "attention (MetaFormer)"),
    _m("timm:xception41", "depthwise separable"),
    _m("timm:inception_v3", "inception", "1x3x299x299"),
    _m("tv:squeezenet1_1", "fire modules"),
    _m("tv:shufflenet_v2_x1_0", "channel shuffle, depthwise"),
    _m("tv:googlenet", "inception"),
    _m("tv:mobilenet_v3_small", "depthwise, squeeze-excite"),
    _m("tv:vgg11_bn", "plain"),
    _m("tv:lraspp_mobilenet_v3_large", "segmentation"),
    _m("tv:deeplabv3_mobilenet_v3_large", "segmentation, atrous"),
    _m("tv:r3d_18", "video, 3D convolution", VIDEO),
    _m("tv:r2plus1d_18", "video, (2+1)D convolution", VIDEO),
    _m("tv:raft_small", "optical flow (two inputs)"),
)


@dataclass
class Row:
    model: Model
    stages: dict[str, str] = field(default_factory=dict)  # stage -> "✓" or the one-line refusal
    speed: dict[str, Any] = field(default_factory=dict)
    left_float: list[str] = field(default_factory=list)
    kernels: str = ""
    seconds: float = 0.0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Row:
        source, name = data["model"].split(":")
        return cls(Model(source, name, data["family"], data["shape"]), dict(data["stages"]), dict(data["speed"]),
                   list(data["left_float"]), data["kernels"], data["seconds"])

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model.key, "family": self.model.family, "shape": self.model.shape,
                "stages": self.stages, "speed": self.speed, "left_float": self.left_float, "kernels": self.kernels,
                "seconds": round(self.seconds, 1)}


def _trtpipe(args: list[str], timeout: float) -> tuple[bool, str]:
    """Run ``trtpipe ARGS`` from this checkout; (succeeded, its last 'Error:' line or output line)."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    try:
        done = subprocess.run([sys.executable, "-m", "trtpipe.cli", *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout:.0f} s"
    if done.returncode == 0:
        return True, "✓"
    lines = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
    error = next((line for line in reversed(lines) if line.startswith("Error:")), lines[-1] if lines else "failed")
    return False, error.removeprefix("Error:").strip()


def _random_calibration(shape: str, count: int, seed: int = 0) -> np.ndarray:
    dims = [int(d) for d in shape.split("x")]
    return np.random.default_rng(seed).standard_normal((count, *dims[1:])).astype(np.float32)


def run_model(model: Model, folder: Path, *, rounds: int, threads: int, timeout: float, quality: str,
              stages: tuple[str, ...] = STAGES) -> Row:
    """One model through every stage and the bench; a refused stage skips the stages that need its file."""
    start = time.perf_counter()
    row = Row(model)
    folder.mkdir(parents=True, exist_ok=True)
    fp32, fp16 = folder / "fp32.onnx", folder / "fp16.onnx"
    cpu, trt = folder / "int8_cpu.onnx", folder / "int8_tensorrt.onnx"
    spec = f"{FACTORIES}:{model.source}__{model.name}"
    calib = ["--calib", "random", "--calib-samples", str(CALIB_SAMPLES), "--quality", quality]
    steps: list[tuple[str, list[str], Path | None]] = [
        ("convert", ["convert", spec, "-o", str(fp32), "--input-shape", model.shape], None),
        ("fp16", ["optimize", str(fp32), "-o", str(fp16), "--precision", "fp16", "--target", "tensorrt"], fp32),
        ("int8 cpu", ["optimize", str(fp32), "-o", str(cpu), "--precision", "int8", "--target", "cpu", *calib], fp32),
        ("int8 tensorrt", ["optimize", str(fp32), "-o", str(trt), "--precision", "int8", "--target", "tensorrt",
                           *calib], fp32),
        ("check", ["check", str(trt)], trt),
    ]
    for stage, args, needs in steps:
        if stage not in stages:
            row.stages[stage] = NOT_RUN
            continue
        if needs is not None and not needs.exists():
            row.stages[stage] = "–"
            continue
        ok, said = _trtpipe(args, timeout)
        row.stages[stage] = said
        if not ok and stage == "convert":
            break
    if cpu.exists():
        manifest = json.loads(cpu.with_suffix(".manifest.json").read_text()) \
            if cpu.with_suffix(".manifest.json").exists() else {}
        row.left_float, row.kernels = _from_manifest(manifest)
        row.speed = _bench(fp32, cpu, folder, model.shape, rounds=rounds, threads=threads)
    row.seconds = time.perf_counter() - start
    return row


def _from_manifest(manifest: dict[str, Any]) -> tuple[list[str], str]:
    """The regions speed-aware placement left float, and the integer-kernel count, from the cpu file's manifest."""
    def find(value: Any, key: str) -> Any:
        if isinstance(value, dict):
            if key in value:
                return value[key]
            for child in value.values():
                found = find(child, key)
                if found is not None:
                    return found
        return None

    placement = find(manifest, "speed_placement") or {}
    kernels = find(manifest, "kernels") or {}
    counted = f"{kernels.get('integer_total', '?')}/{kernels.get('total', '?')}" if kernels else ""
    return list(placement.get("left_float", [])), counted


def _bench(fp32: Path, cpu: Path, folder: Path, shape: str, *, rounds: int, threads: int) -> dict[str, Any]:
    """FP32, trtpipe's cpu INT8 and quantize_static's file timed in one interleaved sequence of rounds
    (optimize/checks/speed_check.py): INT8/FP32, quantize_static/FP32 and INT8/quantize_static as speed ratios (above 1:
    the first file faster) with 95 % intervals, all three from the same rounds, so they agree with each other."""
    sys.path.insert(0, str(ROOT))
    import onnx

    from trtpipe.onnx_info import graph_inputs
    from trtpipe.optimize.checks.speed_check import interleaved_speedups
    from trtpipe.runtime.onnxruntime.peer import quantize_static_peer

    inputs = [i.name for i in graph_inputs(onnx.load(str(fp32), load_external_data=False))]
    result: dict[str, Any] = {}
    feed = {inputs[0]: _random_calibration(shape, 1, seed=7)}
    peer: Path | None = None
    try:
        _, _, peer = quantize_static_peer(fp32, {inputs[0]: _random_calibration(shape, CALIB_SAMPLES)}, folder)
    except Exception as error:  # the peer's own failure is a finding of the row, not the sweep's end
        result["quantize_static_error"] = str(error).splitlines()[0][:200]
    speeds = None
    if peer is not None:
        try:
            speeds = interleaved_speedups([cpu, fp32, peer], feed, threads=threads, rounds=rounds)  # type: ignore[arg-type]
        except Exception as error:  # a peer file ONNX Runtime refuses to load is the peer's finding, too
            result["quantize_static_error"] = str(error).splitlines()[0][:200]
            peer = None
    if speeds is None:
        speeds = interleaved_speedups([cpu, fp32], feed, threads=threads, rounds=rounds)  # type: ignore[arg-type]
    result["int8_vs_fp32"] = speeds[0, 1].to_dict()
    if peer is not None:
        result["int8_vs_quantize_static"] = speeds[0, 2].to_dict()
        result["quantize_static_vs_fp32"] = speeds[2, 1].to_dict()
    if peer is not None:
        result["kernels_compared"] = _kernels_compared(cpu, peer)
    result["method"] = "one interleaved sequence of rounds over every file, the order rotated each round"
    result["load_average"] = round(os.getloadavg()[0], 2)  # the 1-minute load as the bench ended: how busy it was
    return result


def _ratio(entry: dict[str, Any] | None) -> str:
    if not entry:
        return "–"
    interval = entry["interval"]
    return f"{entry['speedup']:.2f}x ({interval['low']:.2f}–{interval['high']:.2f})"


def _kernels_compared(cpu: Path, peer: Path) -> dict[str, Any]:
    """What ONNX Runtime runs for trtpipe's file and for quantize_static's, read from its optimised graphs (no
    timing, so no noise): each file's integer-kernel count, and the op types one graph has more of than the other
    (``{"QLinearConv": 3, "Conv": -3}``: trtpipe's runs three more convolutions in integer)."""
    from collections import Counter

    from trtpipe.runtime.onnxruntime.sessions import FLOAT_KERNELS, INTEGER_KERNELS, optimized_graph

    ours, theirs = (Counter(n.op_type for n in optimized_graph(f).graph.node) for f in (cpu, peer))
    difference = {op: ours[op] - theirs[op] for op in sorted(set(ours) | set(theirs)) if ours[op] != theirs[op]}
    integer = sum(theirs[op] for op in INTEGER_KERNELS)
    return {"quantize_static_kernels": f"{integer}/{integer + sum(theirs[op] for op in FLOAT_KERNELS)}",
            "ops_minus_quantize_static": difference, "same_ops": not difference}


def _load_sentence(rows: list[Row]) -> str:
    """How busy the machine was while the rows' benches ran, from the load average each recorded."""
    loads = [r.speed["load_average"] for r in rows if "load_average" in r.speed]
    if not loads:
        return "The machine's load was not recorded."
    cores = os.cpu_count() or 1
    busy = "quiet" if max(loads) < 0.75 * cores + 1.0 else "shared, busy"
    return (f"The machine was {busy}: the 1-minute load average as each bench ended was median "
            f"{float(np.median(loads)):.1f}, at most {max(loads):.1f}, on {cores} cores.")


def _compared_cells(compared: dict[str, Any] | None) -> list[str]:
    if not compared:
        return ["–", "–"]
    difference = compared["ops_minus_quantize_static"]
    text = ", ".join(f"{op} {n:+d}" for op, n in difference.items()) if difference else "the same"
    return [compared["quantize_static_kernels"], text]


def _cell(said: str) -> str:
    return said if said in ("✓", "–", NOT_RUN) else "✗ " + said.replace("|", "\\|")[:160]


def markdown(rows: list[Row], *, machine: str, date: str, threads: int, rounds: int, minutes: float,
             not_run: list[Model], note: str = "") -> str:
    """The results page: one row per model, then the summary the issue asks for."""
    vs_peer = [r.speed["int8_vs_quantize_static"]["speedup"] for r in rows
               if "int8_vs_quantize_static" in r.speed]
    slower = [r for r in rows if r.speed.get("int8_vs_fp32", {}).get("slower")]
    below = [r for r in rows if r.speed.get("int8_vs_quantize_static", {}).get("speedup", 1.0) < 0.95]
    lines = [
        "# Model zoo: timm and torchvision architectures through every stage",
        "",
        f"Measured {date} on {machine}, with `make zoo` (scripts/zoo.py): {len(rows)} architectures in "
        f"{minutes:.0f} minutes. {_load_sentence(rows)} Every speed is a ratio of interleaved rounds in one "
        f"process, FP32, trtpipe's file and quantize_static's timed in the same sequence ({rounds}+ rounds, batch 1, "
        f"{threads} ONNX Runtime threads, optimize/checks/speed_check.py) with its 95 % bootstrap interval; read the "
        "absolute times in the JSON as load-dependent." + (f" {note}" if note else ""),
        "",
        "Seeded random weights (nothing downloaded); calibration on 32 draws of random noise for both trtpipe and "
        "ONNX Runtime's `quantize_static` (QDQ, per-channel, U8S8, MinMax), so the INT8 files are speed artifacts "
        "and accuracy here is agreement with FP32 on held-out random draws. Stages: `convert`, `optimize --precision "
        "fp16 --target tensorrt`, `optimize --precision int8 --target cpu`, `optimize --precision int8 --target "
        "tensorrt`, `check` of the tensorrt INT8 file; ✓, or the stage's one-line refusal; – where an earlier stage's "
        "file was missing; *not run* where that model ran the speed stages only (`--stages`).",
        "",
        "| model | family | convert | FP16 | INT8 cpu | INT8 tensorrt | check | integer kernels | INT8 / FP32 | "
        "quantize_static / FP32 | INT8 / quantize_static | quantize_static's kernels | ops after ONNX Runtime's "
        "fusions, trtpipe minus quantize_static | left float (speed) |",
        "|---|---|---|---|---|---|---|---|---:|---:|---:|---|---|---|",
    ]
    for r in rows:
        cells = [f"`{r.model.key}`", r.model.family, *(_cell(r.stages.get(s, "–")) for s in STAGES), r.kernels or "–",
                 _ratio(r.speed.get("int8_vs_fp32")), _ratio(r.speed.get("quantize_static_vs_fp32")),
                 _ratio(r.speed.get("int8_vs_quantize_static")), *_compared_cells(r.speed.get("kernels_compared")),
                 ", ".join(r.left_float) or "–"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Summary", ""]
    if vs_peer:
        worst = min(rows, key=lambda r: r.speed.get("int8_vs_quantize_static", {}).get("speedup", 9.0))
        lines.append(f"- trtpipe INT8 / quantize_static over {len(vs_peer)} models: median "
                     f"{float(np.median(vs_peer)):.2f}x, worst {min(vs_peer):.2f}x (`{worst.model.key}`)"
                     f"; below 0.95x: {', '.join(f'`{r.model.key}`' for r in below) or 'none'}.")
    compared = [r for r in rows if r.speed.get("kernels_compared")]
    if compared:
        same = [r for r in compared if r.speed["kernels_compared"]["same_ops"]]
        lines.append(f"- ONNX Runtime runs the same ops for trtpipe's file as for quantize_static's (its optimised "
                     f"graphs, no timing) on {len(same)} of {len(compared)} models; where they are the same, their "
                     "speed ratio measures the machine's noise, not the placement.")
    lines.append("- cpu INT8 files slower than FP32 beyond the interval: "
                 + (", ".join(f"`{r.model.key}`" for r in slower) or "none") + ".")
    refused = [(r.model.key, s, said) for r in rows for s, said in r.stages.items()
               if said not in ("✓", "–", NOT_RUN)]
    lines.append(f"- refusals and failures: {len(refused)}" + (" (listed under 'Known limits')" if refused else "")
                 + ".")
    if not_run:
        lines.append(f"- not run within the time budget: {', '.join(f'`{m.key}`' for m in not_run)}.")
    if refused:
        lines += ["", "## Known limits", "", "Each stage this sweep saw refused or fail, with its own line:", ""]
        lines += [f"- `{key}`, {stage}: {said}" for key, stage, said in refused]
    return "\n".join(lines) + "\n"


def machine_name() -> str:
    model = ""
    with contextlib.suppress(OSError):
        model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), "")
    import onnxruntime

    return (f"{model or platform.processor() or 'an unnamed CPU'}, {os.cpu_count()} cores, {platform.system()}, "
            f"ONNX Runtime {onnxruntime.__version__}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="source:name entries (default: every model of the list)")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "results" / "model-zoo.md")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--work", type=Path, default=None, help="folder for the files (default: a temporary one)")
    parser.add_argument("--budget-minutes", type=float, default=None, help="stop starting models after this long")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=min(4, os.cpu_count() or 1))
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per stage")
    parser.add_argument("--date", default=datetime.date.today().isoformat())
    parser.add_argument("--input-shape", default=None, help="one input shape for every model, e.g. 1x3x64x64")
    parser.add_argument("--image-size", type=int, default=None,
                        help="height and width of the image models' input (default 224; 299 for Inception)")
    parser.add_argument("--stages", default=",".join(STAGES),
                        help=f"comma-separated stages to run (default all: {', '.join(STAGES)}); convert always runs")
    parser.add_argument("--quality", default="balanced", choices=("fast", "balanced", "best"),
                        help="the INT8 recipe of both INT8 stages (optimize --quality)")
    parser.add_argument("--from-json", type=Path, default=None,
                        help="write the page from an earlier run's --json rows (with --minutes) instead of running")
    parser.add_argument("--minutes", type=float, default=0.0, help="with --from-json: how long that run took")
    parser.add_argument("--note", default="", help="a sentence added to the page's introduction")
    args = parser.parse_args(argv)
    known = {m.key: m for m in MODELS}
    chosen = [known.get(key) or _m(key, "given") for key in args.models] if args.models else list(MODELS)
    if args.input_shape:
        chosen = [Model(m.source, m.name, m.family, args.input_shape) for m in chosen]
    elif args.image_size:
        size = f"x{args.image_size}x{args.image_size}"
        chosen = [Model(m.source, m.name, m.family, m.shape if m.shape == VIDEO else "1x3" + size) for m in chosen]
    if args.from_json is not None:
        done = [Row.from_dict(row) for row in json.loads(args.from_json.read_text())]
        ran = {row.model.key for row in done}
        args.output.write_text(markdown(done, machine=machine_name(), date=args.date, threads=args.threads,
                                        rounds=args.rounds, minutes=args.minutes,
                                        not_run=[m for m in chosen if m.key not in ran], note=args.note))
        return 0
    rows: list[Row] = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="trtpipe-zoo-") as tmp:
        work = args.work or Path(tmp)
        not_run: list[Model] = []
        for model in chosen:
            if args.budget_minutes is not None and time.perf_counter() - start > 60 * args.budget_minutes:
                not_run.append(model)
                continue
            row = run_model(model, work / model.key.replace(":", "_"), rounds=args.rounds, threads=args.threads,
                            timeout=args.timeout, quality=args.quality,
                            stages=("convert", *(s.strip() for s in args.stages.split(","))))
            rows.append(row)
            print(json.dumps(row.to_dict()), flush=True)
            if args.json:
                args.json.write_text(json.dumps([r.to_dict() for r in rows], indent=1))
            args.output.write_text(markdown(rows, machine=machine_name(), date=args.date, threads=args.threads,
                                            rounds=args.rounds, minutes=(time.perf_counter() - start) / 60,
                                            not_run=[m for m in chosen[len(rows):]]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
