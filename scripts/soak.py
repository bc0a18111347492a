"""`make soak`: a real `trtpipe serve` under load and faults for a few minutes, on loopback, and what it did.

The script builds three small models with onnx.helper into a temporary repository (``tinyconv``, a two-conv net on
1x28x28, ``resnetish``, a four-stage residual net of about 4 MB on 3xHxW with free height and width, and ``spread``,
whose output is a million times its input), starts
``trtpipe serve`` on 127.0.0.1 with HTTP and gRPC ports, dynamic batching on and an address-space limit
(RLIMIT_AS, ``--memory-limit-gib``; no MALLOC_ARENA_MAX of its own: the server bounds its allocator), and drives
it with one asyncio client (aiohttp, grpc.aio with Triton's generated stubs) in phases:

- warm-up (not counted), then **baseline**: valid requests only, ``--concurrency`` closed-loop clients cycling
  through HTTP JSON, HTTP binary, gRPC raw and gRPC typed contents on both models; every answer is compared with
  ONNX Runtime run in this process on the same input;
- **attacks** (#56; ``--attack-s`` each, on top of ``--duration``): the same valid load, plus six clients sending one
  hostile request of about a megabyte back to back, one attack after another (61,000 copies of one input, 71,000
  ``"data":[[[[["`` in parameters, a megabyte of tiny strings or of small arrays in parameters, a classification
  parameter, a string for a boolean, an answer over ``--max-response-mb`` and a 16 MiB binary one from ``spread``, a
  third model whose output is a million times its input, gRPC's 40,000 copies of one input and a 70,000-character
  model name); the summary shows the valid requests' p50 and p99 over HTTP and gRPC during each, against the
  baseline's. They are in the fault phase's malformed mix too;
- **fault**: the same valid load, plus clients sending malformed requests (bad JSON, data nested up to a million
  deep or otherwise than its shape, wrong shapes and dtypes, unknown models, truncated binary, duplicated inputs,
  null/NaN data, undecodable protobuf), oversized ones (bodies and messages over ``--max-body-mb``, huge declared
  shapes, a batch over the maximum), memory bombs (the largest batch the body limit lets through, at a spatial size
  whose activations exceed the memory limit) and abandoned ones (clients that send and disconnect, or cancel, before
  the answer); ``--fault-kinds`` picks some of these;
- settle (the fault clients finish; not counted), then **recovery**: valid requests only, as in the baseline.

It prints what was sent per kind, the answers by class (HTTP 2xx/4xx/5xx, gRPC codes, no answer), each case's
answers against what the README documents for it, undocumented server errors (any HTTP 5xx but 503, 504, 507; gRPC
INTERNAL, UNKNOWN, DATA_LOSS) with their bodies, the server's peak RSS (VmHWM from /proc) and what it keeps at the
end of the baseline and of the recovery, aborts (the server killed by a signal), readiness and health-probe
latency through the phases, the server's own Prometheus counters, and whether capacity recovered: the valid
requests' throughput and success rate in the recovery phase against the baseline. It exits 1 when there was an
undocumented server error, a wrong answer to a valid request, the server died (then it names the fault requests in
flight when the first connection broke; the server runs with PYTHONFAULTHANDLER, so its log holds every thread's
stack), or capacity did not recover. It describes what the server does; it assumes nothing beyond the status
classes above.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import re
import resource
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from trtpipe.hardware import cpu_model, usable_cores
from trtpipe.tools.loopback import free_port

HOST = "127.0.0.1"  # loopback only: the script never targets another address
HEADER_LENGTH = "Inference-Header-Content-Length"
DOCUMENTED_5XX = (503, 504, 507)  # out of memory or queue full, timeout, insufficient storage
UNDOCUMENTED_GRPC = ("INTERNAL", "UNKNOWN", "DATA_LOSS")  # gRPC's equivalents of an unexplained 500
KINDS = ("valid", "malformed", "oversized", "memory", "abandoned")
PHASES = {"warmup": 0.05, "baseline": 0.25, "fault": 0.40, "settle": 0.05, "recovery": 0.25}  # of --duration
LOG_LINES = {"tracebacks": r"(?m)^Traceback", "MemoryError lines": r"(?m)^MemoryError",
             "fatal transport errors": r"(?m)^Fatal error on transport", "warnings": r"(?m)^WARNING:",
             "ONNX Runtime errors": r"\[E:onnxruntime"}  # counted in the server's log
VALID_SHAPE = {"tinyconv": (1, 28, 28), "resnetish": (3, 64, 64)}


# -- the models ------------------------------------------------------------------------------------------------------


class GraphBuilder:
    """Nodes and He-initialised weights of a small CNN, for onnx.helper."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.weights: list[onnx.TensorProto] = []

    def conv(self, name: str, x: str, cin: int, cout: int, stride: int = 1, relu: bool = True) -> str:
        weight = self.rng.standard_normal((cout, cin, 3, 3)).astype(np.float32) * np.float32(np.sqrt(2 / (cin * 9)))
        self.weights += [numpy_helper.from_array(weight, f"{name}.w"),
                         numpy_helper.from_array(np.zeros(cout, np.float32), f"{name}.b")]
        self.nodes.append(helper.make_node("Conv", [x, f"{name}.w", f"{name}.b"], [name], kernel_shape=[3, 3],
                                           strides=[stride, stride], pads=[1, 1, 1, 1]))
        return self.relu(name) if relu else name

    def relu(self, x: str) -> str:
        self.nodes.append(helper.make_node("Relu", [x], [f"{x}.relu"]))
        return f"{x}.relu"

    def head(self, x: str, channels: int, classes: int = 10) -> str:
        weight = self.rng.standard_normal((channels, classes)).astype(np.float32) / np.float32(np.sqrt(channels))
        self.weights += [numpy_helper.from_array(weight, "fc.w"),
                         numpy_helper.from_array(np.zeros(classes, np.float32), "fc.b")]
        self.nodes += [helper.make_node("GlobalAveragePool", [x], ["pooled"]),
                       helper.make_node("Flatten", ["pooled"], ["flat"]),
                       helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"])]
        return "logits"

    def save(self, path: Path, name: str, inputs: list[onnx.ValueInfoProto], output: str) -> Path:
        graph = helper.make_graph(self.nodes, name, inputs,
                                  [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["n", 10])],
                                  initializer=self.weights)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
        onnx.checker.check_model(model)
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(model, path)
        return path


