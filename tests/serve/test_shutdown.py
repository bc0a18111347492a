"""SIGTERM: readiness turns false while requests are still served for --drain-s, then the listener closes,
requests in flight finish, and the process exits 0."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from tests.builders import lookup
from trtpipe.tools.loopback import free_port, wait_until_ready


def test_sigterm_finishes_in_flight_requests_and_exits_zero(repository: Path) -> None:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "trtpipe.cli", "serve", str(repository), "--port", str(port),
                                "--max-queue-delay-ms", "1500", "--drain-s", "0"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(base, "/v2/models/digits/ready")  # the repository's broken model keeps health 503
        body = {"inputs": [{"name": "input", "shape": [1, 1, 32, 32], "datatype": "FP32",
                            "data": np.zeros(1024).tolist()}]}
        statuses: list[object] = []

        def send() -> None:
            try:
                statuses.append(httpx.post(f"{base}/v2/models/digits/infer", json=body, timeout=30).status_code)
            except httpx.HTTPError as error:
                statuses.append(repr(error))

        worker = threading.Thread(target=send)
        worker.start()
        counted = 'trtpipe_inference_requests_total{model="digits"} 1.0'
        while counted not in httpx.get(f"{base}/metrics", timeout=5).text:
            time.sleep(0.01)
        process.send_signal(signal.SIGTERM)  # the request now waits in the 1.5 s batching window
        worker.join(30)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert statuses == [200]
    assert process.returncode == 0, output
    assert "Server stopped cleanly" in output


def test_sigterm_turns_readiness_false_while_requests_are_still_served(tmp_path: Path) -> None:
    """During the drain, probes get an answer (ready: false, HTTP 503 and gRPC alike), not a refused connection,
    and a request a load balancer still sends is served; then the process exits 0."""
    import tritonclient.grpc as triton_grpc

    lookup(tmp_path)
    port, grpc_port = free_port(), free_port()
    process = subprocess.Popen([sys.executable, "-m", "trtpipe.cli", "serve", str(tmp_path), "--port", str(port),
                                "--grpc-port", str(grpc_port), "--drain-s", "2"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    grpc_client = triton_grpc.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    try:
        wait_until_ready(base, "/v2/health/ready")
        assert grpc_client.is_server_ready()
        process.send_signal(signal.SIGTERM)
        ready = httpx.get(f"{base}/v2/health/ready", timeout=5)
        while ready.status_code == 200:  # until the signal has been handled
            ready = httpx.get(f"{base}/v2/health/ready", timeout=5)
        assert ready.status_code == 503 and ready.json() == {"ready": False, "reason": "The server is shutting down."}
        assert not grpc_client.is_server_ready()
        assert httpx.get(f"{base}/v2/health/live", timeout=5).status_code == 200
        body = {"inputs": [{"name": "input", "shape": [1, 1], "datatype": "FP32", "data": [4.0]}]}
        served = httpx.post(f"{base}/v2/models/lookup/infer", json=body, timeout=10)
        assert served.status_code == 200 and served.json()["outputs"][0]["data"] == [4.0]
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output
    assert "not ready; serving 2 s more before closing" in output and "Server stopped cleanly" in output
