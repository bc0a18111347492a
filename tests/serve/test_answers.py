"""Answers are bounded like requests (#56): over ``--max-response-mb`` an answer is refused before it is encoded, a 413
over HTTP naming the output and its size and pointing to binary data, RESOURCE_EXHAUSTED over gRPC; a large JSON
answer is written a slice at a time and reads exactly as one written at once. A real server (HTTP and gRPC in-process
on loopback) over a model whose output is far larger than its input."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.builders import save_in_repository
from tests.optional import optional
from tests.serve.conftest import RunningServer
from trtpipe.serve.answers import JSON_SLICE, check_answer_size, encode_infer_response
from trtpipe.serve.protocol import InferRequest, ProtocolError

service_pb2 = optional("tritonclient.grpc.service_pb2")
service_pb2_grpc = optional("tritonclient.grpc.service_pb2_grpc")

WIDTH = 1 << 18  # float32 values per row of the output: 1 MiB as binary data, up to 4 MiB as JSON
LIMIT_MB = 3.0


def _spread(repository: Path) -> None:
    """``[n, 1]`` float32 expanded to ``[n, WIDTH]``: a few bytes in, a megabyte out per row."""
    width = numpy_helper.from_array(np.array([1, WIDTH], np.int64), "width")
    graph = helper.make_graph([helper.make_node("Expand", ["x", "width"], ["y"])], "spread",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", WIDTH])],
                              initializer=[width])
    save_in_repository(graph, repository, "spread")


@pytest.fixture(scope="module")
def spread(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repository = tmp_path_factory.mktemp("answers")
    _spread(repository)
    running = RunningServer(repository, batching=False, max_response_mb=LIMIT_MB)
    yield running
    running.stop()


def _body(rows: int, **parameters: object) -> dict[str, object]:
    return {"inputs": [{"name": "x", "shape": [rows, 1], "datatype": "FP32", "data": [0.5] * rows}],
            "parameters": parameters}


def test_an_answer_over_the_limit_is_refused_before_it_is_encoded_naming_the_output(spread: RunningServer) -> None:
    url = f"http://{spread.url}/v2/models/spread/infer"
    refused = httpx.post(url, json=_body(1), timeout=60)  # 1 MiB of values: up to 4 MiB as JSON
    assert refused.status_code == 413, refused.text
    error = refused.json()["error"]
    assert error.startswith(f"Output 'y' (shape 1x{WIDTH}, FP32) would take up to {16 * WIDTH} bytes as JSON"), error
    assert "--max-response-mb" in error and '"binary_data_output": true' in error, error
    binary = httpx.post(url, json=_body(1, binary_data_output=True), timeout=60)  # as binary data it fits
    assert binary.status_code == 200, binary.text
    header = int(binary.headers["Inference-Header-Content-Length"])
    assert np.all(np.frombuffer(binary.content[header:], np.float32) == 0.5)
    over = httpx.post(url, json=_body(4, binary_data_output=True), timeout=60)  # 4 MiB even as binary data
    assert over.status_code == 413 and over.json()["error"].endswith("send fewer rows."), over.text
    assert httpx.get(f"http://{spread.url}/v2/health/ready", timeout=10).status_code == 200


def test_grpc_answers_over_the_limit_are_resource_exhausted(spread: RunningServer) -> None:
    request = service_pb2.ModelInferRequest(model_name="spread")
    tensor = request.inputs.add(name="x", datatype="FP32", shape=[4, 1])
    tensor.contents.fp32_contents.extend([0.5] * 4)
    with grpc.insecure_channel(spread.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.ModelInfer(request, timeout=60)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value.details()
        assert refused.value.details().startswith(f"Output 'y' (shape 4x{WIDTH}, FP32) takes {16 * WIDTH} bytes")
        del request.inputs[:]
        tensor = request.inputs.add(name="x", datatype="FP32", shape=[2, 1])
        tensor.contents.fp32_contents.extend([0.5] * 2)
        answer = stub.ModelInfer(request, timeout=60)
    assert np.all(np.frombuffer(answer.raw_output_contents[0], np.float32) == 0.5)


def test_a_large_json_answer_written_in_slices_reads_as_one() -> None:
    values = np.random.default_rng(0).standard_normal(3 * JSON_SLICE + 5).astype(np.float32).reshape(1, -1)
    values[0, 7], values[0, -1] = np.nan, np.inf
    request = InferRequest("r", {}, None, False)
    body, headers = encode_infer_response("m", "1", request, [_info("y", values.shape)], [values])
    assert headers == {"content-type": "application/json"}
    answer = json.loads(body)
    assert answer["outputs"][0]["parameters"] == {"non_finite_as_null": 2}
    data = answer["outputs"][0]["data"]
    assert len(data) == values.size and data[7] is None and data[-1] is None
    finite = np.isfinite(values[0])
    assert np.array_equal(np.array(data, dtype=object)[finite].astype(np.float32), values[0][finite])


def test_the_size_check_counts_json_at_its_longest_text() -> None:
    array = np.zeros((10, 10), np.float64)
    check_answer_size([("y", array, False)], 25 * 100)
    with pytest.raises(ProtocolError) as refused:
        check_answer_size([("y", array, False)], 25 * 100 - 1)
    assert refused.value.status == 413 and "(\"binary_data_output\": true, 800 bytes)" in refused.value.message
    check_answer_size([("y", array, True)], 800)


def _info(name: str, shape: tuple[int, ...]):  # type: ignore[no-untyped-def]
    from trtpipe.artifact.tensors import TensorInfo

    return TensorInfo(name, "float32", shape)
