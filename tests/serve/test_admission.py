"""Admission and error bodies on the ASGI app itself (no socket): --max-queue binds with batching off, unknown
routes and methods answer JSON, and a not-ready model's ready endpoint answers 400."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from starlette.testclient import TestClient

from trtpipe.serve.options import ServeOptions
from trtpipe.serve.server import build_app


def _body() -> dict[str, object]:
    return {"inputs": [{"name": "input", "shape": [1, 1, 32, 32], "datatype": "FP32",
                        "data": np.zeros(1024).tolist()}]}


def test_max_queue_binds_without_batching(repository: Path) -> None:
    app, models = build_app(repository, ServeOptions(batching=False, max_queue=2))
    entry = models["digits"]["1"]
    assert entry.batcher is None
    with TestClient(app) as client:
        assert client.post("/v2/models/digits/infer", json=_body()).status_code == 200
        entry.in_flight = 2  # two requests already admitted and not finished
        refused = client.post("/v2/models/digits/infer", json=_body())
        assert refused.status_code == 503 and "--max-queue 2" in refused.json()["error"]
        entry.in_flight = 1
        assert client.post("/v2/models/digits/infer", json=_body()).status_code == 200
        assert entry.in_flight == 1  # released after the request


def test_unknown_routes_and_methods_answer_json(repository: Path) -> None:
    app, _ = build_app(repository, ServeOptions(batching=False))
    with TestClient(app) as client:
        missing = client.get("/v3/nothing")
        assert missing.status_code == 404 and "error" in missing.json()
        wrong = client.get("/v2/models/digits/infer")
        assert wrong.status_code == 405 and "error" in wrong.json()
        assert client.get("/v2/models/broken/ready").status_code == 400
        assert client.get("/v2/models/digits/ready").status_code == 200


def test_error_bodies_name_no_server_paths(repository: Path) -> None:
    _, models = build_app(repository, ServeOptions(batching=False))
    error = models["broken"]["1"].error or ""
    assert "broken/1/model.onnx" in error and str(repository) not in error and not error.count("/tmp")
    from trtpipe.serve.repository.loading import public_message

    leaked = RuntimeError("[ONNXRuntimeError] : 1 : FAIL : /onnxruntime_src/onnxruntime/core/graph/model.cc:180 "
                          "Load model from /srv/models/x/1/model.onnx failed")
    text = public_message(leaked, Path("/srv/models/x/1/model.onnx"), "x/1/model.onnx")
    assert "onnxruntime_src" not in text and "/srv" not in text and "x/1/model.onnx" in text


def test_parsing_runs_off_the_event_loop(repository: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While one request's body is being parsed, the server still answers: parsing happens in a worker thread."""
    import threading

    import trtpipe.serve.service as service_module
    from trtpipe.serve.json_body import parse_infer_request

    parsing, release, parsed = threading.Event(), threading.Event(), threading.Event()

    def slow_parse(*args: object) -> object:  # stands for a 64 MB body: parsing takes long
        parsing.set()
        release.wait(10)
        parsed.set()
        return parse_infer_request(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(service_module, "parse_infer_request", slow_parse)
    app, _ = build_app(repository, ServeOptions(batching=False))
    with TestClient(app) as client:
        results: list[int] = []
        sender = threading.Thread(target=lambda: results.append(
            client.post("/v2/models/digits/infer", json=_body()).status_code))
        sender.start()
        assert parsing.wait(30)
        assert client.get("/v2/health/live").status_code == 200
        assert not parsed.is_set()  # answered while the parse was still running
        release.set()
        sender.join(30)
    assert results == [200]


def test_a_client_that_leaves_mid_body_is_not_a_server_failure(repository: Path) -> None:
    import asyncio

    app, _ = build_app(repository, ServeOptions(batching=False))
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        if not sent:
            sent.append({})
            return {"type": "http.request", "body": b'{"inputs": [', "more_body": True}
        return {"type": "http.disconnect"}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v2/models/digits/infer", "raw_path": b"", "query_string": b"",
             "headers": [(b"content-type", b"application/json")], "http_version": "1.1", "scheme": "http",
             "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 1234), "root_path": ""}
    asyncio.run(app(scope, receive, send))
    metrics = app.state.metrics
    samples = {s.name: s.value for m in metrics.registry.collect() for s in m.samples if s.labels.get("model")}
    assert samples.get("trtpipe_client_disconnects_total") == 1.0
    assert not any(name.startswith("trtpipe_inference_failures") and value for name, value in samples.items())
