"""A port is the server's alone: `trtpipe serve` on an HTTP or gRPC port another server listens on stops with one
line naming the port and a non-zero exit, before it says "Serving" (gRPC would otherwise share the port through
SO_REUSEPORT, the kernel handing each new connection to either server). "Serving" means what it says: every
listener answers the moment it is printed. Real `trtpipe serve` processes, real HTTP and gRPC clients."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from tests.builders import lookup
from trtpipe.tools.loopback import free_port

pytest.importorskip("tritonclient.grpc", reason="the gRPC service needs trtpipe[triton]")


def _serve(repository: Path, port: int, grpc_port: int) -> list[str]:
    return [sys.executable, "-m", "trtpipe.cli", "serve", str(repository), "--port", str(port), "--grpc-port",
            str(grpc_port), "--drain-s", "0"]


def _ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def _lines(process: subprocess.Popen[str]) -> queue.Queue[str]:
    """The process's output, a line at a time, read by a thread (a pipe read blocks)."""
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def test_taken_ports_are_refused_before_serving_and_serving_means_listening(tmp_path: Path) -> None:
    import tritonclient.grpc as triton_grpc

    lookup(tmp_path)
    port, grpc_port, other, other_grpc = _ports(4)
    holder = subprocess.Popen(_serve(tmp_path, port, grpc_port), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    try:
        lines = _lines(holder)
        seen = []
        while not any("Serving" in line for line in seen):
            seen.append(lines.get(timeout=120))
        # Printed only now that both listeners are bound: the first attempt of each client is answered.
        assert httpx.get(f"http://127.0.0.1:{port}/v2/health/live", timeout=10).status_code == 200
        assert triton_grpc.InferenceServerClient(f"127.0.0.1:{grpc_port}").is_server_live(client_timeout=10)

        for http_port, rpc_port, taken, flag in ((port, other_grpc, port, "--port"),
                                                 (other, grpc_port, grpc_port, "--grpc-port")):
            second = subprocess.run(_serve(tmp_path, http_port, rpc_port), capture_output=True, text=True,
                                    timeout=120)  # a second server that starts would run until killed
            output = second.stdout + second.stderr
            assert second.returncode != 0, output
            assert "Serving" not in output and "Traceback" not in output, output
            naming = [line for line in output.splitlines() if str(taken) in line]
            assert len(naming) == 1 and naming[0].startswith("Error:") and flag in naming[0], output

        # The first server still has both ports to itself, and serves.
        body = {"inputs": [{"name": "input", "shape": [1, 1], "datatype": "FP32", "data": [3]}]}
        answer = httpx.post(f"http://127.0.0.1:{port}/v2/models/lookup/infer", json=body, timeout=10)
        assert answer.status_code == 200 and answer.json()["outputs"][0]["data"] == [3.0]
        assert triton_grpc.InferenceServerClient(f"127.0.0.1:{grpc_port}").is_model_ready("lookup")
    finally:
        holder.terminate()
        holder.wait(timeout=60)
    assert holder.returncode == 0
