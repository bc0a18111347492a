"""The KServe v2 / Open Inference Protocol gRPC service, beside HTTP on the same event loop.

It implements the service Triton's client speaks (``tritonclient.grpc``'s generated ``GRPCInferenceService``), and
shares the InferenceService with the HTTP routes: the loaded models, their batchers, admission (``--max-queue``,
``--max-body-mb``, ``--max-connections``, readiness), timeouts and metrics. A request's inputs are checked by the
protocol module's ``infer_request``, as HTTP's are, so both transports accept and refuse exactly the same things;
errors become gRPC status codes.

ModelInfer takes its request as bytes and decodes it in a worker thread, as HTTP parses its bodies: protobuf parsing and
the conversion of a 60 MiB ``fp32_contents`` take long, and the event loop keeps answering health checks and other
models meanwhile (decoded on the loop, as gRPC does by default, one such request stalled the health checks for seconds:
docs/results/serving.md, 'Request decoding costs'). Each tensor's decoded size is checked against ``--max-body-mb`` and
its element count against its shape before anything is built; packed fp32/fp64/bool contents and raw contents are then
read in place in the request's bytes, other typed contents converted a chunk at a time, never as a Python list (which
took many times the request's size). A request protobuf cannot decode is INVALID_ARGUMENT, on every RPC.

The service runs on an event loop and a thread of its own (:class:`GrpcThread`): what gRPC itself does on its loop,
turning a large message into bytes, then never holds up HTTP's health checks. Memory that runs out while a message is
received or decoded is that request's UNAVAILABLE, and what a large request took goes back after it (memory.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import math
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import numpy as np

from trtpipe import console
from trtpipe.errors import MissingDependency
from trtpipe.runtime.base import TensorInfo
from trtpipe.serve.forwarding import ConnectionGone
from trtpipe.serve.grpc_bridge import Bridge, CallAborted, Dispatch, ForwardedCall, GrpcThread, status_number
from trtpipe.serve.memory import give_back, short_of_room, warm_thread
from trtpipe.serve.protocol import (
    InferRequest,
    ProtocolError,
    RawData,
    TensorData,
    count_mismatch,
    datatype_of,
    infer_request,
)
from trtpipe.serve.repository import ServedModel
from trtpipe.serve.service import SERVICE_THREADS, ClientLeft, InferenceService, classify_failure
from trtpipe.vocab import __version__

SERVICE = "inference.GRPCInferenceService"
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
LARGE_MESSAGE = 1 << 20  # bytes: a request above this is decoded only while it holds one of a few slots
LARGE_MESSAGES_AT_ONCE = 4  # as HTTP's large bodies: each costs memory while it is decoded


def _grpc_modules() -> tuple[Any, Any, Any]:
    """grpc and Triton's generated messages and service, imported only when --grpc-port asks for them: they come
    with the optional ``triton`` extra."""
    try:
        import grpc
        from tritonclient.grpc import service_pb2, service_pb2_grpc
    except ImportError:
        raise MissingDependency("tritonclient[grpc]", "The gRPC service (--grpc-port)",
                                "pip install 'trtpipe[triton]'") from None
    return grpc, service_pb2, service_pb2_grpc


def _status(grpc: Any, http_status: int) -> Any:
    """The gRPC status code for a ProtocolError's HTTP status: any other 4xx is the client's request
    (INVALID_ARGUMENT); any other 5xx, a 500 included, INTERNAL. Never UNKNOWN."""
    codes = grpc.StatusCode
    known = {404: codes.NOT_FOUND, 408: codes.DEADLINE_EXCEEDED, 413: codes.RESOURCE_EXHAUSTED,
             429: codes.RESOURCE_EXHAUSTED, 503: codes.UNAVAILABLE, 504: codes.DEADLINE_EXCEEDED,
             507: codes.RESOURCE_EXHAUSTED}
    if http_status in known:
        return known[http_status]
    return codes.INVALID_ARGUMENT if 400 <= http_status < 500 else codes.INTERNAL


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
MAX_WIRE_FIELDS = 10_000  # stepped through in Python to find them: a request of more is read from its message
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
    (the contents left empty). protobuf then parses only the small rest: parsing 60 MiB of contents takes a worker
    thread a tenth of a second that it holds the GIL, stalling both event loops (health checks included) as long.
    None where there is nothing to split off, or the message cannot be stepped through within MAX_WIRE_FIELDS
    fields (protobuf then parses all of it, and says what is wrong)."""
    view = memoryview(data)
    pieces: list[bytes | memoryview] = []
    raw: list[memoryview] = []
    typed: list[tuple[int, memoryview] | None] = []
    kept_from = 0
    try:
        for walked, (number, wire, start, end) in enumerate(_fields(data, 0, len(data))):
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
                replacement, run = _input_without_run(data, start, end)
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


