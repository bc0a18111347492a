"""Slow clients are cut off: headers that never finish, bodies that trickle. A normal request is served
meanwhile. Runs `trtpipe serve` as a real process on a loopback port."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np

from trtpipe.tools.loopback import free_port, wait_until_ready


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.settimeout(10)
    return sock


def _closed_within(sock: socket.socket, seconds: float) -> tuple[bool, bytes]:
    """Whether the server closed the connection within ``seconds``, and what it sent before."""
    sock.settimeout(seconds)
    received = b""
    try:
        while chunk := sock.recv(4096):
            received += chunk
        return True, received
    except TimeoutError:
        return False, received
    except ConnectionResetError:
        return True, received


def test_slow_headers_and_bodies_are_cut_off(repository: Path) -> None:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "trtpipe.cli", "serve", str(repository), "--port", str(port),
                                "--header-timeout-s", "1", "--body-timeout-s", "1", "--no-batching"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(base, "/v2/health/live")
        silent = _connect(port)  # sends nothing at all
        slow_headers = _connect(port)
        slow_headers.sendall(b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\n")  # never finishes
        trickle = _connect(port)
        trickle.sendall(b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 100000\r\n\r\n{\"inputs\": ")  # then nothing more
        body = {"inputs": [{"name": "input", "shape": [1, 1, 32, 32], "datatype": "FP32",
                            "data": np.zeros(1024).tolist()}]}
        assert httpx.post(f"{base}/v2/models/digits/infer", json=body, timeout=10).status_code == 200
        assert _closed_within(silent, 5)[0]
        assert _closed_within(slow_headers, 5)[0]
        _, answer = _closed_within(trickle, 5)
        assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive within" in answer
        assert httpx.get(f"{base}/v2/health/live", timeout=5).status_code == 200  # still serving
    finally:
        process.terminate()
        process.wait(timeout=30)
