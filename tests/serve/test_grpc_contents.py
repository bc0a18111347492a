"""ModelInfer's decoding on a real server (HTTP and gRPC in-process on loopback) over tiny onnx.helper models run by
ONNX Runtime: typed contents are decoded off the event loop, straight into arrays, each tensor's decoded size
checked against --max-body-mb before it is built, and every refusal is a gRPC status code a client can act on."""

from __future__ import annotations

import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.builders import save_in_repository
from tests.optional import optional
from tests.serve.conftest import RunningServer

service_pb2 = optional("tritonclient.grpc.service_pb2")
service_pb2_grpc = optional("tritonclient.grpc.service_pb2_grpc")

LIMIT = 1_000_000  # RunningServer's --max-body-mb, in bytes
TYPES = {"FP32": TensorProto.FLOAT, "FP64": TensorProto.DOUBLE, "INT64": TensorProto.INT64,
         "INT8": TensorProto.INT8, "UINT16": TensorProto.UINT16, "BOOL": TensorProto.BOOL}


def _identity(repository: Path, datatype: str) -> None:
    """``y = x`` for an ``[n, k]`` tensor of ``datatype``: what comes back is exactly what the server decoded."""
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], datatype,
                              [helper.make_tensor_value_info("x", TYPES[datatype], ["n", "k"])],
                              [helper.make_tensor_value_info("y", TYPES[datatype], ["n", "k"])])
    save_in_repository(graph, repository, datatype.lower())


def _row_sums(repository: Path) -> None:
    """``[n, k]`` float32 summed to ``[n, 1]``: a large request with a small answer."""
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    graph = helper.make_graph([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)], "sums",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "k"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 1])], initializer=[axes])
    save_in_repository(graph, repository, "sums")


@pytest.fixture(scope="module")
def tiny_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repository = tmp_path_factory.mktemp("tiny")
    for datatype in TYPES:
        _identity(repository, datatype)
    _row_sums(repository)
    return repository


@pytest.fixture(scope="module")
def tiny(tiny_repository: Path) -> Iterator[RunningServer]:
    running = RunningServer(tiny_repository, batching=False)
    yield running
    running.stop()


def _request(model: str, datatype: str, values: np.ndarray, field: str) -> Any:
    request = service_pb2.ModelInferRequest(model_name=model)
    tensor = request.inputs.add(name="x", datatype=datatype, shape=list(values.shape))
    getattr(tensor.contents, field).extend(values.ravel().tolist())
    return request


def _infer(server: RunningServer, request: Any) -> Any:
    with grpc.insecure_channel(server.grpc_url) as channel:
        return service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=60)


