from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from trtpipe.errors import TrtpipeError
from trtpipe.serve.batching import BatchingOptions, MicroBatcher, QueueFull


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
