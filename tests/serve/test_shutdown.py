"""SIGTERM: the listener closes, requests in flight finish, the process exits 0."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from trtpipe.serve.loopback import free_port, wait_until_ready


def test_sigterm_finishes_in_flight_requests_and_exits_zero(repository: Path) -> None:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "trtpipe.cli", "serve", str(repository), "--port", str(port),
                                "--max-queue-delay-ms", "1500"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
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
