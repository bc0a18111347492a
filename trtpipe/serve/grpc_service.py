"""The KServe v2 / Open Inference Protocol gRPC service, beside HTTP on the same event loop.

It implements the service Triton's client speaks (``tritonclient.grpc``'s generated ``GRPCInferenceService``), and
shares the InferenceService with the HTTP routes: the loaded models, their batchers, admission (``--max-queue``,
``--max-body-mb``, ``--max-connections``, readiness), timeouts and metrics. A request's inputs are checked by the
protocol module's ``infer_request``, as HTTP's are, so both transports accept and refuse exactly the same things;
errors become gRPC status codes.

ModelInfer takes its request as bytes and decodes it in a worker thread, as HTTP parses its bodies: protobuf
parsing and the conversion of a 60 MiB ``fp32_contents`` take long, and the event loop keeps answering health
checks and other models meanwhile (decoded on the loop, as gRPC does by default, one such request stalled
/v2/health/live for 2.3 s). Each tensor's decoded size is checked against ``--max-body-mb`` and its element count
against its shape before anything is built; packed fp32/fp64/bool contents and raw contents are then read in
place in the request's bytes, other typed contents converted a chunk at a time, never as a Python list (through
JSON, as before, a 60 MiB request took 1 GiB). A request protobuf cannot decode is INVALID_ARGUMENT, on every RPC.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import math
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import numpy as np

from trtpipe import console
from trtpipe.errors import BadInput, MissingDependency
from trtpipe.runtime.base import TensorInfo
from trtpipe.serve.options import ServeOptions
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
from trtpipe.serve.service import InferenceService
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

    def __init__(self, contents: Any, datatype: str, packed: tuple[int, memoryview] | None = None) -> None:
        self.contents = contents
        self.field = CONTENTS_FIELD.get(datatype)
        self.packed = packed  # (field number, bytes) of the contents' one packed run, in the request's bytes

    def check(self, name: str, shape: list[int], datatype: str, dtype: np.dtype[Any]) -> None:
        if self.field is None:
            raise ProtocolError(400, f"Input '{name}' of datatype {datatype} must come as raw_input_contents.")
        filled = [descriptor.name for descriptor, _ in self.contents.ListFields()]
        if filled and self.field not in filled:
            raise ProtocolError(400, f"Input '{name}' is {datatype}: its values go in {self.field}, but the request "
                                     f"fills {', '.join(filled)}.")
        if len(filled) > 1:
            others = ", ".join(f for f in filled if f != self.field)
            raise ProtocolError(400, f"Input '{name}' fills {others} besides {self.field}: give its values in "
                                     f"{self.field} only.")
        have = len(getattr(self.contents, self.field))
        if have != math.prod(shape):
            raise count_mismatch(name, have, shape)

    def decode(self, name: str, datatype: str, dtype: np.dtype[Any]) -> np.ndarray:
        assert self.field is not None
        values = getattr(self.contents, self.field)
        count = len(values)
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
                               wire: bytes | None = None) -> InferRequest:
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
    layout = wire_layout(wire) if wire is not None else None
    if layout is not None and (len(layout[0]) != len(message.inputs) or len(layout[1]) != len(raw)):
        layout = None
    items = []
    for index, tensor in enumerate(message.inputs):
        data: TensorData
        if raw:
            data = RawData(layout[1][index] if layout else raw[index], "raw_input_contents")
        else:
            data = TypedContents(tensor.contents, tensor.datatype, layout[0][index] if layout else None)
        items.append({"name": tensor.name, "datatype": tensor.datatype, "shape": list(tensor.shape), "data": data})
    header: dict[str, Any] = {"inputs": items, "parameters": {"binary_data_output": True}}
    if message.id:
        header["id"] = message.id
    if message.outputs:
        header["outputs"] = [{"name": o.name} for o in message.outputs]
    return infer_request(header, memoryview(b""), inputs, outputs, max_batch_size, max_tensor_bytes)


# -- the service ------------------------------------------------------------------------------------------------------


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

    async def ModelInfer(self, request: bytes, context: Any) -> Any:
        """The same steps as HTTP's infer route, counted in the same series; ``request`` is the message's bytes
        (see :func:`method_handlers`), decoded and converted in worker threads."""
        service = self.service
        try:
            try:
                service.check_body_size(len(request))
                message = await self._in_thread(len(request), parse_message, self.messages.ModelInferRequest,
                                                request)
            except ProtocolError:
                with service.accounted(""):  # counted, like every HTTP request, under the unknown model
                    raise
            with service.accounted(message.model_name):
                entry = service.admit(message.model_name, message.model_version or None)
                model = entry.model
                assert model is not None
                parsed = await self._in_thread(len(request), infer_request_from_message, message, model.inputs,
                                               model.outputs, entry.max_batch_size, service.settings.max_body_bytes,
                                               request)
                request_id = message.id
                del message  # its copy of the tensors: the arrays hold what the model needs
                outputs = await service.run(entry, [parsed.inputs[t.name] for t in model.inputs])
                return self._infer_response(entry, request_id, parsed, outputs)
        except ProtocolError as error:
            await context.abort(_status(self.grpc, error.status), error.message)
            raise  # abort raises; this keeps type checkers content

    async def _in_thread(self, size: int, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)`` in the service's thread pool (where HTTP parses its bodies); a large request only
        while it holds one of a few slots."""
        async with self.large_messages if size > LARGE_MESSAGE else contextlib.nullcontext():
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


