"""The Open Inference Protocol (KServe v2) over HTTP, with Triton's binary tensor data extension.

Pure functions from request bytes to arrays and from arrays to response bytes, so every rule of the protocol
is tested without a server. Violations raise ProtocolError with the HTTP status and a message naming the tensor.

A request is checked in two steps, for both transports (the gRPC service hands its requests to
:func:`infer_request` in the same form): first everything that needs no decoding, each input's datatype, shape,
decoded size and element count, its data held as a TensorData that can count itself; then the arrays are built,
straight in the model's dtype. How an HTTP body becomes that form, its JSON data arrays counted without being turned
into Python objects, is json_body.py's (:func:`trtpipe.serve.json_body.parse_infer_request`); gRPC's
messages are grpc/messages.py's.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from trtpipe.artifact.tensors import TensorInfo
from trtpipe.shapes import format_shape
from trtpipe.vocab import DTYPES

HEADER_LENGTH = "Inference-Header-Content-Length"
DATATYPES = {entry.kserve: entry.numpy for entry in DTYPES}  # KServe v2 datatype -> numpy dtype name
NUMPY_TO_DATATYPE = {v: k for k, v in DATATYPES.items()}
MAX_ELEMENTS = 2**31  # per input tensor; the body limit bounds real requests long before this


NAME_SHOWN = 256  # characters of a name a client sent that a message echoes
MESSAGE_LIMIT = 4096  # characters of any error message: a gRPC status travels in its trailers, which clients bound


class ProtocolError(Exception):
    """A request refused with an HTTP ``status`` (each transport maps it to its own) and a one-line ``message``,
    cut at MESSAGE_LIMIT characters whatever it echoes."""

    def __init__(self, status: int, message: str) -> None:
        message = bounded(message)
        super().__init__(message)
        self.status = status
        self.message = message


def bounded(message: str) -> str:
    """``message`` cut at MESSAGE_LIMIT characters, saying so."""
    if len(message) <= MESSAGE_LIMIT:
        return message
    return message[:MESSAGE_LIMIT - 40] + f"... (cut: {len(message)} characters)"


def shown(name: str) -> str:
    """A name a client sent (a model's, a tensor's), as a message echoes it: its first NAME_SHOWN characters, and a
    mark saying how long it was when it is longer. Echoed whole, a 70,000-character model name made a gRPC status
    longer than the client's metadata limit, and the client reported UNAVAILABLE instead of NOT_FOUND."""
    if len(name) <= NAME_SHOWN:
        return name
    return f"{name[:NAME_SHOWN]}...({len(name)} characters)"


def check_deadline(deadline: float | None) -> None:
    """ProtocolError(504) once ``deadline`` (a time.monotonic() value) has passed: decoding a request counts
    against its ``--timeout-ms``, and a request past it stops taking CPU where decoding looks at the clock (each
    block of a scan, each slice of values, each step of the checks)."""
    if deadline is not None and time.monotonic() > deadline:
        raise ProtocolError(504, "The request was not decoded within its time limit (--timeout-ms, or the decode "
                                 "budget): send it as binary data, or in smaller requests.")


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


# -- one input's data, counted before it is decoded ------------------------------------------------------------------


class TensorData(ABC):
    """One input's values as a transport carries them: JSON text, raw bytes, gRPC's typed contents.

    Every form says how many values it holds before any array is built, so that a tensor over the size limit or
    with the wrong element count is refused while the request costs no more than its body; only then is it
    decoded, straight into an array of the model's dtype.
    """

    @abstractmethod
    def check(self, name: str, shape: list[int], datatype: str, dtype: np.dtype[Any]) -> None:
        """ProtocolError(400) unless the data holds exactly the elements ``shape`` needs; builds no array."""

    @abstractmethod
    def decode(self, name: str, datatype: str, dtype: np.dtype[Any]) -> np.ndarray:
        """The values as a flat array of ``dtype``, refused (400) when one does not fit it."""


