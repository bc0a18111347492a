"""HTTP and gRPC share one InferenceService: the same admission (readiness, --max-queue, --max-body-mb,
--max-connections), parsing off the event loop, and the same Prometheus series, latency included.

Each test sends the same request by both transports to a real server (uvicorn and the aio gRPC server on one
loop, real ONNX Runtime sessions) and checks that they are answered and counted alike.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.builders import lookup
from tests.optional import optional, optional_error
from tests.serve.conftest import RunningServer

triton_grpc = optional("tritonclient.grpc")
InferenceServerException = optional_error("tritonclient.utils", "InferenceServerException")


def _sample(server: RunningServer, name: str, **labels: str) -> float:
    """A metric's current value in the server's own registry (0 before its first count)."""
    return server.app.state.metrics.registry.get_sample_value(name, labels) or 0.0


def _http_infer(server: RunningServer, model: str, data: np.ndarray) -> httpx.Response:
    tensor = {"name": "input", "shape": list(data.shape), "datatype": "FP32", "data": data.ravel().tolist()}
    return httpx.post(f"http://{server.url}/v2/models/{model}/infer", json={"inputs": [tensor]}, timeout=30)


def _grpc_infer(server: RunningServer, model: str, data: np.ndarray) -> Any:
    tensor = triton_grpc.InferInput("input", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    return triton_grpc.InferenceServerClient(server.grpc_url).infer(model, [tensor])


def _grpc_refusal(server: RunningServer, model: str, data: np.ndarray) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as caught:
        _grpc_infer(server, model, data)
    return caught.value


IMAGE = np.zeros((1, 1, 32, 32), np.float32)


def test_grpc_requests_are_counted_and_timed_like_http(server: RunningServer) -> None:
    series = {"requests": "trtpipe_inference_requests_total", "latency": "trtpipe_inference_latency_seconds_count"}
    before = {key: _sample(server, name, model="digits") for key, name in series.items()}
    assert _http_infer(server, "digits", IMAGE).status_code == 200
    after_http = {key: _sample(server, name, model="digits") for key, name in series.items()}
    _grpc_infer(server, "digits", IMAGE)
    after_grpc = {key: _sample(server, name, model="digits") for key, name in series.items()}
    assert {key: after_http[key] - before[key] for key in series} == {"requests": 1, "latency": 1}
    assert {key: after_grpc[key] - after_http[key] for key in series} == {"requests": 1, "latency": 1}
    exposed = httpx.get(f"http://{server.url}/metrics").text
    assert f'trtpipe_inference_latency_seconds_count{{model="digits"}} {after_grpc["latency"]}' in exposed


class SlowParse:
    """Stands in for the service's parser on a long body: holds each call until released (events, no clock)."""

    def __init__(self, parse: Any) -> None:
        self.parse = parse
        self.parsing, self.release, self.parsed = threading.Event(), threading.Event(), threading.Event()
        self.armed = threading.Event()  # cleared: calls pass straight through (a server's warm-up decode at start)
        self.armed.set()

    def __call__(self, *args: Any) -> Any:
        if not self.armed.is_set():
            return self.parse(*args)
        self.parsing.set()
        self.release.wait(30)
        self.parsed.set()
        return self.parse(*args)


@pytest.fixture()
def slow_parse(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlowParse]:
    """Holds the gRPC path's decoding of a request (the tensors out of the message) until released."""
    import trtpipe.serve.grpc.service as grpc_module

    held = SlowParse(grpc_module.infer_request_from_message)
    monkeypatch.setattr(grpc_module, "infer_request_from_message", held)
    yield held
    held.release.set()


def _in_background(call: Any) -> tuple[threading.Thread, list[object]]:
    results: list[object] = []

    def run() -> None:
        try:
            results.append(call())
        except Exception as error:
            results.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, results


def test_grpc_parses_off_the_event_loop(server: RunningServer, slow_parse: SlowParse) -> None:
    """While a gRPC request's body is being parsed, both transports still answer: as for HTTP, the parse runs in a
    worker thread."""
    thread, results = _in_background(lambda: _grpc_infer(server, "digits", IMAGE).as_numpy("output").shape)
    assert slow_parse.parsing.wait(30)
    assert httpx.get(f"http://{server.url}/v2/health/live", timeout=10).status_code == 200
    assert triton_grpc.InferenceServerClient(server.grpc_url).is_server_live()
    assert not slow_parse.parsed.is_set()  # answered while the parse was still running
    slow_parse.release.set()
    thread.join(30)
    assert results == [(1, 10)]


