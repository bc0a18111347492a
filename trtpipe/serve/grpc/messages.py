"""A ModelInferRequest's bytes to the protocol module's checked request: the gRPC service's decoding, apart from its
endpoints so that each reads on its own.

The message's bulky payloads (raw_input_contents, packed fp32/fp64 contents) are found by walking its wire format and
split off before protobuf parses the small rest (:func:`split_message`): parsing and converting a large
``fp32_contents`` take long, and a worker thread that holds the GIL meanwhile stalls both event loops, health checks
included (docs/results/serving.md, 'Request decoding costs'). Each tensor's decoded size is checked against
``--max-body-mb`` and its element count against its shape before anything is built (:class:`TypedContents` counts
itself, as every TensorData does); packed fp32/fp64/bool contents and raw contents are then read in place in the
request's bytes, other typed contents converted a chunk at a time, never as a Python list (which took many times the
request's size). A request protobuf cannot decode is a ProtocolError(400), INVALID_ARGUMENT on every RPC
(:class:`Undecodable`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from trtpipe.artifact.tensors import TensorInfo
from trtpipe.serve.protocol import (
    UNSUPPORTED_PARAMETERS,
    InferRequest,
    ProtocolError,
    RawData,
    TensorData,
    check_count,
    count_mismatch,
    infer_request,
    shown,
)

# Typed contents field of InferTensorContents for each KServe datatype (FP16 travels as raw bytes only), and the
# numpy type that field holds.
CONTENTS_FIELD = {"BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
                  "INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents",
                  "UINT32": "uint_contents", "UINT64": "uint64_contents", "FP32": "fp32_contents",
                  "FP64": "fp64_contents"}
FIELD_DTYPE = {"bool_contents": "bool", "int_contents": "int32", "int64_contents": "int64",
               "uint_contents": "uint32", "uint64_contents": "uint64", "fp32_contents": "float32",
               "fp64_contents": "float64"}
FIXED_WIDTH = ("fp32_contents", "fp64_contents", "bool_contents")  # packed, one value in a fixed number of bytes
CONVERT_CHUNK = 1 << 16  # varint values converted per call: the worker lets go of the GIL between calls
MAX_RANK = 64  # dimensions of an input's shape; more is refused before the shape is read into Python


# -- typed contents to arrays ---------------------------------------------------------------------------------------


class TypedContents(TensorData):
    """An input's values in InferTensorContents' field for its datatype: counted with len() before anything is
    built, then converted without a Python object per value: the packed bytes of fp32, fp64 and bool contents
    are read in place, in the request's own bytes (``packed``, found by :func:`wire_layout`); varint integers
    are converted a chunk at a time, range-checked for the narrower types."""

    def __init__(self, contents: Any, datatype: str, packed: tuple[int, memoryview] | None = None,
                 split: bool = False) -> None:
        self.contents = contents
        self.field = CONTENTS_FIELD.get(datatype)
        self.packed = packed  # (field number, bytes) of the contents' one packed run, in the request's bytes
        self.split = split  # that run was split off before protobuf parsed the rest (see split_message)

    def _filled(self) -> list[str]:
        """The contents fields the request fills, the one split off included."""
        filled = [descriptor.name for descriptor, _ in self.contents.ListFields()]
        if self.split and self.packed is not None:
            filled.insert(0, self.contents.DESCRIPTOR.fields_by_number[self.packed[0]].name)
        return filled

    def _count(self) -> int:
        """Values in the contents field: a split-off run's length in values (fp32 and fp64 only are split off)."""
        assert self.field is not None
        if self.split and self.packed is not None:
            return len(self.packed[1]) // np.dtype(FIELD_DTYPE[self.field]).itemsize
        return len(getattr(self.contents, self.field))

    def check(self, name: str, shape: list[int], datatype: str, dtype: np.dtype[Any]) -> None:
        if self.field is None:
            raise ProtocolError(400, f"Input '{name}' of datatype {datatype} must come as raw_input_contents.")
        filled = self._filled()
        if filled and self.field not in filled:
            raise ProtocolError(400, f"Input '{name}' is {datatype}: its values go in {self.field}, but the request "
                                     f"fills {', '.join(filled)}.")
        if len(filled) > 1:
            others = ", ".join(f for f in filled if f != self.field)
            raise ProtocolError(400, f"Input '{name}' fills {others} besides {self.field}: give its values in "
                                     f"{self.field} only.")
        if self.split and self.packed is not None and len(self.packed[1]) % np.dtype(FIELD_DTYPE[self.field]).itemsize:
            raise ProtocolError(400, f"Input '{name}': its {self.field} is cut short (a partial value).")
        have = self._count()
        if have != math.prod(shape):
            raise count_mismatch(name, have, shape)

    def decode(self, name: str, datatype: str, dtype: np.dtype[Any]) -> np.ndarray:
        assert self.field is not None
        values = getattr(self.contents, self.field)
        count = self._count()
        source = np.dtype(FIELD_DTYPE[self.field])
        number = self.contents.DESCRIPTOR.fields_by_name[self.field].number
        if (self.field in FIXED_WIDTH and self.packed is not None and self.packed[0] == number
                and len(self.packed[1]) == count * source.itemsize):
            if source.kind == "b":  # one varint byte per value (the length says so); any non-zero one is true
                return np.frombuffer(self.packed[1], np.uint8) != 0
            # protobuf's fixed-width values are little-endian
            return np.frombuffer(self.packed[1], source.newbyteorder("<")).astype(dtype, copy=False)
        out = np.empty(count, dtype)
        iterator = iter(values)
        for begin in range(0, count, CONVERT_CHUNK):
            part = np.fromiter(itertools.islice(iterator, CONVERT_CHUNK), source,
                               count=min(CONVERT_CHUNK, count - begin))
            out[begin:begin + len(part)] = _narrowed(part, dtype, name, datatype)
        return out