def tinyconv(repository: Path) -> Path:
    """[n, 1, 28, 28] -> conv 8, max-pool, conv 16, global pool, 10 logits: microseconds per image."""
    g = GraphBuilder(seed=1)
    x = g.conv("conv1", "input", 1, 8)
    g.nodes.append(helper.make_node("MaxPool", [x], ["pool1"], kernel_shape=[2, 2], strides=[2, 2]))
    x = g.conv("conv2", "pool1", 8, 16)
    return g.save(repository / "tinyconv" / "1" / "model.onnx", "tinyconv",
                  [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", 1, 28, 28])], g.head(x, 16))


def resnetish(repository: Path, widths: tuple[int, ...] = (24, 48, 96, 192)) -> Path:
    """[n, 3, h, w] (free h and w) -> a stride-1 stem, four stages of one basic residual block each (the first at
    full resolution, the others after a stride-2 conv), global pool, 10 logits: about 1.1 M weights (4.4 MB), some
    0.4 GFLOP per 64x64 image. Its first stage's activations are 4 * widths[0] * h * w bytes per image."""
    g = GraphBuilder(seed=2)
    x = g.conv("stem", "image", 3, widths[0])
    channels = widths[0]
    for stage, width in enumerate(widths):
        if stage:
            x = g.conv(f"down{stage}", x, channels, width, stride=2)
            channels = width
        y = g.conv(f"block{stage}.a", x, width, width)
        y = g.conv(f"block{stage}.b", y, width, width, relu=False)
        g.nodes.append(helper.make_node("Add", [y, x], [f"block{stage}.sum"]))
        x = g.relu(f"block{stage}.sum")
    return g.save(repository / "resnetish" / "1" / "model.onnx", "resnetish",
                  [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["n", 3, "h", "w"])],
                  g.head(x, channels))


SPREAD_WIDTH = 1 << 20  # float32 values per row of spread's output: 4 MiB as binary data, up to 16 MiB as JSON


def spread(repository: Path) -> Path:
    """[n, 1] -> [n, SPREAD_WIDTH], each row its value repeated: a few bytes in, megabytes out (the large answers
    of #56)."""
    width = numpy_helper.from_array(np.array([1, SPREAD_WIDTH], np.int64), "width")
    graph = helper.make_graph([helper.make_node("Expand", ["x", "width"], ["y"])], "spread",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", SPREAD_WIDTH])],
                              initializer=[width])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    onnx.checker.check_model(model)
    path = repository / "spread" / "1" / "model.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)
    return path


# -- requests ------------------------------------------------------------------------------------------------------


def binary_request(name: str, array: np.ndarray, *, datatype: str = "FP32", declared: int | None = None,
                   shape: list[int] | None = None) -> tuple[bytes, dict[str, str]]:
    """A KServe v2 request with one input as binary data (``declared`` overrides binary_data_size) and binary
    outputs."""
    raw = array.tobytes()
    tensor = {"name": name, "shape": shape or list(array.shape), "datatype": datatype,
              "parameters": {"binary_data_size": len(raw) if declared is None else declared}}
    header = json.dumps({"inputs": [tensor], "parameters": {"binary_data_output": True}}).encode()
    return header + raw, {HEADER_LENGTH: str(len(header)), "Content-Type": "application/octet-stream"}


def json_request(name: str, array: np.ndarray) -> bytes:
    tensor = {"name": name, "shape": list(array.shape), "datatype": "FP32", "data": array.ravel().tolist()}
    return json.dumps({"inputs": [tensor]}).encode()


def json_text_request(name: str, shape: list[int], data: bytes) -> bytes:
    """A JSON request whose data array is given as its text (for bodies of tens of MB, and for invalid JSON)."""
    head = json.dumps({"name": name, "shape": shape, "datatype": "FP32"})[:-1].encode()
    return b'{"inputs": [' + head + b', "data": [' + data + b"]}]}"


def raw_http(path: str, body: bytes, headers: dict[str, str]) -> bytes:
    """An HTTP/1.1 POST as bytes, for clients that leave halfway."""
    lines = [f"POST {path} HTTP/1.1", f"Host: {HOST}", f"Content-Length: {len(body)}",
             *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


@dataclass
class Outcome:
    label: str  # "HTTP 200", "gRPC INVALID_ARGUMENT", "no answer: ServerDisconnectedError", "abandoned"
    detail: str = ""  # the error body or gRPC details (first 400 characters)
    wrong: bool = False  # a 200 whose outputs differ from ONNX Runtime's in this process


def answer_class(label: str) -> str:
    if label.startswith("HTTP "):
        return f"HTTP {label[5]}xx"
    if label.startswith("gRPC "):
        return label
    return label.split(":")[0]  # "no answer", "abandoned"


def undocumented(label: str) -> bool:
    if label.startswith("HTTP 5"):
        return int(label[5:8]) not in DOCUMENTED_5XX
    return label.startswith("gRPC ") and label[5:] in UNDOCUMENTED_GRPC


@dataclass
class Case:
    name: str
    kind: str
    send: Callable[[], Awaitable[Outcome]]
    documented: tuple[str, ...]  # the answers the README documents for it ("HTTP 400", "gRPC NOT_FOUND", ...)
    pause_s: float = 0.0  # after each send, so a costly case does not crowd out the others


class Clients:
    """HTTP (aiohttp) and gRPC (grpc.aio with tritonclient's generated stubs) clients of one server, and the cases
    they send. Valid requests and faults use separate connection pools and channels."""

    def __init__(self, http_port: int, grpc_port: int, settings: argparse.Namespace, models: dict[str, Path]) -> None:
        import aiohttp
        import grpc
        from tritonclient.grpc import service_pb2, service_pb2_grpc

        self.aiohttp, self.grpc, self.pb = aiohttp, grpc, service_pb2
        self.base = f"http://{HOST}:{http_port}"
        self.http_port = http_port
        unlimited = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
        self.channels = [grpc.aio.insecure_channel(f"{HOST}:{grpc_port}", options=unlimited) for _ in range(2)]
        self.stubs = [service_pb2_grpc.GRPCInferenceServiceStub(c) for c in self.channels]
        self.raw_infer = self.channels[1].unary_unary("/inference.GRPCInferenceService/ModelInfer")
        self.raw_metadata = self.channels[1].unary_unary("/inference.GRPCInferenceService/ModelMetadata")
        timeout = aiohttp.ClientTimeout(total=settings.request_timeout_s)
        self.sessions = [aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0))
                         for _ in range(2)]
        self.settings = settings
        self.body_limit = int(settings.max_body_mb * 2**20)
        self.expected = ExpectedOutputs(models)

    async def close(self) -> None:
        for session in self.sessions:
            await session.close()
        for channel in self.channels:
            await channel.close()

    # Transports

    async def post(self, path: str, body: Any, headers: dict[str, str] | None = None, *, pool: int = 1,
                   method: str = "POST") -> tuple[Outcome, bytes, dict[str, str]]:
        try:
            async with self.sessions[pool].request(method, self.base + path, data=body, headers=headers) as answer:
                payload = await answer.read()
                answer_headers = {k.lower(): v for k, v in answer.headers.items()}
                return Outcome(f"HTTP {answer.status}", _text(payload)), payload, answer_headers
        except (self.aiohttp.ClientError, TimeoutError, OSError) as error:
            return Outcome(f"no answer: {type(error).__name__}", str(error)[:400]), b"", {}

    async def rpc(self, call: Callable[[], Awaitable[Any]]) -> tuple[Outcome, Any]:
        try:
            return Outcome("gRPC OK"), await call()
        except self.grpc.aio.AioRpcError as error:
            return Outcome(f"gRPC {error.code().name}", (error.details() or "")[:400]), None

    def infer_message(self, model: str, name: str, array: np.ndarray, *, typed: bool = False,
                      datatype: str = "FP32", shape: list[int] | None = None) -> Any:
        message = self.pb.ModelInferRequest(model_name=model)
        tensor = message.inputs.add(name=name, datatype=datatype, shape=shape or list(array.shape))
        if typed:
            tensor.contents.fp32_contents.extend(array.ravel().tolist())
        else:
            message.raw_input_contents.append(array.tobytes())
        return message

    # Valid requests

    def valid_cases(self) -> list[Case]:
        """Both models over HTTP binary and JSON and gRPC raw (tinyconv also gRPC typed and a batch of 4), each
        with its answer from ONNX Runtime in this process."""
        rng = np.random.default_rng(0)
        cases = []
        for model, input_name in (("tinyconv", "input"), ("resnetish", "image")):
            for rows in (1, 4) if model == "tinyconv" else (1,):
                array = rng.standard_normal((rows, *VALID_SHAPE[model])).astype(np.float32)
                want = self.expected(model, array)
                path = f"/v2/models/{model}/infer"
                body, headers = binary_request(input_name, array)
                cases.append(self._valid_http(f"{model} HTTP binary x{rows}", path, body, headers, want))
                if rows == 1:
                    cases.append(self._valid_http(f"{model} HTTP JSON", path, json_request(input_name, array),
                                                  {"Content-Type": "application/json"}, want))
                    cases.append(self._valid_grpc(f"{model} gRPC raw", self.infer_message(model, input_name, array),
                                                  want))
                if model == "tinyconv" and rows == 1:
                    cases.append(self._valid_grpc(f"{model} gRPC typed",
                                                  self.infer_message(model, input_name, array, typed=True), want))
        return cases

    def _valid_http(self, name: str, path: str, body: bytes, headers: dict[str, str], want: np.ndarray) -> Case:
        async def send() -> Outcome:
            outcome, payload, answer_headers = await self.post(path, body, headers, pool=0)
            if outcome.label == "HTTP 200":
                outcome.detail = ""
                outcome.wrong = not self.expected.matches(_http_output(payload, answer_headers), want)
            return outcome

        return Case(name, "valid", send, ("HTTP 200",))

    def _valid_grpc(self, name: str, message: Any, want: np.ndarray) -> Case:
        async def send() -> Outcome:
            outcome, answer = await self.rpc(lambda: self.stubs[0].ModelInfer(message,
                                                                              timeout=self.settings.request_timeout_s))
            if answer is not None:
                got = np.frombuffer(answer.raw_output_contents[0], np.float32).reshape(list(answer.outputs[0].shape))
                outcome.wrong = not self.expected.matches(got, want)
            return outcome

        return Case(name, "valid", send, ("gRPC OK",))

    # Faults

    def http_case(self, name: str, kind: str, body: Any, headers: dict[str, str] | None, documented: tuple[str, ...],
                  *, path: str = "/v2/models/tinyconv/infer", method: str = "POST", pause_s: float = 0.0) -> Case:
        async def send() -> Outcome:
            data = body() if callable(body) else body
            return (await self.post(path, data, headers, method=method))[0]

        return Case(name, kind, send, documented, pause_s)

    def grpc_case(self, name: str, kind: str, call: Callable[[], Awaitable[Any]], documented: tuple[str, ...],
                  pause_s: float = 0.0) -> Case:
        async def send() -> Outcome:
            return (await self.rpc(call))[0]

        return Case(name, kind, send, documented, pause_s)

    def malformed_cases(self) -> list[Case]:
        image = np.random.default_rng(1).standard_normal((1, 1, 28, 28)).astype(np.float32)
        values = image.ravel().tolist()
        tensor = {"name": "input", "shape": [1, 1, 28, 28], "datatype": "FP32", "data": values}
        js = {"Content-Type": "application/json"}

        def request(**changes: Any) -> bytes:
            return json.dumps({"inputs": [tensor | changes]}).encode()

        def words(word: bytes) -> bytes:
            return json_text_request("input", [1, 1, 28, 28], b", ".join([word] * 784))

        body, binary_headers = binary_request("input", image)
        header_length = int(binary_headers[HEADER_LENGTH])
        truncated = body[:header_length + 1000]
        bad_400, bad_404 = ("HTTP 400",), ("HTTP 404",)
        cases = [
            self.http_case("bad JSON: truncated", "malformed", request()[:2000], js, bad_400),
            self.http_case("bad JSON: not JSON", "malformed", b"\xff\xfe{inputs: ]", js, bad_400),
            self.http_case("bad JSON: a list, not an object", "malformed", b"[1, 2, 3]", js, bad_400),
            self.http_case("bad JSON: empty body", "malformed", b"", js, bad_400),
            self.http_case("bad JSON: nested 100,000 deep", "malformed",
                           b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", js, bad_400),
            # Nesting inside data: refused at the first bracket past the input's rank, in time linear in the body
            # (#48: it used to cost time quadratic in depth and hold every service thread).
            *(self.http_case(f"data nested {levels:,} deep", "malformed",
                             json_text_request("input", [1, 1, 28, 28], b"[" * levels + b"0.5" + b"]" * levels),
                             js, bad_400) for levels in (10_000, 100_000, 1_000_000)),
            self.http_case("data nested 2x392, not as its shape", "malformed",
                           request(data=[values[:392], values[392:]]), js, bad_400),
            self.http_case("data nested with extra one-element levels", "malformed",
                           request(data=[[[[[[v] for v in values]]]]]), js, bad_400),
            self.http_case("wrong shape", "malformed", request(shape=[1, 1, 27, 28], data=values[:756]), js, bad_400),
            self.http_case("element count differs from shape", "malformed", request(data=values[:10]), js, bad_400),
            self.http_case("negative dimension", "malformed", request(shape=[-1, 1, 28, 28]), js, bad_400),
            self.http_case("boolean dimension", "malformed", request(shape=[True, 1, 28, 28]), js, bad_400),
            self.http_case("wrong datatype (INT64 for FP32)", "malformed",
                           request(datatype="INT64", data=[1] * 784), js, bad_400),
            self.http_case("strings for FP32", "malformed", request(data=["x"] * 784), js, bad_400),
            self.http_case("booleans for FP32", "malformed", request(data=[True] * 784), js, bad_400),
            self.http_case("unknown model", "malformed", request(), js, bad_404, path="/v2/models/nope/infer"),
            self.http_case("unknown version", "malformed", request(), js, bad_404,
                           path="/v2/models/tinyconv/versions/7/infer"),
            self.http_case("unknown route", "malformed", request(), js, bad_404, path="/v2/models/tinyconv/infer/x"),
            self.http_case("GET on infer", "malformed", None, None, ("HTTP 405",), method="GET"),
            self.http_case("truncated binary data", "malformed", truncated, binary_headers, bad_400),
            self.http_case("header length over the body", "malformed", body,
                           binary_headers | {HEADER_LENGTH: str(len(body) + 1)}, bad_400),
            self.http_case("header length not a number", "malformed", body,
                           binary_headers | {HEADER_LENGTH: "twelve"}, bad_400),
            self.http_case("negative binary_data_size", "malformed",
                           binary_request("input", image, declared=-4)[0], binary_headers, bad_400),
            self.http_case("duplicated input", "malformed",
                           json.dumps({"inputs": [tensor, tensor]}).encode(), js, bad_400),
            self.http_case("unexpected input", "malformed",
                           json.dumps({"inputs": [tensor, tensor | {"name": "other"}]}).encode(), js, bad_400),
            self.http_case("no inputs", "malformed", b'{"inputs": []}', js, bad_400),
            self.http_case("parameters not an object", "malformed", request(parameters=[1]), js, bad_400),
            self.http_case("null data", "malformed", words(b"null"), js, bad_400),
            self.http_case("\"NaN\" strings", "malformed", words(b'"NaN"'), js, bad_400),
            self.http_case("bare NaN tokens", "malformed", words(b"NaN"), js, bad_400),
            self.http_case("1e39 in FP32", "malformed", words(b"1e39"), js, bad_400),
            # Binary data carries IEEE values as they are: NaN reaches the model, and its NaN logits come back.
            self.http_case("NaN in binary data", "malformed",
                           binary_request("input", np.full((1, 1, 28, 28), np.nan, np.float32))[0], binary_headers,
                           ("HTTP 200", "HTTP 400")),
        ]
        stub, wait = self.stubs[1], self.settings.request_timeout_s
        message = self.infer_message("tinyconv", "input", image)
        invalid = ("gRPC INVALID_ARGUMENT",)

        def changed(**edits: Any) -> Any:
            copy = self.pb.ModelInferRequest()
            copy.CopyFrom(message)
            for key, value in edits.items():
                if key == "shape":
                    del copy.inputs[0].shape[:]
                    copy.inputs[0].shape.extend(value)
                elif key == "raw":
                    del copy.raw_input_contents[:]
                    copy.raw_input_contents.extend(value)
                elif key == "inputs":
                    copy.inputs.extend(value)
                else:
                    setattr(copy.inputs[0] if key in ("datatype", "name") else copy, key, value)
            return copy

        raw = message.raw_input_contents[0]
        wrong_field = self.pb.ModelInferRequest(model_name="tinyconv")
        wrong_field.inputs.add(name="input", datatype="FP32", shape=[1, 1, 28, 28]).contents.int64_contents.extend(
            [1] * 784)
        nan = self.infer_message("tinyconv", "input", np.full((1, 1, 28, 28), np.nan, np.float32))
        grpc_cases = [
            ("gRPC undecodable protobuf (ModelInfer)", lambda: self.raw_infer(b"\x0f\xff\xff\xff", timeout=wait),
             invalid),
            ("gRPC undecodable protobuf (ModelMetadata)", lambda: self.raw_metadata(b"\x0a\xff\xff\xff\xff\x0f",
                                                                                    timeout=wait), invalid),
            ("gRPC unknown model", lambda: stub.ModelInfer(changed(model_name="nope"), timeout=wait),
             ("gRPC NOT_FOUND",)),
            ("gRPC wrong shape", lambda: stub.ModelInfer(changed(shape=[1, 1, 27, 28]), timeout=wait), invalid),
            ("gRPC wrong datatype", lambda: stub.ModelInfer(changed(datatype="INT64"), timeout=wait), invalid),
            ("gRPC truncated raw contents", lambda: stub.ModelInfer(changed(raw=[raw[:1000]]), timeout=wait), invalid),
            ("gRPC two raw contents for one input", lambda: stub.ModelInfer(changed(raw=[raw, raw]), timeout=wait),
             invalid),
            ("gRPC duplicated input", lambda: stub.ModelInfer(changed(inputs=[message.inputs[0]], raw=[raw, raw]),
                                                              timeout=wait), invalid),
            ("gRPC values in the wrong contents field", lambda: stub.ModelInfer(wrong_field, timeout=wait), invalid),
            ("gRPC no values", lambda: stub.ModelInfer(changed(raw=[]), timeout=wait), invalid),
            ("gRPC NaN in raw contents", lambda: stub.ModelInfer(nan, timeout=wait), ("gRPC OK", *invalid)),
        ]
        return (cases + [self.grpc_case(name, "malformed", call, documented) for name, call, documented in grpc_cases]
                + self.attack_cases())

    def attack_cases(self) -> list[Case]:
        """The hostile requests of #56, each of about a megabyte: they are in the malformed mix, and each is also
        sent alone by ATTACKERS clients in its own phase while the valid clients run (see :func:`drive`), so that
        the report shows what each costs the well-formed requests."""
        js, mb = {"Content-Type": "application/json"}, 1_000_000

        def padded(prefix: bytes, unit: bytes, suffix: bytes) -> bytes:
            return prefix + unit * ((mb - len(prefix) - len(suffix)) // len(unit)) + suffix

        message = self.pb.ModelInferRequest(model_name="tinyconv")
        for _ in range(40_000):
            message.inputs.add(name="input", datatype="FP32", shape=[1, 1, 28, 28])
        entries = message.SerializeToString()  # once: the client's own serialization is not what is measured
        stub, wait = self.stubs[1], self.settings.request_timeout_s
        tensor = {"name": "input", "shape": [1, 1, 28, 28], "datatype": "FP32", "data": [0.0] * 784}
        bad_400 = ("HTTP 400",)
        honest = json.dumps({"inputs": [{"name": "input", "shape": [32, 1, 28, 28], "datatype": "FP32", "data":
                                         np.random.default_rng(5).standard_normal(32 * 784).tolist()}]}).encode()
        return [
            # What six clients of honest JSON requests cost the others: the attacks are to be read against it.
            self.http_case(f"attack: none (honest JSON, 32 rows, {len(honest) / 1e6:.2f} MB)", "malformed", honest,
                           js, ("HTTP 200",)),
            self.http_case("attack: 61,000 copies of one input", "malformed",
                           padded(b'{"inputs":[', b'{"name":"input"},', b'{"name":"input"}]}'), js, bad_400),
            self.http_case("attack: \"data\":[[[[[\" x 71,000 in parameters", "malformed",
                           padded(b'{"parameters":{"x":[', b'"data":[[[[["', b"]}}"), js, bad_400),
            self.http_case("attack: 1 MB of tiny strings in parameters", "malformed",
                           padded(b'{"parameters":{"x":[', b'"a",', b'"a"]},"inputs":[' + json.dumps(tensor).encode()
                                  + b"]}"), js, bad_400),
            self.http_case("attack: 1 MB of small arrays in parameters", "malformed",
                           padded(b'{"parameters":{"x":[', b"[0],", b"[0]]},\"inputs\":[" + json.dumps(tensor).encode()
                                  + b"]}"), js, bad_400),
            self.http_case("attack: classification parameter", "malformed",
                           json.dumps({"inputs": [tensor], "outputs": [
                               {"name": "logits", "parameters": {"classification": 1_000_000_000}}]}).encode(),
                           js, bad_400),
            self.http_case("attack: binary_data_output \"yes\"", "malformed",
                           json.dumps({"inputs": [tensor], "parameters": {"binary_data_output": "yes"}}).encode(), js,
                           bad_400),
            self.http_case(f"attack: JSON answer of up to {16 * 8} MiB (spread, 8 rows)", "malformed",
                           json.dumps({"inputs": [{"name": "x", "shape": [8, 1], "datatype": "FP32",
                                                   "data": [0.5] * 8}]}).encode(), js, ("HTTP 413",),
                           path="/v2/models/spread/infer"),
            self.http_case("attack: 16 MiB binary answer (spread, 4 rows)", "malformed",
                           json.dumps({"inputs": [{"name": "x", "shape": [4, 1], "datatype": "FP32",
                                                   "data": [0.5] * 4}],
                                       "parameters": {"binary_data_output": True}}).encode(), js, ("HTTP 200",),
                           path="/v2/models/spread/infer"),
            self.grpc_case(f"attack: gRPC 40,000 copies of one input ({len(entries) / 1e6:.2f} MB)", "malformed",
                           lambda: self.raw_infer(entries, timeout=wait), ("gRPC INVALID_ARGUMENT",)),
            self.grpc_case("attack: gRPC model name of 70,000 characters", "malformed",
                           lambda: stub.ModelMetadata(self.pb.ModelMetadataRequest(name="m" * 70_000), timeout=wait),
                           ("gRPC NOT_FOUND",)),
        ]

    def oversized_cases(self) -> list[Case]:
        limit, js = self.body_limit, {"Content-Type": "application/json"}
        over = b"0" * (limit + 2**20)

        async def chunks() -> AsyncIterator[bytes]:
            block = b"1" * 2**20
            for _ in range(limit // len(block) + 2):
                yield block

        tiny = np.zeros((1, 1, 28, 28), np.float32)
        body_33, headers_33 = binary_request("input", np.zeros((33, 1, 28, 28), np.float32))
        huge_json = json.dumps({"inputs": [{"name": "input", "shape": [2**40, 1, 28, 28], "datatype": "FP32",
                                            "data": [0.0]}]}).encode()
        huge_binary = binary_request("input", tiny, shape=[2**20, 1, 28, 28])
        big_declared = binary_request("input", tiny, shape=[65536, 1, 28, 28])
        outside = json.dumps({"id": "x" * (2 * 2**20), "inputs": [{"name": "input", "shape": [1, 1, 28, 28],
                                                                    "datatype": "FP32", "data": [0.0] * 784}]}).encode()
        stub, wait = self.stubs[1], self.settings.request_timeout_s
        over_message = self.infer_message("tinyconv", "input", tiny)
        over_message.raw_input_contents[0] = bytes(limit + 2**20)
        huge_shape = self.infer_message("tinyconv", "input", tiny, shape=[2**40, 1, 28, 28])
        rank = self.infer_message("tinyconv", "input", tiny, shape=[1] * 100)
        batch_33 = self.infer_message("tinyconv", "input", np.zeros((33, 1, 28, 28), np.float32), typed=True)
        too_large, invalid = ("HTTP 413",), ("gRPC INVALID_ARGUMENT",)
        return [
            self.http_case("body over --max-body-mb (Content-Length)", "oversized", over, js, too_large, pause_s=0.5),
            self.http_case("body over --max-body-mb (chunked)", "oversized", chunks, js, too_large, pause_s=0.5),
            self.http_case("shape of 2^40 rows (JSON)", "oversized", huge_json, js, ("HTTP 400", "HTTP 413")),
            self.http_case("shape of 2^20 rows (binary)", "oversized", huge_binary[0], huge_binary[1],
                           ("HTTP 400", "HTTP 413")),
            self.http_case("shape of 65536 rows, 3 KB of data", "oversized", big_declared[0], big_declared[1],
                           ("HTTP 400", "HTTP 413")),
            self.http_case("batch of 33 (max 32)", "oversized", body_33, headers_33, ("HTTP 400",)),
            self.http_case("2 MB of JSON besides data", "oversized", outside, js, ("HTTP 400", "HTTP 413")),
            self.grpc_case("gRPC message over --max-body-mb", "oversized",
                           lambda: stub.ModelInfer(over_message, timeout=wait), ("gRPC RESOURCE_EXHAUSTED",),
                           pause_s=0.5),
            self.grpc_case("gRPC shape of 2^40 rows", "oversized", lambda: stub.ModelInfer(huge_shape, timeout=wait),
                           (*invalid, "gRPC RESOURCE_EXHAUSTED")),
            self.grpc_case("gRPC shape of rank 100", "oversized", lambda: stub.ModelInfer(rank, timeout=wait),
                           invalid),
            self.grpc_case("gRPC batch of 33 (typed)", "oversized", lambda: stub.ModelInfer(batch_33, timeout=wait),
                           invalid),
        ]

    def memory_cases(self) -> list[Case]:
        """The largest batch under the body limit, at the image size that fills it: resnetish's first stage then
        needs several activations of 4 * 24 * side^2 * rows bytes at once, past any memory limit of a few GiB."""
        rows = self.settings.max_batch_size
        side = int(math.sqrt(0.9 * self.body_limit / (rows * 3 * 4)))
        shape = [rows, 3, side, side]
        count = math.prod(shape)
        array = np.random.default_rng(2).standard_normal(shape, dtype=np.float32)
        body, headers = binary_request("image", array)
        message = self.infer_message("resnetish", "image", array)
        short = self.infer_message("resnetish", "image", array)
        short.raw_input_contents[0] = short.raw_input_contents[0][:-4]  # refused once decoded: gRPC's memory back
        json_bomb = json_text_request("image", shape, b"0.5," * (count - 1) + b"0.5")
        json_wrong = json_text_request("image", shape, b"0.5," * count + b"0.5")
        js = {"Content-Type": "application/json"}
        path, wait = "/v2/models/resnetish/infer", self.settings.request_timeout_s
        fits_or_not = ("HTTP 200", "HTTP 503", "HTTP 507")
        self.bomb = {"shape": shape, "body_mb": round(len(body) / 2**20, 1),
                     "first_stage_activation_mb": round(4 * 24 * side * side * rows / 2**20)}
        label = "x".join(map(str, shape))
        return [
            self.http_case(f"HTTP binary {label}", "memory", body, headers, fits_or_not, path=path, pause_s=1.0),
            self.grpc_case(f"gRPC raw {label}", "memory", lambda: self.stubs[1].ModelInfer(message, timeout=wait),
                           ("gRPC OK", "gRPC UNAVAILABLE", "gRPC RESOURCE_EXHAUSTED"), pause_s=1.0),
            self.grpc_case(f"gRPC raw {label}, one value short", "memory",
                           lambda: self.stubs[1].ModelInfer(short, timeout=wait),
                           ("gRPC INVALID_ARGUMENT", "gRPC UNAVAILABLE"), pause_s=1.0),
            self.http_case(f"HTTP JSON {label} ({len(json_bomb) / 2**20:.0f} MB)", "memory", json_bomb, js,
                           fits_or_not, path=path, pause_s=1.0),
            self.http_case(f"HTTP JSON {label}, one value too many", "memory", json_wrong, js, ("HTTP 400",),
                           path=path, pause_s=1.0),
        ]

    def abandoned_cases(self) -> list[Case]:
        """Clients that leave before the answer: after sending all (a batch of 8 images, so that there is work to
        drop), in the middle of the body or of the headers; gRPC calls cancelled or past a 5 ms deadline."""
        array = np.random.default_rng(3).standard_normal((8, 3, 64, 64)).astype(np.float32)
        body, headers = binary_request("image", array)
        request = raw_http("/v2/models/resnetish/infer", body, headers)
        cut = request.index(b"\r\n\r\n") + 4 + len(body) // 2
        message = self.infer_message("resnetish", "image", array)
        rng = np.random.default_rng(4)

        def leave(data: bytes, after_s: Callable[[], float]) -> Callable[[], Awaitable[Outcome]]:
            async def send() -> Outcome:
                try:
                    _, writer = await asyncio.open_connection(HOST, self.http_port)
                    writer.write(data)
                    await writer.drain()
                    await asyncio.sleep(after_s())
                    writer.close()
                    await writer.wait_closed()
                except OSError as error:
                    return Outcome(f"no answer: {type(error).__name__}", str(error)[:400])
                return Outcome("abandoned")

            return send

        async def cancelled() -> Outcome:
            call = self.stubs[1].ModelInfer(message, timeout=self.settings.request_timeout_s)
            await asyncio.sleep(float(rng.uniform(0, 0.02)))
            if not call.cancel():  # it had finished: its answer is what the server said
                return (await self.rpc(lambda: call))[0]
            return Outcome("abandoned")

        async def deadline() -> Outcome:
            outcome, _ = await self.rpc(lambda: self.stubs[1].ModelInfer(message, timeout=0.005))
            return outcome if outcome.label != "gRPC DEADLINE_EXCEEDED" else Outcome("abandoned")

        left = ("abandoned",)
        return [Case("HTTP: sent all, left within 20 ms", "abandoned",
                     leave(request, lambda: float(rng.uniform(0, 0.02))), left),
                Case("HTTP: left halfway through the body", "abandoned", leave(request[:cut], lambda: 0.01), left),
                Case("HTTP: left halfway through the headers", "abandoned", leave(request[:40], lambda: 0.01), left),
                Case("gRPC: cancelled within 20 ms", "abandoned", cancelled, (*left, "gRPC OK")),
                Case("gRPC: 5 ms deadline", "abandoned", deadline, (*left, "gRPC OK"))]


def _text(payload: bytes) -> str:
    return payload[:400].decode("utf-8", "replace")


def _http_output(payload: bytes, headers: dict[str, str]) -> np.ndarray | None:
    """The first output of a 200 answer, binary or JSON (``headers`` in lower case); None when it cannot be
    read."""
    try:
        length = headers.get(HEADER_LENGTH.lower())
        header = json.loads(payload[:int(length)] if length else payload)
        output = header["outputs"][0]
        if length:
            size = output["parameters"]["binary_data_size"]
            data = np.frombuffer(payload[int(length):int(length) + size], np.float32)
        else:
            data = np.array(output["data"], np.float32)
        return data.reshape(output["shape"])
    except (ValueError, KeyError, TypeError, IndexError):
        return None


class ExpectedOutputs:
    """The models run by ONNX Runtime in this process: what each valid request's answer must be."""

    def __init__(self, models: dict[str, Path]) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.sessions = {name: ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
                         for name, path in models.items()}

    def __call__(self, model: str, array: np.ndarray) -> np.ndarray:
        session = self.sessions[model]
        return session.run(None, {session.get_inputs()[0].name: array})[0]

    @staticmethod
    def matches(got: np.ndarray | None, want: np.ndarray) -> bool:
        return (got is not None and got.shape == want.shape
                and bool(np.allclose(got, want, rtol=1e-3, atol=1e-4 * max(1.0, float(np.abs(want).max())))))


# -- the server ------------------------------------------------------------------------------------------------------


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    http_port: int
    grpc_port: int
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def status_kb(self, key: str) -> int | None:
        """A VmRSS/VmHWM/VmPeak line of /proc/PID/status, in KiB (None once the process has gone)."""
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith(f"{key}:"):
                    return int(line.split()[1])
        except (OSError, ValueError):
            return None
        return None

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@contextmanager
def running_server(repository: Path, folder: Path, settings: argparse.Namespace) -> Iterator[Server]:
    """``trtpipe serve`` on 127.0.0.1 (HTTP and gRPC), batching on, under RLIMIT_AS; SIGTERM at the end."""
    limit = int(settings.memory_limit_gib * 2**30)

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    http_port, grpc_port = free_port(), free_port()
    command = [sys.executable, "-m", "trtpipe.cli", "serve", str(repository), "--host", HOST, "--port",
               str(http_port), "--grpc-port", str(grpc_port), "--batching", "--max-batch-size",
               str(settings.max_batch_size), "--max-body-mb", str(settings.max_body_mb), "--drain-s", "0",
               *shlex.split(settings.server_args)]
    log = folder / "server.log"
    # The server bounds malloc's arenas itself (trtpipe/serve/memory.py): it runs as a user runs it, without a
    # MALLOC_ARENA_MAX of the soak's. If it dies of a signal, faulthandler writes every thread's Python stack to
    # its log.
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | {"PYTHONFAULTHANDLER": "1"}
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env, preexec_fn=limit_memory)
    server = Server(process, http_port, grpc_port, log)
    try:
        _wait_ready(server)
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_ready(server: Server, seconds: float = 120) -> None:
    from trtpipe.tools.loopback import answers_ok

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise SystemExit(f"trtpipe serve exited with {server.process.returncode} before it was ready:\n"
                             f"{server.log_tail()}")
        if answers_ok(f"http://{HOST}:{server.http_port}/v2/health/ready"):
            return
        time.sleep(0.2)
    raise SystemExit(f"trtpipe serve was not ready within {seconds:g} s:\n{server.log_tail()}")


# -- the run ---------------------------------------------------------------------------------------------------------


@dataclass
class Record:
    kind: str
    case: str
    phase: str
    started: float
    seconds: float
    outcome: Outcome


@dataclass
class Soak:
    server: Server
    clients: Clients
    phase: str = "warmup"
    phase_started: dict[str, float] = field(default_factory=dict)
    phase_ended: dict[str, float] = field(default_factory=dict)
    records: list[Record] = field(default_factory=list)
    in_flight: dict[int, tuple[Case, float]] = field(default_factory=dict)
    rss_kb: dict[str, int] = field(default_factory=dict)  # highest VmRSS sampled per phase
    last_rss_kb: dict[str, int] = field(default_factory=dict)  # the last VmRSS sampled in each phase
    hwm_kb: int = 0  # the last VmHWM read: the peak, known even once the server has gone
    probes: dict[str, list[tuple[str, float]]] = field(default_factory=lambda: defaultdict(list))
    cases: list[Case] = field(default_factory=list)
    death: dict[str, Any] | None = None
    stopping: bool = False

    def begin(self, phase: str) -> None:
        now = time.monotonic()
        if self.phase in self.phase_started:
            self.phase_ended[self.phase] = now
        self.phase, self.phase_started[phase] = phase, now

    async def send(self, case: Case) -> None:
        phase, started = self.phase, time.monotonic()
        token = object()
        self.in_flight[id(token)] = (case, started)
        try:
            outcome = await case.send()
        except Exception as error:  # a client failure is reported as one, never a crash of the run
            outcome = Outcome(f"client error: {type(error).__name__}", str(error)[:400])
        finally:
            del self.in_flight[id(token)]
        self.records.append(Record(case.kind, case.name, phase, started, time.monotonic() - started, outcome))

    async def loop(self, cases: list[Case], offset: int, *, while_phase: str | None = None) -> None:
        """Send ``cases`` in turn from ``offset``, back to back (each case's pause after it), until the run stops
        or, with ``while_phase``, until that phase is over."""
        for case in itertools.islice(itertools.cycle(cases), offset, None):
            if self.stopping or (while_phase is not None and self.phase != while_phase):
                return
            await self.send(case)
            if case.pause_s:
                await asyncio.sleep(case.pause_s)

    async def monitor(self) -> None:
        """Every 0.5 s: the server's resident memory, and its readiness over HTTP with the probe's latency."""
        while not self.stopping:
            rss, hwm = self.server.status_kb("VmRSS"), self.server.status_kb("VmHWM")
            if rss is not None:
                self.rss_kb[self.phase] = max(self.rss_kb.get(self.phase, 0), rss)
                self.last_rss_kb[self.phase] = rss
            self.hwm_kb = max(self.hwm_kb, hwm or 0)
            phase, started = self.phase, time.monotonic()
            outcome = (await self.clients.post("/v2/health/ready", None, method="GET", pool=0))[0]
            self.probes[phase].append((outcome.label, time.monotonic() - started))
            await asyncio.sleep(0.5)

    async def watch(self) -> None:
        """Return when the server process has ended, noting the fault requests in flight when the first
        connection broke (a dying process stops answering before it is reaped) and the last ones answered
        before that."""
        while self.server.process.poll() is None:
            await asyncio.sleep(0.05)
        now = time.monotonic()
        broken = [r.started + r.seconds for r in self.records if _connection_lost(r.outcome)]
        moment = min([now, *broken])
        pending = [(case, started, None) for case, started in self.in_flight.values() if started <= moment]
        pending += [(self._case(r), r.started, r.outcome.label) for r in self.records
                    if r.started <= moment < r.started + r.seconds]
        before = [r for r in self.records if r.kind != "valid" and r.started + r.seconds < moment][-8:]
        self.death = {
            "phase": self.phase, "exit_code": self.server.process.returncode,
            "seconds_before_reaped": round(now - moment, 2),
            "in_flight": sorted(f"{case.kind}: {case.name} (sent {moment - started:.1f} s before; then "
                                f"{label or 'still unanswered'})"
                                for case, started, label in pending if case.kind != "valid"),
            "last_fault_answers": [f"{r.kind}: {r.case}: {r.outcome.label} {r.outcome.detail[:160]}".strip()
                                   for r in before]}
        print(f"trtpipe serve exited with {self.server.process.returncode} during the {self.phase} phase",
              flush=True)

    def _case(self, record: Record) -> Case:
        return next(c for c in self.cases if (c.kind, c.name) == (record.kind, record.case))


def _connection_lost(outcome: Outcome) -> bool:
    """Whether the connection broke or could not be made (as opposed to an answer from the server)."""
    return outcome.label.startswith("no answer") or any(
        words in outcome.detail for words in ("Connection reset", "Connection refused", "Connect call failed",
                                              "Stream removed", "failed to connect"))


async def drive(server: Server, settings: argparse.Namespace, models: dict[str, Path]) -> tuple[Soak, dict[str, Any]]:
    clients = Clients(server.http_port, server.grpc_port, settings, models)
    soak = Soak(server, clients)
    valid = clients.valid_cases()
    makers = {"malformed": clients.malformed_cases, "oversized": clients.oversized_cases,
              "memory": clients.memory_cases, "abandoned": clients.abandoned_cases}
    faults = {kind: makers[kind]() for kind in settings.fault_kinds}
    soak.cases = [*valid, *(case for cases in faults.values() for case in cases)]
    workers = {"malformed": 2, "oversized": 1, "memory": 1, "abandoned": 2}
    plan = {phase: share * settings.duration for phase, share in PHASES.items()}
    watcher = asyncio.ensure_future(soak.watch())
    monitor = asyncio.ensure_future(soak.monitor())
    valid_tasks = [asyncio.ensure_future(soak.loop(valid, i * len(valid) // settings.concurrency))
                   for i in range(settings.concurrency)]
    fault_tasks: list[asyncio.Future[None]] = []
    straggled_s = 0.0
    try:
        for phase, seconds in plan.items():
            soak.begin(phase)
            print(f"[{time.strftime('%H:%M:%S')}] {phase} ({seconds:.0f} s)", flush=True)
            if phase == "fault":
                fault_tasks = [asyncio.ensure_future(soak.loop(cases, i * len(cases) // workers[kind],
                                                               while_phase="fault"))
                               for kind, cases in faults.items() for i in range(workers[kind])]
            if phase == "settle":  # the fault clients stop after what they are sending now
                waited = time.monotonic()
                faults_done = asyncio.gather(*fault_tasks, return_exceptions=True)
                await asyncio.wait([faults_done, watcher], timeout=settings.request_timeout_s + 5,
                                   return_when=asyncio.FIRST_COMPLETED)
                straggled_s = time.monotonic() - waited
            await asyncio.wait([watcher], timeout=seconds)
            if watcher.done():
                break
            if phase == "baseline" and settings.attack_s > 0:
                await attack_phases(soak, clients.attack_cases(), settings, watcher)
                if watcher.done():
                    break
        soak.begin("end")
    finally:
        soak.stopping = True
        for task in fault_tasks:
            task.cancel()
        await asyncio.wait([monitor, *valid_tasks], timeout=settings.request_timeout_s + 5)
        metrics = ""
        if not watcher.done():
            watcher.cancel()
            metrics = (await clients.post("/metrics", None, method="GET", pool=0))[1].decode(errors="replace")
        await clients.close()
    return soak, {"bomb": getattr(clients, "bomb", {}), "fault_stragglers_s": straggled_s,
                  "server_metrics": server_counters(metrics)}


ATTACKERS = 6  # clients sending one attack at once, as in #56's hostile-client run
ATTACK = "attack: "  # the phase of each attack is named after its case


async def attack_phases(soak: Soak, attacks: list[Case], settings: argparse.Namespace,
                        watcher: asyncio.Future[None]) -> None:
    """Each attack in a phase of its own (``--attack-s`` seconds), ATTACKERS clients sending it back to back while
    the valid clients go on; the attackers of one finish what they sent (in a pause, not counted) before the next
    begins, so that each phase's valid latencies are that attack's alone."""
    for case in attacks:
        phase = case.name
        soak.begin(phase)
        print(f"[{time.strftime('%H:%M:%S')}] {phase} ({settings.attack_s:.0f} s, {ATTACKERS} clients)", flush=True)
        attackers = [asyncio.ensure_future(soak.loop([case], 0, while_phase=phase)) for _ in range(ATTACKERS)]
        await asyncio.wait([watcher], timeout=settings.attack_s)
        soak.begin("between attacks")
        await asyncio.wait([watcher, asyncio.gather(*attackers, return_exceptions=True)],
                           timeout=settings.request_timeout_s + 5, return_when=asyncio.FIRST_COMPLETED)
        if watcher.done():
            return


def server_counters(text: str) -> dict[str, float]:
    """The server's own counters from /metrics, summed over models: requests, failures by code, disconnects,
    dropped requests (whatever series the server has that end in _total)."""
    totals: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        match = re.match(r"^(trtpipe_\w+_total)(\{[^}]*\})? ([0-9.e+-]+)$", line)
        if not match:
            continue
        code = re.search(r'code="([^"]+)"', match[2] or "")
        totals[match[1] + (f"{{code={code[1]}}}" if code else "")] += float(match[3])
    return dict(totals)


# -- the report ------------------------------------------------------------------------------------------------------


def valid_figures(soak: Soak, phase: str, transport: str | None = None) -> dict[str, Any]:
    """The valid requests of ``phase``: counts, throughput, latency percentiles; of one transport ("HTTP",
    "gRPC") when given."""
    records = [r for r in soak.records if r.kind == "valid" and r.phase == phase
               and (transport is None or (" gRPC " in r.case) == (transport == "gRPC"))]
    seconds = soak.phase_ended.get(phase, time.monotonic()) - soak.phase_started.get(phase, time.monotonic())
    ok = [r for r in records if r.outcome.label in ("HTTP 200", "gRPC OK") and not r.outcome.wrong]
    latencies = sorted(r.seconds * 1000 for r in ok)
    return {"seconds": round(seconds, 1), "requests": len(records), "succeeded": len(ok),
            "success_rate": len(ok) / len(records) if records else 0.0,
            "throughput": len(ok) / seconds if seconds > 0 else 0.0,
            "p50_ms": float(np.percentile(latencies, 50)) if latencies else None,
            "p99_ms": float(np.percentile(latencies, 99)) if latencies else None,
            "answers": dict(Counter(r.outcome.label for r in records))}


def report(soak: Soak, extra: dict[str, Any], settings: argparse.Namespace, setup_s: float) -> dict[str, Any]:
    counted = [r for r in soak.records if r.phase != "warmup"]
    sent = Counter(r.kind for r in counted)
    classes = {kind: dict(Counter(answer_class(r.outcome.label) for r in counted if r.kind == kind))
               for kind in KINDS}
    cases: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    first: dict[tuple[str, str, str], Record] = {}  # the first record of each answer to a case
    for r in counted:
        label = r.outcome.label + (" (wrong answer)" if r.outcome.wrong else "")
        cases[(r.kind, r.case)][label] += 1
        first.setdefault((r.kind, r.case, label), r)
    documented = {(c.kind, c.name): c.documented for c in soak.cases}
    surprises = [{"kind": kind, "case": name, "answer": label, "count": n, "documented": list(documented[(kind, name)]),
                  "first": {"phase": first[(kind, name, label)].phase,
                            "body": first[(kind, name, label)].outcome.detail}}
                 for (kind, name), answers in cases.items() for label, n in answers.items()
                 if label not in documented[(kind, name)]]
    errors: dict[tuple[str, str, str, str], int] = Counter(
        (r.kind, r.case, r.outcome.label, r.outcome.detail) for r in soak.records if undocumented(r.outcome.label))
    failures: dict[tuple[str, str, str, str], int] = Counter(
        (r.phase, r.case, r.outcome.label, r.outcome.detail) for r in counted
        if r.kind == "valid" and (r.outcome.label not in ("HTTP 200", "gRPC OK") or r.outcome.wrong))
    baseline, recovery = valid_figures(soak, "baseline"), valid_figures(soak, "recovery")
    ratio = recovery["throughput"] / baseline["throughput"] if baseline["throughput"] else 0.0
    alive = soak.server.process.poll() is None
    recovered = (alive and ratio >= settings.min_recovery
                 and recovery["success_rate"] >= baseline["success_rate"] - 0.01)
    probes = {phase: {"probes": len(p), "ready": sum(label == "HTTP 200" for label, _ in p),
                      "max_ms": round(max((s for _, s in p), default=0.0) * 1000, 1)}
              for phase, p in soak.probes.items()}
    wrong = sum(r.outcome.wrong for r in soak.records)
    return {
        "machine": f"{cpu_model()}, {usable_cores()} cores", "date": time.strftime("%Y-%m-%d %H:%M"),
        "settings": {"duration_s": settings.duration, "concurrency": settings.concurrency,
                     "memory_limit_gib": settings.memory_limit_gib, "max_body_mb": settings.max_body_mb,
                     "max_batch_size": settings.max_batch_size, "server_args": settings.server_args,
                     "min_recovery": settings.min_recovery, "fault_kinds": list(settings.fault_kinds)},
        "setup_s": round(setup_s, 1), "memory_bomb": extra["bomb"], "fault_stragglers_s": round(
            extra["fault_stragglers_s"], 1),
        "sent": {kind: sent.get(kind, 0) for kind in KINDS}, "answers_by_class": classes,
        "cases": [{"kind": c.kind, "case": c.name, "answers": dict(cases[(c.kind, c.name)])} for c in soak.cases
                  if (c.kind, c.name) in cases],
        "outside_documented": surprises,
        "undocumented_server_errors": [{"kind": k, "case": c, "answer": label, "body": detail, "count": n}
                                       for (k, c, label, detail), n in errors.items()],
        "wrong_answers": wrong,
        "valid_failures": [{"phase": p, "case": c, "answer": label, "body": detail, "count": n}
                           for (p, c, label, detail), n in failures.items()],
        "peak_rss_mb": round(max(soak.hwm_kb, soak.server.status_kb("VmHWM") or 0) / 1024, 1),
        "rss_mb_by_phase": {phase: round(kb / 1024, 1) for phase, kb in soak.rss_kb.items()},
        "rss_mb_at_end_of_phase": {phase: round(kb / 1024, 1) for phase, kb in soak.last_rss_kb.items()},
        "readiness": probes, "server_metrics": extra["server_metrics"],
        "phases": {"baseline": baseline, "fault": valid_figures(soak, "fault"), "settle": valid_figures(soak, "settle"),
                   "recovery": recovery},
        "attacks": {phase: {transport: valid_figures(soak, phase, transport) for transport in ("HTTP", "gRPC")}
                    for phase in ["baseline", *(p for p in soak.phase_started if p.startswith(ATTACK))]},
        "recovery_throughput_ratio": round(ratio, 3), "recovered": recovered, "server_alive": alive,
        "server_died": soak.death,
        "aborts": int(bool(soak.death) and (soak.server.process.returncode or 0) < 0),  # killed by a signal
        "server_exit_code": None,  # set once it has stopped
    }


def print_report(figures: dict[str, Any], server_log_tail: str) -> None:
    s = figures["settings"]
    print(f"\nSoak of trtpipe serve on {figures['machine']}, {figures['date']}: {s['duration_s']:g} s of load "
          f"(+{figures['setup_s']:g} s setup), {s['concurrency']} valid clients, RLIMIT_AS "
          f"{s['memory_limit_gib']:g} GiB, --max-body-mb {s['max_body_mb']:g}, --max-batch-size "
          f"{s['max_batch_size']}, batching on. Memory bomb: {figures['memory_bomb']}.")
    print("\nRequests sent and answers by class (warm-up excluded):")
    for kind in KINDS:
        answers = ", ".join(f"{label} {n}" for label, n in sorted(figures["answers_by_class"][kind].items()))
        print(f"  {kind:<10} {figures['sent'][kind]:>7}  {answers}")
    print("\nAnswers per case:")
    for entry in figures["cases"]:
        answers = ", ".join(f"{label} {n}" for label, n in sorted(entry["answers"].items()))
        print(f"  {entry['kind']:<10} {entry['case']:<48} {answers}")
    print(f"\nAnswers outside what the README documents for the case: "
          f"{sum(e['count'] for e in figures['outside_documented'])}")
    for e in figures["outside_documented"]:
        print(f"  {e['count']}x {e['kind']}: {e['case']}: {e['answer']} (documented: {', '.join(e['documented'])}); "
              f"first in the {e['first']['phase']} phase: {e['first']['body'] or '-'}")
    errors = figures["undocumented_server_errors"]
    print(f"\nUndocumented server errors (HTTP 5xx but {', '.join(map(str, DOCUMENTED_5XX))}; gRPC "
          f"{', '.join(UNDOCUMENTED_GRPC)}): {sum(e['count'] for e in errors)}")
    for e in errors:
        print(f"  {e['count']}x {e['kind']}: {e['case']}: {e['answer']}: {e['body']}")
    print(f"Wrong answers to valid requests: {figures['wrong_answers']}")
    peak = figures["peak_rss_mb"]
    print(f"\nServer peak RSS (VmHWM): {peak:g} MB; highest sampled RSS "
          f"by phase (MB): {figures['rss_mb_by_phase']}")
    ends = figures["rss_mb_at_end_of_phase"]
    print(f"Memory given back: RSS {ends.get('recovery', '-')} MB at the end of the recovery phase, "
          f"{ends.get('baseline', '-')} MB at the end of the baseline")
    print("Readiness probes by phase (200s / probes, slowest): " + "; ".join(
        f"{phase} {p['ready']}/{p['probes']}, {p['max_ms']:g} ms" for phase, p in figures["readiness"].items()))
    print("Server log: " + ", ".join(f"{k} {v}" for k, v in figures.get("server_log", {}).items()))
    print("Server counters (/metrics): " + ", ".join(f"{k} {v:g}" for k, v in figures["server_metrics"].items()))
    print("\nValid requests (successes are 200/OK with the right outputs):")
    print("  phase        s  requests  succeeded  success   req/s   p50 ms   p99 ms")
    for phase, p in figures["phases"].items():
        p50 = f"{p['p50_ms']:.1f}" if p["p50_ms"] is not None else "-"
        p99 = f"{p['p99_ms']:.1f}" if p["p99_ms"] is not None else "-"
        print(f"  {phase:<9} {p['seconds']:>5g} {p['requests']:>9} {p['succeeded']:>10} {p['success_rate']:>8.2%} "
              f"{p['throughput']:>7.1f} {p50:>8} {p99:>8}")
    if len(figures["attacks"]) > 1:
        print(f"\nValid requests during each attack ({ATTACKERS} attackers) against the baseline, by transport "
              "(p50 / p99 ms, success):")
        for phase, by in figures["attacks"].items():
            cells = [f"{t} {_ms(f['p50_ms'])} / {_ms(f['p99_ms'])} ({f['succeeded']}/{f['requests']})"
                     for t, f in by.items()]
            print(f"  {phase.removeprefix(ATTACK):<48} {cells[0]:<32} {cells[1]}")
    if figures["valid_failures"]:
        print("  Valid requests not answered 200/OK with the right outputs:")
    for f in figures["valid_failures"]:
        print(f"    {f['count']}x {f['phase']}: {f['case']}: {f['answer']}: {f['body']}")
    rates = [figures["phases"][phase]["success_rate"] for phase in ("recovery", "baseline")]
    print(f"\nCapacity recovered: {'yes' if figures['recovered'] else 'NO'} (recovery throughput "
          f"{figures['recovery_throughput_ratio']:.2f}x the baseline's, needed {s['min_recovery']:g}x; success rate "
          f"{rates[0]:.2%} against {rates[1]:.2%}); server alive at the end: "
          f"{'yes' if figures['server_alive'] else 'NO'}; exit code after SIGTERM: {figures['server_exit_code']}")
    print(f"Server aborts (killed by a signal): {figures['aborts']}")
    death = figures["server_died"]
    if death:
        print(f"\nThe server DIED during the {death['phase']} phase (exit code {death['exit_code']}; the first "
              f"connection broke {death['seconds_before_reaped']:g} s before it was reaped). Fault requests in flight "
              "when it broke:")
        for line in death["in_flight"]:
            print(f"  {line}")
        print("Last fault requests answered before:")
        for line in death["last_fault_answers"]:
            print(f"  {line}")
    if death or errors:
        print(f"\nServer log (last lines):\n{server_log_tail}")


def _ms(value: float | None) -> str:
    return f"{value:.1f}" if value is not None else "-"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--duration", type=float, default=180.0,
                        help="Seconds of load in all: 5%% warm-up, 25%% baseline, 40%% faults, 5%% settle, 25%% "
                             "recovery (model building and server start come on top: a few seconds).")
    parser.add_argument("--concurrency", type=int, default=8, help="Clients sending valid requests back to back.")
    parser.add_argument("--memory-limit-gib", type=float, default=1.3,
                        help="The server's RLIMIT_AS (1.3 GiB: the 1.4e9 bytes under which gRPC used to abort it).")
    parser.add_argument("--max-body-mb", type=float, default=64.0, help="The server's --max-body-mb.")
    parser.add_argument("--max-batch-size", type=int, default=32, help="The server's --max-batch-size.")
    parser.add_argument("--server-args", default="", help="More `trtpipe serve` options, e.g. '--timeout-ms 5000'.")
    parser.add_argument("--request-timeout-s", type=float, default=60.0, help="Client timeout per request.")
    parser.add_argument("--min-recovery", type=float, default=0.7,
                        help="Recovery-phase valid throughput needed, as a fraction of the baseline's.")
    parser.add_argument("--fault-kinds", type=lambda text: tuple(text.split(",")), default=KINDS[1:],
                        help="Which faults the fault phase sends, comma-separated (e.g. 'malformed' alone: what the "
                             "valid requests' latency pays for the malformed mix, without the memory bombs).")
    parser.add_argument("--attack-s", type=float, default=10.0,
                        help="Seconds of each attack of #56 after the baseline, sent by 6 clients while the valid "
                             "clients run (0: none; they stay in the malformed mix). Comes on top of --duration.")
    parser.add_argument("--json", type=Path, help="Write the figures to this file.")
    parser.add_argument("--keep", action="store_true", help="Keep the model repository and the server log.")
    settings = parser.parse_args(argv)
    if settings.duration <= 0 or settings.concurrency < 1 or settings.memory_limit_gib <= 0:
        parser.error("--duration and --memory-limit-gib must be positive, --concurrency at least 1")
    if not settings.fault_kinds or not set(settings.fault_kinds) <= set(KINDS[1:]):
        parser.error(f"--fault-kinds takes some of {', '.join(KINDS[1:])}")
    return settings


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    started = time.monotonic()
    folder = Path(tempfile.mkdtemp(prefix="trtpipe-soak-"))
    repository = folder / "repository"
    models = {"tinyconv": tinyconv(repository), "resnetish": resnetish(repository), "spread": spread(repository)}
    sizes = ", ".join(f"{name} {path.stat().st_size / 2**20:.1f} MB" for name, path in models.items())
    print(f"Models in {repository}: {sizes}", flush=True)
    with running_server(repository, folder, settings) as server:
        print(f"trtpipe serve pid {server.pid}: http://{HOST}:{server.http_port}, gRPC {HOST}:{server.grpc_port}, "
              f"log {server.log}", flush=True)
        setup_s = time.monotonic() - started
        soak, extra = asyncio.run(drive(server, settings, models))
        figures = report(soak, extra, settings, setup_s)
    figures["server_exit_code"] = server.process.returncode
    log = server.log.read_text(errors="replace")
    figures["server_log"] = {what: len(re.findall(pattern, log)) for what, pattern in LOG_LINES.items()}
    print_report(figures, server.log_tail())
    if settings.json:
        settings.json.write_text(json.dumps(figures, indent=2) + "\n")
    failed = bool(figures["undocumented_server_errors"] or figures["wrong_answers"] or not figures["recovered"]
                  or figures["server_died"])
    if settings.keep or failed:
        print(f"\nRepository and server log kept in {folder}")
    else:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
    print(f"\nSoak {'FAILED' if failed else 'passed'} in {time.monotonic() - started:.0f} s.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
