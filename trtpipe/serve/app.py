"""The HTTP server: Open Inference Protocol endpoints on Starlette, inference off the event loop.

Batched models go through their MicroBatcher's worker thread; the others run in the default thread pool. The
event loop only parses, validates and answers, so a slow model never blocks health checks or other models.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from trtpipe.serve.batching import QueueFull
from trtpipe.serve.options import ServeOptions
from trtpipe.serve.protocol import (
    HEADER_LENGTH,
    ProtocolError,
    encode_infer_response,
    parse_infer_request,
    tensor_metadata,
)
from trtpipe.serve.repository import ServedModel
from trtpipe.vocab import __version__


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.requests = Counter("trtpipe_inference_requests", "Inference requests", ["model"],
                                registry=self.registry)
        self.failures = Counter("trtpipe_inference_failures", "Failed inference requests", ["model", "code"],
                                registry=self.registry)
        self.latency = Histogram("trtpipe_inference_latency_seconds", "Request latency", ["model"],
                                 buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5),
                                 registry=self.registry)
        self.batch_size = Histogram("trtpipe_batch_size", "Rows per executed batch", ["model"],
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256), registry=self.registry)
        self.disconnects = Counter("trtpipe_client_disconnects", "Requests whose client left before the answer",
                                   ["model"], registry=self.registry)
        self.queue_depth = Gauge("trtpipe_queue_depth", "Requests waiting for a batch", ["model"],
                                 registry=self.registry)


def lookup(models: dict[str, dict[str, ServedModel]], name: str, version: str | None) -> ServedModel:
    """A model version by name (the newest when ``version`` is empty); 404 naming what exists otherwise."""
    versions = models.get(name)
    if versions is None:
        raise ProtocolError(404, f"Unknown model '{name}': this server has {', '.join(sorted(models))}.")
    version = version or max(versions, key=int)
    if version not in versions:
        raise ProtocolError(404, f"Model '{name}' has no version {version}: it has {', '.join(versions)}.")
    return versions[version]


CLIENT_CLOSED = 499  # nginx's code for a request the client abandoned: logged, never sent
LARGE_BODY = 1 << 20  # bytes: a body above this (or of unknown size) waits for one of a few slots
LARGE_BODIES_AT_ONCE = 4


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def create_app(models: dict[str, dict[str, ServedModel]], settings: ServeOptions | None = None,
               metrics: Metrics | None = None) -> Starlette:
    settings = settings or ServeOptions()
    metrics = metrics or Metrics()
    state: dict[str, Any] = {"shutting_down": False}
    large_bodies = asyncio.Semaphore(LARGE_BODIES_AT_ONCE)

    def find(request: Request) -> ServedModel:
        return lookup(models, request.path_params["name"], request.path_params.get("version"))

    async def server_metadata(request: Request) -> Response:
        return JSONResponse({"name": "trtpipe", "version": __version__, "extensions": ["binary_tensor_data"]})

    async def live(request: Request) -> Response:
        return JSONResponse({"live": True})

    async def ready(request: Request) -> Response:
        ok = not state["shutting_down"] and all(e.ready for v in models.values() for e in v.values())
        return JSONResponse({"ready": ok}, status_code=200 if ok else 503)

    async def model_metadata(request: Request) -> Response:
        try:
            entry = find(request)
        except ProtocolError as error:
            return _error(error.status, error.message)
        body: dict[str, Any] = {"name": entry.name, "versions": entry.versions, "platform": entry.platform}
        if entry.model is None:
            body.update(ready=False, error=entry.error)
            return JSONResponse(body, status_code=503)
        body.update(inputs=[tensor_metadata(t) for t in entry.model.inputs],
                    outputs=[tensor_metadata(t) for t in entry.model.outputs], max_batch_size=entry.max_batch_size)
        return JSONResponse(body)

    async def model_ready(request: Request) -> Response:
        try:
            entry = find(request)
        except ProtocolError as error:
            return _error(error.status, error.message)
        ok = entry.ready and not state["shutting_down"]
        body = {"name": entry.name, "ready": ok} | ({"error": entry.error} if entry.error else {})
        return JSONResponse(body, status_code=200 if ok else 400)  # KServe v2: 4xx means "not ready"

    async def infer(request: Request) -> Response:
        start = time.perf_counter()
        name = request.path_params["name"]
        label = name if name in models else "_unknown"
        metrics.requests.labels(label).inc()
        try:
            entry = find(request)
            if entry.model is None:
                raise ProtocolError(503, f"Model '{entry.name}' is not ready: {entry.error}")
            if state["shutting_down"]:
                raise ProtocolError(503, "The server is shutting down.")
            header_length = request.headers.get(HEADER_LENGTH)
            try:
                length = int(header_length) if header_length is not None else None
            except ValueError:
                raise ProtocolError(400, f"{HEADER_LENGTH} must be an integer.") from None
            # Large bodies are read and parsed a few at a time (memory), and parsing runs in a worker thread, so
            # the event loop keeps answering health checks and other models meanwhile.
            declared = request.headers.get("content-length", "")
            large = not declared.isdigit() or int(declared) > LARGE_BODY
            async with (large_bodies if large else contextlib.nullcontext()):
                body = await _read_body(request, settings.max_body_bytes, settings.body_timeout_s)
                parsed = await asyncio.get_running_loop().run_in_executor(
                    None, parse_infer_request, body, length, entry.model.inputs, entry.model.outputs,
                    entry.max_batch_size)
                del body
            arrays = [parsed.inputs[t.name] for t in entry.model.inputs]
            outputs = await run_model(entry, arrays, settings, metrics)
            payload, headers = encode_infer_response(entry.name, entry.version, parsed, entry.model.outputs, outputs)
            metrics.latency.labels(label).observe(time.perf_counter() - start)
            return Response(payload, headers=headers)
        except ProtocolError as error:
            metrics.failures.labels(label, str(error.status)).inc()
            return _error(error.status, error.message)
        except ClientDisconnect:  # the client went away mid-request: nobody to answer, and not a server failure
            metrics.disconnects.labels(label).inc()
            return Response(status_code=CLIENT_CLOSED)
        except Exception as error:  # the model itself failed: report it, stay up
            metrics.failures.labels(label, "500").inc()
            return _error(500, f"Inference failed: {str(error).strip().splitlines()[0] if str(error) else error!r}")

    async def api_description(request: Request) -> Response:
        from trtpipe.serve.openapi import openapi

        return JSONResponse(openapi())

    async def prometheus(request: Request) -> Response:
        for name, versions in models.items():
            metrics.queue_depth.labels(name).set(sum(e.batcher.depth for e in versions.values() if e.batcher))
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @asynccontextmanager
    async def lifespan(app: Starlette):  # type: ignore[no-untyped-def]
        grpc_server = None
        if settings.grpc_port is not None:  # the gRPC service shares this loop, the models, limits and metrics
            from trtpipe.serve.grpc_service import start_grpc

            grpc_server = await start_grpc(models, settings, metrics, state)
        yield
        state["shutting_down"] = True
        if grpc_server is not None:
            await grpc_server.stop(grace=settings.timeout_s or 5.0)
        for versions in models.values():
            for entry in versions.values():
                if entry.batcher:
                    entry.batcher.close()

    routes = [
        Route("/v2", server_metadata),
        Route("/v2/health/live", live),
        Route("/v2/health/ready", ready),
        Route("/v2/models/{name}", model_metadata),
        Route("/v2/models/{name}/versions/{version}", model_metadata),
        Route("/v2/models/{name}/ready", model_ready),
        Route("/v2/models/{name}/versions/{version}/ready", model_ready),
        Route("/v2/models/{name}/infer", infer, methods=["POST"]),
        Route("/v2/models/{name}/versions/{version}/infer", infer, methods=["POST"]),
        Route("/metrics", prometheus),
        Route("/v2/openapi.json", api_description),
    ]
    async def http_error(request: Request, error: Exception) -> Response:
        status = getattr(error, "status_code", 500)
        return _error(status, str(getattr(error, "detail", "")) or "Error")

    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error})
    app.state.trtpipe = state
    app.state.metrics = metrics
    return app


async def _read_body(request: Request, limit: int, timeout_s: float = 30.0) -> bytes:
    """The body, refused with 413 as soon as it is known to be too big (from Content-Length before reading, or
    while streaming when the client sends none) and with 408 when it has not all arrived within ``timeout_s``: a
    client trickling its body cannot hold the connection."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ProtocolError(413, f"The request body is {int(declared)} bytes; the limit is {limit}.")
    chunks: list[bytes] = []

    async def receive() -> None:
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ProtocolError(413, f"The request body exceeds the limit of {limit} bytes.")
            chunks.append(chunk)

    try:
        await asyncio.wait_for(receive(), timeout_s)
    except TimeoutError:
        raise ProtocolError(408, f"The request body did not arrive within {timeout_s:g} s.") from None
    return b"".join(chunks)


