"""`make gpu-check`: the GPU tests and the GPU benches in one command, every result in one folder.

1. ``pytest -m "gpu or tensorrt"`` (JUnit XML and its log);
2. ResNet-50 (random weights: speed only): FP32 and FP16 ONNX on ONNX Runtime CUDA (tuned per artifact, device
   resident and with copies), an FP16 AOTInductor package where ``trtpipe compile`` exists, against PyTorch FP32
   eager, TF32, torch.compile reduce-overhead FP16 channels_last and FP16 channels_last from a CUDA graph, at
   batch 1, 8, 32 and 128;
3. a dense model (PP-OCRv4's text detector from its wheel): its FP32 file on ONNX Runtime CUDA as the reference,
   FP16 beside it.

Each bench writes JSON and Markdown; ``summary.md`` names the machine (GPU, driver, versions) and links them. Run it
on a GPU machine (../shared/gpu/README.md says how to stage one without a package index); without a CUDA GPU it
stops in one line. Exit status: 1 when a step failed (its log says why), else 0.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import subprocess
import sys
from pathlib import Path

CLI = [sys.executable, "-m", "trtpipe.cli"]
RESNET_BATCHES = "1,8,32,128"


def _run(name: str, command: list[str], out: Path, log: list[str]) -> bool:
    """Run one step, its output to ``out/<name>.log``; True when it succeeded."""
    print(f"== {name}: {' '.join(command)}", flush=True)
    with (out / f"{name}.log").open("w") as handle:
        code = subprocess.call(command, stdout=handle, stderr=subprocess.STDOUT)
    log.append(f"- {name}: {'ok' if code == 0 else f'FAILED (exit {code}; {name}.log)'}")
    print(log[-1], flush=True)
    return code == 0


def _machine() -> list[str]:
    import onnxruntime
    import torch

    lines = [f"- GPU: {torch.cuda.get_device_name(0)} (compute capability "
             f"{'.'.join(map(str, torch.cuda.get_device_capability(0)))}, "
             f"{torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB)",
             f"- torch {torch.__version__} (CUDA {torch.version.cuda}), onnxruntime {onnxruntime.__version__} "
             f"(providers: {', '.join(onnxruntime.get_available_providers())})"]
    if shutil.which("nvidia-smi"):
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, check=False).stdout.strip()
        lines.append(f"- driver {driver or 'unknown'}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("reports/gpu-check"))
    parser.add_argument("--duration", default="2", help="seconds of timed runs per row and batch")
    parser.add_argument("--skip-tests", action="store_true")
    parser.add_argument("--batches", default=RESNET_BATCHES,
                        help="ResNet-50's batch sizes (fewer where the device time is short: each batch compiles "
                             "torch.compile's row again)")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("gpu-check needs a CUDA GPU, and torch sees none here.", file=sys.stderr)
        return 2
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    log: list[str] = []
    ok = True
    if not args.skip_tests:
        ok &= _run("pytest-gpu", [sys.executable, "-m", "pytest", "-m", "gpu or tensorrt", "-q", "-rs",
                                  f"--junitxml={out / 'pytest-gpu.xml'}"], out, log)
    models = out / "models"
    models.mkdir(exist_ok=True)
    timing = ["--duration", args.duration, "--rounds", "3", "--device", "cuda", "--backend", "onnxruntime-cuda"]

    # ResNet-50: FP32 and FP16 ONNX, an AOTInductor package where the command exists, the strongest PyTorch rows.
    r50, r50_fp16 = models / "resnet50.onnx", models / "resnet50_fp16.onnx"
    artifacts = [r50]
    ok &= _run("resnet50-convert", [*CLI, "convert", "resnet50", "-o", str(r50)], out, log)
    if _run("resnet50-fp16", [*CLI, "optimize", str(r50), "-o", str(r50_fp16), "--precision", "fp16", "--calib",
                              "random"], out, log):
        artifacts.append(r50_fp16)
    else:
        ok = False
    help_text = subprocess.run([*CLI, "--help"], capture_output=True, text=True, check=False).stdout
    if " compile " in help_text or "\n  compile" in help_text:
        aoti = models / "resnet50_fp16.pt2"
        if _run("resnet50-aoti", [*CLI, "compile", "resnet50", "-o", str(aoti), "--precision", "fp16", "--device",
                                  "cuda", "--channels-last"], out, log):
            artifacts.append(aoti)
        else:
            ok = False
    ok &= _run("resnet50-bench", [*CLI, "bench", "resnet50", *map(str, artifacts), "--batch", args.batches,
                                  *timing, "--baselines", "compile-half,graph-half", "--json",
                                  str(out / "resnet50.json"), "--markdown", str(out / "resnet50.md")], out, log)

    # A dense model from a wheel: its FP32 file on ONNX Runtime CUDA is the reference, FP16 beside it.
    det, det_fp16 = models / "ppocrv4_det.onnx", models / "ppocrv4_det_fp16.onnx"
    try:
        from trtpipe.models.packaged import packaged_onnx

        shutil.copy(packaged_onnx("ppocrv4_det"), det)
        dense = [det]
        shape = ["--input-shape", "x:1x3x640x640"]  # the file's height and width are dynamic: one size to run at
        if _run("ppocrv4_det-fp16", [*CLI, "optimize", str(det), "-o", str(det_fp16), "--precision", "fp16",
                                     "--calib", "random", *shape], out, log):
            dense.append(det_fp16)
        ok &= _run("ppocrv4_det-bench", [*CLI, "bench", str(det), *map(str, dense[1:]), "--batch", "1,8", *timing,
                                         *shape, "--json", str(out / "ppocrv4_det.json"), "--markdown",
                                         str(out / "ppocrv4_det.md")], out, log)
    except Exception as error:  # the wheel is optional: say so and go on
        log.append(f"- ppocrv4_det: skipped ({error})")

    summary = ["# trtpipe gpu-check", "", f"Run {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}.", "",
               *_machine(), "", "## Steps", "", *log, ""]
    for name in ("resnet50", "ppocrv4_det"):
        table = out / f"{name}.md"
        if table.is_file():
            summary += [f"## {name}", "", table.read_text(), ""]
    (out / "summary.md").write_text("\n".join(summary))
    (out / "summary.json").write_text(json.dumps({"ok": ok, "steps": log}, indent=2) + "\n")
    print(f"Wrote {out / 'summary.md'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
