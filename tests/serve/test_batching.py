from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from trtpipe.errors import TrtpipeError
from trtpipe.serve.batching.batcher import BatchingOptions, MicroBatcher, QueueFull


def test_concurrent_requests_run_as_batches_and_get_their_own_rows() -> None:
    batches: list[int] = []

    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        time.sleep(0.01)  # a model call long enough for requests to pile up
        return [arrays[0] * 2]

    batcher = MicroBatcher(run, BatchingOptions(max_batch_size=8, max_delay_s=0.005), on_batch=batches.append)
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda i: batcher.predict([np.full((1, 3), i, np.float32)])[0], range(32)))
    batcher.close()
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result, np.full((1, 3), 2 * i))
    assert sum(batches) == 32 and max(batches) > 1 and max(batches) <= 8
    assert len(batches) < 32


def test_full_queue_and_oversized_requests_are_refused() -> None:
    gate = threading.Event()
    batcher = MicroBatcher(lambda arrays: (gate.wait(5), [arrays[0]])[1], BatchingOptions(max_batch_size=4,
                                                                                          max_delay_s=0, max_queue=2))
    with pytest.raises(TrtpipeError, match="exceeds the maximum batch size 4"):
        batcher.submit([np.zeros((5, 1))])
    futures = [batcher.submit([np.zeros((1, 1))])]
    deadline = time.time() + 5
    while batcher.depth and time.time() < deadline:  # until the worker has taken it...
        time.sleep(0.005)
    time.sleep(0.05)  # ...and is blocked inside the model call (no batching delay: max_delay_s=0)
    futures += [batcher.submit([np.zeros((1, 1))]) for _ in range(2)]
    with pytest.raises(QueueFull):
        batcher.submit([np.zeros((1, 1))])
    gate.set()
    assert all(f.result(5)[0].shape == (1, 1) for f in futures)
    batcher.close()


def test_model_failure_reaches_every_caller() -> None:
    def broken(arrays: list[np.ndarray]) -> list[np.ndarray]:
        raise RuntimeError("kernel exploded")

    batcher = MicroBatcher(broken, BatchingOptions(max_batch_size=4))
    with pytest.raises(RuntimeError, match="kernel exploded"):
        batcher.predict([np.zeros((1, 1))], timeout=5)
    batcher.close()


def test_a_request_the_model_refuses_fails_alone_and_the_others_get_their_rows(tmp_path: Path) -> None:
    """A real ONNX Runtime Gather refuses one index of twelve joined requests: the batch is run again in halves,
    so only that request hears of the failure."""
    import trtpipe
    from tests.builders import TABLE, lookup

    runs: list[int] = []
    with trtpipe.load(lookup(tmp_path)) as model:

        def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
            runs.append(len(arrays[0]))
            return model.predict_all(arrays)

        batcher = MicroBatcher(run, BatchingOptions(max_batch_size=12, max_delay_s=30))  # twelve rows: one batch
        values = [float(i % TABLE) for i in range(12)]
        values[7] = 100.0
        futures = [batcher.submit([np.array([[v]], np.float32)]) for v in values]
        for value, future in zip(values, futures, strict=True):
            if value < TABLE:
                np.testing.assert_array_equal(future.result(30)[0], [[value]])
            else:
                with pytest.raises(Exception, match="indices element out of data bounds"):
                    future.result(30)
        batcher.close()
    assert runs[0] == 12 and len(runs) <= 1 + 2 * 4  # the batch, then halves down to the refused request


def test_a_cancelled_request_is_dropped_unrun() -> None:
    gate, running = threading.Event(), threading.Event()
    ran: list[float] = []

    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        ran.append(float(arrays[0][0, 0]))
        running.set()
        gate.wait(5)
        return [arrays[0]]

    batcher = MicroBatcher(run, BatchingOptions(max_batch_size=4, max_delay_s=0))
    first = batcher.submit([np.full((1, 1), 1.0)])
    assert running.wait(5)  # the worker is inside the model with the first request
    abandoned = batcher.submit([np.full((1, 1), 2.0)])
    assert abandoned.cancel()  # still waiting in the queue: its caller gives up
    gate.set()
    last = batcher.submit([np.full((1, 1), 3.0)])
    assert first.result(5)[0][0, 0] == 1.0 and last.result(5)[0][0, 0] == 3.0
    batcher.close()
    assert ran == [1.0, 3.0]
