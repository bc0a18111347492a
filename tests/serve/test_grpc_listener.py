"""gRPC's listener runs in a process of its own: whatever it does (gRPC's binding copies each message while it holds
its GIL) cannot hold up HTTP's health checks, it is restarted if it dies, and a call its client gives up is dropped
by the server as an HTTP request whose client left is."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.optional import optional, optional_error
from tests.serve.conftest import HeldLookup, RunningServer

triton_grpc = optional("tritonclient.grpc")
InferenceServerException = optional_error("tritonclient.utils", "InferenceServerException")

pytestmark = pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="finds the listener through /proc")


def listener_pid(server: RunningServer) -> int:
    """The gRPC listener process serving ``server``'s gRPC port (its command line carries the port)."""
    mark = f'"port": {server.grpc_port},'.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"trtpipe.serve.grpc.listener" in command and mark in command:
            return int(entry.name)
    raise AssertionError(f"no gRPC listener process holds port {server.grpc_port}")


def _until(condition: Callable[[], bool], what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.05)


def _live_over_grpc(server: RunningServer) -> bool:
    try:
        return bool(triton_grpc.InferenceServerClient(server.grpc_url).is_server_live(client_timeout=2))
    except InferenceServerException:
        return False


def _http_infer(server: RunningServer) -> httpx.Response:
    body = {"inputs": [{"name": "input", "shape": [1, 1, 32, 32], "datatype": "FP32", "data": [0.0] * 1024}]}
    return httpx.post(f"http://{server.url}/v2/models/digits/infer", json=body, timeout=10)


def test_http_answers_while_the_grpc_listener_is_frozen(repository: Path) -> None:
    """The listener stopped dead (as if gRPC held its GIL for ever): HTTP's live, model ready and inference answer, and
    gRPC answers again once the listener runs."""
    server = RunningServer(repository, batching=False)
    pid = listener_pid(server)
    assert pid != os.getpid()
    try:
        os.kill(pid, signal.SIGSTOP)
        assert not _live_over_grpc(server)  # the listener is frozen: gRPC is not answered meanwhile
        assert httpx.get(f"http://{server.url}/v2/health/live", timeout=10).status_code == 200
        assert httpx.get(f"http://{server.url}/v2/models/digits/ready", timeout=10).status_code == 200
        assert _http_infer(server).status_code == 200
    finally:
        os.kill(pid, signal.SIGCONT)
    try:
        _until(lambda: _live_over_grpc(server), "gRPC answers once the listener runs again")
    finally:
        server.stop()


def test_a_listener_that_dies_is_restarted(repository: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Killed (as gRPC's core kills it when one of its own allocations fails), the listener is started again on the
    same port with one warning line; HTTP serves throughout."""
    server = RunningServer(repository, batching=False)
    try:
        first = listener_pid(server)
        os.kill(first, signal.SIGKILL)
        assert httpx.get(f"http://{server.url}/v2/health/live", timeout=10).status_code == 200
        _until(lambda: _live_over_grpc(server), "gRPC answers again")
        assert listener_pid(server) != first
        tensor = triton_grpc.InferInput("input", [1, 1, 32, 32], "FP32")
        tensor.set_data_from_numpy(np.zeros((1, 1, 32, 32), np.float32))
        result = triton_grpc.InferenceServerClient(server.grpc_url).infer("digits", [tensor])
        assert result.as_numpy("output").shape == (1, 10)
        assert _http_infer(server).status_code == 200
    finally:
        server.stop()
    assert capfd.readouterr().err.count("The gRPC listener process exited") == 1


def test_a_grpc_call_whose_client_gave_up_is_dropped_from_the_queue_unrun(held_lookup: HeldLookup) -> None:
    """A gRPC call waiting in a model's queue when its deadline passes: the listener closes the forwarded call, and
    the server takes the request off the queue unrun and counts a disconnect, as for HTTP (test_abandoned.py)."""
    server, batcher, sample = held_lookup.server, held_lookup.batcher, held_lookup.sample

    def infer(value: float, timeout: float | None = None) -> object:
        tensor = triton_grpc.InferInput("input", [1, 1], "FP32")
        tensor.set_data_from_numpy(np.array([[value]], np.float32))
        client = triton_grpc.InferenceServerClient(server.grpc_url)
        try:
            return client.infer("lookup", [tensor], client_timeout=timeout).as_numpy("output")
        except InferenceServerException as error:
            return error.status()

    first: list[object] = []
    sender = threading.Thread(target=lambda: first.append(infer(1.0)))
    sender.start()
    assert held_lookup.inside.wait(30)  # the worker is inside the model with the first request
    second: list[object] = []
    giving_up = threading.Thread(target=lambda: second.append(infer(2.0, timeout=3.0)))
    giving_up.start()
    _until(lambda: batcher.depth == 1, "the second request waits in the queue")
    giving_up.join(30)
    assert second == ["StatusCode.DEADLINE_EXCEEDED"]
    _until(lambda: sample("trtpipe_client_disconnects_total") == 1, "the server hears that the client left")
    assert sample("trtpipe_dropped_requests_total") == 1
    held_lookup.release.set()
    sender.join(30)
    third = infer(3.0)
    assert isinstance(third, np.ndarray) and third.tolist() == [[3.0]]
    assert held_lookup.ran == [1.0, 3.0]  # the abandoned request never reached the model
