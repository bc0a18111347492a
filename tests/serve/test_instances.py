"""``--instances``: each model opened several times, runs going to the least busy instance, and a count that does
not fit in memory refused at start with how many fit. Real digits sessions, a real server on a loopback port."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

import trtpipe
from tests.serve.conftest import RunningServer
from trtpipe.serve.batching.batcher import BatchingOptions, MicroBatcher
from trtpipe.serve.batching.footprint import InstancesDoNotFit
from trtpipe.serve.batching.instances import ModelInstances
from trtpipe.serve.options import ServeOptions
from trtpipe.serve.server import build_app
from trtpipe.tools.loopback import free_port


@pytest.fixture(scope="module")
def digits_repository(tmp_path_factory: pytest.TempPathFactory, digits_onnx: Path) -> Path:
    repo = tmp_path_factory.mktemp("instances")
    (repo / "digits" / "1").mkdir(parents=True)
    shutil.copy(digits_onnx, repo / "digits" / "1" / "model.onnx")
    return repo


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    from trtpipe.models.data import load_split

    return load_split("digits", "eval").images[:48]


def _digits_samples(metrics: str) -> dict[tuple[str, str], float]:
    """{(sample name, instance label): value} of the digits model's samples in Prometheus text."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, s.labels.get("instance", "")): s.value for family in text_string_to_metric_families(metrics)
            for s in family.samples if s.labels.get("model") == "digits"}


@pytest.mark.parametrize("batching", [True, False])
def test_a_server_with_two_instances_answers_concurrent_requests_on_both(
        digits_repository: Path, images: np.ndarray, batching: bool) -> None:
    server = RunningServer(digits_repository, instances=2, batching=batching, max_batch_size=8)
    try:
        entry = server.models["digits"]["1"]
        assert entry.instances is not None and len(entry.instances) == 2
        assert entry.instances.models[0] is not entry.instances.models[1]  # two sessions, not one shared

        def infer(index: int) -> np.ndarray:
            row = images[index : index + 1]
            body = {"inputs": [{"name": "input", "shape": list(row.shape), "datatype": "FP32",
                                "data": row.ravel().tolist()}]}
            answer = httpx.post(f"http://{server.url}/v2/models/digits/infer", json=body, timeout=60)
            assert answer.status_code == 200, answer.text
            return np.array(answer.json()["outputs"][0]["data"], np.float32).reshape(1, -1)

        with ThreadPoolExecutor(16) as pool:
            answers = np.concatenate(list(pool.map(infer, range(len(images)))))
        with trtpipe.load(digits_repository / "digits" / "1" / "model.onnx") as model:
            np.testing.assert_allclose(answers, model.predict(images), rtol=1e-4, atol=1e-4)
        samples = _digits_samples(httpx.get(f"http://{server.url}/metrics", timeout=10).text)
        runs = {instance: v for (name, instance), v in samples.items() if name == "trtpipe_instance_runs_total"}
        assert set(runs) == {"0", "1"} and all(count > 0 for count in runs.values()), runs
        # every run (a batch, or a request without batching) counted once, on one instance
        assert sum(runs.values()) == samples["trtpipe_batch_size_count", ""]
    finally:
        server.stop()


def test_one_instance_is_served_as_before(digits_repository: Path) -> None:
    """The default opens the model once and runs one batch at a time, with no warm-up and no memory check."""
    _, models = build_app(digits_repository, ServeOptions(memory_budget_mb=1))  # a budget alone checks nothing
    entry = models["digits"]["1"]
    assert entry.instances is not None and len(entry.instances) == 1 and entry.model is entry.instances.first
    assert entry.batcher is not None and entry.batcher.workers == 1
    entry.batcher.close()


def test_a_busy_instance_is_not_picked_while_another_is_idle(digits_repository: Path, images: np.ndarray) -> None:
    path = digits_repository / "digits" / "1" / "model.onnx"
    ran: list[int] = []
    instances = ModelInstances([trtpipe.load(path), trtpipe.load(path)], on_run=ran.append)
    with instances:
        with instances.acquire() as (held, _):  # instance 0 is running something
            assert held == 0
            for _ in range(3):
                instances.predict_all(images[:2])
        assert ran == [1, 1, 1]  # never the busy one (a round robin would have alternated)
        instances.predict_all(images[:2])
        assert ran[-1] == 0  # both idle: the one that has run less


def test_two_workers_run_two_batches_at_once() -> None:
    """With a worker per instance, one batch runs while the next gathers and runs: both reach the barrier together
    (with one worker the second batch would wait for the first, and the barrier would break)."""
    barrier = threading.Barrier(2)

    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        barrier.wait(30)
        return [arrays[0] * 2]

    batcher = MicroBatcher(run, BatchingOptions(max_batch_size=1, max_delay_s=0), workers=2)
    try:
        futures = [batcher.submit([np.full((1, 1), i, np.float32)]) for i in range(2)]
        assert [float(f.result(60)[0][0, 0]) for f in futures] == [0.0, 2.0]
    finally:
        batcher.close()


def _fitting(message: str, count: int, room: str) -> tuple[float, int]:
    """(MiB each, how many fit) from a refusal, checked to be consistent with each other."""
    found = re.fullmatch(rf"digits version 1: --instances {count} needs ~[\d,.]+ MiB of host memory \(([\d.]+) MiB "
                         rf"each, measured after loading and a warm-up run\); (\d+) fit in {room}: use --instances "
                         r"(\d+)\.", message)
    assert found, message
    each, fits = float(found[1]), int(found[2])
    assert int(found[3]) == fits and 1 <= fits < count
    return each, fits


def test_instances_beyond_the_memory_are_refused_naming_how_many_fit(digits_repository: Path) -> None:
    with pytest.raises(InstancesDoNotFit) as refused:
        build_app(digits_repository, ServeOptions(instances=1000, memory_budget_mb=100))
    each, fits = _fitting(str(refused.value), 1000, r"the --memory-budget-mb 100 MiB")
    # "each" is rounded to 0.1 MiB in the line: how many fit follows from it within that rounding
    assert math.floor(100 / (each + 0.05)) <= fits <= math.floor(100 / max(each - 0.05, 1e-9))
    assert each >= (digits_repository / "digits" / "1" / "model.onnx").stat().st_size / 2**20  # weights at least
    with pytest.raises(InstancesDoNotFit) as refused:  # no budget: what the machine has free decides
        build_app(digits_repository, ServeOptions(instances=10**7))
    _fitting(str(refused.value), 10**7, r"the [\d,]+ MiB of host memory free")
    _, models = build_app(digits_repository, ServeOptions(instances=2, memory_budget_mb=100))  # what fits loads
    entry = models["digits"]["1"]
    assert entry.instances is not None and len(entry.instances) == 2
    assert entry.batcher is not None
    entry.batcher.close()


def test_trtpipe_serve_refuses_instances_that_do_not_fit_in_one_line(digits_repository: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "trtpipe.cli", "serve", str(digits_repository), "--port",
                             str(free_port()), "--instances", "1000", "--memory-budget-mb", "100"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    errors = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "--instances 1000 needs ~" in errors[0] and " fit in the --memory-budget-mb" \
        in errors[0], result.stdout + result.stderr
    assert "Traceback" not in result.stderr
