"""The KServe v2 / Open Inference Protocol gRPC service, beside HTTP on the same event loop.

It implements the service Triton's client speaks (``tritonclient.grpc``'s generated ``GRPCInferenceService``), and
shares the InferenceService with the HTTP routes: the loaded models, their batchers, admission (``--max-queue``,
``--max-body-mb``, ``--max-connections``, readiness), timeouts and metrics. A request's inputs are checked by the
protocol module's ``infer_request``, as HTTP's are, so both transports accept and refuse exactly the same things;
errors become gRPC status codes.

ModelInfer takes its request as bytes and decodes it in a worker thread, as HTTP parses its bodies: protobuf parsing and
the conversion of a large ``fp32_contents`` take long, and the event loop keeps answering health checks and other
models meanwhile (decoded on the loop, as gRPC does by default, one such request stalled the health checks for seconds:
docs/results/serving.md, 'Request decoding costs'). How a message is decoded, its bulky contents read in place and
counted before anything is built, is messages.py's; a request protobuf cannot decode is INVALID_ARGUMENT, on
every RPC.

The service runs on an event loop and a thread of its own (:class:`GrpcThread`): what gRPC itself does on its loop,
turning a large message into bytes, then never holds up HTTP's health checks. Memory that runs out while a message is
received or decoded is that request's UNAVAILABLE, and what a large request took goes back after it (memory.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np

from trtpipe import console
from trtpipe.errors import import_failure
from trtpipe.serve.answers import check_answer_size, wanted_outputs
from trtpipe.serve.grpc.bridge import Bridge, CallAborted, Dispatch, ForwardedCall, GrpcThread, status_number
from trtpipe.serve.grpc.forwarding import ConnectionGone
from trtpipe.serve.grpc.messages import Undecodable, infer_request_from_message, parse_request
from trtpipe.serve.memory import give_back, short_of_room, warm_thread
from trtpipe.serve.protocol import InferRequest, ProtocolError, bounded, datatype_of
from trtpipe.serve.repository.loading import ServedModel
from trtpipe.serve.service import (
    COSTLY_DECODE,
    LARGE_DECODES_AT_ONCE,
    SERVICE_THREADS,
    ClientLeft,
    InferenceService,
    classify_failure,
)
from trtpipe.vocab import __version__

SERVICE = "inference.GRPCInferenceService"
LARGE_MESSAGE = 1 << 20  # bytes: a request above this is decoded only while it holds one of a few slots
LARGE_MESSAGES_AT_ONCE = LARGE_DECODES_AT_ONCE  # as HTTP's large bodies: each costs memory while it is decoded


def _grpc_modules() -> tuple[Any, Any, Any]:
    """grpc and Triton's generated messages and service, imported only when --grpc-port asks for them: they come
    with the optional ``triton`` extra."""
    try:
        import grpc
        from tritonclient.grpc import service_pb2, service_pb2_grpc
    except ImportError as error:  # not installed, or installed and not loadable (a library not mapped): say which
        raise import_failure(error, "tritonclient[grpc]", "The gRPC service (--grpc-port)",
                             "pip install 'trtpipe[triton]'", ("grpc", "tritonclient", "google")) from None
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
        deadline = service.decode_deadline()  # decoding and checking count against the request's budget, as HTTP's
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
                                           request, raw, deadline)
            request_id = message.id
            del message, request, raw  # their copies of the tensors: the arrays hold what the model needs
            outputs = await service.run(entry, [parsed.inputs[t.name] for t in model.inputs])
            check_answer_size(wanted_outputs(parsed, model.outputs, outputs), service.settings.max_response_bytes,
                              "grpc")  # RESOURCE_EXHAUSTED before anything is copied into the answer
            return self._infer_response(entry, request_id, parsed, outputs)

    def _after(self, size: int) -> None:
        """After a large request: malloc's freed memory back to the system, in a worker thread (it walks every
        arena; ctypes lets go of the GIL meanwhile)."""
        if size > LARGE_MESSAGE:
            with contextlib.suppress(RuntimeError):  # the pool has shut down: the server is stopping
                self.service.executor.submit(give_back)

    @contextlib.asynccontextmanager
    async def _room(self, size: int, need: int | None = None) -> AsyncIterator[None]:
        """A costly request (``size`` bytes, over COSTLY_DECODE) only while it holds one of a few slots, and a large
        one only when the memory it may still take (``need``, its size unless said: its message before it is read,
        as much again to decode it) leaves the reserve free."""
        async with self.large_messages if size > COSTLY_DECODE else contextlib.nullcontext():
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
        except CallAborted as aborted:  # its details bounded like every ProtocolError's (clients bound trailers)
            return status_number(aborted.code), bounded(aborted.details), b""
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
    own (see bridge.py), sharing ``service`` with HTTP; ``stop(grace)`` on what it returns stops it."""
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
