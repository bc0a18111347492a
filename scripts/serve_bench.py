"""`make loadtest`: throughput and latency of `trtpipe serve` with and without dynamic batching.

For each model: the in-process p50 of trtpipe.load(...).predict at batch 1, then a server on a loopback port
per batching mode, driven by `trtpipe loadtest` at concurrency 1, 8 and 32. Writes reports/loadtest.json and
prints a Markdown table.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

import trtpipe
from trtpipe.bench.timing import measure
from trtpipe.serve.loadtest import run_loadtest

MODELS = {"digits_resnet": 8.0, "resnet50": 15.0}  # seconds per concurrency level
LEVELS = [1, 8, 32]
PORT = 8765


def in_process_p50(name: str) -> float:
    with trtpipe.load(Path("models") / name / "1" / "model.onnx") as model:
        shape = [1, *model.inputs[0].shape[1:]]
        x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
        return float(np.median(measure(lambda: model.predict(x), warmup=20, iters=None, duration_s=5)))


def serve(batching: bool) -> subprocess.Popen:  # type: ignore[type-arg]
    command = [sys.executable, "-m", "trtpipe.cli", "serve", "models", "--port", str(PORT)]
    if not batching:
        command.append("--no-batching")
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{PORT}/v2/health/live", timeout=1).status_code == 200:
                return process
        except httpx.TransportError:
            time.sleep(0.5)
    process.kill()
    raise SystemExit("the server did not start")


def main() -> None:
    report: dict[str, dict[str, object]] = {}
    for name in MODELS:
        report[name] = {"in_process_p50_ms": in_process_p50(name)}
    for batching in (False, True):
        process = serve(batching)
        try:
            for name, duration in MODELS.items():
                result = run_loadtest(f"http://127.0.0.1:{PORT}", name, LEVELS, duration_s=duration)
                report[name]["batching" if batching else "no_batching"] = result["results"]
        finally:
            process.terminate()
            process.wait(60)
    Path("reports").mkdir(exist_ok=True)
    Path("reports/loadtest.json").write_text(json.dumps(report, indent=2) + "\n")
    print("| Model | Batching | Concurrency | Req/s | p50 ms | p90 ms | p99 ms |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, entry in report.items():
        for mode in ("no_batching", "batching"):
            for r in entry[mode]:  # type: ignore[union-attr]
                print(f"| {name} | {'on' if mode == 'batching' else 'off'} | {r['concurrency']} | "
                      f"{r['throughput']:.1f} | {r['p50_ms']:.2f} | {r['p90_ms']:.2f} | {r['p99_ms']:.2f} |")
        http_p50 = entry["no_batching"][0]["p50_ms"]  # type: ignore[index]
        print(f"\n{name}: in-process p50 {entry['in_process_p50_ms']:.2f} ms; HTTP adds "
              f"{http_p50 - entry['in_process_p50_ms']:.2f} ms at concurrency 1 (no batching)")
        ratio = entry["batching"][-1]["throughput"] / entry["no_batching"][-1]["throughput"]  # type: ignore[index]
        print(f"{name}: dynamic batching at concurrency 32 gives {ratio:.2f}x the throughput without it\n")


if __name__ == "__main__":
    main()