def _refusal(server: RunningServer, request: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        _infer(server, request)
    return caught.value


@pytest.mark.parametrize(("datatype", "field", "values"), [
    ("FP32", "fp32_contents", np.array([[0.1, -2.5e-38, 3.4e38], [np.inf, -0.0, 7.0]], np.float32)),
    ("FP64", "fp64_contents", np.array([[0.1, 1e300, -5e-324]], np.float64)),
    ("INT64", "int64_contents", np.array([[-(2**63), 2**63 - 1, 0, -1]], np.int64)),
    ("INT8", "int_contents", np.array([[-128, 127, 0]], np.int8)),
    ("UINT16", "uint_contents", np.array([[0, 65535]], np.uint16)),
    ("BOOL", "bool_contents", np.array([[True, False, True]], np.bool_)),
])
def test_typed_contents_reach_the_model_exactly(tiny: RunningServer, datatype: str, field: str,
                                                values: np.ndarray) -> None:
    response = _infer(tiny, _request(datatype.lower(), datatype, values, field))
    returned = np.frombuffer(response.raw_output_contents[0], values.dtype).reshape(values.shape)
    np.testing.assert_array_equal(returned, values)


@pytest.mark.parametrize(("request_", "code", "message"), [
    # 200,000 INT64 zeros travel as 200 kB of varints but decode to 1.6 MB: over the limit, refused unbuilt.
    (_request("int64", "INT64", np.zeros((1, 200_000), np.int64), "int64_contents"),
     grpc.StatusCode.RESOURCE_EXHAUSTED, "Input 'x' of shape 1x200000 and datatype INT64 takes 1600000 bytes; the "
                                         f"limit is {LIMIT} bytes"),
    (_request("int8", "INT8", np.array([[300, 0]]), "int_contents"), grpc.StatusCode.INVALID_ARGUMENT,
     "Input 'x' is INT8: its values must lie in [-128, 127], got [0, 300]"),
    (_request("fp32", "FP32", np.array([[1, 2]]), "int_contents"), grpc.StatusCode.INVALID_ARGUMENT,
     "Input 'x' is FP32: its values go in fp32_contents, but the request fills int_contents"),
    (service_pb2.ModelInferRequest(model_name="fp32", inputs=[
        {"name": "x", "datatype": "FP32", "shape": [1, 4], "contents": {"fp32_contents": [1.0, 2.0, 3.0]}}]),
     grpc.StatusCode.INVALID_ARGUMENT, "Input 'x' has 3 elements; shape 1x4 needs 4"),
    (service_pb2.ModelInferRequest(model_name="fp32", inputs=[
        {"name": "x", "datatype": "FP32", "shape": [1, 1], "contents": {"fp32_contents": [1.0]}},
        {"name": "x", "datatype": "FP32", "shape": [1, 1], "contents": {"fp32_contents": [1.0]}}]),
     grpc.StatusCode.INVALID_ARGUMENT, "Input 'x' is given more than once"),
    (service_pb2.ModelInferRequest(model_name="fp32", inputs=[
        {"name": "x", "datatype": "FP32", "shape": [1] * 100, "contents": {"fp32_contents": [1.0]}}]),
     grpc.StatusCode.INVALID_ARGUMENT, "Input 'x' has a shape of 100 dimensions"),
], ids=["over-the-limit", "out-of-range", "wrong-field", "wrong-count", "given-twice", "too-many-dimensions"])
def test_refusals_are_status_codes_naming_the_tensor(tiny: RunningServer, request_: Any, code: grpc.StatusCode,
                                                     message: str) -> None:
    refused = _refusal(tiny, request_)
    assert refused.code() == code and message in refused.details()


def test_a_large_request_is_decoded_off_the_event_loop(tiny_repository: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """While the protobuf of a large request is being decoded, the server still answers /v2/health/live: the
    decoding happens in a worker thread, not on the event loop that HTTP and gRPC share. Protobuf's own decoder
    runs, held until the test has seen the server answer (installed before the server starts, wherever the
    server takes it from)."""
    decoding, release = threading.Event(), threading.Event()
    decode = service_pb2.ModelInferRequest.FromString

    def held(data: bytes) -> Any:
        decoding.set()
        release.wait(30)
        return decode(data)

    monkeypatch.setattr(service_pb2.ModelInferRequest, "FromString", staticmethod(held))
    server = RunningServer(tiny_repository, batching=False)
    values = np.random.default_rng(0).random((1, 200_000), dtype=np.float32)
    results: list[Any] = []
    sender = threading.Thread(target=lambda: results.append(_infer(server, _request("sums", "FP32", values,
                                                                                    "fp32_contents"))))
    sender.start()
    try:
        assert decoding.wait(30), "the request was never decoded by protobuf's ModelInferRequest.FromString"
        assert httpx.get(f"http://{server.url}/v2/health/live", timeout=10).status_code == 200
    finally:
        release.set()
        sender.join(60)
        server.stop()
    total = np.frombuffer(results[0].raw_output_contents[0], np.float32)
    np.testing.assert_allclose(total, values.sum(dtype=np.float64), rtol=1e-4)


def test_typed_contents_cost_no_python_object_per_value(tiny: RunningServer) -> None:
    """A 1 MB fp32_contents request costs the server about its own size again (its packed bytes, read in place),
    not a Python float per value and a JSON copy of them (which was 5 times the request, and so refused as over
    the limit), as tracemalloc counts it: every Python object and numpy array, in every thread."""
    values = np.random.default_rng(1).random((1, LIMIT // 4 - 64), dtype=np.float32)
    body = _request("sums", "FP32", values, "fp32_contents").SerializeToString()
    with grpc.insecure_channel(tiny.grpc_url) as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")  # bytes in, bytes out
        call(body, timeout=60)  # warm: threads, sessions and caches exist before measuring
        tracemalloc.start()
        try:
            answer = call(body, timeout=60)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    total = np.frombuffer(service_pb2.ModelInferResponse.FromString(answer).raw_output_contents[0], np.float32)
    np.testing.assert_allclose(total, values.sum(dtype=np.float64), rtol=1e-4)
    assert peak < 3 * len(body), f"{peak} bytes at the peak for a request of {len(body)}"


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (lengths here are under 128: one byte)."""
    return bytes([number << 3 | 2, len(payload)]) + payload


@pytest.mark.parametrize("contents", [
    b"".join(bytes([6 << 3 | 5]) + np.float32(v).tobytes() for v in (1, 2, 3)),  # unpacked: one field per value
    _field(6, np.array([1], "<f4").tobytes()) + _field(6, np.array([2, 3], "<f4").tobytes()),  # two packed runs
    _field(6, np.array([1, 2, 3], "<f4").tobytes()),  # what every client writes
])
def test_every_encoding_protobuf_allows_is_read(tiny: RunningServer, contents: bytes) -> None:
    """Values are read in place from the request's bytes when they lie as protobuf writes them; any other layout
    protobuf accepts is read from the decoded message."""
    tensor = service_pb2.ModelInferRequest.InferInputTensor(name="x", datatype="FP32", shape=[1, 3])
    body = _field(1, b"fp32") + _field(5, tensor.SerializeToString() + _field(5, contents))
    with grpc.insecure_channel(tiny.grpc_url) as channel:
        answer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")(body, timeout=60)
    returned = service_pb2.ModelInferResponse.FromString(answer).raw_output_contents[0]
    np.testing.assert_array_equal(np.frombuffer(returned, np.float32), [1, 2, 3])
