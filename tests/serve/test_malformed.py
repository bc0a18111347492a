"""What a client reads when its request or a model is broken, from a real `trtpipe serve` process: a request
httptools cannot parse (a 0x7f byte in a header) is a JSON 400 like every other error, and a model that failed to load
says why without ONNX Runtime's source file and line."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from trtpipe.tools.loopback import free_port, wait_until_ready

SOURCE_LOCATION = re.compile(r"\w+\.(?:cc|cpp|h|hpp)(?::\d+)?")


def _missing_weights(path: Path) -> None:
    """A model whose weights live in a file next to it that is not there: ONNX Runtime names its own source file
    (tensorprotoutils.cc) when it refuses it."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.ones(1024, np.float32), "w")
    graph = helper.make_graph([helper.make_node("Add", ["input", "w"], ["output"])], "g",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", 1024])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["n", 1024])],
                              initializer=[weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    onnx.save(model, path, save_as_external_data=True, location="weights.bin", size_threshold=0)
    (path.parent / "weights.bin").unlink()


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, digits_onnx: Path) -> Iterator[str]:
    repository = tmp_path_factory.mktemp("malformed")
    (repository / "digits" / "1").mkdir(parents=True)
    shutil.copy(digits_onnx, repository / "digits" / "1" / "model.onnx")
    (repository / "weightless" / "1").mkdir(parents=True)
    _missing_weights(repository / "weightless" / "1" / "model.onnx")
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "trtpipe.cli", "serve", str(repository), "--port", str(port),
                                "--drain-s", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(url, "/v2/models/digits/ready", 120)
        yield url
    finally:
        process.terminate()
        process.communicate(timeout=60)


@pytest.mark.parametrize("content_type", [b"application/\x7fjson", b"app\x00lication/json", b"\x7f"])
def test_a_header_http_does_not_allow_is_a_json_400(base: str, content_type: bytes) -> None:
    port = int(base.rsplit(":", 1)[1])
    body = json.dumps({"inputs": []}).encode()
    request = (b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: " + content_type
               + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), answer
    assert b"content-type: application/json" in head.lower(), answer
    assert json.loads(payload)["error"].startswith("The request is not valid HTTP/1.1"), answer


def test_a_model_that_failed_to_load_says_why_without_source_locations(base: str) -> None:
    for path in ("/v2/models/weightless", "/v2/models/weightless/ready", "/v2/models/weightless/infer"):
        answer = (httpx.post(f"{base}{path}", json={"inputs": []}, timeout=30) if path.endswith("infer")
                  else httpx.get(f"{base}{path}", timeout=30))
        assert answer.status_code in (400, 503), answer.text
        text = answer.json()["error"]
        assert "External data path" in text, text  # what went wrong is still said
        assert not SOURCE_LOCATION.search(text) and "/tmp" not in text, text
    ready = httpx.get(f"{base}/v2/health/ready", timeout=30)
    assert ready.status_code == 503 and ready.json()["reason"] == "Model 'weightless' is not loaded."
