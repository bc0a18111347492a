"""Dynamic batching: requests that arrive close together run as one batch.

A worker thread takes requests from a bounded queue, waits up to ``max_delay`` for more (or until a preferred
batch size or ``max_batch_size`` is reached), runs them as one batch and hands each caller its rows. A model with
several instances (``--instances``) has as many workers: one gathers the next batch while the others run theirs,
so up to that many batches run at once, each on an idle instance.
Requests whose inputs differ past the batch axis (another image size for a model with dynamic height and width)
run in separate batches.
Services use it directly; the HTTP server uses it for every model with a dynamic batch axis.

One request's failure stays its own: a batch that fails is run again in halves, down to single requests, so a
request the model refuses (an index out of range) or one too large for memory beside the others fails alone.
A request whose caller has cancelled it (its client left) is skipped, never run. Outputs are split among the
requests only when each has as many rows as the batch; a model whose outputs do not (it reshapes or reduces the
batch axis) runs each request alone from then on.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from trtpipe import console
from trtpipe.errors import BadInput, TrtpipeError


class QueueFull(TrtpipeError):
    """The batcher's queue is at capacity: the caller should shed load (HTTP 503)."""


@dataclass(frozen=True)
class BatchingOptions:
    max_batch_size: int = 32
    max_delay_s: float = 0.002
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue: int = 1024  # requests waiting, not rows


@dataclass
class _Request:
    inputs: list[np.ndarray]
    rows: int
    future: Future[list[np.ndarray]] = field(default_factory=Future)
    enqueued: float = field(default_factory=time.perf_counter)


def _stackable(first: _Request, other: _Request) -> bool:
    """Whether two requests' inputs join along axis 0: the same dtypes and the same shape past the batch axis (a
    model with dynamic height and width takes each request at its own size, and those never share a batch)."""
    return len(first.inputs) == len(other.inputs) and all(
        a.dtype == b.dtype and a.shape[1:] == b.shape[1:] for a, b in zip(first.inputs, other.inputs, strict=True))


class MicroBatcher:
    """Batch calls of ``run(list_of_input_arrays) -> list_of_output_arrays`` along axis 0."""

    def __init__(self, run: Callable[[list[np.ndarray]], list[np.ndarray]], options: BatchingOptions,
                 on_batch: Callable[[int], None] | None = None, name: str = "The model", workers: int = 1) -> None:
        self._run = run
        self.options = options
        self.name = name  # what warnings call the model
        self._on_batch = on_batch
        self._queue: queue.Queue[_Request | None] = queue.Queue(maxsize=options.max_queue)
        self._carry: _Request | None = None
        self._gathering = threading.Lock()  # one worker gathers a batch at a time (it owns the queue and _carry)
        self.joins = True  # False once the model's outputs were found not to keep the batch axis
        self._threads = [threading.Thread(target=self._work, name="trtpipe-batcher", daemon=True)
                         for _ in range(workers)]
        for thread in self._threads:
            thread.start()

    @property
    def workers(self) -> int:
        """Batches that may run at once (a model's instances)."""
        return len(self._threads)

    @property
    def depth(self) -> int:
        return self._queue.qsize()

    def submit(self, inputs: list[np.ndarray]) -> Future[list[np.ndarray]]:
        """Queue one request (its own batch of rows); raises QueueFull when the queue is at capacity."""
        rows = int(inputs[0].shape[0])
        if rows > self.options.max_batch_size:
            raise BadInput(f"A request of {rows} rows exceeds the maximum batch size {self.options.max_batch_size}.")
        request = _Request(inputs, rows)
        try:
            self._queue.put_nowait(request)
        except queue.Full:
            raise QueueFull(f"The queue is full ({self.options.max_queue} requests waiting): retry later.") from None
        return request.future

    def predict(self, inputs: list[np.ndarray], timeout: float | None = None) -> list[np.ndarray]:
        return self.submit(inputs).result(timeout)

    def close(self) -> None:
        """Stop the workers once each has finished the batch it holds (a worker passes the stop mark on)."""
        self._queue.put(None)
        for thread in self._threads:
            thread.join(timeout=10)

    def _work(self) -> None:
        while True:
            with self._gathering:
                batch = self._gather()
            if batch is None:
                return
            if batch:
                self._execute(batch)

    def _gather(self) -> list[_Request] | None:
        """The next batch (empty when its first request's caller had left); None when the batcher is closing."""
        preferred = set(self.options.preferred_batch_sizes)
        first = self._carry or self._queue.get()
        self._carry = None
        if first is None:
            with contextlib.suppress(queue.Full):
                self._queue.put_nowait(None)  # for the next worker
            return None
        if first.future.cancelled():  # its caller left while it waited: drop it, unrun
            return []
        batch, rows = [first], first.rows
        deadline = first.enqueued + self.options.max_delay_s
        while self.joins and rows < self.options.max_batch_size:
            if rows in preferred and self._queue.empty():
                break  # a preferred size and nothing else waiting: run now
            remaining = deadline - time.perf_counter()
            try:
                item = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:  # closing: finish this batch, then stop
                self._queue.put(None)
                break
            if item.future.cancelled():
                continue
            if rows + item.rows > self.options.max_batch_size or not _stackable(first, item):
                self._carry = item  # it starts the next batch
                break
            batch.append(item)
            rows += item.rows
        return batch

    def _execute(self, batch: list[_Request]) -> None:
        live = [r for r in batch if r.future.set_running_or_notify_cancel()]  # cancelled ones are dropped here
        try:
            if live:
                self._run_together(live)
        except BaseException as error:  # every waiting caller must hear of the failure
            for request in live:
                if not request.future.done():
                    request.future.set_exception(error)

    def _run_together(self, group: list[_Request]) -> None:
        """Run ``group`` as one batch and give each request its rows. When the batch fails, each half is run again
        (and so on down to one request), so only the requests that fail alone hear of a failure: about 2·log2(n)
        more runs for one bad request among n (running each alone would take n), 2n - 1 when every one fails."""
        try:
            outputs = self._call(group)
        except Exception as error:
            if len(group) == 1:
                group[0].future.set_exception(error)
                return
            half = len(group) // 2
            self._run_together(group[:half])
            self._run_together(group[half:])
            return
        if outputs is None:  # the outputs do not keep the batch axis: each request alone, its outputs whole
            for request in group:
                self._run_together([request])
            return
        if len(group) == 1:
            group[0].future.set_result(outputs)
            return
        start = 0
        for request in group:
            request.future.set_result([o[start : start + request.rows] for o in outputs])
            start += request.rows

    def _call(self, group: list[_Request]) -> list[np.ndarray] | None:
        """The model's outputs for ``group`` joined along axis 0 (a single request's, whole); None when several
        requests ran and an output's rows do not match the batch's, so they cannot be split among them."""
        rows = sum(r.rows for r in group)
        if len(group) == 1:
            outputs = self._run(group[0].inputs)
        else:
            outputs = self._run([np.concatenate([r.inputs[i] for r in group]) for i in range(len(group[0].inputs))])
            shapes = [np.shape(o) for o in outputs]
            if any(not shape or shape[0] != rows for shape in shapes):
                self.joins = False
                console.warn(f"{self.name} gave outputs of shapes {', '.join(map(str, shapes))} for a batch of {rows} "
                             "rows: it does not keep the batch axis, so its requests now run one at a time.")
                return None
        if self._on_batch:
            self._on_batch(rows)
        return outputs
