"""Servers started as separate processes on loopback ports, for `make loadtest` and the server tests: a free port
to give one, and waiting until it answers.

The standard library's urllib, not an HTTP client package: these run wherever trtpipe is installed.
"""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def answers_ok(url: str, timeout_s: float = 1.0) -> bool:
    """Whether a GET of ``url`` answers 200 now; False while the server is not up or answers another status."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):  # refused, reset, timed out, or an HTTP error status
        return False


def wait_until_ready(base: str, path: str, seconds: float = 60) -> None:
    """Poll a server started as a separate process until ``base + path`` answers 200 (RuntimeError after
    ``seconds``): e.g. ``/v2/health/ready``, or one model's ready path where another model may be broken."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if answers_ok(f"{base}{path}"):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{base} did not answer {path} within {seconds} s")
