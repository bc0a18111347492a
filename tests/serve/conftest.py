"""A real server on a loopback port, over a small repository: the digits model, its TensorRT-target INT8 and
one corrupt model that must be reported not ready while the others serve."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trtpipe.tools.loopback import free_port


def fake_engine(folder: Path, name: str = "resnet.plan") -> Path:
    """A plan file with the sidecar trtpipe writes for it (profile 1/8/64 at 3x224x224): enough for export-triton,
    which reads only the sidecar (no TensorRT here to read the plan itself)."""
    import hashlib
    import json

    engine = folder / name
    engine.write_bytes(b"engine")
    sidecar = {"schema": "trtpipe.engine/1", "tensorrt_version": "10.13.0.35", "gpu_name": "H100",
               "compute_capability": "9.0", "engine_sha256": hashlib.sha256(b"engine").hexdigest(),
               "inputs": [{"name": "input", "dtype": "float32", "shape": [-1, 3, 224, 224]}],
               "outputs": [{"name": "output", "dtype": "float32", "shape": [-1, 1000]}],
               "profiles": [[{"input": "input", "min": [1, 3, 224, 224], "opt": [8, 3, 224, 224],
                              "max": [64, 3, 224, 224]}]]}
    Path(f"{engine}.json").write_text(json.dumps(sidecar))
    return engine


@pytest.fixture(scope="session")
def repository(tmp_path_factory: pytest.TempPathFactory, digits_onnx: Path) -> Path:
    from trtpipe.optimize import OptimizeOptions, optimize

    repo = tmp_path_factory.mktemp("repo")
    for name in ("digits", "broken", "digits_int8_trt"):
        (repo / name / "1").mkdir(parents=True)
    shutil.copy(digits_onnx, repo / "digits" / "1" / "model.onnx")
    (repo / "broken" / "1" / "model.onnx").write_bytes(b"this is not an ONNX file")
    optimize(digits_onnx, repo / "digits_int8_trt" / "1" / "model.onnx",
             OptimizeOptions(precision="int8", target="tensorrt", calib="digits", calib_samples=64))
    return repo


class RunningServer:
    def __init__(self, repository: Path, **batching: object) -> None:
        import uvicorn

        from trtpipe.serve.options import ServeOptions
        from trtpipe.serve.server import build_app

        self.grpc_port = free_port()
        self.grpc_url = f"127.0.0.1:{self.grpc_port}"
        options = ServeOptions(max_body_mb=1_000_000 / 2**20, timeout_ms=30_000, grpc_port=self.grpc_port,
                               **batching)  # type: ignore[arg-type]
        self.app, self.models = build_app(repository, options)
        # A port that was free when chosen can be taken before uvicorn binds it (free_port can also hand back the
        # gRPC port, which the app binds only when it starts): a failed bind ends the server's thread, and the next
        # attempt takes another port.
        for _ in range(5):
            self.port = free_port()
            if self.port == self.grpc_port:
                continue
            self.url = f"127.0.0.1:{self.port}"
            self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port,
                                                        log_level="error"))
            self.thread = threading.Thread(target=self.server.run, daemon=True)
            self.thread.start()
            deadline = time.time() + 30
            while not self.server.started and self.thread.is_alive() and time.time() < deadline:
                time.sleep(0.05)
            if self.server.started:
                return
        raise RuntimeError("server did not start")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[RunningServer]:
    running = RunningServer(repository, max_batch_size=16, max_queue_delay_ms=2.0)
    yield running
    running.stop()


class HeldLookup:
    """A server of the lookup model (tests/builders.py) whose batcher is held inside the model on each request
    until ``release`` is set (events, no clock): a request sent meanwhile waits in the queue. ``ran`` lists the
    values the model was run on; ``sample`` reads one of the model's Prometheus series."""

    def __init__(self, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        from tests.builders import lookup

        lookup(folder)
        self.server = RunningServer(folder, max_queue_delay_ms=0)  # each request runs as soon as the worker is free
        self.inside, self.release = threading.Event(), threading.Event()
        self.ran: list[float] = []
        batcher = self.server.models["lookup"]["1"].batcher
        assert batcher is not None
        self.batcher = batcher
        model_run = batcher._run

        def held(arrays: list[Any]) -> list[Any]:
            self.ran.append(float(arrays[0][0, 0]))
            self.inside.set()
            self.release.wait(30)
            return model_run(arrays)

        monkeypatch.setattr(batcher, "_run", held)
        self.registry = self.server.app.state.metrics.registry

    def sample(self, name: str) -> float:
        return self.registry.get_sample_value(name, {"model": "lookup"}) or 0.0


@pytest.fixture
def held_lookup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HeldLookup]:
    held = HeldLookup(tmp_path, monkeypatch)
    yield held
    held.release.set()
    held.server.stop()
