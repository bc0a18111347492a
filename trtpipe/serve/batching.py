"""Dynamic batching: requests that arrive close together run as one batch.

One worker thread per model takes requests from a bounded queue, waits up to ``max_delay`` for more (or until
a preferred batch size or ``max_batch_size`` is reached), runs them as one batch and hands each caller its rows.
Requests whose inputs differ past the batch axis (another image size for a model with dynamic height and width)
run in separate batches.
Services use it directly; the HTTP server uses it for every model with a dynamic batch axis.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from trtpipe.errors import TrtpipeError


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
    future: Future = field(default_factory=Future)  # type: ignore[type-arg]
    enqueued: float = field(default_factory=time.perf_counter)


def _stackable(first: _Request, other: _Request) -> bool:
    """Whether two requests' inputs join along axis 0: the same dtypes and the same shape past the batch axis (a
    model with dynamic height and width takes each request at its own size, and those never share a batch)."""
    return len(first.inputs) == len(other.inputs) and all(
        a.dtype == b.dtype and a.shape[1:] == b.shape[1:] for a, b in zip(first.inputs, other.inputs, strict=True))


class MicroBatcher:
    """Batch calls of ``run(list_of_input_arrays) -> list_of_output_arrays`` along axis 0."""

    def __init__(self, run: Callable[[list[np.ndarray]], list[np.ndarray]], options: BatchingOptions,
                 on_batch: Callable[[int], None] | None = None) -> None:
        self._run = run
        self.options = options
        self._on_batch = on_batch
        self._queue: queue.Queue[_Request | None] = queue.Queue(maxsize=options.max_queue)
        self._carry: _Request | None = None
        self._thread = threading.Thread(target=self._work, name="trtpipe-batcher", daemon=True)
        self._thread.start()

    @property
    def depth(self) -> int:
        return self._queue.qsize()

    def submit(self, inputs: list[np.ndarray]) -> Future:  # type: ignore[type-arg]
        """Queue one request (its own batch of rows); raises QueueFull when the queue is at capacity."""
        rows = int(inputs[0].shape[0])
        if rows > self.options.max_batch_size:
            raise TrtpipeError(f"A request of {rows} rows exceeds the maximum batch size "
                               f"{self.options.max_batch_size}.")
        request = _Request(inputs, rows)
        try:
            self._queue.put_nowait(request)
        except queue.Full:
            raise QueueFull(f"The queue is full ({self.options.max_queue} requests waiting): retry later.") from None
        return request.future

    def predict(self, inputs: list[np.ndarray], timeout: float | None = None) -> list[np.ndarray]:
        return self.submit(inputs).result(timeout)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=10)

    def _work(self) -> None:
        preferred = set(self.options.preferred_batch_sizes)
        while True:
            first = self._carry or self._queue.get()
            self._carry = None
            if first is None:
                return
            batch, rows = [first], first.rows
            deadline = first.enqueued + self.options.max_delay_s
            while rows < self.options.max_batch_size:
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
                if rows + item.rows > self.options.max_batch_size or not _stackable(first, item):
                    self._carry = item  # it starts the next batch
                    break
                batch.append(item)
                rows += item.rows
            self._execute(batch, rows)

    def _execute(self, batch: list[_Request], rows: int) -> None:
        live = [r for r in batch if r.future.set_running_or_notify_cancel()]
        if not live:
            return
        try:
            if len(live) == 1:
                outputs = self._run(live[0].inputs)
                live[0].future.set_result(outputs)
            else:
                joined = [np.concatenate([r.inputs[i] for r in live]) for i in range(len(live[0].inputs))]
                outputs = self._run(joined)
                start = 0
                for request in live:
                    request.future.set_result([o[start : start + request.rows] for o in outputs])
                    start += request.rows
            if self._on_batch:
                self._on_batch(sum(r.rows for r in live))
        except BaseException as error:  # every waiting caller must hear of the failure
            for request in live:
                if not request.future.done():
                    request.future.set_exception(error)
