"""The gRPC service, driven by Triton's own gRPC client beside HTTP on the same server."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

import trtpipe
from tests.optional import optional, optional_error
from trtpipe.models.data import load_split

triton_grpc = optional("tritonclient.grpc")
service_pb2 = optional("tritonclient.grpc.service_pb2")
service_pb2_grpc = optional("tritonclient.grpc.service_pb2_grpc")
InferenceServerException = optional_error("tritonclient.utils", "InferenceServerException")


@pytest.fixture(scope="module")
def client(server):  # type: ignore[no-untyped-def]
    return triton_grpc.InferenceServerClient(server.grpc_url)


def test_health_and_metadata(client) -> None:  # type: ignore[no-untyped-def]
    assert client.is_server_live()
    assert not client.is_server_ready()  # one model of the repository is broken
    assert client.is_model_ready("digits") and not client.is_model_ready("broken")
    metadata = client.get_model_metadata("digits")
    assert metadata.inputs[0].name == "input" and list(metadata.inputs[0].shape) == [-1, 1, 32, 32]
    assert metadata.platform == "onnxruntime_onnx"


def test_raw_contents_match_predict(client, repository) -> None:  # type: ignore[no-untyped-def]
    images = load_split("digits", "eval").images[:5]
    tensor = triton_grpc.InferInput("input", list(images.shape), "FP32")
    tensor.set_data_from_numpy(images)
    result = client.infer("digits", [tensor], request_id="g1")
    with trtpipe.load(repository / "digits" / "1" / "model.onnx") as model:
        np.testing.assert_allclose(result.as_numpy("output"), model.predict(images), rtol=1e-5, atol=1e-5)
    assert result.get_response().id == "g1"


def test_typed_contents(server, repository) -> None:  # type: ignore[no-untyped-def]
    images = load_split("digits", "eval").images[:2]
    request = service_pb2.ModelInferRequest(model_name="digits")
    tensor = request.inputs.add(name="input", datatype="FP32", shape=list(images.shape))
    tensor.contents.fp32_contents.extend(images.ravel().tolist())
    with grpc.insecure_channel(server.grpc_url) as channel:
        response = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    logits = np.frombuffer(response.raw_output_contents[0], np.float32).reshape(2, 10)
    with trtpipe.load(repository / "digits" / "1" / "model.onnx") as model:
        np.testing.assert_allclose(logits, model.predict(images), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("model", "shape", "datatype", "code"), [
    ("nope", [1, 1, 32, 32], "FP32", "StatusCode.NOT_FOUND"),
    ("digits", [1, 1, 8, 8], "FP32", "StatusCode.INVALID_ARGUMENT"),
    ("digits", [1, 1, 32, 32], "INT64", "StatusCode.INVALID_ARGUMENT"),
    ("broken", [1, 1, 32, 32], "FP32", "StatusCode.UNAVAILABLE"),
])
def test_errors_are_grpc_status_codes(client, model: str, shape: list[int], datatype: str, code: str) -> None:  # type: ignore[no-untyped-def]
    tensor = triton_grpc.InferInput("input", shape, datatype)
    tensor.set_data_from_numpy(np.zeros(shape, np.int64 if datatype == "INT64" else np.float32))
    with pytest.raises(InferenceServerException) as caught:
        client.infer(model, [tensor])
    assert caught.value.status() == code
    assert client.is_server_live()


@pytest.mark.parametrize(("method", "body", "code"), [
    ("ModelInfer", b"\xff\xff\xff", "INVALID_ARGUMENT"),  # not a protobuf message at all
    ("ModelInfer", b"\x0a\x05dig", "INVALID_ARGUMENT"),  # model_name cut short
    ("ServerLive", b"\xff\xff\xff", "INVALID_ARGUMENT"),
    ("ModelMetadata", b"\x0a\x02\xc3\x28", "INVALID_ARGUMENT"),  # a name that is not UTF-8
    ("ModelStatistics", b"", "UNIMPLEMENTED"),
])
def test_undecodable_requests_are_the_clients_fault_in_plain_words(server, method: str, body: bytes,  # type: ignore[no-untyped-def]
                                                                   code: str) -> None:
    """gRPC answers an exception from a request deserializer with UNKNOWN and "Unexpected <class
    'google.protobuf.message.DecodeError'>": the service answers INVALID_ARGUMENT and says what it could not read."""
    with grpc.insecure_channel(server.grpc_url) as channel:
        call = channel.unary_unary(f"/inference.GRPCInferenceService/{method}")  # raw bytes, as a client may send
        with pytest.raises(grpc.RpcError) as caught:
            call(body, timeout=30)
    details = caught.value.details()
    assert caught.value.code() == getattr(grpc.StatusCode, code), details
    assert "<class" not in details and "Error" not in details and ".py" not in details, details
    assert method in details or "inference." in details


@pytest.mark.parametrize(("status", "code"), [
    (400, "INVALID_ARGUMENT"), (404, "NOT_FOUND"), (408, "DEADLINE_EXCEEDED"), (413, "RESOURCE_EXHAUSTED"),
    (422, "INVALID_ARGUMENT"), (429, "RESOURCE_EXHAUSTED"), (499, "INVALID_ARGUMENT"), (500, "INTERNAL"),
    (503, "UNAVAILABLE"), (504, "DEADLINE_EXCEEDED"), (507, "RESOURCE_EXHAUSTED"),
])
def test_every_protocol_status_has_a_grpc_code_and_none_is_unknown(status: int, code: str) -> None:
    """The statuses the service raises (the model refusing data 400, out of memory 503 or 507, timeouts 504) map to
    the gRPC code a client retries or fixes by; a client's fault is never UNKNOWN or INTERNAL."""
    from trtpipe.serve.grpc.service import _status

    assert _status(grpc, status) == getattr(grpc.StatusCode, code)