def count_mismatch(name: str, have: int, shape: list[int]) -> ProtocolError:
    return ProtocolError(400, f"Input '{name}' has {have} elements; shape {format_shape(shape)} needs "
                              f"{math.prod(shape)}.")


class RawData(TensorData):
    """Raw little-endian bytes (HTTP's binary data extension, gRPC's raw_input_contents), used in place."""

    def __init__(self, buffer: bytes | memoryview, what: str) -> None:
        self.buffer = buffer
        self.what = what  # how the message names it: "binary data", "raw_input_contents"

    def check(self, name: str, shape: list[int], datatype: str, dtype: np.dtype[Any]) -> None:
        need = math.prod(shape) * dtype.itemsize
        if len(self.buffer) != need:
            raise ProtocolError(400, f"Input '{name}' has {len(self.buffer)} bytes of {self.what}; shape "
                                     f"{format_shape(shape)} of {datatype} needs {need}.")

    def decode(self, name: str, datatype: str, dtype: np.dtype[Any]) -> np.ndarray:
        return np.frombuffer(self.buffer, dtype=dtype)


def describe_json(value: Any) -> str:
    """A JSON value as a client wrote it, for messages: null, true, "NaN", an object."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    text = orjson.dumps(value).decode()
    return text if len(text) <= 40 else text[:37] + "..."


# -- the request ------------------------------------------------------------------------------------------------------


@dataclass
class _Planned:
    """An input that passed every check that needs no decoding."""

    info: TensorInfo
    shape: list[int]
    datatype: str
    dtype: np.dtype[Any]
    data: TensorData


def infer_request(header: dict[str, Any], binary: memoryview, inputs: list[TensorInfo], outputs: list[TensorInfo],
                  max_batch_size: int | None, max_tensor_bytes: int | None = None,
                  deadline: float | None = None) -> InferRequest:
    """Check a request in the JSON form (``data`` as TensorData, or ``binary_data_size`` slices of ``binary``)
    against the model's tensors, then decode it. Both transports come here, so both accept and refuse the same
    things; every check that needs no decoding runs before any array is built.

    Each step costs time in proportion to the request at most, and within its budget (``deadline``, as decoding):
    a request with more ``inputs`` or ``outputs`` entries than the model declares is refused before any entry is
    looked at (61,000 copies of one input took 33 s of CPU to be found duplicates: docs/results/serving.md)."""
    if not isinstance(header, dict) or not isinstance(header.get("inputs"), list):
        raise ProtocolError(400, "The request needs an 'inputs' list.")
    request_id = header.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise ProtocolError(400, f"'id' must be a string, not {type(request_id).__name__}.")
    parameters = _parameters(header, "the request")
    _refuse_unsupported(parameters, "The request")
    entries = header["inputs"]
    _check_count(entries, inputs, "inputs")
    for item in entries:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ProtocolError(400, "Each entry of 'inputs' must be an object with a string 'name'.")
        _parameters(item, f"input '{shown(item['name'])}'")

    expected = {t.name: t for t in inputs}
    given = [i["name"] for i in entries]
    twice = _repeated(given)
    if twice:
        raise ProtocolError(400, f"Input {', '.join(repr(shown(t)) for t in twice)} is given more than once.")
    missing, extra = sorted(set(expected) - set(given)), sorted(set(given) - set(expected))
    if missing or extra:
        raise ProtocolError(400, f"Inputs do not match the model: missing {missing or 'none'}, unexpected "
                                 f"{[shown(e) for e in extra] or 'none'} (the model takes {', '.join(expected)}).")
    check_deadline(deadline)
    planned: list[_Planned] = []
    offset = 0
    for item in entries:
        plan, used = _plan_input(item, expected[item["name"]], binary[offset:], max_tensor_bytes)
        offset += used
        planned.append(plan)
    if offset != len(binary):
        raise ProtocolError(400, f"The binary data has {len(binary)} bytes, but the inputs' binary_data_size add "
                                 f"up to {offset}.")
    _check_batch(planned, inputs, max_batch_size)
    requested = _requested_outputs(header, outputs, parameters)
    check_deadline(deadline)
    arrays = {p.info.name: p.data.decode(p.info.name, p.datatype, p.dtype).reshape(p.shape) for p in planned}
    return InferRequest(request_id, arrays, requested, _flag(parameters, "binary_data_output", "the request", False))


def _repeated(names: list[Any]) -> list[Any]:
    """The names that occur more than once, sorted: one pass with a set (hashable names only are compared)."""
    seen: set[Any] = set()
    twice: set[Any] = set()
    for name in names:
        if isinstance(name, str):
            (twice if name in seen else seen).add(name)
    return sorted(twice)


def check_count(count: int, first: list[Any], declared: list[TensorInfo], field: str) -> None:
    """ProtocolError(400) when a request has more entries in ``field`` ('inputs' or 'outputs': ``count``) than the
    model declares tensors, before any entry is looked at: only ``first``, the names of the first few (one more
    than the model declares), are, to say which name repeats. Both transports call it."""
    if count <= len(declared):
        return
    twice = _repeated(first[:len(declared) + 1])
    if twice:
        verb = "is given" if field == "inputs" else "is requested"
        raise ProtocolError(400, f"{field.capitalize()[:-1]} {', '.join(repr(shown(t)) for t in twice)} {verb} "
                                 f"more than once (the request has {count} entries in '{field}').")
    raise ProtocolError(400, f"The request has {count} entries in '{field}'; the model has {len(declared)} "
                             f"({', '.join(t.name for t in declared)}): name each at most once.")


def _check_count(entries: list[Any], declared: list[TensorInfo], field: str) -> None:
    first = [e.get("name") if isinstance(e, dict) else None for e in entries[:len(declared) + 1]]
    check_count(len(entries), first, declared, field)


def _check_batch(planned: list[_Planned], inputs: list[TensorInfo], max_batch_size: int | None) -> None:
    """Rows of every batched input agree, and none is over the model's maximum batch size."""
    rows = {p.info.name: p.shape[0] for p in planned if p.shape}
    batched = [t.name for t in inputs if t.shape and not isinstance(t.shape[0], int)]  # a dynamic first axis
    if len(batched) == len(inputs) and len(set(rows.values())) > 1:  # one batch axis: rows must agree
        sizes = ", ".join(f"{name} {rows[name]}" for name in batched)
        raise ProtocolError(400, f"The inputs disagree on the batch size ({sizes}): give every input the same "
                                 "number of rows.")
    over = [p for p in planned if p.shape and max_batch_size is not None and p.shape[0] > max_batch_size]
    if over:
        named = ", ".join(f"'{p.info.name}' (shape {format_shape(p.shape)})" for p in over)
        raise ProtocolError(400, f"Input {named} has a batch of {over[0].shape[0]}, over the model's maximum batch "
                                 f"size {max_batch_size}: split the request.")