async def run_model(entry: ServedModel, arrays: list[Any], settings: ServeOptions, metrics: Metrics) -> list[Any]:
    assert entry.model is not None
    timeout = settings.timeout_s
    if entry.batcher is None:  # without a batcher's queue, admission is bounded here: same --max-queue
        if entry.in_flight >= settings.max_queue:
            raise ProtocolError(503, f"{entry.in_flight} requests are already waiting or running for "
                                     f"'{entry.name}' (--max-queue {settings.max_queue}): retry later.")
        entry.in_flight += 1
        try:
            return await _execute(entry, arrays, timeout, metrics)
        finally:
            entry.in_flight -= 1
    return await _execute(entry, arrays, timeout, metrics)


async def _execute(entry: ServedModel, arrays: list[Any], timeout: float | None, metrics: Metrics) -> list[Any]:
    assert entry.model is not None
    if entry.batcher is not None:
        try:
            future = entry.batcher.submit(arrays)
        except QueueFull as error:
            raise ProtocolError(503, error.message) from None
        wrapped = asyncio.wrap_future(future)
    else:
        metrics.batch_size.labels(entry.name).observe(int(arrays[0].shape[0]) if arrays[0].ndim else 1)
        loop = asyncio.get_running_loop()
        wrapped = loop.run_in_executor(None, entry.model.predict_all, arrays)
    try:
        return await asyncio.wait_for(wrapped, timeout) if timeout else await wrapped
    except TimeoutError:
        raise ProtocolError(504, f"Inference did not finish within {timeout:g} s.") from None
