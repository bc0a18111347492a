"""What the HTTP routes and the gRPC service share: the models, admission, execution and metrics.

Both transports turn a request into the same steps, taken here once: find the model (404), admit the request
(503 while the model is not ready or the server shuts down), refuse a body over ``--max-body-mb`` (413), parse it
off the event loop, run it under ``--max-queue`` and ``--timeout-ms`` (503, 504), and count it in the same
Prometheus series. A rule added here holds for both transports; neither module imports the other.

A failure of the model itself is classified here too (:func:`classify_failure`), into the ProtocolError each
transport reports: running out of memory is 503 (the server is fine, this request did not fit now), the model
refusing this request's data (ONNX Runtime's INVALID_ARGUMENT, a kernel that cannot take these values or shapes)
is 400, anything else 500; the messages carry no path of the server's or the library's files.
"""

from __future__ import annotations

import asyncio
import errno
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from trtpipe.errors import BadInput
from trtpipe.runtime.registry import failed_node, refused_by_runtime
from trtpipe.serve.batching.batcher import QueueFull
from trtpipe.serve.json_body import parse_infer_request
from trtpipe.serve.options import ServeOptions
from trtpipe.serve.protocol import InferRequest, ProtocolError, shown
from trtpipe.serve.refusal_log import REFUSALS
from trtpipe.serve.repository.loading import ServedModel

UNKNOWN_MODEL = "_unknown"  # the metrics label of a request for a model the server does not have


@dataclass
class Metrics:
    """The server's Prometheus series, in a registry of its own so that each app (and each test) counts apart.

    ``requests``, ``failures`` (by status code), ``latency`` and ``disconnects`` are counted per request by
    :meth:`InferenceService.accounted`, whichever transport the request came by; ``dropped`` counts the requests
    taken off the queue unrun because nobody waited for them any more (the client left, or ``--timeout-ms``
    passed); ``batch_size`` per executed batch; ``instance_runs`` per run each model instance finished (a batch,
    or a request without batching: how ``--instances`` spread the load); ``queue_depth`` is read when /metrics is
    scraped.
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
        self.dropped = Counter("trtpipe_dropped_requests", "Requests dropped before they ran: their client had left "
                               "or their timeout had passed", ["model"], registry=self.registry)
        self.instance_runs = Counter("trtpipe_instance_runs", "Runs (batches, or requests without batching) each "
                                     "model instance finished", ["model", "version", "instance"],
                                     registry=self.registry)
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
        raise ProtocolError(404, f"Unknown model '{shown(name)}': this server has {', '.join(sorted(models))}.")
    version = version or max(versions, key=int)
    if version not in versions:
        raise ProtocolError(404, f"Model '{name}' has no version {shown(version)}: it has {', '.join(versions)}.")
    return versions[version]


_INTERNAL_PATH = re.compile(r"(?:/[\w.+-]+){2,}(?::\d+)?")  # a runtime's source or install path, with a line
# A library's source location, with or without its folders: ONNX Runtime writes "reshape_helper.h:84" or
# "/onnxruntime_src/onnxruntime/core/framework/bfc_arena.cc:360" before the C++ function that failed.
_SOURCE_LOCATION = re.compile(r"(?:[\w.+-]*/)*[\w.+-]+\.(?:cc|cpp|cxx|c|cu|cuh|h|hpp|inl)(?::\d+)?\s*")
# A C++ signature ORT_THROW and ORT_ENFORCE put before their message: "void* onnxruntime::BFCArena::Alloc(size_t) ".
_CPP_SIGNATURE = re.compile(r"^(?:[\w:*&<>, ]+\s)?[\w:~<>]+\([^()]*\)(?:\s*const)?\s+")
_ENFORCED = re.compile(r"^.*? was false\.\s*")  # ORT_ENFORCE: "<signature> <condition> was false. <message>"
_FUNCTION_NAME = re.compile(r"^[\w:~]+\s+")  # ORT_MAKE_STATUS names the function alone: "Compute"
# How runtimes say they ran out of memory (ONNX Runtime's arena, C++'s bad_alloc, CUDA, cuDNN and cuBLAS, PyTorch,
# OpenVINO), and how Python says it could not start a thread (its stack is memory too, under ``ulimit -v``).
_OUT_OF_MEMORY = re.compile(r"failed to allocate memory|bad_alloc|out of memory|cannot allocate memory|"
                            r"can't start new thread|ALLOC_FAILED|MemoryAllocation|OutOfMemory", re.IGNORECASE)


def failure_message(error: BaseException) -> str:
    """What a client is told when the model itself failed: the first line of the error, no traceback, and no path
    of the server's files (ONNX Runtime names its source files in its messages)."""
    line = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
    return f"Inference failed: {_INTERNAL_PATH.sub('<path>', _SOURCE_LOCATION.sub('', line))}"


