"""The protocol's rules, on request bytes, without a server."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trtpipe.runtime.base import TensorInfo
from trtpipe.serve.protocol import HEADER_LENGTH, ProtocolError, encode_infer_response, parse_infer_request

INPUTS = [TensorInfo("input", "float32", ("batch", 1, 2, 2))]
OUTPUTS = [TensorInfo("output", "float32", ("batch", 3)), TensorInfo("aux", "int64", ("batch",))]


def _request(**override: object) -> dict[str, object]:
    body = {"id": "r1", "inputs": [{"name": "input", "shape": [2, 1, 2, 2], "datatype": "FP32",
                                    "data": list(range(8))}]}
    body.update(override)
    return body


def _parse(body: dict[str, object] | bytes, header_length: int | None = None, max_batch: int | None = 8):  # type: ignore[no-untyped-def]
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return parse_infer_request(raw, header_length, INPUTS, OUTPUTS, max_batch)


def test_flat_and_nested_json_data() -> None:
    flat = _parse(_request())
    nested = _parse(_request(inputs=[{"name": "input", "shape": [2, 1, 2, 2], "datatype": "FP32",
                                      "data": np.arange(8).reshape(2, 1, 2, 2).tolist()}]))
    np.testing.assert_array_equal(flat.inputs["input"], nested.inputs["input"])
    assert flat.inputs["input"].dtype == np.float32 and flat.id == "r1"


def test_binary_inputs_and_outputs_round_trip() -> None:
    array = np.arange(8, dtype=np.float32).reshape(2, 1, 2, 2)
    header = json.dumps({"inputs": [{"name": "input", "shape": [2, 1, 2, 2], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 32}}],
                         "outputs": [{"name": "output", "parameters": {"binary_data": True}}, {"name": "aux"}]}
                        ).encode()
    request = _parse(header + array.tobytes(), len(header))
    np.testing.assert_array_equal(request.inputs["input"], array)
    out = np.ones((2, 3), np.float32)
    body, headers = encode_infer_response("m", "1", request, OUTPUTS, [out, np.array([4, 5])])
    length = int(headers[HEADER_LENGTH])
    response = json.loads(body[:length])
    assert response["outputs"][0]["parameters"]["binary_data_size"] == 24
    np.testing.assert_array_equal(np.frombuffer(body[length:], np.float32).reshape(2, 3), out)
    assert response["outputs"][1] == {"name": "aux", "datatype": "INT64", "shape": [2], "data": [4, 5]}


@pytest.mark.parametrize(("body", "message"), [
    (_request(inputs=[{"name": "input", "shape": [2, 1, 2, 2], "datatype": "FP64", "data": list(range(8))}]),
     "Input 'input' has datatype FP64; the model expects FP32"),
    (_request(inputs=[{"name": "input", "shape": [2, 3, 2, 2], "datatype": "FP32", "data": list(range(24))}]),
     "Input 'input' has shape 2x3x2x2; the model expects batchx1x2x2"),
    (_request(inputs=[{"name": "input", "shape": [2, 1, 2, 2], "datatype": "FP32", "data": [1, 2, 3]}]),
     "Input 'input' has 3 elements; shape 2x1x2x2 needs 8"),
    (_request(inputs=[]), "missing ['input']"),
    (_request(inputs=[{"name": "image", "shape": [1], "datatype": "FP32", "data": [1]}]), "unexpected ['image']"),
    (_request(inputs=[{"name": "input", "shape": [9, 1, 2, 2], "datatype": "FP32", "data": [0] * 36}]),
     "Batch of 9 exceeds the model's maximum batch size 8"),
    (_request(outputs=[{"name": "logits"}]), "Unknown output 'logits'"),
    (b"{not json", "not valid JSON"),
    (b'{"id": 1}', "needs an 'inputs' list"),
])
def test_violations_are_400_naming_the_problem(body: dict[str, object] | bytes, message: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        _parse(body)
    assert caught.value.status == 400 and message in caught.value.message


def test_binary_sizes_must_add_up() -> None:
    header = json.dumps({"inputs": [{"name": "input", "shape": [1, 1, 2, 2], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 16}}]}).encode()
    with pytest.raises(ProtocolError, match="binary data has 20 bytes"):
        _parse(header + bytes(20), len(header))
    with pytest.raises(ProtocolError, match="declares binary_data_size 16, but 8 bytes remain"):
        _parse(header + bytes(8), len(header))
    with pytest.raises(ProtocolError, match="Inference-Header-Content-Length is 9999"):
        _parse(header + bytes(16), 9999)


def _input(**override: object) -> dict[str, object]:
    item: dict[str, object] = {"name": "input", "shape": [2, 1, 2, 2], "datatype": "FP32", "data": list(range(8))}
    item.update(override)
    return item


@pytest.mark.parametrize(("body", "message"), [
    (_request(inputs=[_input(parameters="x")]), "'parameters' of input 'input' must be an object"),
    (_request(inputs=[_input(name=["input"])]), "string 'name'"),
    (_request(inputs=[_input(shape=[2**60 + 2, 1, 2, 2])]), "over the limit"),
    (_request(inputs=[_input(shape=[True, 1, 2, 2])]), "a list of non-negative integers"),
    (_request(outputs=[{"name": "output", "parameters": 5}]), "'parameters' of output 'output' must be an object"),
    (_request(outputs=[{"name": "output"}, {"name": "output"}]), "requested twice"),
    (_request(outputs="output"), "'outputs' must be a list"),
    (_request(id=7), "'id' must be a string"),
    (_request(parameters=[1]), "'parameters' of the request must be an object"),
    (b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "not valid JSON"),
])
def test_malformed_requests_are_400_naming_the_field(body: dict[str, object] | bytes, message: str) -> None:
    """Requests a fuzzer found to cause 500s: each is now a 400 that says what is wrong."""
    with pytest.raises(ProtocolError) as caught:
        _parse(body)
    assert caught.value.status == 400 and message in caught.value.message


def test_non_finite_outputs_are_valid_json() -> None:
    request = _parse(_request())
    logits = np.array([[1.0, np.nan, np.inf], [0.5, -np.inf, 2.0]], np.float32)
    body, _ = encode_infer_response("m", "1", request, OUTPUTS, [logits, np.arange(2)])
    response = json.loads(body, parse_constant=lambda token: pytest.fail(f"bare {token} in JSON"))
    output = response["outputs"][0]
    assert output["data"] == [1.0, None, None, 0.5, None, 2.0]
    assert output["parameters"]["non_finite_as_null"] == 3


TWO = [TensorInfo("image", "uint8", ("batch", 2, 2, 3)), TensorInfo("meta", "float32", ("batch", 2))]


def _two(image: dict[str, object], meta: dict[str, object]) -> None:
    body = {"inputs": [{"name": "image", "datatype": "UINT8", **image}, {"name": "meta", "datatype": "FP32", **meta}]}
    parse_infer_request(json.dumps(body).encode(), None, TWO, OUTPUTS, 8)


@pytest.mark.parametrize(("image", "meta", "message"), [
    # Rows that disagree would broadcast or fail inside the model (a 500 for every request batched with it).
    ({"shape": [1, 2, 2, 3], "data": [0] * 12}, {"shape": [2, 2], "data": [0.0] * 4},
     r"disagree on the batch size \(image 1, meta 2\)"),
    # numpy would wrap 300 to 44 and truncate 1.5: the model would run on values the client never sent.
    ({"shape": [1, 2, 2, 3], "data": [300] + [0] * 11}, {"shape": [1, 2], "data": [0.0] * 2},
     r"values must lie in \[0, 255\], got \[0, 300\]"),
    ({"shape": [1, 2, 2, 3], "data": [-1] + [0] * 11}, {"shape": [1, 2], "data": [0.0] * 2}, "must lie in"),
    ({"shape": [1, 2, 2, 3], "data": [1.5] * 12}, {"shape": [1, 2], "data": [0.0] * 2}, "whole numbers, not float64"),
    ({"shape": [1, 2, 2, 3], "data": [True] * 12}, {"shape": [1, 2], "data": [0.0] * 2}, "not booleans"),
    ({"shape": [0, 2, 2, 3], "data": []}, {"shape": [0, 2], "data": []}, "every dimension must be at least 1"),
])
def test_inputs_a_model_would_fail_on_are_refused_with_400(image: dict[str, object], meta: dict[str, object],
                                                          message: str) -> None:
    with pytest.raises(ProtocolError, match=message) as refused:
        _two(image, meta)
    assert refused.value.status == 400


def test_an_input_given_twice_is_named() -> None:
    body = _request(inputs=[_request()["inputs"][0], _request()["inputs"][0]])  # type: ignore[index]
    with pytest.raises(ProtocolError, match="Input 'input' is given more than once"):
        _parse(body)


def test_a_failure_message_shows_no_server_path() -> None:
    from trtpipe.serve.service import failure_message

    error = RuntimeError("[ONNXRuntimeError] : 1 : FAIL : Status Message: /onnxruntime_src/onnxruntime/core/"
                         "providers/cpu/math/element_wise_ops.h:583 void onnxruntime::BroadcastIterator::Append")
    message = failure_message(error)
    assert "/onnxruntime_src" not in message and message.startswith("Inference failed: [ONNXRuntimeError]")
