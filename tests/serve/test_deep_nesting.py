"""Nesting inside ``data`` costs time in proportion to the body, whatever its depth: a real `trtpipe serve` process
refuses 10k, 100k and 1M levels in milliseconds of its own CPU time (read from Linux's per-thread counters), answers a
one-row request sent beside six of them at once, refuses data nested otherwise than its shape for HTTP and gRPC
alike, and stops decoding a request once its --timeout-ms has passed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from trtpipe.tools.loopback import free_port, wait_until_ready

LEVELS = (10_000, 100_000, 1_000_000)
SERVER_CPU_LIMIT_S = 0.050  # of the server's CPU time per refusal: the bound (#48)
BESIDE_LIMIT_S = 1.0  # wall time of a one-row request sent beside six deep ones (#48)


class Served:
    """A `trtpipe serve` process of the digits model (input 1x1x32x32, any batch), with gRPC."""

    def __init__(self, repository: Path, *options: str) -> None:
        self.port, self.grpc_port = free_port(), free_port()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "trtpipe.cli", "serve", str(repository), "--port", str(self.port), "--grpc-port",
             str(self.grpc_port), "--drain-s", "0", *options], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True)
        self.base = f"http://127.0.0.1:{self.port}"
        wait_until_ready(self.base, "/v2/health/ready", 120)

    def cpu_s(self) -> float:
        """CPU time the server process has used so far, all its threads together (nanoseconds in schedstat)."""
        total = 0
        for task in Path(f"/proc/{self.process.pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (OSError, IndexError, ValueError):  # a thread that has just ended
                continue
        return total / 1e9

    def stop(self) -> str:
        self.process.terminate()
        output, _ = self.process.communicate(timeout=60)
        return output


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, digits_onnx: Path) -> Iterator[Served]:
    repository = tmp_path_factory.mktemp("deep")
    (repository / "digits" / "1").mkdir(parents=True)
    shutil.copy(digits_onnx, repository / "digits" / "1" / "model.onnx")
    server = Served(repository)
    yield server
    server.stop()


def _deep(levels: int, shape: str = "[1, 1, 32, 32]") -> bytes:
    """A request whose data nests ``levels`` deep around one value."""
    return (b'{"inputs": [{"name": "input", "shape": %s, "datatype": "FP32", "data": ' % shape.encode()
            + b"[" * levels + b"0.5" + b"]" * levels + b"}]}")


def _one_row() -> dict[str, object]:
    return {"inputs": [{"name": "input", "shape": [1, 1, 32, 32], "datatype": "FP32",
                        "data": np.zeros(1024).tolist()}]}


@pytest.mark.parametrize("levels", LEVELS)
def test_deep_nesting_inside_data_is_refused_in_milliseconds_of_server_time(served: Served, levels: int) -> None:
    body = _deep(levels)
    with httpx.Client(timeout=60) as client:
        client.get(f"{served.base}/v2/health/live")  # the connection is open before the clock starts
        before = served.cpu_s()
        refused = client.post(f"{served.base}/v2/models/digits/infer", content=body)
        spent = served.cpu_s() - before
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"].startswith("Input 'input' data nests deeper than 4 levels (at byte "), refused.text
    assert spent < SERVER_CPU_LIMIT_S, f"{levels} levels took {spent * 1000:.1f} ms of the server's CPU"


def test_a_one_row_request_beside_six_deep_ones_is_answered_at_once(served: Served) -> None:
    url = f"{served.base}/v2/models/digits/infer"
    bodies = [_deep(levels) for levels in LEVELS for _ in range(2)]
    with ThreadPoolExecutor(len(bodies)) as pool:
        deep = [pool.submit(httpx.post, url, content=body, timeout=120) for body in bodies]
        time.sleep(0.05)  # the deep ones are on their way
        start = time.perf_counter()
        answer = httpx.post(url, json=_one_row(), timeout=120)
        took = time.perf_counter() - start
        statuses = [future.result().status_code for future in deep]
    assert answer.status_code == 200, answer.text
    assert statuses == [400] * len(bodies)
    assert took < BESIDE_LIMIT_S, f"the one-row request took {took:.2f} s beside six deep ones"


@pytest.mark.parametrize(("data", "nested"), [
    ([list(range(512)), list(range(512, 1024))], "2x512"),  # the right count, rectangular, not its shape
    (np.arange(1024.0).reshape(32, 32).tolist(), "32x32"),
    ([[[[[[v] for v in range(1024)]]]]], "1x1x1x1x1024x1, 6 levels deep"),  # extra one-element levels
])
def test_data_nested_otherwise_than_its_shape_is_refused_naming_the_tensor(served: Served, data: object,
                                                                            nested: str) -> None:
    body = {"inputs": [{"name": "input", "shape": [1, 1, 32, 32], "datatype": "FP32", "data": data}]}
    for padded in (False, True):  # read by orjson with the rest, or scanned (a large array)
        text = json.dumps(body, indent=1 if padded else None).encode()
        refused = httpx.post(f"{served.base}/v2/models/digits/infer", content=text, timeout=60)
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error.startswith("Input 'input' data ") and "its shape 1x1x32x32" in error, error
        assert f"nested as {nested}" in error or "nests deeper than 4 levels" in error, error
    for flat_or_shaped in (np.arange(1024.0).tolist(), np.arange(1024.0).reshape(1, 1, 32, 32).tolist()):
        body = {"inputs": [{"name": "input", "shape": [1, 1, 32, 32], "datatype": "FP32", "data": flat_or_shaped}]}
        assert httpx.post(f"{served.base}/v2/models/digits/infer", json=body, timeout=60).status_code == 200


def test_grpc_refuses_contents_of_another_shape(served: Served) -> None:
    """gRPC carries values flat, beside their shape: a 2x1024 tensor for the 1x1x32x32 input is refused as HTTP's
    2x1024 nesting is, an INVALID_ARGUMENT naming the tensor."""
    grpcclient = pytest.importorskip("tritonclient.grpc")
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{served.grpc_port}")
    tensor = grpcclient.InferInput("input", [2, 1024], "FP32")
    tensor.set_data_from_numpy(np.zeros((2, 1024), np.float32))
    with pytest.raises(InferenceServerException) as refused:
        client.infer("digits", [tensor])
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "Input 'input' has shape 2x1024" in refused.value.message()
    client.close()


def test_decoding_counts_against_the_timeout_and_stops_past_it(tmp_path: Path, digits_onnx: Path) -> None:
    """A request whose decoding takes longer than --timeout-ms is a 504 that says so, and the server stops decoding
    it: it spends less than half the CPU time that decoding the whole body takes (measured here, in this process).
    Before, only inference was timed, and a body of any size was decoded to its end."""
    from trtpipe.artifact.tensors import TensorInfo
    from trtpipe.serve.json_body import parse_infer_request

    (tmp_path / "digits" / "1").mkdir(parents=True)
    shutil.copy(digits_onnx, tmp_path / "digits" / "1" / "model.onnx")
    rows = 4096
    body = (b'{"inputs": [{"name": "input", "shape": [%d, 1, 32, 32], "datatype": "FP32", "data": [' % rows
            + b", ".join([b"0.5"] * (rows * 1024)) + b"]}]}")  # 20 MB
    inputs, outputs = [TensorInfo("input", "float32", ("n", 1, 32, 32))], [TensorInfo("output", "float32", ("n", 10))]
    start = time.process_time()
    parse_infer_request(body, None, inputs, outputs, rows)
    whole_s = time.process_time() - start
    server = Served(tmp_path, "--timeout-ms", "1", "--max-batch-size", str(rows))
    try:
        with httpx.Client(timeout=60) as client:
            client.get(f"{server.base}/v2/health/live")
            before = server.cpu_s()
            answer = client.post(f"{server.base}/v2/models/digits/infer", content=body)
            spent = server.cpu_s() - before
        assert answer.status_code == 504, answer.text
        assert answer.json()["error"].startswith("The request was not decoded within its time limit"), answer.text
        assert spent < whole_s / 2, f"the server spent {spent:.3f} s of CPU; decoding it whole takes {whole_s:.3f} s"
        assert httpx.get(f"{server.base}/v2/health/ready", timeout=10).status_code == 200
    finally:
        output = server.stop()
    assert server.process.returncode == 0, output
