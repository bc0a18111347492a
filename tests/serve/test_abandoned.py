"""A request whose client has gone is taken off the batching queue before it runs, and counted.

A real server (uvicorn, a real ONNX Runtime session) whose batcher is held inside the model on a first request
(events, no clock), so that a second request waits in the queue while its client disconnects.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable

import httpx

from tests.serve.conftest import HeldLookup


def _body(value: float) -> bytes:
    return json.dumps({"inputs": [{"name": "input", "shape": [1, 1], "datatype": "FP32", "data": [value]}]}).encode()


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 20
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.01)


def test_a_request_whose_client_left_is_dropped_from_the_queue_unrun(held_lookup: HeldLookup) -> None:
    server, batcher, sample = held_lookup.server, held_lookup.batcher, held_lookup.sample
    url = f"http://{server.url}/v2/models/lookup/infer"
    first: list[httpx.Response] = []
    sender = threading.Thread(target=lambda: first.append(httpx.post(url, content=_body(1.0), timeout=30)))
    sender.start()
    assert held_lookup.inside.wait(30)  # the worker is inside the model with the first request

    client = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    body = _body(2.0)
    client.sendall(b"POST /v2/models/lookup/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    _until(lambda: batcher.depth == 1, "the second request waits in the queue")
    client.close()  # its client gives up
    _until(lambda: sample("trtpipe_client_disconnects_total") == 1, "the disconnect is noticed")
    assert sample("trtpipe_dropped_requests_total") == 1

    held_lookup.release.set()
    sender.join(30)
    assert first[0].status_code == 200
    third = httpx.post(url, content=_body(3.0), timeout=30)  # queued after the abandoned one
    assert third.status_code == 200 and third.json()["outputs"][0]["data"] == [3.0]
    assert held_lookup.ran == [1.0, 3.0]  # the abandoned request never reached the model
    assert sample("trtpipe_batch_size_sum") == 2
    registry = held_lookup.registry
    failures = [s for m in registry.collect() for s in m.samples if s.name == "trtpipe_inference_failures_total"]
    assert not any(s.value for s in failures)  # leaving is not a failure of the server
