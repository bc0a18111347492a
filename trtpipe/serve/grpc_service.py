"""The KServe v2 / Open Inference Protocol gRPC service, beside HTTP on the same event loop.

It implements the service Triton's client speaks (``tritonclient.grpc``'s generated ``GRPCInferenceService``), and
shares the InferenceService with the HTTP routes: the loaded models, their batchers, admission (``--max-queue``,
``--max-body-mb``, ``--max-connections``, readiness), timeouts and metrics. Requests are turned into the HTTP
protocol's form (JSON-like header plus raw bytes) and checked by the same parser, so both transports accept and
refuse exactly the same things; errors become gRPC status codes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trtpipe.errors import BadInput, MissingDependency
from trtpipe.serve.options import ServeOptions
from trtpipe.serve.protocol import InferRequest, ProtocolError, datatype_of
from trtpipe.serve.repository import ServedModel
from trtpipe.serve.service import InferenceService
from trtpipe.vocab import __version__

# Typed contents field of InferTensorContents for each KServe datatype (FP16 travels as raw bytes only).
CONTENTS_FIELD = {"BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
                  "INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents",
                  "UINT32": "uint_contents", "UINT64": "uint64_contents", "FP32": "fp32_contents",
                  "FP64": "fp64_contents"}


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
    """The gRPC status code for a ProtocolError's HTTP status (anything unlisted, a 500 included: INTERNAL)."""
    codes = grpc.StatusCode
    return {400: codes.INVALID_ARGUMENT, 404: codes.NOT_FOUND, 408: codes.DEADLINE_EXCEEDED,
            413: codes.RESOURCE_EXHAUSTED, 503: codes.UNAVAILABLE, 504: codes.DEADLINE_EXCEEDED}.get(
        http_status, codes.INTERNAL)


def as_protocol_request(request: Any) -> tuple[bytes, int | None]:
    """A ModelInferRequest as the HTTP protocol's body: a JSON header (inputs with typed data, or
    binary_data_size for raw contents) followed by the raw bytes, for ``parse_infer_request``."""
    import orjson

    raw = list(request.raw_input_contents)
    if raw and len(raw) != len(request.inputs):
        raise ProtocolError(400, f"{len(raw)} raw_input_contents for {len(request.inputs)} inputs: give one per "
                                 "input, in order, or none.")
    inputs = []
    for index, tensor in enumerate(request.inputs):
        item: dict[str, Any] = {"name": tensor.name, "datatype": tensor.datatype, "shape": list(tensor.shape)}
        if raw:
            item["parameters"] = {"binary_data_size": len(raw[index])}
        else:
            field = CONTENTS_FIELD.get(tensor.datatype)
            if field is None:
                raise ProtocolError(400, f"Input '{tensor.name}' of datatype {tensor.datatype} must come as "
                                         "raw_input_contents.")
            item["data"] = list(getattr(tensor.contents, field))
        inputs.append(item)
    header: dict[str, Any] = {"inputs": inputs, "parameters": {"binary_data_output": True}}
    if request.id:
        header["id"] = request.id
    if request.outputs:
        header["outputs"] = [{"name": o.name} for o in request.outputs]
    body = orjson.dumps(header)
    return body + b"".join(raw), len(body)


class GrpcEndpoints:
    """The RPCs trtpipe answers, each a thin translation onto the InferenceService; a ProtocolError aborts the
    call with its gRPC status code. The RPCs it does not answer (shared memory, repository control, statistics)
    are the generated servicer's, UNIMPLEMENTED: see :func:`servicer`."""

    def __init__(self, service: InferenceService, grpc: Any, messages: Any) -> None:
        self.service = service
        self.grpc = grpc
        self.messages = messages  # tritonclient.grpc.service_pb2

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

    async def ModelInfer(self, request: Any, context: Any) -> Any:
        """The same steps as HTTP's infer route, counted in the same series; only the body's form differs."""
        service = self.service
        try:
            with service.accounted(request.model_name):
                entry = service.admit(request.model_name, request.model_version or None)
                assert entry.model is not None
                body, length = as_protocol_request(request)
                parsed = await service.parse(entry, body, length)
                del body
                outputs = await service.run(entry, [parsed.inputs[t.name] for t in entry.model.inputs])
                return self._infer_response(entry, request.id, parsed, outputs)
        except ProtocolError as error:
            await context.abort(_status(self.grpc, error.status), error.message)
            raise  # abort raises; this keeps type checkers content

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


async def start_grpc(service: InferenceService) -> Any:
    """Create, bind and start the aio gRPC server on the running loop (the HTTP app's, sharing ``service``)."""
    grpc, messages, generated = _grpc_modules()
    server = create_server(grpc, service.settings)
    generated.add_GRPCInferenceServiceServicer_to_server(servicer(service, grpc, messages, generated), server)
    bind(server, service.settings)
    await server.start()
    return server
