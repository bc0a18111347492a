"""The protocol's rules, on request bytes, without a server."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest

from trtpipe.artifact.tensors import TensorInfo
from trtpipe.serve.answers import encode_infer_response
from trtpipe.serve.json_body import SMALL_ARRAY, parse_infer_request
from trtpipe.serve.protocol import HEADER_LENGTH, ProtocolError

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
     "Input 'input' (shape 9x1x2x2) has a batch of 9, over the model's maximum batch size 8"),
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
    (b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "100001 JSON arrays and objects besides"),
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
    ({"shape": [1, 2, 2, 3], "data": [1.5] * 12}, {"shape": [1, 2], "data": [0.0] * 2}, "whole numbers, not 1.5"),
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


def _with_data(text: bytes, padded: bool) -> bytes:
    """A request for INPUTS whose data is ``text``; ``padded`` puts enough spaces after its first bracket that it
    is too long for orjson to read with the rest (SMALL_ARRAY): it is scanned and read a slice at a time."""
    if padded and text.startswith(b"["):
        text = b"[" + b" " * (SMALL_ARRAY + 1) + text[1:]
    return (b'{"id": "has \\"data\\": [9] in it", "inputs": [{"name": "input", "datatype": "FP32", '
            b'"shape": [2, 1, 2, 2], "data": ' + text + b"}]}")


BOTH_READERS = pytest.mark.parametrize("padded", [False, True], ids=["small", "large"])


@BOTH_READERS
@pytest.mark.parametrize(("data", "message"), [
    ([None] * 8, "its data must be numbers, not null"),
    (["NaN"] * 8, 'its data must be numbers, not "NaN"'),
    ([1.0] * 7 + ["inf"], 'its data must be numbers, not "inf"'),
    ([1.0] * 7 + [True], "its data must be numbers, not booleans"),
    ([[[[1e39, 0], [0, 0]]], [[[0, 0], [0, 0]]]], r"1e\+39 is outside its range"),
    ([-3.5e38] + [0] * 7, r"-3.5e\+38 is outside its range"),
    ([{"value": 1}] * 8, "its data must be numbers, not an object"),
    ("0" * 8, "data must be a JSON array"),
])
def test_values_a_float_tensor_cannot_hold_are_refused_naming_it(data: object, message: str, padded: bool) -> None:
    """numpy would read null and "NaN" as NaN, true as 1.0 and 1e39 as infinity in FP32: the model would run on
    values the client never sent. Each is a 400 naming the tensor, nested or flat, small or large."""
    with pytest.raises(ProtocolError, match=f"Input 'input' is FP32: {message}|Input 'input' {message}") as refused:
        _parse(_with_data(json.dumps(data).encode(), padded))
    assert refused.value.status == 400


EIGHT = [1, 2, 3, 4, 5, 6, 7, 8]


@BOTH_READERS
@pytest.mark.parametrize(("text", "expected"), [
    (b"[1,2,3,4,5,6,7,8]", EIGHT),
    (b'[ [[[1, 2],\n [3, 4]]],\t[[[5e0, 6.0E0], [7, 8]]] ]', EIGHT),
    (b"[[1,2,3,4],[5,6,7,8]]", r"nested as 2x4, which is not its shape 2x1x2x2"),  # flat or as its shape only
    (b"[[[[[1,2]],[[3,4]]]],[[[[5,6]],[[7,8]]]]]",
     r"nests deeper than 4 levels \(at byte \d+\)|as 2x1x2x1x2, 5 levels deep"),
    (b"[[1,2,3],[4,5,6,7,8]]", r"ragged \(arrays at depth 2 hold 3 and 5"),  # the right count, but not a tensor
    (b"[1,2,3,4,5,6,7,8,]", "not valid JSON"),
    (b"[1,2,3,4,5,6,7,,8]", "not valid JSON"),
    (b"[[1,2,3,4][5,6,7,8]]", "not valid JSON|nested as 2x4"),  # refused for its nesting before it is parsed
    (b"[1,2,3,4,5,6,7,08]", "not valid JSON"),
    (b"[1,2,3,4,5,6,7,tru]", "not valid JSON"),
    (b"[[],[1,2,3,4,5,6,7,8]]", "not valid JSON|empty array"),
    (b"[1,2,3,4,5,6,7,8", "not valid JSON"),
])
def test_data_arrays_are_read_as_strictly_as_json(text: bytes, expected: list[int] | str, padded: bool) -> None:
    """Large data arrays are counted and read without orjson building the whole array; what they accept and refuse
    is JSON's all the same, and text that only looks like a data array (inside a string) is left alone."""
    body = _with_data(text, padded)
    if isinstance(expected, list):
        request = _parse(body)
        np.testing.assert_array_equal(request.inputs["input"].ravel(), expected)
        assert request.id == 'has "data": [9] in it'
    else:
        with pytest.raises(ProtocolError, match=expected) as refused:
            _parse(body)
        assert refused.value.status == 400


