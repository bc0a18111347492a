"""`make loadtest`: `trtpipe serve` against a real Triton Inference Server, same artifacts, same load, one run.

For each model: the in-process p50 of trtpipe.load(...).predict at batch 1; then one server at a time on
loopback ports, driven by `trtpipe loadtest` (KServe v2 binary tensors, aiohttp clients on the same cores) at
concurrency 1, 8 and 32:
  - trtpipe serve, dynamic batching off and on;
  - tritonserver (from the nvidia-pytriton wheel, no native onnxruntime backend) serving the Python-backend
    export of the same artifacts (`trtpipe export-triton --backend python`), with the same dynamic batching
    settings (max batch 32, 2 ms queue delay) and ONNX Runtime's default threads, like trtpipe serve.
Each level also records the CPU the server spent (it and every process under it: Triton's backend stubs).
Writes reports/loadtest.json and prints a Markdown table.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

import trtpipe
from trtpipe.bench.timing import measure
from trtpipe.hardware import cpu_model, usable_cores
from trtpipe.serve.options import ServeOptions
from trtpipe.serve.repository.triton import export
from trtpipe.tools.loadtest import run_loadtest
from trtpipe.tools.loopback import free_port, wait_until_ready
from trtpipe.tools.tritonserver import TritonServer, unavailable
from trtpipe.vocab import TritonBackend

MODELS = {"digits_resnet": 8.0, "resnet50": 15.0}  # seconds per concurrency level
LEVELS = [1, 8, 32]
REPOSITORY = Path("models")
SETTINGS = ServeOptions()  # both servers: max batch 32, 2 ms queue delay


def in_process_p50(name: str) -> float:
    with trtpipe.load(REPOSITORY / name / "1" / "model.onnx") as model:
        shape = [1, *model.inputs[0].shape[1:]]
        x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
        return float(np.median(measure(lambda: model.predict(x), warmup=20, iters=None, duration_s=5)))


@contextmanager
def trtpipe_serve(batching: bool) -> Iterator[tuple[str, int]]:
    port = free_port()
    command = [sys.executable, "-m", "trtpipe.cli", "serve", str(REPOSITORY), "--port", str(port)]
    if not batching:
        command.append("--no-batching")
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until_ready(f"http://127.0.0.1:{port}", "/v2/health/ready", seconds=120)
        yield f"http://127.0.0.1:{port}", process.pid
    finally:
        process.terminate()
        process.wait(60)


@contextmanager
def triton_serve(folder: Path) -> Iterator[tuple[str, int]]:
    artifacts = {name: REPOSITORY / name / "1" / "model.onnx" for name in MODELS}
    options = ServeOptions(triton_backend=TritonBackend.PYTHON, max_batch_size=SETTINGS.max_batch_size,
                           max_queue_delay_ms=SETTINGS.max_queue_delay_ms)
    export(artifacts, folder / "repository", options)
    with TritonServer(folder / "repository", folder / "tritonserver.log") as server:
        assert server.process is not None
        yield server.http_url, server.process.pid


def main() -> None:
    report: dict[str, object] = {"machine": f"{cpu_model()}, {usable_cores()} cores, {platform.python_version()}",
                                 "date": time.strftime("%Y-%m-%d"), "models": {}}
    models: dict[str, dict[str, object]] = report["models"]  # type: ignore[assignment]
    for name in MODELS:
        models[name] = {"in_process_p50_ms": in_process_p50(name)}
    servers = {"trtpipe serve, batching off": lambda: trtpipe_serve(False),
               "trtpipe serve, batching on": lambda: trtpipe_serve(True)}
    reason = unavailable()
    folder = Path(tempfile.mkdtemp(prefix="trtpipe-loadtest-"))
    if reason:
        print(f"Triton rows skipped: {reason}", file=sys.stderr)
    else:
        servers["Triton 2.51 Python backend, batching on"] = lambda: triton_serve(folder)
    for label, start in servers.items():
        with start() as (url, pid):
            for name, duration in MODELS.items():
                result = run_loadtest(url, name, LEVELS, duration_s=duration, server_pid=pid)
                models[name][label] = result["results"]
    Path("reports").mkdir(exist_ok=True)
    Path("reports/loadtest.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"Measured on {report['machine']}, {report['date']}; client and server share the cores.\n")
    print("| Model | Server | Concurrency | Req/s | p50 ms | p99 ms | Server CPU cores | Server CPU ms/req |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, entry in models.items():
        for label in servers:
            for r in entry[label]:  # type: ignore[attr-defined]
                print(f"| {name} | {label} | {r['concurrency']} | {r['throughput']:.1f} | {r['p50_ms']:.2f} | "
                      f"{r['p99_ms']:.2f} | {r['server_cpu_cores']:.2f} | {r['server_cpu_ms_per_request']:.2f} |")
    for name, entry in models.items():
        off, on = entry["trtpipe serve, batching off"], entry["trtpipe serve, batching on"]
        print(f"\n{name}: in-process p50 {entry['in_process_p50_ms']:.2f} ms; HTTP adds "  # type: ignore[index]
              f"{off[0]['p50_ms'] - entry['in_process_p50_ms']:.2f} ms at concurrency 1 (no batching); dynamic "
              f"batching at concurrency 32 gives {on[-1]['throughput'] / off[-1]['throughput']:.2f}x the throughput")
        triton = entry.get("Triton 2.51 Python backend, batching on")
        if triton:
            for mine, theirs in zip(on, triton, strict=True):  # type: ignore[call-overload]
                print(f"{name} concurrency {mine['concurrency']}: trtpipe serve {mine['throughput']:.1f} req/s vs "
                      f"Triton {theirs['throughput']:.1f} req/s ({mine['throughput'] / theirs['throughput']:.2f}x)")


if __name__ == "__main__":
    main()
