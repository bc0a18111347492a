"""gRPC under memory pressure: a real `trtpipe serve` with --grpc-port, driven by real gRPC and HTTP clients.

Under an address-space limit (RLIMIT_AS) large requests that do not fit are refused one by one (UNAVAILABLE, 503)
while the process lives on and serves the next request; the memory large gRPC requests took goes back after them,
as HTTP's does (trtpipe/serve/memory.py; figures in docs/results/serving-memory.md).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.optional import optional
from trtpipe.tools.loopback import child_pids, free_port, resident_mib, status_mib, wait_until_ready

service_pb2 = optional("tritonclient.grpc.service_pb2")

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux's")

CHANNELS = 16  # the model's activation is CHANNELS times its input: a 40 MiB request needs 640 MiB to run
SIDE = 3238  # 1x1xSIDExSIDE float32: 40 MiB
HEADROOM = 512 << 20  # address space the limited server gets above its footprint at rest (less than one run needs)
UNLIMITED = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]


def spread(repository: Path) -> Path:
    """[n, 1, h, w] -> a 1x1 convolution to CHANNELS channels -> the maximum over all but the batch: [n, 1]. Its
    answer to a tensor of zeros is 0.5 (the bias), whatever its size."""
    weight = numpy_helper.from_array(np.ones((CHANNELS, 1, 1, 1), np.float32), "weight")
    bias = numpy_helper.from_array(np.full(CHANNELS, 0.5, np.float32), "bias")
    axes = numpy_helper.from_array(np.array([1, 2, 3], np.int64), "axes")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input", "weight", "bias"], ["wide"], kernel_shape=[1, 1]),
         helper.make_node("ReduceMax", ["wide", "axes"], ["reduced"], keepdims=0),
         helper.make_node("Unsqueeze", ["reduced", "one"], ["output"])], "spread",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", 1, "h", "w"])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["n", 1])],
        initializer=[weight, bias, axes, numpy_helper.from_array(np.array([1], np.int64), "one")])
    path = repository / "spread" / "1" / "model.onnx"
    path.parent.mkdir(parents=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9), path)
    return path


@dataclass
class Served:
    process: subprocess.Popen[str]
    base: str
    grpc_url: str

    def status_mib(self, field: str) -> float:
        return status_mib(self.process.pid, field)

    def rss_mib(self) -> float:
        """The resident memory of the server and of its child processes (the gRPC listener) together."""
        assert child_pids(self.process.pid), "the gRPC listener process is not running"
        return resident_mib(self.process.pid)


@contextmanager
def serving(repository: Path, limit: int | None = None, env: dict[str, str] | None = None) -> Iterator[Served]:
    """`trtpipe serve` with HTTP and gRPC on loopback, one ONNX Runtime thread, under RLIMIT_AS ``limit``."""
    port, grpc_port = free_port(), free_port()

    def limit_memory() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    environment = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | (env or {})
    process = subprocess.Popen([sys.executable, "-m", "trtpipe.cli", "serve", str(repository), "--port", str(port),
                                "--grpc-port", str(grpc_port), "--threads", "1", "--drain-s", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment,
                               preexec_fn=limit_memory)
    served = Served(process, f"http://127.0.0.1:{port}", f"127.0.0.1:{grpc_port}")
    try:
        try:
            wait_until_ready(served.base, "/v2/health/ready")
        except RuntimeError:
            process.kill()
            raise AssertionError(f"the server did not start (exit {process.wait()}):\n{process.communicate()[0]}"
                                 ) from None
        yield served
    finally:
        if process.poll() is None:
            process.terminate()
        output = process.communicate(timeout=60)[0]
    assert process.returncode == 0, f"the server ended with {process.returncode}:\n{output[-3000:]}"
    assert "listener process exited" not in output, output[-3000:]  # the gRPC listener never died either


def infer_message(side: int, short: bool = False) -> bytes:
    """A ModelInferRequest of zeros, 1x1xSIDExSIDE as raw contents, as tritonclient sends it; ``short``: one
    value fewer than the shape needs (refused once decoded)."""
    message = service_pb2.ModelInferRequest(model_name="spread")
    message.inputs.add(name="input", datatype="FP32", shape=[1, 1, side, side])
    message.raw_input_contents.append(bytes(4 * (side * side - short)))
    return message.SerializeToString()


def http_body(side: int, short: bool = False) -> tuple[bytes, dict[str, str]]:
    """The same request over HTTP, its tensor as binary data."""
    size = 4 * (side * side - short)
    header = json.dumps({"inputs": [{"name": "input", "shape": [1, 1, side, side], "datatype": "FP32",
                                      "parameters": {"binary_data_size": size}}]}).encode()
    return header + bytes(size), {"Inference-Header-Content-Length": str(len(header))}


def grpc_call(served: Served, message: bytes) -> tuple[str, str, bytes]:
    """(status code name, details, response bytes) of one ModelInfer carrying ``message``."""
    with grpc.insecure_channel(served.grpc_url, options=UNLIMITED) as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        try:
            return "OK", "", call(message, timeout=120)
        except grpc.RpcError as error:
            return error.code().name, error.details() or "", b""


def http_call(served: Served, side: int, short: bool = False) -> httpx.Response:
    body, headers = http_body(side, short)
    return httpx.post(f"{served.base}/v2/models/spread/infer", content=body, headers=headers, timeout=120)


def small_requests_are_served(served: Served) -> None:
    code, details, answer = grpc_call(served, infer_message(8))
    assert code == "OK", details
    assert np.frombuffer(service_pb2.ModelInferResponse.FromString(answer).raw_output_contents[0],
                         np.float32).tolist() == [0.5]
    reply = http_call(served, 8)
    assert reply.status_code == 200, reply.text


def test_under_a_memory_limit_with_grpc_requests_that_do_not_fit_are_refused_and_the_server_serves_on(
        tmp_path: Path) -> None:
    """The limit is the server's footprint at rest with malloc's arenas bounded (measured first, the same for any
    version of the server) plus HEADROOM: room for three 40 MiB requests in flight (in gRPC's core and ours), not
    for the 640 MiB each needs to run. Three gRPC requests at once, then HTTP ones: each is refused by itself
    (UNAVAILABLE, 503; never UNKNOWN, never the process), and the server stays ready and serves the next requests."""
    spread(tmp_path)
    with serving(tmp_path, env={"MALLOC_ARENA_MAX": "2"}) as rest:
        footprint = int(rest.status_mib("VmSize") * 2**20)
    with serving(tmp_path, limit=footprint + HEADROOM) as served:
        small_requests_are_served(served)
        message = infer_message(SIDE)
        for _ in range(2):
            with ThreadPoolExecutor(3) as pool:
                answers = list(pool.map(lambda _: grpc_call(served, message), range(3)))
            assert {code for code, _, _ in answers} == {"UNAVAILABLE"}, answers
            assert all("memory" in details for _, details, _ in answers), answers
            for _ in range(2):
                refused = http_call(served, SIDE)
                assert refused.status_code == 503, refused.text
                assert "memory" in refused.json()["error"]
            assert served.process.poll() is None
            assert httpx.get(f"{served.base}/v2/health/ready", timeout=10).status_code == 200
            small_requests_are_served(served)


ROUNDS, AT_ONCE = 6, 3
LARGE_SIDE = 3965  # 1x1xSIDExSIDE float32: 60 MiB


def test_memory_taken_for_large_grpc_requests_goes_back_as_for_http(tmp_path: Path) -> None:
    """Six rounds of three 60 MiB requests, each refused once decoded (one value short), over HTTP and then over
    gRPC: what the server keeps after the gRPC rounds is within 1.5 times what it kept after the HTTP ones
    (gRPC's messages used to stay with the process, in malloc's arenas and in reference cycles, growing it by
    gigabytes)."""
    spread(tmp_path)

    def rounds(send: object) -> float:
        assert callable(send)
        for _ in range(ROUNDS):
            with ThreadPoolExecutor(AT_ONCE) as pool:
                list(pool.map(lambda _: send(), range(AT_ONCE)))
        time.sleep(1)
        return served.rss_mib()

    with serving(tmp_path) as served:
        message = infer_message(LARGE_SIDE, short=True)

        def over_http() -> None:
            reply = http_call(served, LARGE_SIDE, short=True)
            assert reply.status_code == 400, reply.text

        def over_grpc() -> None:
            code, details, _ = grpc_call(served, message)
            assert code == "INVALID_ARGUMENT", details

        after_http = rounds(over_http)
        after_grpc = rounds(over_grpc)
    assert after_grpc <= 1.5 * after_http, f"RSS {after_grpc:.0f} MiB after gRPC, {after_http:.0f} MiB after HTTP"