def model_message(error: BaseException) -> str:
    """A runtime's error as a client can read it: for ONNX Runtime, the node that failed and what it said, without
    the status prefix, the source file and line, or the C++ function (``Gather node: indices element out of data
    bounds, idx=100 must be within the inclusive range [-10,9]``); for anything else its first line. No path of
    the server's or the library's files is left."""
    text = str(error).strip()
    line = text.splitlines()[0].strip() if text else type(error).__name__
    where, line = failed_node(line)  # ONNX Runtime's status code and failing node, read in its folder
    located = _SOURCE_LOCATION.match(line)
    if located:  # ONNX Runtime's "<file>:<line> <function> <message>": keep the message
        line = line[located.end():]
        if " was false." in line:
            line = _ENFORCED.sub("", line)
        else:
            line = _CPP_SIGNATURE.sub("", line) if _CPP_SIGNATURE.match(line) else _FUNCTION_NAME.sub("", line)
    line = _SOURCE_LOCATION.sub("", line)
    return where + _INTERNAL_PATH.sub("<path>", line).strip()


def out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` says memory (or a thread's stack) could not be had: Python's MemoryError, an OSError with
    ENOMEM, or a runtime's allocation failure, which each runtime spells in its own words."""
    if isinstance(error, MemoryError) or (isinstance(error, OSError) and error.errno == errno.ENOMEM):
        return True
    return bool(_OUT_OF_MEMORY.search(f"{type(error).__name__}: {error}"))


def refused_by_model(error: BaseException) -> bool:
    """Whether the model refused this request's data, as opposed to failing by itself: ONNX Runtime's
    INVALID_ARGUMENT (an index out of its table in a Gather), or a kernel that cannot run on these values or shapes
    (a Reshape that does not fit: ONNX Runtime reports that as FAIL from the node). The model loaded and serves other
    requests, so what differs is this request."""
    return refused_by_runtime(error)


def classify_failure(error: Exception) -> ProtocolError:
    """The ProtocolError a client gets for an exception from running its request (both transports map the status
    to their own codes):

    - out of memory (or of threads) -> 503: the server is up and stays ready; this request did not fit now, and a
      smaller batch or a later retry may;
    - input the backend or the model refused -> 400, with what the model said;
    - anything else -> 500, the model failing by itself.
    """
    if isinstance(error, ProtocolError):
        return error
    if out_of_memory(error):
        return ProtocolError(503, "The server ran out of memory for this request: retry later or send fewer rows "
                                  f"({model_message(error)}).")
    if isinstance(error, BadInput):
        return ProtocolError(400, error.message)
    if refused_by_model(error):
        return ProtocolError(400, f"The model refused this request's data: {model_message(error)}")
    return ProtocolError(500, failure_message(error))


def start_threads(executor: ThreadPoolExecutor, count: int) -> None:
    """Start ``count`` worker threads of ``executor`` now. A pool starts its threads when work first arrives;
    under an address-space limit (``ulimit -v``) a thread started after a large batch has grown ONNX Runtime's
    memory pool may not get its stack ("can't start new thread"), and every later request that needed it would
    fail. Each thread waits at a barrier until all have started, so each submit starts a new one."""
    barrier = threading.Barrier(count + 1)
    for _ in range(count):
        executor.submit(barrier.wait, 30)
    barrier.wait(30)


SERVICE_THREADS = min(32, (os.cpu_count() or 1) + 4)  # what the event loop's default pool would have
# Large requests each transport decodes at once: together they leave at least two service threads to small requests
# and unbatched models, so that requests that have not reached a model's queue cannot hold every thread.
LARGE_DECODES_AT_ONCE = max(1, min(4, (SERVICE_THREADS - 2) // 2))
# Bytes of a request above which it is decoded only while it holds one of those slots: a body of a few hundred
# kilobytes already costs tens of milliseconds of CPU, most of it in one call that holds the GIL, and six 1 MB bodies
# decoded at once (they were under the old 1 MiB threshold) kept every small request waiting (#56).
COSTLY_DECODE = 1 << 18
DECODE_BUDGET_S = 10.0  # the longest a request's decoding may take without --timeout-ms (504 past it)


class InferenceService:
    """The loaded models behind both transports, and the one place a request is admitted, run and counted.

    ``draining`` turns readiness false (HTTP and gRPC) while inference is still served: set on SIGTERM for
    ``--drain-s``, so that load balancers, which probe readiness, stop sending before the listener closes, and
    requests they send meanwhile are still answered. ``shutting_down`` also refuses new inference (503): set when
    the drain ends, just before the listeners close, while requests in flight finish.

    Parsing and unbatched inference run on the service's own thread pool, whose threads :meth:`start` starts before
    the server takes requests (see :func:`start_threads`).
    """

    def __init__(self, models: dict[str, dict[str, ServedModel]], settings: ServeOptions | None = None,
                 metrics: Metrics | None = None) -> None:
        self.models = models
        self.settings = settings or ServeOptions()
        self.metrics = metrics or Metrics()
        self.draining = False
        self.shutting_down = False
        self.executor = ThreadPoolExecutor(SERVICE_THREADS, thread_name_prefix="trtpipe-serve")
        # Each listener besides HTTP (the gRPC one) says why it cannot take requests now, or None: readiness
        # covers every listener the server was asked to run.
        self.listener_problems: list[Callable[[], str | None]] = []

    def start(self) -> None:
        """Start the pool's threads now, before the server reports ready."""
        start_threads(self.executor, SERVICE_THREADS)

    # Readiness and lookup

    def server_ready(self) -> bool:
        """Every model version loaded, every listener taking requests, and the server neither draining nor
        shutting down."""
        return self.unready_reason() is None

    def unready_reason(self) -> str | None:
        """Why the server is not ready, in a sentence for /v2/health/ready's body, or None when it is."""
        if not self.accepting:
            return "The server is shutting down."
        broken = sorted({e.name for v in self.models.values() for e in v.values() if not e.ready})
        if broken:
            return f"Model {', '.join(repr(name) for name in broken)} is not loaded."
        for problem in self.listener_problems:
            said = problem()
            if said is not None:
                return said
        return None

    def model_ready(self, entry: ServedModel) -> bool:
        return entry.ready and self.accepting

    @property
    def accepting(self) -> bool:
        """Whether load balancers should send here: false from SIGTERM on."""
        return not (self.draining or self.shutting_down)

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

    def decode_deadline(self) -> float:
        """When a request arriving now must be decoded and checked by (time.monotonic()): ``--timeout-ms``, or
        DECODE_BUDGET_S without it; both transports' decoding stops (504) past it."""
        return time.monotonic() + (self.settings.timeout_s or DECODE_BUDGET_S)

    async def parse(self, entry: ServedModel, body: bytes | bytearray, header_length: int | None) -> InferRequest:
        """The request checked against the model's tensors, parsed in a worker thread: a large body takes long to
        decode, and meanwhile the event loop keeps answering health checks and other models. Decoding may take
        ``--timeout-ms`` (DECODE_BUDGET_S without it): past it the worker stops where it is and the request is a
        504, so that no body holds a thread for longer (the threads are shared with unbatched models)."""
        assert entry.model is not None
        self.check_body_size(len(body))
        deadline = self.decode_deadline()
        return await asyncio.get_running_loop().run_in_executor(
            self.executor, parse_infer_request, body, header_length, entry.model.inputs, entry.model.outputs,
            entry.max_batch_size, None, deadline)

    # Execution

    async def run(self, entry: ServedModel, arrays: list[Any]) -> list[Any]:
        """The model's outputs for ``arrays``. A batcher's queue bounds waiting requests; without one, the count of
        requests in flight does (the same ``--max-queue``): 503 past it, 504 past ``--timeout-ms``."""
        assert entry.model is not None
        if entry.batcher is not None:
            return await self._execute(entry, arrays)
        max_queue = self.settings.max_queue
        with entry.admission:
            waiting = entry.in_flight
            if waiting < max_queue:
                entry.in_flight += 1
        if waiting >= max_queue:
            raise ProtocolError(503, f"{waiting} requests are already waiting or running for "
                                     f"'{entry.name}' (--max-queue {max_queue}): retry later.")
        try:
            return await self._execute(entry, arrays)
        finally:
            with entry.admission:
                entry.in_flight -= 1

    async def _execute(self, entry: ServedModel, arrays: list[Any]) -> list[Any]:
        """Off the event loop: on the model's batcher thread, or in the service's thread pool without one.

        When nobody waits for the answer any more (the caller is cancelled: its HTTP client left, its gRPC call was
        cancelled; or ``--timeout-ms`` passed), a request that has not started is taken off the queue unrun and
        counted as dropped: a client that gave up costs no model time.
        """
        assert entry.model is not None
        timeout = self.settings.timeout_s
        future: Future[list[Any]]
        if entry.batcher is not None:
            try:
                future = entry.batcher.submit(arrays)
            except QueueFull as error:
                raise ProtocolError(503, error.message) from None
        else:  # a batcher reports its batches itself (load_repository's on_batch)
            self.metrics.batch_size.labels(entry.name).observe(int(arrays[0].shape[0]) if arrays[0].ndim else 1)
            future = self.executor.submit((entry.instances or entry.model).predict_all, arrays)
        wrapped = asyncio.wrap_future(future)
        try:
            return await asyncio.wait_for(wrapped, timeout) if timeout else await wrapped
        except TimeoutError:
            self._drop(entry, future)
            raise ProtocolError(504, f"Inference did not finish within {timeout:g} s.") from None
        except asyncio.CancelledError:
            self._drop(entry, future)
            raise

    def _drop(self, entry: ServedModel, future: Future[list[Any]]) -> None:
        """Cancel a request nobody waits for; counted when it had not started (a running batch cannot be stopped:
        its rows are computed and thrown away)."""
        if future.cancel():
            self.metrics.dropped.labels(entry.name).inc()

    # Metrics

    @contextmanager
    def accounted(self, name: str) -> Iterator[None]:
        """Count one inference request for model ``name``, from arrival to its answer.

        Counted as a request on entry; on leaving, its latency when it succeeded, a failure by status code (and a
        log line, rate-limited: see ``refusal_log``) when it raised ProtocolError, a disconnect on ClientLeft or
        when the call was cancelled (a gRPC client cancelling).
        Any other exception is the model failing: :func:`classify_failure` turns it into the ProtocolError it
        means (503 out of memory, 400 data the model refused, 500 otherwise), counted under that status, logged in
        one line (rate-limited: see ``refusal_log``) and re-raised, so every transport reports it the same way and
        stays up.
        """
        label = name if name in self.models else UNKNOWN_MODEL
        self.metrics.requests.labels(label).inc()
        start = time.perf_counter()
        try:
            yield
        except ProtocolError as error:
            self.metrics.failures.labels(label, str(error.status)).inc()
            REFUSALS(f"{shown(name) or UNKNOWN_MODEL} answered {error.status}: {error.message}")
            raise
        except (ClientLeft, asyncio.CancelledError):
            self.metrics.disconnects.labels(label).inc()
            raise
        except Exception as error:
            refusal = classify_failure(error)
            self.metrics.failures.labels(label, str(refusal.status)).inc()
            REFUSALS(f"{name or UNKNOWN_MODEL} answered {refusal.status}: {refusal.message}")
            raise refusal from error
        self.metrics.latency.labels(label).observe(time.perf_counter() - start)

    def exposition(self) -> tuple[bytes, str]:
        """The Prometheus text for /metrics and its content type, with each model's queue depth read now."""
        for name, versions in self.models.items():
            self.metrics.queue_depth.labels(name).set(sum(e.batcher.depth for e in versions.values() if e.batcher))
        return generate_latest(self.metrics.registry), CONTENT_TYPE_LATEST

    # Shutdown

    def close(self) -> None:
        """Refuse new requests, stop every batcher (each finishes the batch it holds first) and the thread pool."""
        self.shutting_down = True
        for versions in self.models.values():
            for entry in versions.values():
                if entry.batcher:
                    entry.batcher.close()
        self.executor.shutdown(wait=False, cancel_futures=True)
        REFUSALS.flush()
