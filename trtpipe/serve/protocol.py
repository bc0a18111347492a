"""The Open Inference Protocol (KServe v2) over HTTP, with Triton's binary tensor data extension.

Pure functions from request bytes to arrays and from arrays to response bytes, so every rule of the protocol
is tested without a server. Violations raise ProtocolError with the HTTP status and a message naming the tensor.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from trtpipe.runtime.base import TensorInfo
from trtpipe.shapes import format_shape
from trtpipe.vocab import DTYPES

HEADER_LENGTH = "Inference-Header-Content-Length"
DATATYPES = {entry.kserve: entry.numpy for entry in DTYPES}  # KServe v2 datatype -> numpy dtype name
NUMPY_TO_DATATYPE = {v: k for k, v in DATATYPES.items()}
MAX_ELEMENTS = 2**31  # per input tensor; the body limit bounds real requests long before this


class ProtocolError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class InferRequest:
    id: str | None
    inputs: dict[str, np.ndarray]
    outputs: list[tuple[str, bool]] | None  # requested (name, binary); None: all, as binary_default says
    binary_default: bool


def datatype_of(dtype: str) -> str:
    return NUMPY_TO_DATATYPE.get(dtype, dtype.upper())


def tensor_metadata(info: TensorInfo) -> dict[str, Any]:
    return {"name": info.name, "datatype": datatype_of(info.dtype),
            "shape": [d if isinstance(d, int) else -1 for d in info.shape]}


def parse_infer_request(body: bytes, header_length: int | None, inputs: list[TensorInfo],
                        outputs: list[TensorInfo], max_batch_size: int | None) -> InferRequest:
    """Decode and check an infer request against the model's tensors."""
    if header_length is not None:
        if header_length < 0 or header_length > len(body):
            raise ProtocolError(400, f"{HEADER_LENGTH} is {header_length}, but the body has {len(body)} bytes.")
        header_bytes, binary = body[:header_length], memoryview(body)[header_length:]
    else:
        header_bytes, binary = body, memoryview(b"")
    try:
        header = orjson.loads(header_bytes)  # nesting is capped (1,024 levels): deep JSON is a 400, not a crash
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        raise ProtocolError(400, f"The request is not valid JSON ({error}).") from None
    if not isinstance(header, dict) or not isinstance(header.get("inputs"), list):
        raise ProtocolError(400, "The request needs an 'inputs' list.")
    request_id = header.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise ProtocolError(400, f"'id' must be a string, not {type(request_id).__name__}.")
    parameters = _parameters(header, "the request")
    for item in header["inputs"]:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ProtocolError(400, "Each entry of 'inputs' must be an object with a string 'name'.")
        _parameters(item, f"input '{item['name']}'")

    expected = {t.name: t for t in inputs}
    given = [i["name"] for i in header["inputs"]]
    missing, extra = sorted(set(expected) - set(given)), sorted({str(g) for g in given} - set(expected))
    twice = sorted({str(g) for g in given if given.count(g) > 1})
    if twice:
        raise ProtocolError(400, f"Input {', '.join(repr(t) for t in twice)} is given more than once.")
    if missing or extra:
        raise ProtocolError(400, f"Inputs do not match the model: missing {missing or 'none'}, unexpected "
                                 f"{extra or 'none'} (the model takes {', '.join(expected)}).")
    arrays: dict[str, np.ndarray] = {}
    offset = 0
    for item in header["inputs"]:
        info = expected[item["name"]]
        array, used = _decode_input(item, info, binary[offset:])
        offset += used
        arrays[info.name] = array
    if offset != len(binary):
        raise ProtocolError(400, f"The binary data has {len(binary)} bytes, but the inputs' binary_data_size add "
                                 f"up to {offset}.")
    batch = {int(a.shape[0]) for a in arrays.values() if a.ndim}
    batched = [t.name for t in inputs if t.shape and not isinstance(t.shape[0], int)]  # a dynamic first axis
    if len(batched) == len(inputs) and len(batch) > 1:  # one batch axis shared by every input: rows must agree
        sizes = ", ".join(f"{name} {arrays[name].shape[0]}" for name in batched)
        raise ProtocolError(400, f"The inputs disagree on the batch size ({sizes}): give every input the same "
                                 "number of rows.")
    if max_batch_size is not None and batch and max(batch) > max_batch_size:
        raise ProtocolError(400, f"Batch of {max(batch)} exceeds the model's maximum batch size {max_batch_size}.")

    requested = None
    if header.get("outputs") is not None:
        if not isinstance(header["outputs"], list):
            raise ProtocolError(400, "'outputs' must be a list of {\"name\": ...} objects.")
        known = {t.name for t in outputs}
        requested = []
        for item in header["outputs"]:
            name = item.get("name") if isinstance(item, dict) else None
            if not isinstance(name, str) or name not in known:
                raise ProtocolError(400, f"Unknown output {name!r}: the model's outputs are {', '.join(known)}.")
            if name in {n for n, _ in requested}:
                raise ProtocolError(400, f"Output '{name}' is requested twice.")
            binary_flag = _parameters(item, f"output '{name}'").get("binary_data",
                                                                    parameters.get("binary_data_output"))
            requested.append((name, bool(binary_flag)))
    return InferRequest(request_id, arrays, requested, bool(parameters.get("binary_data_output", False)))


