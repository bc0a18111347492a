"""An HTTP infer request's body read as the protocol module checks it: its JSON, each input's ``data`` a TensorData,
and the binary data after it (Triton's binary tensor data extension).

A JSON request's data arrays are not turned into Python objects to be counted: orjson would make some 16 bytes of them
per byte of body before a wrong count could be refused (measured: docs/results/serving.md, 'Request decoding costs').
:func:`read_json` cuts each plain ``"data": [...]`` array out of the text and leaves it as a :class:`JsonArray`,
counted by a vectorised scan of its bytes (its nesting followed from its brackets) and parsed a slice at a time once
the request's checks have passed; orjson parses only the small rest. The checks themselves, which both transports
share, are protocol.py's (:func:`~trtpipe.serve.protocol.infer_request`).
"""

from __future__ import annotations

import math
import re
import secrets
from collections.abc import Iterator
from typing import Any

import numpy as np
import orjson

from trtpipe.artifact.tensors import TensorInfo
from trtpipe.serve.collector import paused_collection
from trtpipe.serve.json_nesting import EMPTY_ARRAY, BracketNesting, Nesting, TooDeep, check_nesting, nesting_of
from trtpipe.serve.protocol import (
    HEADER_LENGTH,
    InferRequest,
    ProtocolError,
    TensorData,
    check_deadline,
    count_mismatch,
    describe_json,
    infer_request,
)


class JsonArray(TensorData):
    """A ``data`` array of a JSON request, kept as text: counted by a vectorised scan of its bytes and parsed a
    slice at a time, so that no Python object exists for more than one slice's values.

    orjson would turn the whole array into Python floats (many times the body's size in memory:
    docs/results/serving.md, 'Request decoding costs') before anyone could see that the count is wrong; here the
    count costs nothing and the values go straight into the model's dtype. Data nested as its shape is flattened in
    row-major order, as Triton reads it (any other nesting is refused: :func:`check_nesting`).
    """

    def __init__(self, text: bytes | bytearray, start: int, end: int, elements: int, nesting: Nesting,
                 deadline: float | None = None) -> None:
        self.text, self.start, self.end = text, start, end  # text[start] is '[', text[end] its closing ']'
        self.elements = elements
        self.nesting = nesting  # the length at each depth, why the arrays are not rectangular, or TooDeep
        self.deadline = deadline  # decoding stops (504) past it

    def check(self, name: str, shape: list[int], datatype: str, dtype: np.dtype[Any]) -> None:
        if isinstance(self.nesting, TooDeep):  # its values were not counted past the first bracket too deep
            check_nesting(name, self.nesting, shape)
        if self.elements != math.prod(shape):
            raise count_mismatch(name, self.elements, shape)
        check_nesting(name, self.nesting, shape)

    def decode(self, name: str, datatype: str, dtype: np.dtype[Any]) -> np.ndarray:
        out = np.empty(self.elements, dtype)
        filled = 0
        for values, kinds in self.slices(f"Input '{name}' data"):
            if filled + len(values) > self.elements:  # cannot happen: the scan counted them
                raise count_mismatch(name, filled + len(values), [self.elements])
            out[filled:filled + len(values)] = typed_values(values, dtype, name, datatype, kinds)
            filled += len(values)
        if filled != self.elements:
            raise count_mismatch(name, filled, [self.elements])
        return out

    def slices(self, name: str) -> Iterator[tuple[list[Any], set[type] | None]]:
        """The values, a slice of about SLICE_BYTES at a time, cut at commas (brackets read as spaces: any comma
        then separates two values, and a missing or doubled one is still invalid JSON), each with the types its
        text shows it holds (see :func:`_kinds`). ``name`` says what the array is, in messages."""
        pos, end = self.start + 1, self.end
        while True:
            check_deadline(self.deadline)
            cut = self.text.find(b",", pos + SLICE_BYTES, end) if pos + SLICE_BYTES < end else -1
            stop = end if cut < 0 else cut
            text = b"[" + self.text[pos:stop].translate(_BRACKETS_AS_SPACES) + b"]"
            try:
                values = orjson.loads(text)
            except orjson.JSONDecodeError as error:
                raise ProtocolError(400, f"{name} is not valid JSON at byte {pos + error.pos - 1} ({error.msg}).") \
                    from None
            if not values:
                raise ProtocolError(400, f"{name} is not valid JSON at byte {pos} (no value between commas).")
            yield values, _kinds(text)
            if cut < 0:
                return
            pos = cut + 1


