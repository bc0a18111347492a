"""What the HTTP routes and the gRPC service share: the models, admission, execution and metrics.

Both transports turn a request into the same steps, taken here once: find the model (404), admit the request
(503 while the model is not ready or the server shuts down), refuse a body over ``--max-body-mb`` (413), parse it
off the event loop, run it under ``--max-queue`` and ``--timeout-ms`` (503, 504), and count it in the same
Prometheus series. A rule added here holds for both transports; neither module imports the other.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from trtpipe.serve.batching import QueueFull
from trtpipe.serve.options import ServeOptions
from trtpipe.serve.protocol import InferRequest, ProtocolError, parse_infer_request
from trtpipe.serve.repository import ServedModel

UNKNOWN_MODEL = "_unknown"  # the metrics label of a request for a model the server does not have


@dataclass
class Metrics:
    """The server's Prometheus series, in a registry of its own so that each app (and each test) counts apart.

    ``requests``, ``failures`` (by status code), ``latency`` and ``disconnects`` are counted per request by
    :meth:`InferenceService.accounted`, whichever transport the request came by; ``batch_size`` per executed
    batch; ``queue_depth`` is read when /metrics is scraped.
    """

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


class ClientLeft(Exception):
    """The client went away before its request had arrived: nobody to answer, and not a server failure.

    A transport raises it (HTTP: on Starlette's ClientDisconnect) so that the count of disconnects, like every
    other count, is kept in one place.
    """


def lookup(models: dict[str, dict[str, ServedModel]], name: str, version: str | None) -> ServedModel:
    """A model version by name (the newest when ``version`` is empty); 404 naming what exists otherwise."""
    versions = models.get(name)
    if versions is None:
        raise ProtocolError(404, f"Unknown model '{name}': this server has {', '.join(sorted(models))}.")
    version = version or max(versions, key=int)
    if version not in versions:
        raise ProtocolError(404, f"Model '{name}' has no version {version}: it has {', '.join(versions)}.")
    return versions[version]


_INTERNAL_PATH = re.compile(r"(?:/[\w.+-]+){2,}(?::\d+)?")  # a runtime's source or install path, with a line


def failure_message(error: BaseException) -> str:
    """What a client is told when the model itself failed: the first line of the error, no traceback, and no path
    of the server's files (ONNX Runtime names its source files in its messages)."""
    line = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
    return f"Inference failed: {_INTERNAL_PATH.sub('<path>', line)}"


class InferenceService:
    """The loaded models behind both transports, and the one place a request is admitted, run and counted.

    ``shutting_down`` turns readiness false and refuses new inference at once (set on SIGTERM, before the
    listeners close), so a load balancer stops sending while requests in flight finish.
    """

    def __init__(self, models: dict[str, dict[str, ServedModel]], settings: ServeOptions | None = None,
                 metrics: Metrics | None = None) -> None:
        self.models = models
        self.settings = settings or ServeOptions()
        self.metrics = metrics or Metrics()
        self.shutting_down = False

    # Readiness and lookup

    def server_ready(self) -> bool:
        """Every model version loaded and the server not shutting down."""
        return not self.shutting_down and all(e.ready for v in self.models.values() for e in v.values())

    def model_ready(self, entry: ServedModel) -> bool:
        return entry.ready and not self.shutting_down

    def find(self, name: str, version: str | None) -> ServedModel:
        """A model version by name (404 when there is none), for metadata and readiness."""
        return lookup(self.models, name, version)

    # Admission

    def admit(self, name: str, version: str | None) -> ServedModel:
        """The model an inference request names, if it may run now: 404 unknown, 503 not ready or shutting down."""
        entry = self.find(name, version)
        if entry.model is None:
            raise ProtocolError(503, f"Model '{entry.name}' is not ready: {entry.error}")
        if self.shutting_down:
            raise ProtocolError(503, "The server is shutting down.")
        return entry

    def check_body_size(self, size: int) -> None:
        """413 for a request body over ``--max-body-mb``, with the same message whichever transport carried it."""
        limit = self.settings.max_body_bytes
        if size > limit:
            raise ProtocolError(413, f"The request body is {size} bytes; the limit is {limit}.")

    async def parse(self, entry: ServedModel, body: bytes, header_length: int | None) -> InferRequest:
        """The request checked against the model's tensors, parsed in a worker thread: a large body takes long to
        decode, and meanwhile the event loop keeps answering health checks and other models."""
        assert entry.model is not None
        self.check_body_size(len(body))
        return await asyncio.get_running_loop().run_in_executor(
            None, parse_infer_request, body, header_length, entry.model.inputs, entry.model.outputs,
            entry.max_batch_size)

    # Execution

    async def run(self, entry: ServedModel, arrays: list[Any]) -> list[Any]:
        """The model's outputs for ``arrays``. A batcher's queue bounds waiting requests; without one, the count of
        requests in flight does (the same ``--max-queue``): 503 past it, 504 past ``--timeout-ms``."""
        assert entry.model is not None
        if entry.batcher is not None:
            return await self._execute(entry, arrays)
        max_queue = self.settings.max_queue
        if entry.in_flight >= max_queue:
            raise ProtocolError(503, f"{entry.in_flight} requests are already waiting or running for "
                                     f"'{entry.name}' (--max-queue {max_queue}): retry later.")
        entry.in_flight += 1
        try:
            return await self._execute(entry, arrays)
        finally:
            entry.in_flight -= 1

    async def _execute(self, entry: ServedModel, arrays: list[Any]) -> list[Any]:
        """Off the event loop: on the model's batcher thread, or in the default thread pool without one."""
        assert entry.model is not None
        timeout = self.settings.timeout_s
        if entry.batcher is not None:
            try:
                future = entry.batcher.submit(arrays)
            except QueueFull as error:
                raise ProtocolError(503, error.message) from None
            wrapped = asyncio.wrap_future(future)
        else:  # a batcher reports its batches itself (load_repository's on_batch)
            self.metrics.batch_size.labels(entry.name).observe(int(arrays[0].shape[0]) if arrays[0].ndim else 1)
            wrapped = asyncio.get_running_loop().run_in_executor(None, entry.model.predict_all, arrays)
        try:
            return await asyncio.wait_for(wrapped, timeout) if timeout else await wrapped
        except TimeoutError:
            raise ProtocolError(504, f"Inference did not finish within {timeout:g} s.") from None

    # Metrics

    @contextmanager
    def accounted(self, name: str) -> Iterator[None]:
        """Count one inference request for model ``name``, from arrival to its answer.

        Counted as a request on entry; on leaving, its latency when it succeeded, a failure by status code when it
        raised ProtocolError, a disconnect on ClientLeft. Any other exception is the model failing: it is counted
        as a 500 and re-raised as ProtocolError(500), so every transport reports it the same way and stays up.
        """
        label = name if name in self.models else UNKNOWN_MODEL
        self.metrics.requests.labels(label).inc()
        start = time.perf_counter()
        try:
            yield
        except ProtocolError as error:
            self.metrics.failures.labels(label, str(error.status)).inc()
            raise
        except ClientLeft:
            self.metrics.disconnects.labels(label).inc()
            raise
        except Exception as error:
            self.metrics.failures.labels(label, "500").inc()
            raise ProtocolError(500, failure_message(error)) from error
        self.metrics.latency.labels(label).observe(time.perf_counter() - start)

    def exposition(self) -> tuple[bytes, str]:
        """The Prometheus text for /metrics and its content type, with each model's queue depth read now."""
        for name, versions in self.models.items():
            self.metrics.queue_depth.labels(name).set(sum(e.batcher.depth for e in versions.values() if e.batcher))
        return generate_latest(self.metrics.registry), CONTENT_TYPE_LATEST

    # Shutdown

    def close(self) -> None:
        """Refuse new requests and stop every batcher (each finishes the batch it holds first)."""
        self.shutting_down = True
        for versions in self.models.values():
            for entry in versions.values():
                if entry.batcher:
                    entry.batcher.close()
