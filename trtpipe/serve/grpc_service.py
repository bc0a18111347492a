"""The KServe v2 / Open Inference Protocol gRPC service, beside HTTP on the same event loop.

It implements the service Triton's client speaks (``tritonclient.grpc``'s generated ``GRPCInferenceService``), and
shares everything with the HTTP routes: the loaded models, their batchers, ``--max-queue``, timeouts and metrics.
Requests are turned into the HTTP protocol's form (JSON-like header plus raw bytes) and checked by the same
parser, so both transports accept and refuse exactly the same things; errors become gRPC status codes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trtpipe.errors import BadInput, MissingDependency
from trtpipe.serve.app import Metrics, lookup, run_model
from trtpipe.serve.options import ServeOptions
from trtpipe.serve.protocol import ProtocolError, datatype_of, parse_infer_request
from trtpipe.serve.repository import ServedModel
from trtpipe.vocab import __version__

# Typed contents field of InferTensorContents for each KServe datatype (FP16 travels as raw bytes only).
CONTENTS_FIELD = {"BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
                  "INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents",
                  "UINT32": "uint_contents", "UINT64": "uint64_contents", "FP32": "fp32_contents",
                  "FP64": "fp64_contents"}


def _grpc_modules() -> tuple[Any, Any, Any]:
    try:
        import grpc
        from tritonclient.grpc import service_pb2, service_pb2_grpc
    except ImportError:
        raise MissingDependency("tritonclient[grpc]", "The gRPC service (--grpc-port)",
                                "pip install 'trtpipe[triton]'") from None
    return grpc, service_pb2, service_pb2_grpc


def _status(grpc: Any, http_status: int) -> Any:
    codes = grpc.StatusCode
    return {400: codes.INVALID_ARGUMENT, 404: codes.NOT_FOUND, 408: codes.DEADLINE_EXCEEDED,
            413: codes.RESOURCE_EXHAUSTED, 503: codes.UNAVAILABLE, 504: codes.DEADLINE_EXCEEDED}.get(
        http_status, codes.INTERNAL)


def _parameter(value: Any) -> Any:
    kind = value.WhichOneof("parameter_choice")
    return getattr(value, kind) if kind else None


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


async def start_grpc(models: dict[str, dict[str, ServedModel]], settings: ServeOptions, metrics: Metrics,
                     state: dict[str, Any]) -> Any:
    """Create, bind and start the aio gRPC server on the running loop."""
    grpc, service_pb2, service_pb2_grpc = _grpc_modules()

    class Service(service_pb2_grpc.GRPCInferenceServiceServicer):
        async def ServerLive(self, request: Any, context: Any) -> Any:
            return service_pb2.ServerLiveResponse(live=True)

        async def ServerReady(self, request: Any, context: Any) -> Any:
            ready = not state["shutting_down"] and all(e.ready for v in models.values() for e in v.values())
            return service_pb2.ServerReadyResponse(ready=ready)

        async def ModelReady(self, request: Any, context: Any) -> Any:
            entry = await self._find(request.name, request.version, context)
            return service_pb2.ModelReadyResponse(ready=entry.ready and not state["shutting_down"])

        async def ServerMetadata(self, request: Any, context: Any) -> Any:
            return service_pb2.ServerMetadataResponse(name="trtpipe", version=__version__, extensions=[])

        async def ModelMetadata(self, request: Any, context: Any) -> Any:
            entry = await self._find(request.name, request.version, context)
            if entry.model is None:
                await context.abort(grpc.StatusCode.UNAVAILABLE, f"Model '{entry.name}' is not ready: {entry.error}")
            tensor = service_pb2.ModelMetadataResponse.TensorMetadata
            return service_pb2.ModelMetadataResponse(
                name=entry.name, versions=entry.versions, platform=entry.platform,
                inputs=[tensor(name=t.name, datatype=datatype_of(t.dtype),
                               shape=[d if isinstance(d, int) else -1 for d in t.shape]) for t in entry.model.inputs],
                outputs=[tensor(name=t.name, datatype=datatype_of(t.dtype),
                                shape=[d if isinstance(d, int) else -1 for d in t.shape])
                         for t in entry.model.outputs])

        async def ModelInfer(self, request: Any, context: Any) -> Any:
            label = request.model_name if request.model_name in models else "_unknown"
            metrics.requests.labels(label).inc()
            try:
                entry = lookup(models, request.model_name, request.model_version or None)
                if entry.model is None:
                    raise ProtocolError(503, f"Model '{entry.name}' is not ready: {entry.error}")
                if state["shutting_down"]:
                    raise ProtocolError(503, "The server is shutting down.")
                body, length = as_protocol_request(request)
                if len(body) > settings.max_body_bytes:
                    raise ProtocolError(413, f"The request is {len(body)} bytes; the limit is "
                                             f"{settings.max_body_bytes}.")
                parsed = parse_infer_request(body, length, entry.model.inputs, entry.model.outputs,
                                             entry.max_batch_size)
                arrays = [parsed.inputs[t.name] for t in entry.model.inputs]
                outputs = await run_model(entry, arrays, settings, metrics)
            except ProtocolError as error:
                metrics.failures.labels(label, str(error.status)).inc()
                await context.abort(_status(grpc, error.status), error.message)
            by_name = {t.name: np.ascontiguousarray(a) for t, a in zip(entry.model.outputs, outputs, strict=True)}
            wanted = [name for name, _ in parsed.outputs] if parsed.outputs else list(by_name)
            response = service_pb2.ModelInferResponse(model_name=entry.name, model_version=entry.version,
                                                      id=request.id)
            for name in wanted:
                array = by_name[name]
                response.outputs.add(name=name, datatype=datatype_of(array.dtype.name), shape=list(array.shape))
                response.raw_output_contents.append(array.tobytes())
            return response

        async def _find(self, name: str, version: str, context: Any) -> ServedModel:
            try:
                return lookup(models, name, version or None)
            except ProtocolError as error:
                await context.abort(_status(grpc, error.status), error.message)
                raise  # abort raises; this keeps type checkers content

    server = grpc.aio.server(options=[("grpc.max_receive_message_length", settings.max_body_bytes),
                                      ("grpc.max_send_message_length", settings.max_body_bytes)])
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(Service(), server)
    address = f"{'[::1]' if settings.host == '::1' else settings.host}:{settings.grpc_port}"
    if server.add_insecure_port(address) == 0:
        raise BadInput(f"The gRPC service cannot listen on {address}: choose a free --grpc-port.")
    await server.start()
    return server
