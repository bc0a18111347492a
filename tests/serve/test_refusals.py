"""Refusals a client can read and a log an operator can read: one line per request the model refused, with the
model's message once and none of ONNX Runtime's own lines (a batch that a bad request fails is run again in halves),
rate-limited under a flood; ragged nested data refused naming the tensor; a binary_data_size that is not an integer
named as what was read. A real `trtpipe serve` process, real HTTP clients."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.builders import lookup
from trtpipe.serve.refusal_log import BURST
from trtpipe.tools.loopback import free_port, wait_until_ready

MODEL_MESSAGE = "indices element out of data bounds"  # ONNX Runtime's Gather, for an index past the table


def _serve(repository: Path) -> tuple[subprocess.Popen[str], str]:
    """A server whose batches wait for company (up to 8 rows, 200 ms), so that bad requests share batches with good
    ones."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "trtpipe.cli", "serve", str(repository), "--port", str(port),
                                "--max-batch-size", "8", "--max-queue-delay-ms", "200", "--drain-s", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return process, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("refusals")
    lookup(folder)
    (folder / "square" / "1").mkdir(parents=True)
    _square(folder / "square" / "1" / "model.onnx")
    return folder


@pytest.fixture(scope="module")
def base(repository: Path):  # type: ignore[no-untyped-def]
    process, url = _serve(repository)
    try:
        wait_until_ready(url, "/v2/health/ready")
        yield url
    finally:
        process.terminate()
        process.communicate(timeout=60)


def _square(path: Path) -> None:
    """Identity on a 1x1x32x32 image (any batch)."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["input"], ["output"])], "square",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", 1, 32, 32])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["n", 1, 32, 32])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9), path)


def _lookup(base: str, value: float) -> httpx.Response:
    body = {"inputs": [{"name": "input", "shape": [1, 1], "datatype": "FP32", "data": [value]}]}
    return httpx.post(f"{base}/v2/models/lookup/infer", json=body, timeout=60)


def test_ragged_nested_data_is_refused_naming_the_tensor(base: str) -> None:
    url = f"{base}/v2/models/square/infer"
    values = np.arange(1024, dtype=np.float32)
    for data in ([values[:1000].tolist(), values[1000:].tolist()],  # 1024 values, but not a 1x1x32x32 tensor
                 [[[values[:32].tolist()] * 30 + [values[:24].tolist(), values[:40].tolist()]]]):
        body = {"inputs": [{"name": "input", "shape": [1, 1, 32, 32], "datatype": "FP32", "data": data}]}
        refused = httpx.post(url, content=json.dumps(body), timeout=30)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"].startswith("Input 'input' data is ragged")
    for data in (values.tolist(), values.reshape(1, 1, 32, 32).tolist()):  # flat, or nested as its shape
        body = {"inputs": [{"name": "input", "shape": [1, 1, 32, 32], "datatype": "FP32", "data": data}]}
        answer = httpx.post(url, content=json.dumps(body), timeout=30)
        assert answer.status_code == 200 and answer.json()["outputs"][0]["data"] == values.tolist()


def test_binary_data_size_that_is_not_an_integer_is_named_as_read(base: str) -> None:
    header = json.dumps({"inputs": [{"name": "input", "shape": [1, 1, 32, 32], "datatype": "FP32",
                                     "parameters": {"binary_data_size": "4096"}}]}).encode()
    refused = httpx.post(f"{base}/v2/models/square/infer", content=header + bytes(4096),
                         headers={"Inference-Header-Content-Length": str(len(header))}, timeout=30)
    assert refused.status_code == 400
    assert refused.json()["error"] == ("Input 'input' binary_data_size must be a non-negative integer, got the "
                                       "string '4096'.")


def test_each_refused_request_is_one_log_line_and_a_flood_is_summed_up(repository: Path) -> None:
    process, base = _serve(repository)
    flood = 3 * BURST
    try:
        wait_until_ready(base, "/v2/health/ready")
        with ThreadPoolExecutor(8) as pool:  # three bad requests among good ones, batched together
            answers = list(pool.map(lambda v: _lookup(base, v), [1, 2, 100, 3, 4, 200, 5, 300]))
        assert [a.status_code for a in answers] == [200, 200, 400, 200, 200, 400, 200, 400]
        assert all(MODEL_MESSAGE in a.json()["error"] for a in answers if a.status_code == 400)
        for _ in range(flood):
            assert _lookup(base, 100).status_code == 400
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    assert "[E:onnxruntime" not in output and "[W:onnxruntime" not in output, output  # the runtime's own lines
    lines = [line for line in output.splitlines() if "lookup answered 400:" in line]
    assert all(line.count(MODEL_MESSAGE) == 1 for line in lines), output
    assert {line.split("idx=")[1].split()[0] for line in lines[:3]} == {"100", "200", "300"}, output
    held = [line for line in output.splitlines() if "more refused request" in line]
    said = len(lines) + sum(int(line.split("more refused")[0].split()[-1]) for line in held)
    assert said == 3 + flood, output  # every refusal is in the log, one by one or summed up when the server stops
    assert len(lines) < 3 + flood and held, output  # a flood is not a line per request


def test_every_refused_inference_request_is_a_log_line(repository: Path) -> None:
    """The guide promises a line per refused request; requests refused before the model ran (malformed, unknown
    model, an unsupported parameter) had none, only /metrics counted them (#56)."""
    process, base = _serve(repository)
    try:
        wait_until_ready(base, "/v2/health/ready")
        good = {"name": "input", "shape": [1, 1], "datatype": "FP32", "data": [1.0]}
        refused = [httpx.post(f"{base}/v2/models/lookup/infer", content=b"{not json", timeout=60),
                   httpx.post(f"{base}/v2/models/nothing/infer", json={"inputs": [good]}, timeout=60),
                   httpx.post(f"{base}/v2/models/lookup/infer", timeout=60,
                              json={"inputs": [good], "outputs": [{"name": "output",
                                                                   "parameters": {"classification": 3}}]}),
                   httpx.post(f"{base}/v2/models/lookup/infer", json={"inputs": [good, good]}, timeout=60),
                   httpx.post(f"{base}/v2/models/lookup/infer", json={"inputs": []}, timeout=60)]
        assert [answer.status_code for answer in refused] == [400, 404, 400, 400, 400]
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    lines = [line for line in output.splitlines() if " answered 4" in line]
    assert len(lines) == len(refused), output
    assert sum("lookup answered 400: " in line for line in lines) == 4, output
    assert any("nothing answered 404: Unknown model 'nothing'" in line for line in lines), output
