"""What `export-triton` writes, served by a real Triton Inference Server (the binary nvidia-pytriton ships).

The Python-backend export of the digits model (FP32, CPU INT8, TensorRT-target INT8) answers over HTTP and gRPC
exactly as ``trtpipe.load(...).predict`` does, Triton's dynamic batcher really groups requests, and the native
export's configs pass Triton's own validation (its only complaint here: no onnxruntime/tensorrt backend).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

import trtpipe
from tests.serve.conftest import fake_engine
from trtpipe.serve.options import ServeOptions
from trtpipe.serve.repository.triton import export
from trtpipe.tools.tritonserver import TritonServer, unavailable
from trtpipe.vocab import TritonBackend

REASON = unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"no runnable Triton server: {REASON}")
MODELS = ("digits", "digits_int8_cpu", "digits_int8_trt")


@pytest.fixture(scope="module")
def artifacts(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The served artifacts, each with its manifest beside it."""
    from trtpipe.optimize import OptimizeOptions, optimize

    cpu_int8 = tmp_path_factory.mktemp("cpu_int8") / "model.onnx"
    optimize(repository / "digits" / "1" / "model.onnx", cpu_int8,
             OptimizeOptions(precision="int8", target="cpu", calib="digits", calib_samples=64))
    return {"digits": repository / "digits" / "1" / "model.onnx", "digits_int8_cpu": cpu_int8,
            "digits_int8_trt": repository / "digits_int8_trt" / "1" / "model.onnx"}


@pytest.fixture(scope="module")
def triton(artifacts: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    folder = tmp_path_factory.mktemp("triton")
    export(artifacts, folder / "repository", ServeOptions(triton_backend=TritonBackend.PYTHON, threads=1,
                                                           max_batch_size=16, max_queue_delay_ms=20))
    with TritonServer(folder / "repository", folder / "tritonserver.log") as server:
        yield server


def _inputs(batch: int, seed: int = 0) -> np.ndarray:
    from trtpipe.models.loader import load_model

    images = load_model("digits_resnet").evaluation_data().images  # type: ignore[union-attr]
    return np.ascontiguousarray(images[seed * batch:(seed + 1) * batch], dtype=np.float32)


@pytest.mark.parametrize("name", MODELS)
def test_http_and_grpc_answer_as_trtpipe_load(triton: TritonServer, artifacts: dict[str, Path], name: str) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    x = _inputs(5)
    with trtpipe.load(artifacts[name]) as model:
        expected = model.predict(x)
    for client_module, client in ((httpclient, httpclient.InferenceServerClient(triton.http_url[len("http://"):])),
                                  (grpcclient, grpcclient.InferenceServerClient(triton.grpc_url))):
        tensor = client_module.InferInput("input", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        got = client.infer(name, [tensor]).as_numpy("output")
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
        assert (got.argmax(1) == expected.argmax(1)).all()


def test_dynamic_batching_groups_concurrent_requests(triton: TritonServer, artifacts: dict[str, Path]) -> None:
    """32 single-image requests at once: Triton's statistics show fewer executions than inferences, and every
    answer is its own image's (the Python model splits the batch back in order)."""
    import tritonclient.http as httpclient

    def stats() -> dict[str, int]:
        entry = httpx.get(f"{triton.http_url}/v2/models/digits/stats").json()["model_stats"][0]
        return {"inferences": int(entry["inference_count"]), "executions": int(entry["execution_count"])}

    images = _inputs(32, seed=1)
    with trtpipe.load(artifacts["digits"]) as model:
        expected = model.predict(images)
    before = stats()
    client = httpclient.InferenceServerClient(triton.http_url[len("http://"):], concurrency=32)

    pending = []
    for index in range(32):  # all sent before any answer is read (the client's own greenlet pool)
        tensor = httpclient.InferInput("input", [1, 1, 32, 32], "FP32")
        tensor.set_data_from_numpy(images[index:index + 1])
        pending.append(client.async_infer("digits", [tensor]))
    answers = np.stack([request.get_result().as_numpy("output")[0] for request in pending])
    after = stats()
    assert after["inferences"] - before["inferences"] == 32
    assert after["executions"] - before["executions"] < 32
    np.testing.assert_allclose(answers, expected, rtol=1e-5, atol=1e-5)


def test_a_malformed_request_gets_400_and_the_model_keeps_serving(triton: TritonServer) -> None:
    url = f"{triton.http_url}/v2/models/digits/infer"
    wrong_shape = {"inputs": [{"name": "input", "shape": [1, 5], "datatype": "FP32", "data": [0.0] * 5}]}
    answer = httpx.post(url, json=wrong_shape)
    assert answer.status_code == 400 and "unexpected shape" in answer.json()["error"]
    good = {"inputs": [{"name": "input", "shape": [1, 1, 32, 32], "datatype": "FP32",
                        "data": _inputs(1).ravel().tolist()}]}
    assert httpx.post(url, json=good).status_code == 200


def test_trtpipe_loadtest_drives_triton_and_reads_its_cpu(triton: TritonServer) -> None:
    """The binary-tensor requests of `trtpipe loadtest` are Triton's too: `make loadtest` compares like with like,
    and the CPU it reports covers the server and its Python-backend stubs."""
    from trtpipe.tools.loadtest import run_loadtest

    assert triton.process is not None
    report = run_loadtest(triton.http_url, "digits", [1, 4], duration_s=0.5, warmup_s=0.2,
                          server_pid=triton.process.pid)
    for level in report["results"]:
        assert level["requests"] > 0 and level["errors"] == 0
        assert level["server_cpu_cores"] > 0


def test_native_export_passes_triton_validation(artifacts: dict[str, Path], tmp_path: Path) -> None:
    """Loaded one by one with explicit model control: Triton's only complaint about each native config is the
    backend library this build lacks. A config Triton finds wrong (a preferred batch size above the maximum) is
    refused for that instead, so the check can fail."""
    repository = tmp_path / "native"
    export({"digits": artifacts["digits"], "digits_int8_cpu": artifacts["digits_int8_cpu"],
            "resnet": fake_engine(tmp_path)}, repository, ServeOptions(instances=2))
    shutil.copytree(repository / "digits", repository / "broken_config")
    config = (repository / "broken_config" / "config.pbtxt").read_text()
    (repository / "broken_config" / "config.pbtxt").write_text(
        config.replace('name: "digits"', 'name: "broken_config"').replace("preferred_batch_size: 8",
                                                                           "preferred_batch_size: 64"))
    with TritonServer(repository, tmp_path / "tritonserver.log", explicit=True) as server:
        def load(name: str) -> httpx.Response:
            return httpx.post(f"{server.http_url}/v2/repository/models/{name}/load", timeout=60)

        for name, backend in (("digits", "onnxruntime"), ("digits_int8_cpu", "onnxruntime"), ("resnet", "tensorrt")):
            answer = load(name)
            assert answer.status_code == 400, answer.text
            assert f"unable to find backend library for backend '{backend}'" in answer.json()["error"], answer.text
        assert load("broken_config").status_code != 200
        assert "preferred size must be <= max batch size for broken_config" in server.log.read_text()
