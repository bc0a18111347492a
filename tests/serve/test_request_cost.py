"""No request costs much more than its size (#56): a real `trtpipe serve` process refuses 61,000 copies of one input
within 50 ms of its own CPU over HTTP and gRPC (they took 33 s), names longer than any client's metadata limit come
back with their own status, and every adversarial body of a megabyte costs less than three times the CPU of an honest
one of the same size."""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import httpx
import numpy as np
import orjson
import pytest

from tests.optional import optional
from tests.serve.test_deep_nesting import Served
from trtpipe.serve.json_body import JSON_OUTSIDE_DATA_LIMIT

service_pb2 = optional("tritonclient.grpc.service_pb2")
service_pb2_grpc = optional("tritonclient.grpc.service_pb2_grpc")

ENTRIES = 61_000
SERVER_CPU_LIMIT_S = 0.050  # of the server's CPU time per refusal: the bound (#56)
CPU_RATIO_LIMIT = 3.0  # adversarial CPU per MB against an honest body's (#56)
MB = 1_000_000


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, digits_onnx: Path) -> Iterator[Served]:
    repository = tmp_path_factory.mktemp("cost")
    (repository / "digits" / "1").mkdir(parents=True)
    shutil.copy(digits_onnx, repository / "digits" / "1" / "model.onnx")
    server = Served(repository)
    yield server
    server.stop()


def _entries(field: str, count: int) -> bytes:
    entry = b'{"name":"input"}' if field == "inputs" else b'{"name":"output"}'
    return b'{"%s":[' % field.encode() + b",".join([entry] * count) + b"]}"


@pytest.mark.parametrize(("field", "count"), [("inputs", ENTRIES), ("inputs", 15_000), ("outputs", 14_000)])
def test_sixty_one_thousand_entries_are_refused_in_milliseconds_over_http(served: Served, field: str,
                                                                          count: int) -> None:
    """61,000 entries (1 MB) are over the 256 KiB of JSON a request may hold besides its data arrays; 15,000 (255
    KB) are not, and are refused by their count, before any entry is looked at."""
    body = _entries(field, count)
    if field == "outputs":  # a valid input, then the outputs
        body = (b'{"inputs":[{"name":"input","shape":[1,1,32,32],"datatype":"FP32","data":' +
                orjson.dumps([0.0] * 1024) + b"}]," + body[1:])
    with httpx.Client(timeout=60) as client:
        client.get(f"{served.base}/v2/health/live")  # the connection is open before the clock starts
        before = served.cpu_s()
        refused = client.post(f"{served.base}/v2/models/digits/infer", content=body)
        spent = served.cpu_s() - before
    assert refused.status_code == 400, refused.text
    noun = "Input 'input' is given" if field == "inputs" else "Output 'output' is requested"
    error = refused.json()["error"]
    if len(body) > JSON_OUTSIDE_DATA_LIMIT:
        assert error.startswith(f"The request has over {JSON_OUTSIDE_DATA_LIMIT} bytes of JSON besides"), error
    else:
        assert error == f"{noun} more than once (the request has {count} entries in '{field}').", error
    assert spent < SERVER_CPU_LIMIT_S, f"{count} entries took {spent * 1000:.1f} ms of the server's CPU"


