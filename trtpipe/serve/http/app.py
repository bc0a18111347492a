"""The HTTP server: Open Inference Protocol endpoints on Starlette, inference off the event loop.

Batched models go through their MicroBatcher's worker thread; the others run in the service's thread pool. The
event loop only parses, validates and answers, so a slow model never blocks health checks or other models.
While a request waits for the model, the route also listens for its client leaving: a request nobody waits for is
taken off the queue unrun (``InferenceService._execute``).
Admission, execution and metrics are the InferenceService's (``service.py``), shared with the gRPC service;
this module is what is HTTP's own: routes, bodies, headers and status codes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from trtpipe.serve.answers import LARGE_ANSWER, answer_size, check_answer_size, encode_infer_response, wanted_outputs
from trtpipe.serve.memory import give_back
from trtpipe.serve.options import ServeOptions
from trtpipe.serve.protocol import HEADER_LENGTH, InferRequest, ProtocolError, tensor_metadata
from trtpipe.serve.repository.loading import ServedModel
from trtpipe.serve.service import COSTLY_DECODE, LARGE_DECODES_AT_ONCE, ClientLeft, InferenceService, Metrics
from trtpipe.vocab import __version__

CLIENT_CLOSED = 499  # nginx's code for a request the client abandoned: logged, never sent
LARGE_BODY = COSTLY_DECODE  # bytes: a body above this (or of unknown size) waits for one of a few slots
LARGE_BODIES_AT_ONCE = LARGE_DECODES_AT_ONCE

T = TypeVar("T")


def create_app(models: dict[str, dict[str, ServedModel]], settings: ServeOptions | None = None,
               metrics: Metrics | None = None) -> Starlette:
    """The ASGI app serving ``models``; with ``settings.grpc_port`` its lifespan runs the gRPC service too.

    ``app.state.service`` is the InferenceService both transports share (``server.py`` sets its ``draining``
    and ``shutting_down`` on a signal); ``app.state.metrics`` its Prometheus series.
    """
    service = InferenceService(models, settings, metrics)
    endpoints = HttpEndpoints(service)
    app = Starlette(routes=routes(endpoints), lifespan=lifespan(service),
                    exception_handlers={HTTPException: http_error})
    app.state.service = service
    app.state.metrics = service.metrics
    return app


def routes(endpoints: HttpEndpoints) -> list[Route]:
    """KServe v2's HTTP paths (each with and without a version), /metrics and the OpenAPI description."""
    return [
        Route("/v2", endpoints.server_metadata),
        Route("/v2/health/live", endpoints.live),
        Route("/v2/health/ready", endpoints.ready),
        Route("/v2/models/{name}", endpoints.model_metadata),
        Route("/v2/models/{name}/versions/{version}", endpoints.model_metadata),
        Route("/v2/models/{name}/ready", endpoints.model_ready),
        Route("/v2/models/{name}/versions/{version}/ready", endpoints.model_ready),
        Route("/v2/models/{name}/infer", endpoints.infer, methods=["POST"]),
        Route("/v2/models/{name}/versions/{version}/infer", endpoints.infer, methods=["POST"]),
        Route("/metrics", endpoints.prometheus),
        Route("/v2/openapi.json", endpoints.api_description),
    ]


def lifespan(service: InferenceService) -> Callable[[Starlette], contextlib.AbstractAsyncContextManager[None]]:
    """Start the service's threads, and the gRPC service (when asked for) on the app's event loop, so that it
    shares the models, limits and metrics; at shutdown refuse new requests first, then let gRPC's requests in
    flight finish, then stop the batchers."""

    @asynccontextmanager
    async def run(app: Starlette) -> AsyncIterator[None]:
        settings = service.settings
        service.start()
        grpc_server = None
        if settings.grpc_port is not None:
            from trtpipe.serve.grpc.service import start_grpc  # gRPC is optional: imported only when asked for

            grpc_server = await start_grpc(service)
            if grpc_server.bridge is not None:
                service.listener_problems.append(grpc_server.bridge.problem)
        yield
        service.shutting_down = True
        if grpc_server is not None:
            await grpc_server.stop(grace=settings.timeout_s or 5.0)
        service.close()

    return run


async def http_error(request: Request, error: Exception) -> Response:
    """Starlette's own errors (unknown route 404, wrong method 405) in the JSON shape of every other error."""
    status = getattr(error, "status_code", 500)
    return _error(status, str(getattr(error, "detail", "")) or "Error")


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


