"""A model's rejection of one request's data is a 400 for that request alone, whatever it was batched with, and
no message names a library's source file; a model whose outputs change the batch axis is never split wrongly.

Real servers and real ONNX Runtime sessions on the tiny failure models of ``tests/builders.py``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

import trtpipe
from tests.builders import TABLE, lookup, regroup
from tests.serve.conftest import RunningServer
from trtpipe import console
from trtpipe.serve.batching.batcher import BatchingOptions, MicroBatcher

LIBRARY_SOURCE = re.compile(r"onnxruntime_src|\w\.(?:h|hpp|cc|cpp|cu):\d+")


@pytest.fixture(scope="module")
def tiny_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repository = tmp_path_factory.mktemp("tiny")
    lookup(repository)
    regroup(repository)
    return repository


@pytest.fixture(scope="module")
def batched(tiny_repository: Path) -> Iterator[RunningServer]:
    """A batch runs at twelve rows (or after 5 s): twelve requests sent together run as one batch."""
    running = RunningServer(tiny_repository, max_batch_size=12, max_queue_delay_ms=5000)
    yield running
    running.stop()


def _infer(server: RunningServer, model: str, data: np.ndarray) -> httpx.Response:
    tensor = {"name": "input", "shape": list(data.shape), "datatype": "FP32", "data": data.ravel().tolist()}
    return httpx.post(f"http://{server.url}/v2/models/{model}/infer", json={"inputs": [tensor]}, timeout=30)


def _sample(server: RunningServer, name: str, **labels: str) -> float:
    return server.app.state.metrics.registry.get_sample_value(name, labels) or 0.0


def test_one_refused_request_in_a_batch_fails_alone_with_400(batched: RunningServer) -> None:
    values = [float(i % TABLE) for i in range(12)]
    values[5] = 100.0  # past the table of 10: ONNX Runtime's Gather refuses it (INVALID_ARGUMENT)
    with ThreadPoolExecutor(len(values)) as pool:
        answers = list(pool.map(lambda v: _infer(batched, "lookup", np.array([[v]], np.float32)), values))
    assert [a.status_code for a in answers] == [200] * 5 + [400] + [200] * 6
    refused = answers[5].json()["error"]
    assert refused.startswith("The model refused this request's data: Gather node: indices element out of data")
    assert not LIBRARY_SOURCE.search(refused)
    for value, answer in zip(values, answers, strict=True):
        if value < TABLE:
            assert answer.json()["outputs"][0]["data"] == [value]
    # The twelve ran as one batch, then in halves around the refused one: 11 rows in 3 or 4 runs, not 11.
    assert _sample(batched, "trtpipe_batch_size_sum", model="lookup") == 11
    assert _sample(batched, "trtpipe_batch_size_count", model="lookup") <= 4
    assert _sample(batched, "trtpipe_inference_failures_total", model="lookup", code="400") == 1
    assert _sample(batched, "trtpipe_inference_failures_total", model="lookup", code="500") == 0


def test_a_reshape_that_does_not_fit_is_a_400_naming_no_library_path(batched: RunningServer) -> None:
    refused = _infer(batched, "regroup", np.zeros((1, 3), np.float32))  # 3 values cannot make rows of 4
    assert refused.status_code == 400
    message = refused.json()["error"]
    assert message.startswith("The model refused this request's data: Reshape node: The input tensor cannot be "
                              "reshaped to the requested shape.")
    assert not LIBRARY_SOURCE.search(message) and "onnxruntime::" not in message
    fits = _infer(batched, "regroup", np.arange(8, dtype=np.float32).reshape(1, 8))
    assert fits.status_code == 200 and fits.json()["outputs"][0]["shape"] == [2, 4]
    assert httpx.get(f"http://{batched.url}/v2/health/ready").status_code == 200


def test_a_model_whose_outputs_change_the_batch_axis_is_served_unbatched(tiny_repository: Path) -> None:
    from trtpipe.serve.options import ServeOptions
    from trtpipe.serve.repository.loading import load_repository

    with console.recording_warnings() as warnings:
        models = load_repository(tiny_repository, ServeOptions())
    assert models["regroup"]["1"].batcher is None and models["lookup"]["1"].batcher is not None
    assert any(w.startswith("regroup version 1 is served without batching: output 'output' has first dimension "
                            "'m', not the inputs' batch axis ('n')") for w in warnings), warnings
    for versions in models.values():
        for entry in versions.values():
            if entry.batcher:
                entry.batcher.close()


def test_outputs_are_split_among_requests_only_when_their_rows_match_the_batch(tmp_path: Path) -> None:
    """ONNX Runtime cannot name the output's first dimension here, so loading lets the model batch; the batcher
    sees 4 rows come back for a batch of 2 and runs each request alone instead of splitting them."""
    with trtpipe.load(regroup(tmp_path, declared=None)) as model:
        first, second = (np.arange(8, dtype=np.float32).reshape(1, 8) + offset for offset in (0, 100))
        batcher = MicroBatcher(model.predict_all, BatchingOptions(max_batch_size=2, max_delay_s=30))
        with console.recording_warnings() as warnings:
            futures = [batcher.submit([first]), batcher.submit([second])]  # two rows: they run as one batch
            results = [f.result(30)[0] for f in futures]
        batcher.close()
        np.testing.assert_array_equal(results[0], model.predict(first))
        np.testing.assert_array_equal(results[1], model.predict(second))
    assert results[0].shape == (2, 4) and not batcher.joins
    assert any("does not keep the batch axis" in w for w in warnings), warnings