@pytest.mark.parametrize(("values", "end"), [(300_000, b",]"), (299_999, b",,0.5]"), (300_000, b", ]")])
def test_a_large_data_array_is_as_strict_where_it_is_cut(values: int, end: bytes) -> None:
    """A data array is parsed a slice at a time, cut at commas: a value missing at the end or between two commas
    is refused as orjson refuses it in a whole array."""
    body = _large_body(values, declared=300_000)
    with pytest.raises(ProtocolError, match="Input 'input' data is not valid JSON at byte") as refused:
        _parse(body[:body.rindex(b"]}]}")] + end + b"}]}", max_batch=None)
    assert refused.value.status == 400


def _large_body(values: int, declared: int) -> bytes:
    """A JSON request of ``values`` times 0.5 (4 bytes each: the most values per byte a float tensor takes) whose
    shape declares ``declared`` elements."""
    return (b'{"inputs": [{"name": "input", "datatype": "FP32", "shape": [%d, 1, 2, 2], "data": [' % (declared // 4)
            + b",".join([b"0.5"] * values) + b"]}]}")


def _peak(function: object, *args: object) -> tuple[object, int]:
    """``function(*args)`` and the most memory it held at once beyond what existed before, as tracemalloc counts
    it: every Python object and numpy array."""
    tracemalloc.start()
    try:
        result = function(*args)  # type: ignore[operator]
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_wrong_count_is_refused_before_the_values_are_built() -> None:
    """orjson would build a Python float per value (about 16 bytes of memory per byte of this body) before the
    count could be compared: the data array is counted on its text, and the request refused within its own size."""
    body = _large_body(2_000_000, declared=2_000_004)

    def parse() -> str:
        with pytest.raises(ProtocolError) as refused:
            parse_infer_request(body, None, INPUTS, OUTPUTS, None)
        return refused.value.message

    message, peak = _peak(parse)
    assert message == "Input 'input' has 2000000 elements; shape 500001x1x2x2 needs 2000004."
    assert peak < len(body), f"{peak} bytes at the peak for a body of {len(body)}"


def test_a_large_json_tensor_is_decoded_within_twice_its_body() -> None:
    body = _large_body(2_000_000, declared=2_000_000)
    request, peak = _peak(parse_infer_request, body, None, INPUTS, OUTPUTS, None)
    array = request.inputs["input"]  # type: ignore[attr-defined]
    assert array.shape == (500_000, 1, 2, 2) and array.dtype == np.float32 and (array == 0.5).all()
    assert peak < 2 * len(body), f"{peak} bytes at the peak for a body of {len(body)}"


def test_json_besides_the_data_arrays_is_bounded() -> None:
    """What is not a data array becomes Python objects: more than 256 KiB of it is refused before it is parsed."""
    with pytest.raises(ProtocolError, match="over 262144 bytes of JSON besides its inputs' data arrays") as refused:
        _parse(_request(id="x" * 300_000))
    assert refused.value.status == 400
    with pytest.raises(ProtocolError, match="besides its inputs' data arrays"):
        _parse(_request(inputs=[_input(shape=[1] * 600_000)]))


def test_arrays_and_objects_besides_the_data_arrays_are_bounded() -> None:
    """Under 256 KiB, 20,000 tiny objects in a parameter (and the request's own 7) are refused by their count before
    orjson builds them; a request with parameters, nested small data and an id of brackets is read."""
    with pytest.raises(ProtocolError, match=r"The request has 20007 JSON arrays and objects besides its inputs' "
                                            r"large data arrays; at most 16384 are read") as refused:
        _parse(_request(parameters={"x": [{}] * 20_000}))
    assert refused.value.status == 400
    read = _parse(_request(id="[" * 1000, parameters={"p": {"q": [1, [2]]}},
                           inputs=[_input(data=[[[[0, 1], [2, 3]]], [[[4, 5], [6, 7]]]])]))
    assert read.inputs["input"].tolist() == [[[[0, 1], [2, 3]]], [[[4, 5], [6, 7]]]]


def test_a_tensor_over_the_size_limit_is_refused_before_it_is_decoded() -> None:
    body = json.dumps(_request()).encode()
    with pytest.raises(ProtocolError, match="Input 'input' of shape 2x1x2x2 and datatype FP32 takes 32 bytes; the "
                                            r"limit is 31 bytes \(--max-body-mb") as refused:
        parse_infer_request(body, None, INPUTS, OUTPUTS, 8, max_tensor_bytes=31)
    assert refused.value.status == 413
    assert parse_infer_request(body, None, INPUTS, OUTPUTS, 8, max_tensor_bytes=32).inputs["input"].nbytes == 32


def test_the_body_limit_is_in_mib_as_its_help_says() -> None:
    import dataclasses

    from trtpipe.options import spec_of
    from trtpipe.serve.options import ServeOptions

    field = next(f for f in dataclasses.fields(ServeOptions) if f.name == "max_body_mb")
    assert "MiB" in spec_of(field).help and ServeOptions(max_body_mb=1).max_body_bytes == 2**20


@pytest.mark.parametrize(("body", "message"), [
    (_request(outputs=[{"name": "output", "parameters": {"classification": 3}}]),
     "Output 'output' has the parameter 'classification' (3): this server does not classify"),
    (_request(outputs=[{"name": "output", "parameters": {"classification": -1}}]), "'classification' (-1)"),
    (_request(inputs=[_input(parameters={"shared_memory_region": "r0"})]),
     "Input 'input' has the parameter 'shared_memory_region' (\"r0\"): this server has no shared memory"),
    (_request(outputs=[{"name": "output", "parameters": {"shared_memory_byte_size": 64}}]),
     "Output 'output' has the parameter 'shared_memory_byte_size'"),
    (_request(parameters={"binary_data_output": "yes"}),
     "The parameter 'binary_data_output' of the request must be true or false, not \"yes\""),
    (_request(parameters={"binary_data_output": 1}), "must be true or false, not 1"),
    (_request(outputs=[{"name": "output", "parameters": {"binary_data": 0}}]),
     "The parameter 'binary_data' of output 'output' must be true or false, not 0"),
    (_request(inputs=[_input()] * 3), "Input 'input' is given more than once (the request has 3 entries in 'inputs')"),
    (_request(inputs=[_input(), _input(name="b")]), "The request has 2 entries in 'inputs'; the model has 1 (input)"),
    (_request(outputs=[{"name": n} for n in ("output", "aux", "x")]), "The request has 3 entries in 'outputs'"),
], ids=["classification", "classification-negative", "shared-memory-input", "shared-memory-output",
        "string-boolean", "number-boolean", "output-number-boolean", "inputs-repeated", "inputs-over", "outputs-over"])
def test_parameters_are_checked_like_inputs(body: dict[str, object], message: str) -> None:
    """Parameters this server does not implement are refused naming them (ignored, classification answered every
    score and shared memory read nothing); booleans are JSON booleans only ("yes" and 1 counted as true)."""
    with pytest.raises(ProtocolError) as refused:
        _parse(body)
    assert refused.value.status == 400 and message in refused.value.message, refused.value.message


def test_custom_parameters_are_ignored() -> None:
    """KServe v2 lets a request carry parameters of its own: those this server does not know are not read."""
    body = _request(parameters={"priority": 3, "trace": {"id": "x"}, "binary_data_output": True},
                    inputs=[_input(parameters={"note": "anything"})], outputs=[{"name": "aux", "parameters": {"k": 1}}])
    parsed = _parse(body)
    assert parsed.outputs == [("aux", True)] and parsed.binary_default


def test_long_names_are_echoed_cut_and_marked() -> None:
    from trtpipe.serve.protocol import MESSAGE_LIMIT

    with pytest.raises(ProtocolError) as refused:
        _parse(_request(inputs=[_input(name="n" * 70_000)]))
    assert "'" + "n" * 256 + "...(70000 characters)'" in refused.value.message
    assert len(ProtocolError(400, "x" * 100_000).message) <= MESSAGE_LIMIT
