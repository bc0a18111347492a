"""Property-based fuzzing of the HTTP server with hypothesis, bounded in examples and time: whatever a client
sends, the answer is one of the status codes the OpenAPI description documents for that route (never an
undocumented 5xx), error bodies are JSON naming the problem, and the server is live afterwards."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from trtpipe.serve.http.openapi import openapi
from trtpipe.serve.options import ServeOptions
from trtpipe.serve.server import build_app

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=16,
)
HEADER_TEXT = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=5)
VALID: dict[str, Any] = {"id": "f", "inputs": [{"name": "input", "shape": [1, 1, 32, 32], "datatype": "FP32",
                                                "data": [0.0] * 1024}]}
FIELDS = (("id",), ("parameters",), ("inputs",), ("outputs",), ("inputs", 0), ("inputs", 0, "name"),
          ("inputs", 0, "shape"), ("inputs", 0, "datatype"), ("inputs", 0, "data"), ("inputs", 0, "parameters"))


def _mutated(path: tuple[object, ...], value: object) -> dict[str, Any]:
    body = json.loads(json.dumps(VALID))
    target: Any = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return body


BODIES = st.one_of(
    st.builds(_mutated, st.sampled_from(FIELDS), JSON).map(lambda b: (json.dumps(b).encode(), None)),
    JSON.map(lambda b: (json.dumps(b).encode(), None)),
    st.tuples(st.binary(max_size=300), st.one_of(st.none(), st.integers(-5, 400).map(str), HEADER_TEXT)),
)
ROUTES = st.tuples(st.sampled_from(["digits", "broken", "nope", "digits_int8_trt", "", "..", "%00"]),
                   st.sampled_from([None, "1", "2", "x", "-1"]))


@pytest.fixture(scope="module")
def client(repository: Path):  # type: ignore[no-untyped-def]
    app, _ = build_app(repository, ServeOptions(batching=False, max_body_mb=1.0, timeout_ms=10_000))
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def _documented(path: str) -> set[int]:
    spec = openapi()["paths"][path]
    return {int(code) for operation in spec.values() if isinstance(operation, dict) and "responses" in operation
            for code in operation["responses"]}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(route=ROUTES, body=BODIES, method=st.sampled_from(["POST", "POST", "POST", "GET", "PUT", "DELETE"]))
def test_infer_answers_only_documented_statuses(client, route, body, method) -> None:  # type: ignore[no-untyped-def]
    name, version = route
    path = f"/v2/models/{name}" + (f"/versions/{version}" if version else "") + "/infer"
    payload, header_length = body
    headers = {"Inference-Header-Content-Length": header_length} if header_length is not None else {}
    response = client.request(method, path, content=payload, headers=headers)
    documented = _documented("/v2/models/{name}/infer") | {404}
    assert response.status_code in documented, (response.status_code, response.text[:300])
    if response.status_code != 200:
        assert "error" in response.json()
    elif response.headers["content-type"].startswith("application/json"):
        json.loads(response.content)  # valid JSON: no bare NaN


def test_the_server_is_live_after_fuzzing_and_describes_itself(client) -> None:  # type: ignore[no-untyped-def]
    assert client.get("/v2/health/live").status_code == 200
    spec = client.get("/v2/openapi.json").json()
    assert spec["openapi"].startswith("3.") and "/v2/models/{name}/infer" in spec["paths"]