class HttpEndpoints:
    """The route handlers: each turns an HTTP request into InferenceService calls and the answer into JSON or
    binary tensors, and a ProtocolError into its status code with ``{"error": message}``."""

    def __init__(self, service: InferenceService) -> None:
        self.service = service
        # Large bodies are read and parsed a few at a time: each costs memory while it is held.
        self.large_bodies = asyncio.Semaphore(LARGE_BODIES_AT_ONCE)

    async def server_metadata(self, request: Request) -> Response:
        return JSONResponse({"name": "trtpipe", "version": __version__, "extensions": ["binary_tensor_data"]})

    async def live(self, request: Request) -> Response:
        return JSONResponse({"live": True})

    async def ready(self, request: Request) -> Response:
        reason = self.service.unready_reason()
        if reason is None:
            return JSONResponse({"ready": True})
        return JSONResponse({"ready": False, "reason": reason}, status_code=503)

    async def model_metadata(self, request: Request) -> Response:
        try:
            entry = self._find(request)
        except ProtocolError as error:
            return _error(error.status, error.message)
        body: dict[str, Any] = {"name": entry.name, "versions": entry.versions, "platform": entry.platform}
        if entry.model is None:
            body.update(ready=False, error=entry.error)
            return JSONResponse(body, status_code=503)
        body.update(inputs=[tensor_metadata(t) for t in entry.model.inputs],
                    outputs=[tensor_metadata(t) for t in entry.model.outputs], max_batch_size=entry.max_batch_size)
        return JSONResponse(body)

    async def model_ready(self, request: Request) -> Response:
        try:
            entry = self._find(request)
        except ProtocolError as error:
            return _error(error.status, error.message)
        ok = self.service.model_ready(entry)
        body = {"name": entry.name, "ready": ok} | ({"error": entry.error} if entry.error else {})
        return JSONResponse(body, status_code=200 if ok else 400)  # KServe v2: 4xx means "not ready"

    async def infer(self, request: Request) -> Response:
        name = request.path_params["name"]
        try:
            with self.service.accounted(name):
                entry = self.service.admit(name, request.path_params.get("version"))
                parsed = await self._read_request(request, entry)
                assert entry.model is not None
                outputs = await _unless_client_leaves(
                    request, self.service.run(entry, [parsed.inputs[t.name] for t in entry.model.inputs]))
                payload, headers, large = await self._answer(entry, parsed, outputs)
        except ProtocolError as error:
            return _error(error.status, error.message)
        except ClientLeft:
            return Response(status_code=CLIENT_CLOSED)
        return Response(payload, headers=headers, background=BackgroundTask(self._give_back) if large else None)

    async def _answer(self, entry: ServedModel, parsed: InferRequest,
                      outputs: list[Any]) -> tuple[bytes, dict[str, str], bool]:
        """The answer's body and headers, and whether it is large: refused (413) over ``--max-response-mb`` before
        anything is encoded, and a large one encoded in a worker thread, so that the event loop keeps answering
        health checks meanwhile (a 1.4 GB JSON answer stalled /live for 2.4 s)."""
        assert entry.model is not None
        wanted = wanted_outputs(parsed, entry.model.outputs, outputs)
        check_answer_size(wanted, self.service.settings.max_response_bytes)
        args = (entry.name, entry.version, parsed, entry.model.outputs, outputs)
        if answer_size(wanted) <= LARGE_ANSWER:
            return (*encode_infer_response(*args), False)
        payload, headers = await asyncio.get_running_loop().run_in_executor(self.service.executor,
                                                                             encode_infer_response, *args)
        return payload, headers, True

    async def _give_back(self) -> None:
        """After a large answer has been sent: malloc's freed memory back to the system, in a worker thread."""
        with contextlib.suppress(RuntimeError):  # the pool has shut down: the server is stopping
            await asyncio.get_running_loop().run_in_executor(self.service.executor, give_back)

    async def api_description(self, request: Request) -> Response:
        from trtpipe.serve.http.openapi import openapi

        return JSONResponse(openapi())

    async def prometheus(self, request: Request) -> Response:
        text, content_type = self.service.exposition()
        return Response(text, media_type=content_type)

    def _find(self, request: Request) -> ServedModel:
        return self.service.find(request.path_params["name"], request.path_params.get("version"))

    async def _read_request(self, request: Request, entry: ServedModel) -> InferRequest:
        """The body read and parsed, a large one (or one of unknown size) only while it holds one of a few slots,
        and dropped as soon as it is parsed."""
        header_length = request.headers.get(HEADER_LENGTH)
        try:
            length = int(header_length) if header_length is not None else None
        except ValueError:
            raise ProtocolError(400, f"{HEADER_LENGTH} must be an integer.") from None
        declared = request.headers.get("content-length", "")
        large = not declared.isdigit() or int(declared) > LARGE_BODY
        async with (self.large_bodies if large else contextlib.nullcontext()):
            body = await _read_body(request, self.service)
            parsed = await self.service.parse(entry, body, length)
            del body
        return parsed


async def _read_body(request: Request, service: InferenceService) -> bytearray:
    """The body, gathered in one growing buffer (each piece copied once as it arrives: joining the pieces at the
    end would copy the whole body at once on the event loop, while health checks wait:
    docs/results/serving-memory.md), refused with 413 as soon as it is known to be too big (from Content-Length
    before reading, or while streaming when the client sends none) and with 408 when it has not all arrived within
    ``--body-timeout-s``: a client trickling its body cannot hold the connection."""
    limit, timeout_s = service.settings.max_body_bytes, service.settings.body_timeout_s
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit():
        service.check_body_size(int(declared))
    body = bytearray()

    async def receive() -> None:
        async for chunk in request.stream():
            if len(body) + len(chunk) > limit:
                raise ProtocolError(413, f"The request body exceeds the limit of {limit} bytes.")
            body.extend(chunk)

    try:
        await asyncio.wait_for(receive(), timeout_s)
    except BaseException as error:
        # The exception's traceback and the awaiting frames refer to one another, and would keep the body received
        # so far until the cyclic collector runs, seconds later: let go of it now.
        body.clear()
        if isinstance(error, TimeoutError):
            raise ProtocolError(408, f"The request body did not arrive within {timeout_s:g} s.") from None
        if isinstance(error, ClientDisconnect):  # the client went away mid-body: nobody to answer, not a failure
            raise ClientLeft from None
        raise
    return body


async def _unless_client_leaves(request: Request, work: Awaitable[T]) -> T:
    """``work``'s result, or ClientLeft as soon as the client disconnects: ``work`` is then cancelled, which takes
    the request off its model's queue if it has not started (a client that gave up costs no model time).

    Once the body is read, the next ASGI message is ``http.disconnect``, when the client goes away (or once the
    response is complete, which cannot come before ``work`` ends)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # this handler is cancelled itself (a forced shutdown): so is the work
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):  # whatever it ends with, nobody is there to hear it
        await task
    raise ClientLeft


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