def _guarded(name: str, behavior: Callable[..., Any], grpc: Any) -> Callable[[Any, Any], Awaitable[Any]]:
    """The unary RPC ``name``, answering an Undecodable request with INVALID_ARGUMENT, an RPC the generated
    servicer leaves unimplemented with UNIMPLEMENTED, and any other failure with INTERNAL, each with a plain
    message (gRPC's own answer to an exception is UNKNOWN, with the exception's class in the details)."""

    async def handle(request: Any, context: Any) -> Any:
        if isinstance(request, Undecodable):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
        try:
            result = behavior(request, context)
            return await result if inspect.isawaitable(result) else result
        except grpc.aio.AbortError:  # the RPC has answered already
            raise
        except NotImplementedError:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"trtpipe does not implement {name}.")
        except Exception as error:
            console.warn(f"gRPC {name} failed: {error!r}")
            await context.abort(grpc.StatusCode.INTERNAL, f"{name} failed on the server: see its log.")

    return handle


def method_handlers(grpc: Any, messages: Any, endpoints: Any) -> dict[str, Any]:
    """The service's handlers, read from its descriptor (as the generated ``add_..._to_server`` would write
    them), except that ModelInfer takes its request as bytes, to decode it off the event loop, and every other
    unary RPC answers an undecodable request with INVALID_ARGUMENT."""
    from google.protobuf.message_factory import GetMessageClass

    makers = {(False, True): grpc.unary_stream_rpc_method_handler,
              (True, False): grpc.stream_unary_rpc_method_handler,
              (True, True): grpc.stream_stream_rpc_method_handler}
    handlers = {}
    for method in messages.DESCRIPTOR.services_by_name[SERVICE.rsplit(".", 1)[1]].methods:
        request_class, response_class = GetMessageClass(method.input_type), GetMessageClass(method.output_type)
        behavior = getattr(endpoints, method.name)
        streaming = (method.client_streaming, method.server_streaming)
        if streaming in makers:
            handlers[method.name] = makers[streaming](behavior, request_deserializer=request_class.FromString,
                                                      response_serializer=response_class.SerializeToString)
        elif method.name == "ModelInfer":
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                _guarded(method.name, behavior, grpc), request_deserializer=None,
                response_serializer=response_class.SerializeToString)
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                _guarded(method.name, behavior, grpc), request_deserializer=_lenient(request_class),
                response_serializer=response_class.SerializeToString)
    return handlers


def create_server(grpc: Any, settings: ServeOptions) -> Any:
    """An aio server with HTTP's limits: messages up to ``--max-body-mb`` each way, and at most
    ``--max-connections`` calls at once (more get RESOURCE_EXHAUSTED, as HTTP's get 503)."""
    return grpc.aio.server(options=[("grpc.max_receive_message_length", settings.max_body_bytes),
                                    ("grpc.max_send_message_length", settings.max_body_bytes)],
                           maximum_concurrent_rpcs=settings.max_connections)


def bind(server: Any, settings: ServeOptions) -> str:
    """Listen on ``--host`` at ``--grpc-port``; a port that cannot be bound is the user's to change."""
    address = f"{'[::1]' if settings.host == '::1' else settings.host}:{settings.grpc_port}"
    if server.add_insecure_port(address) == 0:
        raise BadInput(f"The gRPC service cannot listen on {address}: choose a free --grpc-port.")
    return address


def add_service(server: Any, service: InferenceService, grpc: Any, messages: Any, generated: Any) -> None:
    """Register the inference service's handlers on ``server``."""
    handlers = method_handlers(grpc, messages, servicer(service, grpc, messages, generated))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))


async def start_grpc(service: InferenceService) -> Any:
    """Create, bind and start the aio gRPC server on the running loop (the HTTP app's, sharing ``service``)."""
    grpc, messages, generated = _grpc_modules()
    server = create_server(grpc, service.settings)
    add_service(server, service, grpc, messages, generated)
    bind(server, service.settings)
    await server.start()
    return server
