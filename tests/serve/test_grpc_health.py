"""HTTP health answers while gRPC is busy: the gRPC service runs on an event loop of its own, so that what gRPC does
on its loop (turning a large message into bytes takes a few hundred milliseconds of a 60 MiB one) never holds up
/v2/health/live and /v2/health/ready. Figures under load: docs/results/serving-memory.md."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.optional import optional
from tests.serve.conftest import RunningServer
from trtpipe.serve.grpc.service import GrpcEndpoints

triton_grpc = optional("tritonclient.grpc")

HELD_S = 5.0  # how long the gRPC call holds its event loop
BOUND_S = 2.0  # a liveness probe's answer within this, meanwhile (orchestrators give it about 1 s)


def test_health_answers_while_a_grpc_call_holds_its_event_loop(repository: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A ModelInfer whose handler holds its event loop for HELD_S (as a large message's conversion does, for a
    shorter time): HTTP's live and ready answer within BOUND_S meanwhile, and the call then completes."""
    entered = threading.Event()
    original: Callable[..., Any] = GrpcEndpoints.ModelInfer

    async def holding(self: Any, request: Any, context: Any) -> Any:
        entered.set()
        time.sleep(HELD_S)  # blocks the loop this handler runs on
        return await original(self, request, context)

    monkeypatch.setattr(GrpcEndpoints, "ModelInfer", holding)
    server = RunningServer(repository, batching=False)
    results: list[Any] = []

    def infer() -> None:
        tensor = triton_grpc.InferInput("input", [1, 1, 32, 32], "FP32")
        tensor.set_data_from_numpy(np.zeros((1, 1, 32, 32), np.float32))
        results.append(triton_grpc.InferenceServerClient(server.grpc_url).infer("digits", [tensor]))

    sender = threading.Thread(target=infer)
    sender.start()
    try:
        assert entered.wait(30), "the ModelInfer call never reached its handler"
        for path in ("/v2/health/live", "/v2/models/digits/ready"):
            started = time.monotonic()
            answer = httpx.get(f"http://{server.url}{path}", timeout=BOUND_S)
            assert answer.status_code == 200 and time.monotonic() - started < BOUND_S
        assert sender.is_alive(), "the gRPC call was not held while health was asked"
    finally:
        sender.join(60)
        server.stop()
    assert results and results[0].as_numpy("output").shape == (1, 10)