def _input_without_run(data: bytes, start: int, end: int) -> tuple[bytes | None, tuple[int, memoryview] | None]:
    """An InferInputTensor (``data[start:end]``) re-encoded, key and length included, with its contents emptied
    when they hold one packed fp32 or fp64 run, and that run; (None, None) when there is nothing to split off."""
    contents = [(s, e) for number, wire, s, e in _fields(data, start, end)
                if number == CONTENTS_FIELD_NUMBER and wire == 2]
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
                               split: tuple[list[memoryview], list[tuple[int, memoryview] | None]] | None = None
                               ) -> InferRequest:
    """A ModelInferRequest checked against the model's tensors and decoded, in the form the protocol module
    checks for both transports: typed contents and raw contents become TensorData, read only once counted (in
    place in ``wire``, the message's bytes, where given)."""
    raw = message.raw_input_contents
    if raw and len(raw) != len(message.inputs):
        raise ProtocolError(400, f"{len(raw)} raw_input_contents for {len(message.inputs)} inputs: give one per "
                                 "input, in order, or none.")
    for tensor in message.inputs:
        if len(tensor.shape) > MAX_RANK:
            raise ProtocolError(400, f"Input '{tensor.name}' has a shape of {len(tensor.shape)} dimensions: at "
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
        items.append({"name": tensor.name, "datatype": tensor.datatype, "shape": list(tensor.shape), "data": data})
    header: dict[str, Any] = {"inputs": items, "parameters": {"binary_data_output": True}}
    if message.id:
        header["id"] = message.id
    if message.outputs:
        header["outputs"] = [{"name": o.name} for o in message.outputs]
    return infer_request(header, memoryview(b""), inputs, outputs, max_batch_size, max_tensor_bytes)


# -- the service ------------------------------------------------------------------------------------------------------


async def _first(context: Any) -> bytes:
    """The one message of a ModelInfer call, read by the handler itself with ``context.read()`` once admission has
    let it in: when memory runs out while it is read, the MemoryError is raised here, where the handler answers it;
    when the listener has closed the call (its client gave up), nobody is left to answer."""
    try:
        return await context.read()
    except ConnectionGone:
        raise ClientLeft from None


def _refusal(error: Exception) -> ProtocolError:
    """A failure before the request names its model, as the ProtocolError the client gets: memory that ran out
    while the message was received or decoded is 503 (UNAVAILABLE), as over HTTP."""
    return error if isinstance(error, ProtocolError) else classify_failure(error)



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


class GrpcEndpoints:
    """The RPCs trtpipe answers, each a thin translation onto the InferenceService; a ProtocolError aborts the
    call with its gRPC status code. The RPCs it does not answer (shared memory, repository control, statistics)
    are the generated servicer's, UNIMPLEMENTED: see :func:`servicer`."""

    def __init__(self, service: InferenceService, grpc: Any, messages: Any) -> None:
        self.service = service
        self.grpc = grpc
        self.messages = messages  # tritonclient.grpc.service_pb2
        self.large_messages = asyncio.Semaphore(LARGE_MESSAGES_AT_ONCE)

    async def ServerLive(self, request: Any, context: Any) -> Any:
        return self.messages.ServerLiveResponse(live=True)

    async def ServerReady(self, request: Any, context: Any) -> Any:
        return self.messages.ServerReadyResponse(ready=self.service.server_ready())

    async def ModelReady(self, request: Any, context: Any) -> Any:
        entry = await self._find(request.name, request.version, context)
        return self.messages.ModelReadyResponse(ready=self.service.model_ready(entry))

    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        return self.messages.ServerMetadataResponse(name="trtpipe", version=__version__, extensions=[])

    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        entry = await self._find(request.name, request.version, context)
        if entry.model is None:
            await context.abort(self.grpc.StatusCode.UNAVAILABLE, f"Model '{entry.name}' is not ready: {entry.error}")
        assert entry.model is not None
        tensor = self.messages.ModelMetadataResponse.TensorMetadata

        def describe(infos: list[Any]) -> list[Any]:
            return [tensor(name=t.name, datatype=datatype_of(t.dtype),
                           shape=[d if isinstance(d, int) else -1 for d in t.shape]) for t in infos]

        return self.messages.ModelMetadataResponse(name=entry.name, versions=entry.versions, platform=entry.platform,
                                                   inputs=describe(entry.model.inputs),
                                                   outputs=describe(entry.model.outputs))

    async def ModelInfer(self, requests: AsyncIterator[bytes], context: Any) -> Any:
        """The same steps as HTTP's infer route, counted in the same series. The call is a one-message stream
        of the message's bytes (see :func:`method_handlers` and :func:`_first`), decoded and converted in worker
        threads; ``requests``, its iterator, is left unread. No buffer of the request
        outlives it: the error that answers a refused one is read out of its exception before the call aborts
        (an exception's traceback holds the frames, and the frames the request's bytes and message), and malloc
        hands the memory back after a large one."""
        size = [0]
        try:
            response = await self._infer(context, size)
        except ProtocolError as error:
            code, details = _status(self.grpc, error.status), error.message
        else:
            self._after(size[0])
            return response
        self._after(size[0])
        await context.abort(code, details)

    async def _infer(self, context: Any, size: list[int]) -> Any:
        """ModelInfer's work: its response, or ProtocolError. Running out of memory while the message is received
        or decoded is a 503 (UNAVAILABLE) for this request, as it is over HTTP; so is a large message that would
        leave the server less memory than it keeps in reserve (memory.short_of_room)."""
        service = self.service
        try:
            size[0] = context.size
            service.check_body_size(context.size)
            async with self._room(context.size, need=2 * context.size):
                request = await _first(context)
                message, raw = await asyncio.get_running_loop().run_in_executor(
                    service.executor, parse_request, self.messages.ModelInferRequest, request)
        except (ProtocolError, MemoryError, ClientLeft) as error:
            with service.accounted(""):  # counted, like every HTTP request, under the unknown model
                raise (error if isinstance(error, ClientLeft) else _refusal(error)) from None
        with service.accounted(message.model_name):
            entry = service.admit(message.model_name, message.model_version or None)
            model = entry.model
            assert model is not None
            parsed = await self._in_thread(len(request), infer_request_from_message, message, model.inputs,
                                           model.outputs, entry.max_batch_size, service.settings.max_body_bytes,
                                           request, raw)
            request_id = message.id
            del message, request, raw  # their copies of the tensors: the arrays hold what the model needs
            outputs = await service.run(entry, [parsed.inputs[t.name] for t in model.inputs])
            return self._infer_response(entry, request_id, parsed, outputs)

    def _after(self, size: int) -> None:
        """After a large request: malloc's freed memory back to the system, in a worker thread (it walks every
        arena; ctypes lets go of the GIL meanwhile)."""
        if size > LARGE_MESSAGE:
            with contextlib.suppress(RuntimeError):  # the pool has shut down: the server is stopping
                self.service.executor.submit(give_back)

    @contextlib.asynccontextmanager
    async def _room(self, size: int, need: int | None = None) -> AsyncIterator[None]:
        """A large request (``size`` bytes) only while it holds one of a few slots, and only when the memory it may
        still take (``need``, its size unless said: its message before it is read, as much again to decode it)
        leaves the reserve free."""
        async with self.large_messages if size > LARGE_MESSAGE else contextlib.nullcontext():
            short = short_of_room(size if need is None else need) if size > LARGE_MESSAGE else None
            if short is not None:
                raise ProtocolError(503, short)
            yield

    async def _in_thread(self, size: int, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)`` in the service's thread pool (where HTTP parses its bodies), with :meth:`_room`."""
        async with self._room(size):
            return await asyncio.get_running_loop().run_in_executor(self.service.executor, function, *args)

    def _infer_response(self, entry: ServedModel, request_id: str, parsed: InferRequest, outputs: list[Any]) -> Any:
        """The requested outputs (all when none were named), each as raw bytes."""
        assert entry.model is not None
        by_name = {t.name: np.ascontiguousarray(a) for t, a in zip(entry.model.outputs, outputs, strict=True)}
        wanted = [name for name, _ in parsed.outputs] if parsed.outputs else list(by_name)
        response = self.messages.ModelInferResponse(model_name=entry.name, model_version=entry.version, id=request_id)
        for name in wanted:
            array = by_name[name]
            response.outputs.add(name=name, datatype=datatype_of(array.dtype.name), shape=list(array.shape))
            response.raw_output_contents.append(array.tobytes())
        return response

    async def _find(self, name: str, version: str, context: Any) -> ServedModel:
        try:
            return self.service.find(name, version or None)
        except ProtocolError as error:
            await context.abort(_status(self.grpc, error.status), error.message)
            raise  # abort raises; this keeps type checkers content


def servicer(service: InferenceService, grpc: Any, messages: Any, generated: Any) -> Any:
    """GrpcEndpoints on top of the generated servicer class (``generated`` is ``service_pb2_grpc``), which answers
    every RPC not defined here with UNIMPLEMENTED; the class exists only once tritonclient is imported."""
    base = generated.GRPCInferenceServiceServicer
    cls = type("GrpcInferenceServicer", (GrpcEndpoints, base), {})
    return cls(service, grpc, messages)


def _lenient(message_class: Any) -> Callable[[bytes], Any]:
    """A request deserializer that returns Undecodable instead of raising: gRPC would answer UNKNOWN, with
    protobuf's exception class in the details."""
    from google.protobuf.message import DecodeError

    def deserialize(data: bytes) -> Any:
        try:
            return message_class.FromString(data)
        except DecodeError:
            return Undecodable(message_class.DESCRIPTOR.full_name)

    return deserialize


def dispatcher(endpoints: Any, grpc: Any, messages: Any) -> tuple[Dispatch, dict[str, Any]]:
    """How the server answers each call the gRPC listener forwards, and what the listener must know of the service
    (its name, its unary methods, its streaming ones, which it answers UNIMPLEMENTED itself).

    ModelInfer's handler reads its message itself (after admission: see GrpcEndpoints._infer); every other unary
    RPC's message is decoded here, an undecodable one answered INVALID_ARGUMENT. An RPC the generated servicer
    leaves unimplemented is UNIMPLEMENTED, any other failure INTERNAL, each with a plain message (gRPC's own answer
    to an exception is UNKNOWN, with the exception's class in the details)."""
    from google.protobuf.message_factory import GetMessageClass

    described = messages.DESCRIPTOR.services_by_name[SERVICE.rsplit(".", 1)[1]]
    unary = {m.name: (GetMessageClass(m.input_type), GetMessageClass(m.output_type)) for m in described.methods
             if not (m.client_streaming or m.server_streaming)}
    streaming = [[m.name, [m.client_streaming, m.server_streaming]] for m in described.methods if m.name not in unary]
    codes = grpc.StatusCode

    async def answer(call: ForwardedCall) -> Any:
        if call.method == "ModelInfer":
            return await endpoints.ModelInfer(None, call)
        request = _lenient(unary[call.method][0])(await call.read())
        if isinstance(request, Undecodable):
            raise CallAborted(codes.INVALID_ARGUMENT, request.message)
        result = getattr(endpoints, call.method)(request, call)
        return await result if inspect.isawaitable(result) else result

    async def dispatch(call: ForwardedCall) -> tuple[int, str, bytes]:
        if call.method not in unary:
            return status_number(codes.UNIMPLEMENTED), f"trtpipe does not implement {call.method}.", b""
        try:
            response = await answer(call)
        except CallAborted as aborted:
            return status_number(aborted.code), aborted.details, b""
        except (ClientLeft, ConnectionGone):
            raise ConnectionGone from None  # nobody to answer
        except NotImplementedError:
            return status_number(codes.UNIMPLEMENTED), f"trtpipe does not implement {call.method}.", b""
        except Exception as error:
            console.warn(f"gRPC {call.method} failed: {error!r}")
            return status_number(codes.INTERNAL), f"{call.method} failed on the server: see its log.", b""
        return status_number(codes.OK), "", unary[call.method][1].SerializeToString(response)

    return dispatch, {"service": SERVICE, "unary": list(unary), "streaming": streaming}


async def _start(service: InferenceService) -> Bridge:
    """Warm the worker threads, then start the gRPC listener process and answer what it forwards."""
    grpc, messages, generated = _grpc_modules()
    dispatch, methods = dispatcher(servicer(service, grpc, messages, generated), grpc, messages)
    await warm_up(service, messages)
    bridge = Bridge(service.settings, dispatch, service.executor, methods)
    try:
        await bridge.start()
    except BaseException:
        await bridge.stop(0)
        raise
    return bridge


async def start_grpc(service: InferenceService) -> GrpcThread:
    """The gRPC service: its listener in a process of its own, its calls answered on a loop and thread of their
    own (see grpc_bridge), sharing ``service`` with HTTP; ``stop(grace)`` on what it returns stops it."""
    return await GrpcThread().start(lambda: _start(service))


def _warm_up_jobs(entry: ServedModel, messages: Any, max_body_bytes: int) -> list[Callable[[], Any]]:
    """What a worker thread does for ``entry`` while it warms up: decode a one-row ModelInferRequest of zeros, as
    every request is decoded, and run it on the model where the model runs in the service's pool (without a
    batcher). A dimension the model leaves free is 1. Nothing for a model that is not loaded."""
    model = entry.model
    if model is None:
        return []
    arrays = [np.zeros([d if isinstance(d, int) and d > 0 else 1 for d in t.shape], t.dtype) for t in model.inputs]
    message = messages.ModelInferRequest(model_name=entry.name)
    for info, array in zip(model.inputs, arrays, strict=True):
        message.inputs.add(name=info.name, datatype=datatype_of(info.dtype), shape=list(array.shape))
        message.raw_input_contents.append(array.tobytes())
    wire = message.SerializeToString()

    def decode() -> None:
        parsed = messages.ModelInferRequest()
        parsed.ParseFromString(wire)
        infer_request_from_message(parsed, model.inputs, model.outputs, entry.max_batch_size, max_body_bytes, wire)

    return [decode] if entry.batcher is not None else [decode, lambda: model.predict_all(arrays)]


async def warm_up(service: InferenceService, messages: Any) -> None:
    """Before the gRPC service takes calls: each of the service's worker threads (all started, see
    ``service.start_threads``) decodes a small request for each model and runs the models that run in that pool,
    once. Each thread thereby touches the thread-local storage of the libraries it will use (protobuf, numpy, the
    runtime) while memory is plentiful: glibc allocates it on a thread's first use, and aborts the process when
    that allocation fails under a memory limit. A barrier holds each thread until all have had their share, so that
    every thread gets one; a model that fails here is left to fail on its requests, as it would have."""
    jobs = [job for versions in service.models.values() for entry in versions.values()
            for job in _warm_up_jobs(entry, messages, service.settings.max_body_bytes)]
    workers = SERVICE_THREADS  # the pool's size: service.start started every one
    barrier = threading.Barrier(workers)

    def warm() -> None:
        warm_thread(*jobs)
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(60)

    loop = asyncio.get_running_loop()
    await asyncio.gather(*(loop.run_in_executor(service.executor, warm) for _ in range(workers)))
    give_back()
