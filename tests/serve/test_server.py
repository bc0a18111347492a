"""The server driven by Triton's own HTTP client, JSON and binary, and by raw HTTP for the error paths."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

import trtpipe
from tests.optional import optional, optional_error
from trtpipe.models.data import load_split

triton = optional("tritonclient.http")
InferenceServerException = optional_error("tritonclient.utils", "InferenceServerException")


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    return load_split("digits", "eval").images[:8]


@pytest.mark.parametrize("binary", [False, True])
def test_triton_client_gets_what_predict_gives(server, repository, images, binary: bool) -> None:  # type: ignore[no-untyped-def]
    client = triton.InferenceServerClient(server.url)
    tensor = triton.InferInput("input", list(images.shape), "FP32")
    tensor.set_data_from_numpy(images, binary_data=binary)
    result = client.infer("digits", [tensor], outputs=[triton.InferRequestedOutput("output", binary_data=binary)],
                          request_id="req-7")
    with trtpipe.load(repository / "digits" / "1" / "model.onnx") as model:
        np.testing.assert_allclose(result.as_numpy("output"), model.predict(images), rtol=1e-5, atol=1e-5)
    assert result.get_response()["id"] == "req-7"


def test_health_metadata_and_readiness(server) -> None:  # type: ignore[no-untyped-def]
    client = triton.InferenceServerClient(server.url)
    assert client.is_server_live()
    assert not client.is_server_ready()  # one model is broken
    assert client.is_model_ready("digits") and client.is_model_ready("digits", "1")
    assert not client.is_model_ready("broken")
    metadata = client.get_model_metadata("digits")
    assert metadata["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 1, 32, 32]}]
    assert metadata["platform"] == "onnxruntime_onnx" and metadata["versions"] == ["1"]
    broken = httpx.get(f"http://{server.url}/v2/models/broken/ready")
    assert broken.status_code == 400 and "not a valid ONNX model" in broken.json()["error"]  # 4xx: not ready
    assert httpx.get(f"http://{server.url}/v2").json()["extensions"] == ["binary_tensor_data"]


def test_tensorrt_target_int8_is_served_with_tensorrt_arithmetic(server, images) -> None:  # type: ignore[no-untyped-def]
    client = triton.InferenceServerClient(server.url)
    split = load_split("digits", "eval")
    tensor = triton.InferInput("input", [16, 1, 32, 32], "FP32")
    tensor.set_data_from_numpy(split.images[:16])
    logits = client.infer("digits_int8_trt", [tensor]).as_numpy("output")
    assert np.mean(logits.argmax(1) == split.labels[:16]) >= 0.9  # CPU integer kernels would score ~10 %


@pytest.mark.parametrize(("path", "body", "status", "message"), [
    ("/v2/models/nope/infer", {"inputs": []}, 404, "Unknown model 'nope'"),
    ("/v2/models/digits/versions/9/infer", {"inputs": []}, 404, "has no version 9"),
    ("/v2/models/broken/infer", {"inputs": []}, 503, "is not ready"),
    ("/v2/models/digits/infer", {"inputs": [{"name": "input", "shape": [1, 1, 32, 32], "datatype": "INT64",
                                             "data": [0] * 1024}]}, 400, "datatype INT64"),
    ("/v2/models/digits/infer", {"inputs": [{"name": "input", "shape": [1, 1, 32, 32], "datatype": "FP32",
                                             "data": [0.0] * 10}]}, 400, "has 10 elements"),
    ("/v2/models/digits/infer", {"inputs": [{"name": "input", "shape": [17, 1, 32, 32], "datatype": "FP32",
                                             "data": [0.0] * 17 * 1024}]}, 400, "maximum batch size 16"),
])
def test_errors_follow_the_protocol_and_the_server_stays_up(server, path, body, status, message) -> None:  # type: ignore[no-untyped-def]
    response = httpx.post(f"http://{server.url}{path}", content=json.dumps(body))
    assert response.status_code == status and message in response.json()["error"]
    assert httpx.get(f"http://{server.url}/v2/health/live").status_code == 200


def test_malformed_and_oversized_bodies(server) -> None:  # type: ignore[no-untyped-def]
    url = f"http://{server.url}/v2/models/digits/infer"
    assert httpx.post(url, content=b"{nope").status_code == 400
    bad_header = httpx.post(url, content=b"{}", headers={"Inference-Header-Content-Length": "abc"})
    assert bad_header.status_code == 400
    too_big = httpx.post(url, content=b"x" * 2_000_000)
    assert too_big.status_code == 413 and "limit" in too_big.json()["error"]

    def chunks():  # no Content-Length: the limit applies while streaming
        for _ in range(40):
            yield b"y" * 65536

    assert httpx.post(url, content=chunks()).status_code == 413
    assert httpx.get(f"http://{server.url}/v2/health/live").status_code == 200


def test_metrics_count_requests_failures_latency_and_batches(server, images) -> None:  # type: ignore[no-untyped-def]
    client = triton.InferenceServerClient(server.url)
    tensor = triton.InferInput("input", list(images.shape), "FP32")
    tensor.set_data_from_numpy(images)
    client.infer("digits", [tensor])
    with pytest.raises(InferenceServerException):
        client.infer("nope", [tensor])
    text = httpx.get(f"http://{server.url}/metrics").text
    for needle in ('trtpipe_inference_requests_total{model="digits"}', "trtpipe_inference_failures_total",
                   'trtpipe_inference_latency_seconds_bucket{le="0.001",model="digits"}',
                   'trtpipe_batch_size_count{model="digits"}', 'trtpipe_queue_depth{model="digits"}'):
        assert needle in text, needle