def _requested_outputs(header: dict[str, Any], outputs: list[TensorInfo],
                       parameters: dict[str, Any]) -> list[tuple[str, bool]] | None:
    if header.get("outputs") is None:
        return None
    if not isinstance(header["outputs"], list):
        raise ProtocolError(400, "'outputs' must be a list of {\"name\": ...} objects.")
    _check_count(header["outputs"], outputs, "outputs")
    known = {t.name for t in outputs}
    default = _flag(parameters, "binary_data_output", "the request", False)
    requested: list[tuple[str, bool]] = []
    for item in header["outputs"]:
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str) or name not in known:
            read = repr(shown(name)) if isinstance(name, str) else describe_json(name)
            raise ProtocolError(400, f"Unknown output {read}: the model's outputs are {', '.join(known)}.")
        if name in {n for n, _ in requested}:
            raise ProtocolError(400, f"Output '{name}' is requested twice.")
        own = _parameters(item, f"output '{name}'")
        _refuse_unsupported(own, f"Output '{name}'")
        requested.append((name, _flag(own, "binary_data", f"output '{name}'", default)))
    return requested


# Parameters of KServe v2 extensions (Triton's) that this server does not implement: a request that uses one is
# refused, since ignoring it would answer something else than was asked (all the classes' scores instead of the top
# ones; zeros read from a request without data). Any other parameter is a custom one, which KServe v2 lets a server
# ignore: the serving guide (docs/guides/serving.md) lists them.
UNSUPPORTED_PARAMETERS = {
    "classification": "this server does not classify: request the output and take its top classes yourself",
    "shared_memory_region": "this server has no shared memory: send the values in the request",
    "shared_memory_byte_size": "this server has no shared memory: send the values in the request",
    "shared_memory_offset": "this server has no shared memory: send the values in the request",
}