class JsonValue(TensorData):
    """A ``data`` value orjson has already built: a small array (under SMALL_ARRAY bytes), one that is not a plain
    array of numbers (strings, objects, NaN), or one spelled so that the scan did not find it. It is small (see
    JSON_OUTSIDE_DATA_LIMIT) and is refused or read with the same rules as JsonArray."""

    def __init__(self, value: Any) -> None:
        self.value = value
        self.flat: list[Any] | None = None
        self.empty = False  # whether it holds an empty array, which a JsonArray's slices refuse as JSON

    def check(self, name: str, shape: list[int], datatype: str, dtype: np.dtype[Any]) -> None:
        self.flat, self.empty = _flatten(self.value, name)
        if len(self.flat) != math.prod(shape):
            raise count_mismatch(name, len(self.flat), shape)
        if self.empty:
            raise ProtocolError(400, f"Input '{name}' data {EMPTY_ARRAY}.")
        check_nesting(name, nesting_of(self.value), shape)

    def decode(self, name: str, datatype: str, dtype: np.dtype[Any]) -> np.ndarray:
        flat = self.flat if self.flat is not None else _flatten(self.value, name)[0]
        return typed_values(flat, dtype, name, datatype)


def _flatten(value: Any, name: str) -> tuple[list[Any], bool]:
    """A nested JSON array's values in row-major order, and whether it holds an empty array (iteratively: orjson
    allows 1,024 levels, more than Python's recursion limit)."""
    if not isinstance(value, list):
        raise ProtocolError(400, f"Input '{name}' data must be a JSON array, not {describe_json(value)}.")
    flat: list[Any] = []
    empty = False
    stack = [iter(value)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                empty = empty or not item
                stack.append(iter(item))
                break
            flat.append(item)
        else:
            stack.pop()
    return flat, empty



def _kinds(text: bytes | bytearray) -> set[type] | None:
    """The Python types orjson makes of a scanned slice of JSON, read from its text in C: without t, f or n
    (true, false, null: the scan lets no other word through, and orjson none but these) it holds numbers only,
    and floats only if a point or an exponent shows. None when the values must be looked at one by one, as when
    19 digits or more show (orjson reads an integer past 64 bits as a float)."""
    if any(letter in text for letter in (b"t", b"f", b"n")) or _LONG_INTEGER.search(text):
        return None
    return {int, float} if any(mark in text for mark in (b".", b"e", b"E")) else {int}


def typed_values(values: list[Any], dtype: np.dtype[Any], name: str, datatype: str,
                 kinds: set[type] | None = None) -> np.ndarray:
    """JSON values (Python scalars from orjson) as an array of ``dtype``, each exactly what the client sent.

    numpy would take null and "NaN" as NaN, true as 1.0, 1e39 as infinity in FP32, wrap 300 into a uint8 and
    truncate 1.5: the model would run on other values than the client sent. A float tensor takes numbers within
    its type's finite range, an integer tensor whole numbers within its range, a BOOL tensor true and false.
    ``kinds``, when given, are the values' types, known without looking at each.
    """
    kinds = kinds if kinds is not None else set(map(type, values))
    if dtype.kind == "b":
        allowed: set[type] = {bool}
        wanted = "true or false"
    elif dtype.kind in "iu":
        allowed, wanted = {int}, "whole numbers"
    else:
        allowed, wanted = {int, float}, "numbers"
    if not kinds <= allowed:
        odd = next(v for v in values if type(v) not in allowed)
        what = "booleans" if isinstance(odd, bool) else describe_json(odd)
        raise ProtocolError(400, f"Input '{name}' is {datatype}: its data must be {wanted}, not {what}.")
    if dtype.kind == "b":
        return np.array(values, dtype=dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        low, high = min(values), max(values)
        if low < info.min or high > info.max:
            raise ProtocolError(400, f"Input '{name}' is {datatype}: its values must lie in [{info.min}, "
                                     f"{info.max}], got [{low}, {high}].")
        return np.array(values, dtype=dtype)
    with np.errstate(over="ignore"):
        array = np.array(values, dtype=np.float64).astype(dtype)
    if not np.isfinite(array).all():  # every JSON number is finite: an infinity here overflowed the dtype
        bad = values[int(np.flatnonzero(~np.isfinite(array))[0])]
        raise ProtocolError(400, f"Input '{name}' is {datatype}: {bad!r} is outside its range "
                                 f"(±{float(np.finfo(dtype).max):.6g}).")
    return array


# -- reading a JSON request without building its tensors as Python objects ----------------------------------------

SLICE_BYTES = 1 << 18  # of a data array parsed at once: a bounded number of Python objects alive at a time
SCAN_FIRST, SCAN_BLOCK = 1 << 13, 1 << 20  # bytes of a data array scanned at once, first and at most (a few
# temporary arrays of this length)
DEEP_BLOCK = 1 << 16  # bytes scanned at once past TooDeep: the block where the array closes is followed bracket by
# bracket, which in a block of brackets only costs temporary arrays 8 times its size
SMALL_ARRAY = 1 << 12  # bytes: a data array shorter than this is parsed by orjson with the rest of the request
JSON_OUTSIDE_DATA_LIMIT = 1 << 18  # JSON bytes besides the data arrays; orjson turns them into Python objects (a
# request has a few hundred of them; 1 MiB of tiny arrays cost twice an honest megabyte's CPU, in one call that holds
# the GIL: #56)
JSON_CONTAINER_LIMIT = 1 << 14  # arrays and objects (counted as '[' and '{' bytes, in C) in the JSON besides the data
# arrays: each is a container orjson builds and the collector later walks; 250 KB of `{"data":[[[[[0]]]]]}` made 72,000
# of them and cost 1.6 to 5 times an honest megabyte's CPU per byte (CI, #56). A request has a few dozen; 15,000
# `inputs` entries still reach their own message.
DATA_KEY = b'"data"'
MAX_DATA_KEYS = 1024  # "data" keys looked at per request (each costs some Python work): the rest is orjson's
MAX_DEEP_SCANS = 16  # small data arrays nested too deep that are scanned to be named; more are orjson's to refuse
_ENDS_SMALL = re.compile(rb'["{}]')  # a quote or brace: an array that has one soon is small
_ARRAY_BYTES = re.compile(rb"[\[\] \t\n\r,0-9+\-.eEtruefalsn]*")  # the bytes a plain data array may hold
_AFTER_DATA_KEY = re.compile(rb"[ \t\n\r]*:[ \t\n\r]*\[")
_BRACKETS_AS_SPACES = bytes.maketrans(b"[]", b"  ")
_LONG_INTEGER = re.compile(rb"[0-9]{19}")
# Bytes of a plain data array: 0 ends the scan (quotes, braces, NaN...), 1 separates values, 2 belongs to a value
# (digits, sign, point, exponent, and the letters of true, false and null), 3 and 4 are '[' and ']'.
_CLASS = np.zeros(256, np.uint8)
_CLASS[list(b" \t\n\r,")] = 1
_CLASS[list(b"0123456789+-.eEtruefalsn")] = 2
_CLASS[ord("[")], _CLASS[ord("]")] = 3, 4


def _scan_array(text: bytes | bytearray, start: int, max_depth: int, deadline: float | None = None
                ) -> JsonArray | None:
    """The plain array that opens at ``text[start]``, its values counted, or None when it holds anything else
    before it closes: then orjson reads it, and its own rules refuse it. Blocks grow from SCAN_FIRST to SCAN_BLOCK
    bytes, so that the work is in proportion to the array, whatever its size or nesting: past ``max_depth`` levels
    (the model's deepest input) its nesting is no longer followed (:class:`TooDeep`), only its end looked for. One
    that nests too deep and never closes is refused here. Past ``deadline``, ProtocolError(504).

    Only the run of bytes a plain array may hold is looked at (found first by a regular expression, in C): an array
    cut short by anything else (a quote, a brace) is left to orjson at the cost of its own bytes, never of a whole
    block (a block per ``"data":[[[[["`` held a thread for seconds per megabyte: docs/results/serving.md)."""
    run = _ARRAY_BYTES.match(text, start)  # it matches at least the '[' at start
    run_end = run.end() if run is not None else start
    view = np.frombuffer(text, np.uint8)[:run_end]
    depth, elements, in_value, pos, size = 0, 0, False, start, SCAN_FIRST
    nesting = BracketNesting()
    deep: TooDeep | None = None
    while pos < run_end:
        check_deadline(deadline)
        kind = _CLASS[view[pos:pos + size]]
        if deep is not None and np.count_nonzero(kind == 4) < depth:
            # Too deep, and the array cannot close in this block: the brackets are counted, not followed one by one.
            if not kind.all():
                return None
            depth += int(np.count_nonzero(kind == 3)) - int(np.count_nonzero(kind == 4))
            pos += len(kind)
            continue
        brackets = np.flatnonzero(kind >= 3)  # few: depth is followed at the brackets only
        depths = np.cumsum(np.where(kind[brackets] == 3, 1, -1)) + depth
        closing = np.flatnonzero(depths == 0)
        if closing.size:
            kind = kind[:int(brackets[closing[0]]) + 1]
            brackets, depths = brackets[:int(closing[0]) + 1], depths[:int(closing[0]) + 1]
        if not kind.all():  # a class-0 byte
            return None
        if deep is None and depths.size and int(depths.max()) > max_depth:
            deep = TooDeep(pos + int(brackets[int(np.argmax(depths > max_depth))]), max_depth)
        if deep is None:
            value = kind == 2
            starts = np.empty_like(value)  # the first byte of each value
            starts[0] = bool(value[0]) and not in_value
            np.greater(value[1:], value[:-1], out=starts[1:])
            elements += int(np.count_nonzero(starts))
            nesting.feed(kind[brackets] == 3, depths, brackets, starts)
            in_value = bool(value[-1])
        if closing.size:
            return JsonArray(text, start, pos + len(kind) - 1, elements, deep or nesting.result(), deadline)
        depth, pos = int(depths[-1]) if depths.size else depth, pos + len(kind)
        size = min(4 * size, SCAN_BLOCK) if deep is None else DEEP_BLOCK
    if deep is not None and run_end == len(text):
        raise ProtocolError(400, f"The request is not valid JSON: a 'data' array nests deeper than {max_depth} "
                                 f"levels (at byte {deep.at}) and never closes.")
    return None


def _extent(text: bytes | bytearray, start: int, max_depth: int) -> str:
    """What the array opening at ``text[start]`` is worth scanning as: ``"small"`` when it cannot hold more than
    SMALL_ARRAY bytes of values (a quote or brace comes first: in valid JSON one follows an array in an object at
    once), left to orjson with the rest at the cost of a bounded search up to that mark; ``"deep"`` when it is small
    but opens more than ``max_depth`` arrays at once, scanned so that nesting too deep is named as such (orjson
    would stop at 1,024 levels with a message that names no tensor); ``"large"`` otherwise, scanned over its own
    bytes. Each search stops at the first quote or brace, so that many small arrays cost no more than their bytes."""
    stop = start + SMALL_ARRAY
    mark = _ENDS_SMALL.search(text, start, stop)
    end = mark.start() if mark is not None else min(stop, len(text))
    if text.find(b"[" * (max_depth + 1), start, end) >= 0:
        return "deep"
    return "small" if mark is not None or stop >= len(text) else "large"


def read_json(text: bytes | bytearray, max_depth: int = 1, deadline: float | None = None) -> dict[str, Any]:
    """A request's JSON, each input's ``data`` a TensorData: a plain ``"data": [...]`` array left as text (a
    JsonArray), any other value as orjson read it (a JsonValue). ``max_depth`` is the most dimensions an input
    of the model has: a data array's nesting is followed that deep and no further (see :func:`_scan_array`).
    Past ``deadline`` (time.monotonic()), ProtocolError(504), wherever decoding has got to.

    The text is searched for ``"data"`` keys (bytes.find, in C: no Python work per string or byte, so that a
    body of many tiny strings costs what its bytes do): one followed by an array is scanned and cut out, a
    placeholder (unguessable, per request) put in its stead. (A found ``"data"`` whose first quote is an escaped one
    ends a key such as ``x\\"data``: its array is cut out all the same, and no input reads it.) Arrays that are small
    but nest too deep are scanned for the first MAX_DEEP_SCANS of them only (each scan has a fixed cost); later ones
    are left to orjson, and so is everything after the first MAX_DATA_KEYS ``"data"`` keys (a request has one per
    input), under the same limit as the rest. What remains is small and parsed by orjson; more than
    JSON_OUTSIDE_DATA_LIMIT of it, or more than JSON_CONTAINER_LIMIT arrays and objects in it, is refused before
    orjson builds anything, whatever it is. A ``"data"`` array
    elsewhere than in an input (a custom parameter's) is checked as JSON and left as its placeholder: no parameter
    of that name is read.
    """
    nonce = secrets.token_hex(8)
    arrays: dict[str, JsonArray] = {}
    pieces: list[bytes | bytearray] = []
    pos = piece = kept = deep_scans = 0  # piece: where the current stretch of kept text starts; kept: bytes kept
    for _ in range(MAX_DATA_KEYS):
        if (found := text.find(DATA_KEY, pos)) < 0:
            break
        check_deadline(deadline)
        pos = found + len(DATA_KEY)
        if (key := _AFTER_DATA_KEY.match(text, pos)) is None:
            continue
        start = key.end() - 1
        extent = _extent(text, start, max_depth)
        if extent == "deep":
            deep_scans += 1
        if extent == "small" or (extent == "deep" and deep_scans > MAX_DEEP_SCANS):
            continue
        if (array := _scan_array(text, start, max_depth, deadline)) is None:
            continue
        placeholder = f"{nonce}:{len(arrays)}"
        pieces += [text[piece:array.start], b'"' + placeholder.encode() + b'"']
        kept += array.start - piece + len(placeholder) + 2
        _check_outside_data(kept)
        arrays[placeholder] = array
        pos = piece = array.end + 1
    _check_outside_data(kept + len(text) - piece)
    skeleton = b"".join([*pieces, text[piece:]]) if pieces else text
    _check_containers(skeleton)
    try:
        with paused_collection():  # containers of a tiny-array body would set off full collections: collector.py
            header = orjson.loads(skeleton)  # nesting is capped (1,024 levels): deep JSON is a 400, not a crash
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        raise ProtocolError(400, f"The request is not valid JSON ({error}).") from None
    if isinstance(header, dict) and isinstance(header.get("inputs"), list):
        for item in header["inputs"]:  # each input's data as TensorData, the form protocol.infer_request checks
            if isinstance(item, dict) and "data" in item:
                data = item["data"]
                item["data"] = arrays.pop(data) if isinstance(data, str) and data in arrays else JsonValue(data)
    for array in arrays.values():  # a "data" array elsewhere (a parameter's): its value is unused, its text checked
        for _ in array.slices("A 'data' array"):
            pass
    return header


def _check_outside_data(size: int) -> None:
    if size > JSON_OUTSIDE_DATA_LIMIT:
        raise ProtocolError(400, f"The request has over {JSON_OUTSIDE_DATA_LIMIT} bytes of JSON besides its "
                                 "inputs' data arrays: send tensor values as 'data' arrays of numbers (true/false "
                                 "for BOOL) or as binary data.")


def _check_containers(skeleton: bytes | bytearray) -> None:
    if (containers := skeleton.count(b"[") + skeleton.count(b"{")) > JSON_CONTAINER_LIMIT:
        raise ProtocolError(400, f"The request has {containers} JSON arrays and objects besides its inputs' large "
                                 f"data arrays; at most {JSON_CONTAINER_LIMIT} are read: send tensor values as "
                                 "'data' arrays of numbers (true/false for BOOL) or as binary data.")


# -- the request ------------------------------------------------------------------------------------------------------


def parse_infer_request(body: bytes | bytearray, header_length: int | None, inputs: list[TensorInfo],
                        outputs: list[TensorInfo], max_batch_size: int | None,
                        max_tensor_bytes: int | None = None, deadline: float | None = None) -> InferRequest:
    """Decode and check an HTTP infer request (JSON, or a JSON header and binary data) against the model's
    tensors. ``max_tensor_bytes`` bounds each decoded input (413 past it), as the body limit bounds the body;
    ``deadline`` (time.monotonic()) the time decoding may take (504 past it)."""
    if header_length is not None:
        if header_length < 0 or header_length > len(body):
            raise ProtocolError(400, f"{HEADER_LENGTH} is {header_length}, but the body has {len(body)} bytes.")
        header_bytes, binary = body[:header_length], memoryview(body)[header_length:]
    else:
        header_bytes, binary = body, memoryview(b"")
    max_depth = max([len(t.shape) for t in inputs] + [1])
    return infer_request(read_json(header_bytes, max_depth, deadline), binary, inputs, outputs, max_batch_size,
                         max_tensor_bytes, deadline)
