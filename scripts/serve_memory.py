"""What a real `trtpipe serve` (HTTP and gRPC) keeps after large requests, and how fast its health checks answer
while large requests are decoded: the figures of docs/results/serving-memory.md.

- ``rss``: a fresh server, then six rounds of three 60 MiB requests at once, each refused once decoded (one value
  short of its shape: INVALID_ARGUMENT, HTTP 400), over HTTP (binary data) and, on another fresh server, over gRPC
  (raw contents); the server's RSS after each round and after 10 s idle.
- ``health``: ``--runs`` runs of ``--seconds`` each, on a fresh server: four client processes send 60 MiB requests
  back to back (gRPC raw contents, gRPC fp32_contents, HTTP binary, HTTP JSON of 57 MB), ``--hogs`` processes spin
  on the CPU, and this process probes /v2/health/live and /v2/health/ready every 50 ms; each run's slowest probe.

The repository is scripts/soak.py's resnetish model (free height and width), built in a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.soak import resnetish
from trtpipe.hardware import cpu_model, usable_cores
from trtpipe.tools.loopback import free_port, resident_mib, wait_until_ready

SHAPE = [1, 3, 2048, 2560]  # 60 MiB of float32
COUNT = 3 * 2048 * 2560
UNLIMITED = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]


@contextmanager
def serving(repository: Path) -> Iterator[tuple[subprocess.Popen[bytes], str, str]]:
    port, grpc_port = free_port(), free_port()
    process = subprocess.Popen([sys.executable, "-m", "trtpipe.cli", "serve", str(repository), "--port", str(port),
                                "--grpc-port", str(grpc_port), "--drain-s", "0"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(base, "/v2/health/ready")
        yield process, base, f"127.0.0.1:{grpc_port}"
    finally:
        process.terminate()
        process.wait(60)


def grpc_message(count: int, typed: bool = False) -> bytes:
    from tritonclient.grpc import service_pb2

    message = service_pb2.ModelInferRequest(model_name="resnetish")
    tensor = message.inputs.add(name="image", datatype="FP32", shape=SHAPE)
    if typed:
        tensor.contents.fp32_contents.extend(np.zeros(count, np.float32))
    else:
        message.raw_input_contents.append(bytes(4 * count))
    return message.SerializeToString()


def http_binary(count: int) -> tuple[bytes, dict[str, str]]:
    header = json.dumps({"inputs": [{"name": "image", "shape": SHAPE, "datatype": "FP32",
                                     "parameters": {"binary_data_size": 4 * count}}]}).encode()
    return header + bytes(4 * count), {"Inference-Header-Content-Length": str(len(header))}


def http_json() -> tuple[bytes, dict[str, str]]:
    """1x3x1400x1400 values of text (57 MB), one too many: refused once parsed."""
    side = 1400
    body = (b'{"inputs": [{"name": "image", "shape": [1, 3, 1400, 1400], "datatype": "FP32", "data": ['
            + b"0.5123," * (3 * side * side) + b"0.5]}]}")
    return body, {"Content-Type": "application/json"}


def grpc_sender(url: str, message: bytes) -> Callable[[], str]:
    import grpc

    channel = grpc.insecure_channel(url, options=UNLIMITED)
    call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")

    def send() -> str:
        try:
            call(message, timeout=120)
            return "OK"
        except grpc.RpcError as error:
            return error.code().name

    return send


def http_sender(base: str, body: bytes, headers: dict[str, str]) -> Callable[[], str]:
    def send() -> str:
        return str(httpx.post(f"{base}/v2/models/resnetish/infer", content=body, headers=headers,
                              timeout=120).status_code)

    return send


def measure_rss(repository: Path) -> None:
    for transport in ("http", "grpc"):
        with serving(repository) as (process, base, url):
            time.sleep(1)
            start = resident_mib(process.pid)
            send = (grpc_sender(url, grpc_message(COUNT - 1)) if transport == "grpc"
                    else http_sender(base, *http_binary(COUNT - 1)))
            rounds, answers = [], set()
            for _ in range(6):
                with ThreadPoolExecutor(3) as pool:
                    answers |= set(pool.map(lambda _, send=send: send(), range(3)))
                time.sleep(0.5)
                rounds.append(round(resident_mib(process.pid)))
            time.sleep(10)
            print(f"{transport}: RSS {start:.0f} MiB at rest, after each round {rounds}, "
                  f"{resident_mib(process.pid):.0f} MiB after 10 s idle; answers {sorted(answers)}", flush=True)


def _load(kind: str, base: str, url: str) -> None:
    send = {"grpc raw": lambda: grpc_sender(url, grpc_message(COUNT - 1)),
            "grpc typed": lambda: grpc_sender(url, grpc_message(COUNT - 1, typed=True)),
            "http binary": lambda: http_sender(base, *http_binary(COUNT - 1)),
            "http json": lambda: http_sender(base, *http_json())}[kind]()
    while True:
        send()


def measure_health(repository: Path, runs: int, seconds: float, hogs: int) -> None:
    context = multiprocessing.get_context("spawn")
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
    worst = []
    try:
        for run in range(runs):
            with serving(repository) as (_, base, url):
                loaders = [context.Process(target=_load, args=(kind, base, url), daemon=True)
                           for kind in ("grpc raw", "grpc typed", "http binary", "http json")]
                for loader in loaders:
                    loader.start()
                time.sleep(2)  # the loaders' first requests are in flight
                latencies = []
                with httpx.Client() as client:
                    end = time.monotonic() + seconds
                    while time.monotonic() < end:
                        for path in ("/v2/health/live", "/v2/health/ready"):
                            started = time.perf_counter()
                            assert client.get(base + path, timeout=30).status_code == 200
                            latencies.append(time.perf_counter() - started)
                        time.sleep(0.05)
                for loader in loaders:
                    loader.kill()
                    loader.join()
            worst.append(max(latencies))
            print(f"run {run + 1}: {len(latencies)} probes, slowest {max(latencies) * 1000:.0f} ms, p99 "
                  f"{np.percentile(latencies, 99) * 1000:.0f} ms", flush=True)
    finally:
        for spinner in spinners:
            spinner.kill()
    print(f"runs whose slowest probe took under 0.5 s: {sum(w < 0.5 for w in worst)} of {len(worst)}; slowest "
          f"{max(worst) * 1000:.0f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("rss", "health"))
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--hogs", type=int, default=1, help="Processes spinning on the CPU meanwhile.")
    settings = parser.parse_args()
    print(f"{cpu_model()}, {usable_cores()} cores, {time.strftime('%Y-%m-%d %H:%M')}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        repository = Path(folder) / "repository"
        resnetish(repository)
        if settings.what == "rss":
            measure_rss(repository)
        else:
            measure_health(repository, settings.runs, settings.seconds, settings.hogs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
