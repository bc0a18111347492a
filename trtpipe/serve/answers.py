"""An infer request's answer: its size checked against ``--max-response-mb`` before anything is encoded, then the HTTP
body (JSON, with binary tensors appended where they were asked for) or gRPC's raw outputs.

Answers are bounded like requests: a model with a large output answered a 393 KB request with 1.4 GB of JSON, and
the server's memory grew by as much and stayed grown (docs/results/serving.md). The size an answer would take is
known from the outputs' shapes and types before a byte is written: binary data takes the arrays' bytes, JSON at most
:data:`JSON_CHARS` characters a value. A large JSON array is encoded a slice at a time (see
:func:`encode_infer_response`), in a worker thread (``http/app.py``), so that the event loop and the other threads get
the GIL between slices.
"""

from __future__ import annotations

import secrets
from typing import Any

import numpy as np
import orjson

from trtpipe.artifact.tensors import TensorInfo
from trtpipe.serve.protocol import HEADER_LENGTH, InferRequest, ProtocolError, datatype_of
from trtpipe.shapes import format_shape

# The longest text of one value in JSON, its comma included: "-1.1754944e-38," for FP32 (orjson writes FP16 as FP32
# text), "-2.2250738585072014e-308," for FP64, "-9223372036854775808," for INT64, "false," for BOOL.
JSON_CHARS = {"bool": 6, "int8": 5, "uint8": 4, "int16": 7, "uint16": 6, "int32": 12, "uint32": 11, "int64": 21,
              "uint64": 21, "float16": 16, "float32": 16, "float64": 25}
JSON_SLICE = 1 << 16  # values of one output encoded per orjson call: the GIL is free for others between calls
LARGE_ANSWER = 1 << 20  # bytes: an answer above this is encoded in a worker thread, and memory is given back after it


def wanted_outputs(request: InferRequest, outputs: list[TensorInfo],
                   arrays: list[np.ndarray]) -> list[tuple[str, np.ndarray, bool]]:
    """The outputs the answer carries, in order: (name, array, whether as binary data)."""
    by_name = {t.name: a for t, a in zip(outputs, arrays, strict=True)}
    wanted = request.outputs or [(t.name, request.binary_default) for t in outputs]
    return [(name, by_name[name], binary) for name, binary in wanted]


def answer_size(wanted: list[tuple[str, np.ndarray, bool]]) -> int:
    """Bytes the answer's tensors take at most: binary data its bytes, JSON data its longest text."""
    return sum(_size(array, binary) for _, array, binary in wanted)


def _size(array: np.ndarray, binary: bool) -> int:
    return array.nbytes if binary else array.size * JSON_CHARS.get(array.dtype.name, 25)


def check_answer_size(wanted: list[tuple[str, np.ndarray, bool]], limit: int, transport: str = "http") -> None:
    """ProtocolError(413) when the answer would take more than ``limit`` bytes (``--max-response-mb``), before
    anything is encoded: it names the largest output, its size, and what to do (binary data, over HTTP, takes a
    fraction of JSON's; fewer rows always help). gRPC reports it as RESOURCE_EXHAUSTED."""
    total = answer_size(wanted)
    if total <= limit:
        return
    name, array, binary = max(wanted, key=lambda w: _size(w[1], w[2]))
    what = f"Output '{name}' (shape {format_shape(list(array.shape))}, {datatype_of(array.dtype.name)})"
    if binary or transport != "http":
        raise ProtocolError(413, f"{what} takes {array.nbytes} bytes; the answer would take {total}, over the limit "
                                 f"of {limit} bytes (--max-response-mb, in MiB): send fewer rows.")
    raise ProtocolError(413, f"{what} would take up to {_size(array, False)} bytes as JSON; the answer would take up "
                             f"to {total}, over the limit of {limit} bytes (--max-response-mb, in MiB): ask for it as "
                             f"binary data (\"binary_data_output\": true, {array.nbytes} bytes), or send fewer rows.")


def encode_infer_response(model_name: str, version: str, request: InferRequest, outputs: list[TensorInfo],
                          arrays: list[np.ndarray]) -> tuple[bytes, dict[str, str]]:
    """The response body and headers: JSON, with binary tensors appended where they were asked for.

    orjson writes numpy arrays itself, in C (NaN and infinities as null, each float in its own type's shortest
    form): no Python object per value (tolist() and json took an order of magnitude longer: docs/results/serving.md,
    'Request decoding costs'). A data array over JSON_SLICE values is written a slice at a time, each slice put in
    the place of a placeholder (unguessable, per answer) once the rest is written: orjson holds the GIL for the
    whole of one call, so that one 100 MB array held every other thread, the event loop's included, for seconds."""
    entries, chunks = [], []
    nonce = secrets.token_hex(8)
    large: dict[bytes, np.ndarray] = {}
    for name, output, binary in wanted_outputs(request, outputs, arrays):
        array = np.ascontiguousarray(output)
        entry: dict[str, Any] = {"name": name, "datatype": datatype_of(array.dtype.name), "shape": list(array.shape)}
        if binary:
            raw = array.tobytes()
            entry["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
        else:
            flat = array.reshape(-1).astype(array.dtype.newbyteorder("="), copy=False)
            if flat.dtype.kind == "f" and not np.isfinite(flat).all():
                # JSON has no NaN or Infinity: they go out as null, and the entry says so. Binary outputs carry
                # the exact IEEE values.
                entry["parameters"] = {"non_finite_as_null": int((~np.isfinite(flat)).sum())}
            if flat.size > JSON_SLICE:
                placeholder = f"{nonce}:{len(large)}"
                large[f'"{placeholder}"'.encode()] = flat
                entry["data"] = placeholder
            else:
                entry["data"] = flat
        entries.append(entry)
    response: dict[str, Any] = {"model_name": model_name, "model_version": version, "outputs": entries}
    if request.id is not None:
        response["id"] = request.id
    header = orjson.dumps(response, option=orjson.OPT_SERIALIZE_NUMPY)
    if large:
        header = _fill(header, large)
    if not chunks:
        return header, {"content-type": "application/json"}
    return header + b"".join(chunks), {"content-type": "application/octet-stream",
                                      HEADER_LENGTH: str(len(header))}


def _fill(header: bytes, large: dict[bytes, np.ndarray]) -> bytes:
    """``header`` with each placeholder (quoted) replaced by its array's JSON, written a slice at a time."""
    pieces: list[bytes] = []
    pos = 0
    for placeholder, flat in large.items():
        at = header.index(placeholder, pos)
        pieces.append(header[pos:at])
        pieces.append(b"[")
        for start in range(0, flat.size, JSON_SLICE):
            if start:
                pieces.append(b",")
            pieces.append(orjson.dumps(flat[start:start + JSON_SLICE], option=orjson.OPT_SERIALIZE_NUMPY)[1:-1])
        pieces.append(b"]")
        pos = at + len(placeholder)
    pieces.append(header[pos:])
    return b"".join(pieces)