def _refuse_unsupported(parameters: dict[str, Any], what: str) -> None:
    """ProtocolError(400) naming the first parameter of UNSUPPORTED_PARAMETERS that ``parameters`` holds."""
    for key, why in UNSUPPORTED_PARAMETERS.items():
        if key in parameters:
            raise ProtocolError(400, f"{what} has the parameter '{key}' ({describe_json(parameters[key])}): {why}.")


def _flag(parameters: dict[str, Any], key: str, what: str, default: bool) -> bool:
    """A boolean parameter: a JSON true or false, or ``default`` when absent; anything else ("yes", 1) a 400."""
    value = parameters.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ProtocolError(400, f"The parameter '{key}' of {what} must be true or false, not "
                                 f"{describe_json(value)}.")
    return value


def _parameters(item: dict[str, Any], what: str) -> dict[str, Any]:
    value = item.get("parameters")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ProtocolError(400, f"'parameters' of {what} must be an object, not {type(value).__name__}.")
    return value


def _plan_input(item: dict[str, Any], info: TensorInfo, binary: memoryview,
                max_tensor_bytes: int | None) -> tuple[_Planned, int]:
    """One input checked without decoding it: datatype, shape, decoded size and element count. Returns its plan
    and the bytes of ``binary`` it takes."""
    name = info.name
    datatype = item.get("datatype")
    if datatype != datatype_of(info.dtype):
        read = shown(datatype) if isinstance(datatype, str) else describe_json(datatype)
        raise ProtocolError(400, f"Input '{name}' has datatype {read}; the model expects "
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
    if max_tensor_bytes is not None and count * dtype.itemsize > max_tensor_bytes:
        raise ProtocolError(413, f"Input '{name}' of shape {format_shape(shape)} and datatype {datatype} takes "
                                 f"{count * dtype.itemsize} bytes; the limit is {max_tensor_bytes} bytes "
                                 f"(--max-body-mb, in MiB).")
    parameters = item.get("parameters") or {}
    _refuse_unsupported(parameters, f"Input '{name}'")
    size = parameters.get("binary_data_size")
    used = 0
    if size is not None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            read = f"the string {size!r}" if isinstance(size, str) else describe_json(size)
            raise ProtocolError(400, f"Input '{name}' binary_data_size must be a non-negative integer, got {read}.")
        if size > len(binary):
            raise ProtocolError(400, f"Input '{name}' declares binary_data_size {size}, but {len(binary)} bytes "
                                     "remain.")
        data: TensorData = RawData(binary[:size], "binary data")
        used = size
    elif "data" not in item:
        raise ProtocolError(400, f"Input '{name}' has neither 'data' nor binary_data_size.")
    else:
        data = item["data"]
        if not isinstance(data, TensorData):  # each transport reads its values into one (json_body: JsonValue)
            raise TypeError(f"Input '{name}' data is a {type(data).__name__}, not TensorData.")
    data.check(name, shape, datatype, dtype)
    return _Planned(info, shape, datatype, dtype, data), used