def _parameters(item: dict[str, Any], what: str) -> dict[str, Any]:
    value = item.get("parameters")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ProtocolError(400, f"'parameters' of {what} must be an object, not {type(value).__name__}.")
    return value


def _decode_input(item: dict[str, Any], info: TensorInfo, binary: memoryview) -> tuple[np.ndarray, int]:
    name = info.name
    datatype = item.get("datatype")
    if datatype != datatype_of(info.dtype):
        raise ProtocolError(400, f"Input '{name}' has datatype {datatype}; the model expects "
                                 f"{datatype_of(info.dtype)}.")
    shape = item.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                              for d in shape):
        raise ProtocolError(400, f"Input '{name}' needs a shape: a list of non-negative integers.")
    if 0 in shape:  # an empty tensor: nothing to run, and kernels refuse it
        raise ProtocolError(400, f"Input '{name}' has shape {format_shape(shape)}: every dimension must be at "
                                 "least 1.")
    if len(shape) != len(info.shape) or any(isinstance(want, int) and want != got
                                             for want, got in zip(info.shape, shape, strict=True)):
        raise ProtocolError(400, f"Input '{name}' has shape {format_shape(shape)}; the model expects "
                                 f"{format_shape(info.shape)} ('?' is free).")
    count = math.prod(shape)  # Python integers: a huge shape cannot wrap around to a small count
    dtype = np.dtype(DATATYPES[datatype])
    if count > MAX_ELEMENTS:
        raise ProtocolError(400, f"Input '{name}' has shape {format_shape(shape)}: {count} elements, over the "
                                 f"limit of {MAX_ELEMENTS}.")
    size = (item.get("parameters") or {}).get("binary_data_size")
    if size is not None:
        if not isinstance(size, int) or size < 0 or size > len(binary):
            raise ProtocolError(400, f"Input '{name}' declares binary_data_size {size}, but {len(binary)} bytes "
                                     "remain.")
        if size != count * dtype.itemsize:
            raise ProtocolError(400, f"Input '{name}' has {size} bytes of binary data; shape "
                                     f"{format_shape(shape)} of {datatype} needs {count * dtype.itemsize}.")
        return np.frombuffer(binary[:size], dtype=dtype).reshape(shape), size
    if "data" not in item:
        raise ProtocolError(400, f"Input '{name}' has neither 'data' nor binary_data_size.")
    try:
        flat = _json_values(item["data"], dtype, name, datatype)
    except (ValueError, TypeError, OverflowError) as error:
        raise ProtocolError(400, f"Input '{name}' data cannot be read as {datatype} ({error}).") from None
    if flat.size != count:
        raise ProtocolError(400, f"Input '{name}' has {flat.size} elements; shape {format_shape(shape)} needs "
                                 f"{count}.")
    return flat.reshape(shape), 0


def _json_values(data: Any, dtype: np.dtype, name: str, datatype: str) -> np.ndarray:
    """JSON ``data`` as a flat array of ``dtype``. An integer tensor takes whole numbers within its type's range
    only: numpy would wrap 300 into a uint8 or truncate 1.5 without a word, and the model would run on other
    values than the client sent."""
    if dtype.kind not in "iu":
        return np.asarray(data, dtype=dtype).reshape(-1)
    values = np.asarray(data)
    if values.dtype.kind not in "iu" or values.dtype == np.bool_:
        raise ProtocolError(400, f"Input '{name}' is {datatype}: its data must be whole numbers, not "
                                 f"{'booleans' if values.dtype == np.bool_ else values.dtype.name} values.")
    info = np.iinfo(dtype)
    if values.size and (values.min() < info.min or values.max() > info.max):
        raise ProtocolError(400, f"Input '{name}' is {datatype}: its values must lie in [{info.min}, {info.max}], "
                                 f"got [{values.min()}, {values.max()}].")
    return values.astype(dtype).reshape(-1)


def encode_infer_response(model_name: str, version: str, request: InferRequest, outputs: list[TensorInfo],
                          arrays: list[np.ndarray]) -> tuple[bytes, dict[str, str]]:
    """The response body and headers: JSON, with binary tensors appended where they were asked for."""
    wanted = request.outputs or [(t.name, request.binary_default) for t in outputs]
    by_name = {t.name: a for t, a in zip(outputs, arrays, strict=True)}
    entries, chunks = [], []
    for name, binary in wanted:
        array = np.ascontiguousarray(by_name[name])
        entry: dict[str, Any] = {"name": name, "datatype": datatype_of(array.dtype.name), "shape": list(array.shape)}
        if binary:
            raw = array.tobytes()
            entry["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
        else:
            flat = array.reshape(-1)
            if flat.dtype.kind == "f" and not np.isfinite(flat).all():
                # JSON has no NaN or Infinity: they go out as null, and the entry says so. Binary outputs carry
                # the exact IEEE values.
                entry["parameters"] = {"non_finite_as_null": int((~np.isfinite(flat)).sum())}
                entry["data"] = [None if not np.isfinite(v) else float(v) for v in flat]
            else:
                entry["data"] = flat.tolist()
        entries.append(entry)
    response: dict[str, Any] = {"model_name": model_name, "model_version": version, "outputs": entries}
    if request.id is not None:
        response["id"] = request.id
    header = json.dumps(response, separators=(",", ":"), allow_nan=False).encode()
    if not chunks:
        return header, {"content-type": "application/json"}
    return header + b"".join(chunks), {"content-type": "application/octet-stream",
                                      HEADER_LENGTH: str(len(header))}
