"""Servers started as separate processes on loopback ports, for `make loadtest`, the measurement scripts and the
server tests: a free port to give one, waiting until it answers, and the memory it and its children hold.

The standard library's urllib, not an HTTP client package: these run wherever trtpipe is installed.
"""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from pathlib import Path


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


def child_pids(pid: int) -> list[int]:
    """The pids of ``pid``'s child processes (a server's gRPC listener), whichever of its threads started them
    (Linux's /proc)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:  # the thread has ended
            continue
    return found


def status_mib(pid: int, field: str) -> float:
    """A size field of /proc/PID/status (``VmRSS``, ``VmSize``...) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise ValueError(f"no {field} in /proc/{pid}/status")


def resident_mib(pid: int) -> float:
    """The resident memory of process ``pid`` and of its children together, in MiB."""
    return sum(status_mib(process, "VmRSS") for process in [pid, *child_pids(pid)])