@pytest.fixture(scope="module")
def limited(repository: Path) -> Iterator[RunningServer]:
    """No batching, so --max-queue counts requests in flight."""
    running = RunningServer(repository, batching=False, max_queue=2)
    yield running
    running.stop()


def test_grpc_applies_max_queue_as_http_does(limited: RunningServer) -> None:
    entry = limited.models["digits"]["1"]
    failures = _sample(limited, "trtpipe_inference_failures_total", model="digits", code="503")
    entry.in_flight = 2  # two requests already admitted and not finished
    try:
        refused = _http_infer(limited, "digits", IMAGE)
        error = _grpc_refusal(limited, "digits", IMAGE)
    finally:
        entry.in_flight = 0
    assert refused.status_code == 503 and "--max-queue 2" in refused.json()["error"]
    assert error.status() == "StatusCode.UNAVAILABLE" and "--max-queue 2" in error.message()
    assert _sample(limited, "trtpipe_inference_failures_total", model="digits", code="503") == failures + 2
    _grpc_infer(limited, "digits", IMAGE)  # admitted again once there is room


def test_shutting_down_refuses_both_transports(limited: RunningServer) -> None:
    service = limited.app.state.service
    client = triton_grpc.InferenceServerClient(limited.grpc_url)
    service.shutting_down = True
    try:
        refused = _http_infer(limited, "digits", IMAGE)
        error = _grpc_refusal(limited, "digits", IMAGE)
        http_ready = httpx.get(f"http://{limited.url}/v2/models/digits/ready").status_code
        grpc_ready = client.is_model_ready("digits")
    finally:
        service.shutting_down = False
    assert refused.status_code == 503 and "shutting down" in refused.json()["error"]
    assert error.status() == "StatusCode.UNAVAILABLE" and "shutting down" in error.message()
    assert http_ready == 400 and not grpc_ready
    assert client.is_model_ready("digits")


def test_grpc_calls_are_bounded_by_max_connections(repository: Path, slow_parse: SlowParse) -> None:
    """Past --max-connections calls at once, gRPC refuses new ones (RESOURCE_EXHAUSTED) as HTTP does (503)."""
    slow_parse.armed.clear()  # the server decodes a small request in each thread before it is ready
    running = RunningServer(repository, max_connections=1)
    slow_parse.armed.set()
    try:
        client = triton_grpc.InferenceServerClient(running.grpc_url)
        thread, results = _in_background(lambda: _grpc_infer(running, "digits", IMAGE).as_numpy("output").shape)
        assert slow_parse.parsing.wait(30)  # the one call allowed is now in flight
        with pytest.raises(InferenceServerException) as caught:
            client.is_server_live()
        assert caught.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
        slow_parse.release.set()
        thread.join(30)
        assert results == [(1, 10)]
    finally:
        running.stop()


@pytest.fixture(scope="module")
def failing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A model that loads and fails at run time: ONNX Runtime's Gather refuses an index past its table of 10."""
    repository = tmp_path_factory.mktemp("failing")
    lookup(repository)
    running = RunningServer(repository)
    yield running
    running.stop()


def test_a_model_refusing_the_data_is_reported_and_counted_alike(failing: RunningServer) -> None:
    """ONNX Runtime's INVALID_ARGUMENT is the request's fault, not the server's: 400 and gRPC's INVALID_ARGUMENT."""
    good, bad = np.array([[3.0]], np.float32), np.array([[100.0]], np.float32)
    failures = _sample(failing, "trtpipe_inference_failures_total", model="lookup", code="400")
    answer = _http_infer(failing, "lookup", bad)
    refused = "The model refused this request's data: Gather node: indices element out of data bounds"
    assert answer.status_code == 400 and answer.json()["error"].startswith(refused)
    error = _grpc_refusal(failing, "lookup", bad)
    assert error.status() == "StatusCode.INVALID_ARGUMENT" and error.message().startswith(refused)
    assert _sample(failing, "trtpipe_inference_failures_total", model="lookup", code="400") == failures + 2
    np.testing.assert_array_equal(_grpc_infer(failing, "lookup", good).as_numpy("output"), [[3.0]])  # still serving