def test_sixty_one_thousand_entries_are_refused_in_milliseconds_over_grpc(served: Served) -> None:
    request = service_pb2.ModelInferRequest(model_name="digits")
    for _ in range(ENTRIES):
        request.inputs.add(name="input", datatype="FP32", shape=[1, 1, 32, 32])
    with grpc.insecure_channel(f"127.0.0.1:{served.grpc_port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        stub.ServerLive(service_pb2.ServerLiveRequest(), timeout=30)
        before = served.cpu_s()
        with pytest.raises(grpc.RpcError) as refused:
            stub.ModelInfer(request, timeout=60)
        spent = served.cpu_s() - before
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
    assert refused.value.details() == f"Input 'input' is given more than once (the request has {ENTRIES} entries in " \
                                      "'inputs')."
    assert spent < SERVER_CPU_LIMIT_S, f"{ENTRIES} entries took {spent * 1000:.1f} ms of the server's CPU"


def test_a_long_model_name_is_not_found_with_a_bounded_message(served: Served) -> None:
    """A 70,000-character name was echoed whole: the client's metadata limit turned NOT_FOUND into UNAVAILABLE."""
    name = "m" * 70_000
    with grpc.insecure_channel(f"127.0.0.1:{served.grpc_port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        for call, request in ((stub.ModelMetadata, service_pb2.ModelMetadataRequest(name=name)),
                              (stub.ModelReady, service_pb2.ModelReadyRequest(name=name)),
                              (stub.ModelInfer, service_pb2.ModelInferRequest(model_name=name))):
            with pytest.raises(grpc.RpcError) as refused:
                call(request, timeout=30)
            assert refused.value.code() == grpc.StatusCode.NOT_FOUND, refused.value.details()
            details = refused.value.details()
            assert details.startswith(f"Unknown model '{'m' * 256}...(70000 characters)'"), details[:400]
            assert len(details) < 1000
    answer = httpx.post(f"{served.base}/v2/models/digits/infer", timeout=30, json={"inputs": [
        {"name": "x" * 70_000, "shape": [1], "datatype": "FP32", "data": [0]}]})
    assert answer.status_code == 400 and len(answer.text) < 1000, answer.text[:400]
    assert "'" + "x" * 256 + "...(70000 characters)'" in answer.json()["error"]


# -- CPU per megabyte -------------------------------------------------------------------------------------------------


def _honest() -> bytes:
    """A JSON request of about a megabyte: 92 rows of the digits input as numbers."""
    values = np.random.default_rng(0).random(92 * 1024).astype(np.float32)
    return orjson.dumps({"inputs": [{"name": "input", "shape": [92, 1, 32, 32], "datatype": "FP32",
                                     "data": values}]}, option=orjson.OPT_SERIALIZE_NUMPY)


def _padded(prefix: bytes, unit: bytes, suffix: bytes, size: int) -> bytes:
    return prefix + unit * ((size - len(prefix) - len(suffix)) // len(unit)) + suffix


UNDER_LIMIT = 250_000  # bytes: under the 256 KiB of JSON a request may hold besides its data arrays
ADVERSARIAL: dict[str, Callable[[int], bytes]] = {
    "nesting": lambda size: (b'{"inputs":[{"name":"input","shape":[1,1,32,32],"datatype":"FP32","data":'
                             + b"[" * (size // 2 - 60) + b"0" + b"]" * (size // 2 - 60) + b"}]}"),
    "long keys": lambda size: _padded(b'{"parameters":{"', b"k", b'":1},"inputs":[]}', size),
    "many keys": lambda size: _padded(b'{"parameters":{"k":0', b',"k":0', b'},"inputs":[]}', size),
    "tiny strings": lambda size: _padded(b'{"parameters":{"x":[', b'"a",', b'"a"]},"inputs":[]}', size),
    "small arrays": lambda size: _padded(b'{"parameters":{"x":[', b"[0],", b"[0]]},\"inputs\":[]}", size),
    "data keys": lambda size: _padded(b'{"parameters":{"x":[', b'{"data":[[[[[0]]]]]},', b'{}]},"inputs":[]}', size),
    "block rescans": lambda size: _padded(b'{"parameters":{"x":[', b'"data":[[[[["', b"]}}", size),
    "entries": lambda size: _padded(b'{"inputs":[', b'{"name":"input"},', b'{"name":"input"}]}', size),
}


def _cpu_per_mb(body: bytes) -> float:
    """Process CPU seconds per MB of decoding ``body`` for the digits model, the least of five tries."""
    from trtpipe.artifact.tensors import TensorInfo
    from trtpipe.serve.json_body import parse_infer_request
    from trtpipe.serve.protocol import ProtocolError

    inputs, outputs = [TensorInfo("input", "float32", ("n", 1, 32, 32))], [TensorInfo("output", "float32", ("n", 10))]
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        with contextlib.suppress(ProtocolError):
            parse_infer_request(body, None, inputs, outputs, 256)
        best = min(best, time.process_time() - start)
    return best / (len(body) / MB)


@pytest.mark.parametrize("size", [MB, UNDER_LIMIT])
@pytest.mark.parametrize("attack", ADVERSARIAL)
def test_no_body_costs_much_more_cpu_per_megabyte_than_an_honest_one(attack: str, size: int) -> None:
    """A block rescanned per ``"data":[[[[["`` cost 30 times an honest body's CPU per byte; duplicate detection was
    quadratic. Each attack, at a megabyte and under the bound on JSON besides data arrays (where orjson builds it),
    is measured against an honest JSON body of a megabyte, measured alongside."""
    body = ADVERSARIAL[attack](size)
    assert size * 0.95 < len(body) <= size * 1.05
    honest = _cpu_per_mb(_honest())
    adversarial = _cpu_per_mb(body)
    assert adversarial < CPU_RATIO_LIMIT * honest, (f"{attack}: {adversarial * 1000:.1f} ms/MB against an honest "
                                                    f"{honest * 1000:.1f} ms/MB")