# -- where the bulky bytes lie in a ModelInferRequest ---------------------------------------------------------------

INPUTS_FIELD, RAW_CONTENTS_FIELD, CONTENTS_FIELD_NUMBER = 5, 7, 5  # ModelInferRequest.inputs, .raw_input_contents;
# InferInputTensor.contents
MAX_WIRE_FIELDS = 1_000  # stepped through in Python to find them (inner ones counted): more is protobuf's to read
EMPTY_RAW_CONTENTS = bytes([RAW_CONTENTS_FIELD << 3 | 2, 0])


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        value, pos = value | (byte & 0x7F) << shift, pos + 1
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(number, wire type, start, end) of each field of the message in ``data[start:end]``: a length-delimited
    value without its length. A field is stepped over by its length, whatever its size."""
    pos = start
    while pos < end:
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            after = _varint(data, pos)[1]
        elif wire == 1:
            after = pos + 8
        elif wire == 2:
            length, pos = _varint(data, pos)
            after = pos + length
        elif wire == 5:
            after = pos + 4
        else:
            raise ValueError(f"wire type {wire}")
        if after > end:
            raise ValueError("field past the end")
        yield number, wire, pos, after
        pos = after


def wire_layout(data: bytes) -> tuple[list[tuple[int, memoryview] | None], list[memoryview]] | None:
    """Where a ModelInferRequest's bulky bytes lie in ``data`` (already decoded by protobuf, so well formed):
    for each input, the one packed run of its contents, as (field number, bytes); and each raw_input_contents.
    Read in place, they cost no copy; protobuf's message holds its own, dropped once the arrays exist. None
    where the layout is not the usual one, or has over MAX_WIRE_FIELDS fields to step through (then the
    message's own copies are used)."""
    view = memoryview(data)
    typed: list[tuple[int, memoryview] | None] = []
    raw: list[memoryview] = []
    walked = 0
    try:
        for number, wire, start, end in _fields(data, 0, len(data)):
            walked += 1
            if number == INPUTS_FIELD and wire == 2:
                contents = []
                for inner, inner_wire, inner_start, inner_end in _fields(data, start, end):
                    walked += 1
                    if inner == CONTENTS_FIELD_NUMBER and inner_wire == 2:
                        contents.append((inner_start, inner_end))
                    if walked > MAX_WIRE_FIELDS:
                        return None
                runs = list(itertools.islice(_fields(data, *contents[0]), 2)) if len(contents) == 1 else []
                typed.append((runs[0][0], view[runs[0][2]:runs[0][3]]) if len(runs) == 1 and runs[0][1] == 2
                             else None)
            elif number == RAW_CONTENTS_FIELD and wire == 2:
                raw.append(view[start:end])
            if walked > MAX_WIRE_FIELDS:
                return None
    except (ValueError, IndexError):
        return None
    return typed, raw


def split_message(data: bytes) -> tuple[bytes, list[memoryview], list[tuple[int, memoryview] | None]] | None:
    """A ModelInferRequest's bytes without its bulky payloads, and those payloads, read in place in ``data``: the
    raw_input_contents (each left as an empty field) and, per input, the one packed run of fp32 or fp64 contents
    (the contents left empty). protobuf then parses only the small rest: parsing large contents holds the GIL in a
    worker thread, stalling the event loops (health checks included) as long (docs/results/serving-memory.md).
    None where there is nothing to split off, or the message cannot be stepped through within MAX_WIRE_FIELDS
    fields (protobuf then parses all of it, and says what is wrong)."""
    view = memoryview(data)
    pieces: list[bytes | memoryview] = []
    raw: list[memoryview] = []
    typed: list[tuple[int, memoryview] | None] = []
    kept_from = walked = 0
    try:
        for number, wire, start, end in _fields(data, 0, len(data)):
            walked += 1
            if walked > MAX_WIRE_FIELDS:
                return None
            if wire != 2 or number not in (RAW_CONTENTS_FIELD, INPUTS_FIELD):
                continue
            header = _header(data, start, end, number)
            if header is None or header < kept_from:
                return None
            if number == RAW_CONTENTS_FIELD:
                replacement: bytes | None = EMPTY_RAW_CONTENTS
                raw.append(view[start:end])
            else:
                inner = list(itertools.islice(_fields(data, start, end), MAX_WIRE_FIELDS - walked + 1))
                walked += len(inner)
                if walked > MAX_WIRE_FIELDS:  # an input of countless fields: stepping through them costs
                    return None
                replacement, run = _input_without_run(data, start, end, inner)
                typed.append(run)
            if replacement is not None:
                pieces += [view[kept_from:header], replacement]
                kept_from = end
    except (ValueError, IndexError):
        return None
    if not raw and not any(typed):
        return None
    pieces.append(view[kept_from:])
    return b"".join(pieces), raw, typed


SPLIT_RUNS = (6, 7)  # InferTensorContents.fp32_contents, .fp64_contents: fixed width, counted by their length


def _input_without_run(data: bytes, start: int, end: int, fields: list[tuple[int, int, int, int]]
                       ) -> tuple[bytes | None, tuple[int, memoryview] | None]:
    """An InferInputTensor (``data[start:end]``, whose ``fields`` the caller has stepped through) re-encoded, key
    and length included, with its contents emptied when they hold one packed fp32 or fp64 run, and that run;
    (None, None) when there is nothing to split off."""
    contents = [(s, e) for number, wire, s, e in fields if number == CONTENTS_FIELD_NUMBER and wire == 2]
    if len(contents) != 1:
        return None, None
    runs = list(itertools.islice(_fields(data, *contents[0]), 2))
    if len(runs) != 1 or runs[0][1] != 2 or runs[0][0] not in SPLIT_RUNS:
        return None, None
    inner = _header(data, contents[0][0], contents[0][1], CONTENTS_FIELD_NUMBER)
    if inner is None or inner < start:
        return None, None
    body = data[start:inner] + bytes([CONTENTS_FIELD_NUMBER << 3 | 2, 0]) + data[contents[0][1]:end]
    return bytes([INPUTS_FIELD << 3 | 2]) + _varint_bytes(len(body)) + body, (runs[0][0],
                                                                             memoryview(data)[runs[0][2]:runs[0][3]])


def _header(data: bytes, start: int, end: int, number: int) -> int | None:
    """Where the key of the length-delimited field ``number`` whose value is ``data[start:end]`` begins: its key is
    one byte (fields 1 to 15) and its length in its shortest form, as protobuf writes them; None otherwise."""
    header = start - _length_size(end - start) - 1
    return header if header >= 0 and data[header] == (number << 3 | 2) else None


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length_size(length: int) -> int:
    """Bytes of the varint that encodes ``length`` (protobuf writes lengths in their shortest form)."""
    return max(1, (length.bit_length() + 6) // 7)


def _narrowed(values: np.ndarray, dtype: np.dtype[Any], name: str, datatype: str) -> np.ndarray:
    """``values`` (in the contents field's type, int32 for INT8) as ``dtype``, refused when one does not fit:
    numpy would wrap 300 into an INT8 without a word."""
    if values.dtype == dtype or not values.size:
        return values
    info = np.iinfo(dtype)
    low, high = values.min(), values.max()
    if low < info.min or high > info.max:
        raise ProtocolError(400, f"Input '{name}' is {datatype}: its values must lie in [{info.min}, {info.max}], "
                                 f"got [{low}, {high}].")
    return values.astype(dtype)


def infer_request_from_message(message: Any, inputs: list[TensorInfo], outputs: list[TensorInfo],
                               max_batch_size: int | None, max_tensor_bytes: int | None,
                               wire: bytes | None = None,
                               split: tuple[list[memoryview], list[tuple[int, memoryview] | None]] | None = None,
                               deadline: float | None = None) -> InferRequest:
    """A ModelInferRequest checked against the model's tensors and decoded, in the form the protocol module
    checks for both transports: typed contents and raw contents become TensorData, read only once counted (in
    place in ``wire``, the message's bytes, where given). Past ``deadline`` (time.monotonic()), ProtocolError(504)
    where the checks look at the clock."""
    check_count(len(message.inputs), [t.name for t in message.inputs[:len(inputs) + 1]], inputs, "inputs")
    check_count(len(message.outputs), [o.name for o in message.outputs[:len(outputs) + 1]], outputs, "outputs")
    raw = message.raw_input_contents
    if raw and len(raw) != len(message.inputs):
        raise ProtocolError(400, f"{len(raw)} raw_input_contents for {len(message.inputs)} inputs: give one per "
                                 "input, in order, or none.")
    for tensor in message.inputs:
        if len(tensor.shape) > MAX_RANK:
            raise ProtocolError(400, f"Input '{shown(tensor.name)}' has a shape of {len(tensor.shape)} dimensions: at "
                                     f"most {MAX_RANK} are read.")
    layout = wire_layout(wire) if wire is not None and split is None else None
    if split is not None:  # split off before protobuf parsed the rest: see split_message
        raw_views, typed_runs = split
        layout = (typed_runs if typed_runs else [None] * len(message.inputs), raw_views)
    if layout is not None and (len(layout[0]) != len(message.inputs) or len(layout[1]) != len(raw)):
        layout = None
    items = []
    for index, tensor in enumerate(message.inputs):
        data: TensorData
        if raw:
            data = RawData(layout[1][index] if layout else raw[index], "raw_input_contents")
        else:
            data = TypedContents(tensor.contents, tensor.datatype, layout[0][index] if layout else None,
                                 split=split is not None and layout is not None and layout[0][index] is not None)
        items.append({"name": tensor.name, "datatype": tensor.datatype, "shape": list(tensor.shape), "data": data,
                      "parameters": refused_parameters(tensor.parameters)})
    header: dict[str, Any] = {"inputs": items,
                              "parameters": {**refused_parameters(message.parameters), "binary_data_output": True}}
    if message.id:
        header["id"] = message.id
    if message.outputs:
        header["outputs"] = [{"name": o.name, "parameters": refused_parameters(o.parameters)}
                             for o in message.outputs]
    return infer_request(header, memoryview(b""), inputs, outputs, max_batch_size, max_tensor_bytes, deadline)


def refused_parameters(parameters: Any) -> dict[str, Any]:
    """Of a message's ``parameters`` map (InferParameter values), those the protocol module refuses
    (UNSUPPORTED_PARAMETERS: classification, shared memory), with their values, so that gRPC refuses them as HTTP
    does; the others are custom ones, ignored, and never read into Python one by one."""
    return {key: getattr(parameters[key], parameters[key].WhichOneof("parameter_choice") or "bool_param")
            for key in UNSUPPORTED_PARAMETERS if key in parameters}


class Undecodable:
    """What a request that is not a valid protobuf message of its RPC's type decodes to: the RPC answers
    INVALID_ARGUMENT (gRPC itself would answer UNKNOWN, naming protobuf's exception class)."""

    def __init__(self, type_name: str) -> None:
        self.message = f"The request is not a valid {type_name} message: protobuf cannot decode it."


def parse_message(message_class: Any, data: bytes) -> Any:
    """``data`` as ``message_class``; ProtocolError(400) when protobuf cannot decode it."""
    from google.protobuf.message import DecodeError

    try:
        return message_class.FromString(data)
    except DecodeError:
        raise ProtocolError(400, Undecodable(message_class.DESCRIPTOR.full_name).message) from None


def parse_request(message_class: Any, data: bytes
                  ) -> tuple[Any, tuple[list[memoryview], list[tuple[int, memoryview] | None]] | None]:
    """A ModelInferRequest from its bytes, and its bulky payloads read in place (None when there are none):
    protobuf parses only what is left once they are split off (:func:`split_message`)."""
    split = split_message(data)
    if split is None:
        return parse_message(message_class, data), None
    skeleton, raw, typed = split
    return parse_message(message_class, skeleton), (raw, typed)
