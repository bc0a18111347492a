"""An ONNX file from elsewhere (no trtpipe manifest) placed in a repository is served with the inputs and outputs
its graph declares: several inputs, a uint8 one, dynamic height and width, a scalar beside a batched tensor."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.optional import optional
from tests.serve.conftest import RunningServer

triton = optional("tritonclient.http")


def _save(model: onnx.ModelProto, path: Path) -> None:
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    path.parent.mkdir(parents=True)
    onnx.save(model, str(path))


def _pixels_model() -> onnx.ModelProto:
    """uint8 pixels [N, 3, H, W] (H and W dynamic) and a float gain [N, 1] -> per-channel means times the gain,
    and the per-channel maxima: two inputs of two dtypes, two outputs, as a preprocessing-included export has."""
    nodes = [helper.make_node("Cast", ["pixels"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("ReduceMean", ["f", "axes"], ["mean"], keepdims=0),
             helper.make_node("Mul", ["mean", "gain"], ["scores"]),
             helper.make_node("ReduceMax", ["f", "axes"], ["peak"], keepdims=0)]
    graph = helper.make_graph(
        nodes, "elsewhere",
        [helper.make_tensor_value_info("pixels", TensorProto.UINT8, ["batch", 3, "height", "width"]),
         helper.make_tensor_value_info("gain", TensorProto.FLOAT, ["batch", 1])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 3]),
         helper.make_tensor_value_info("peak", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(np.array([2, 3], np.int64), "axes")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="elsewhere")


def _threshold_model() -> onnx.ModelProto:
    """x [N, 4] and a scalar threshold: a model whose inputs do not all have a batch axis."""
    nodes = [helper.make_node("Greater", ["x", "threshold"], ["above"]),
             helper.make_node("Cast", ["above"], ["mask"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "threshold",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4]),
                               helper.make_tensor_value_info("threshold", TensorProto.FLOAT, [])],
                              [helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("elsewhere")
    _save(_pixels_model(), repo / "pixels" / "1" / "model.onnx")
    _save(_threshold_model(), repo / "threshold" / "1" / "model.onnx")
    running = RunningServer(repo, max_batch_size=8, max_queue_delay_ms=20.0)  # a wide window: requests do meet
    yield running
    running.stop()


def _expected(pixels: np.ndarray, gain: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    values = pixels.astype(np.float32)
    return values.mean((2, 3)) * gain, values.max((2, 3))


def test_metadata_comes_from_the_graph(server: RunningServer) -> None:
    client = triton.InferenceServerClient(server.url)
    assert client.is_server_ready()
    metadata = client.get_model_metadata("pixels")
    assert metadata["inputs"] == [{"name": "pixels", "datatype": "UINT8", "shape": [-1, 3, -1, -1]},
                                  {"name": "gain", "datatype": "FP32", "shape": [-1, 1]}]
    assert [o["name"] for o in metadata["outputs"]] == ["scores", "peak"]
    assert client.get_model_metadata("threshold")["inputs"][1] == {"name": "threshold", "datatype": "FP32",
                                                                   "shape": []}


@pytest.mark.parametrize("binary", [False, True])
def test_uint8_and_float_inputs_by_name(server: RunningServer, binary: bool) -> None:
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (2, 3, 5, 7), dtype=np.uint8)
    gain = np.array([[1.0], [0.5]], np.float32)
    inputs = [triton.InferInput("pixels", list(pixels.shape), "UINT8"), triton.InferInput("gain", [2, 1], "FP32")]
    inputs[0].set_data_from_numpy(pixels, binary_data=binary)
    inputs[1].set_data_from_numpy(gain, binary_data=binary)
    result = triton.InferenceServerClient(server.url).infer("pixels", inputs)
    scores, peak = _expected(pixels, gain)
    np.testing.assert_allclose(result.as_numpy("scores"), scores, rtol=1e-5)
    np.testing.assert_array_equal(result.as_numpy("peak"), peak)


def test_requests_of_other_sizes_never_share_a_batch(server: RunningServer) -> None:
    """Dynamic height and width: concurrent requests of three sizes are batched by size, each answered right."""
    def infer(index: int) -> tuple[int, list[float], list[float]]:
        side = 4 + 4 * (index % 3)
        pixels = np.full((1, 3, side, side + 1), index, np.uint8)
        body = {"inputs": [{"name": "pixels", "shape": list(pixels.shape), "datatype": "UINT8",
                            "data": pixels.ravel().tolist()},
                           {"name": "gain", "shape": [1, 1], "datatype": "FP32", "data": [2.0]}]}
        response = httpx.post(f"http://{server.url}/v2/models/pixels/infer", json=body, timeout=30)
        outputs = {o["name"]: o["data"] for o in response.json().get("outputs", [])}
        return response.status_code, outputs.get("scores", []), outputs.get("peak", [])

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(infer, range(12)))
    assert [a[0] for a in answers] == [200] * 12, answers
    for index, (_, scores, peak) in enumerate(answers):
        assert scores == [2.0 * index] * 3 and peak == [float(index)] * 3


def test_a_scalar_input_beside_a_batched_one(server: RunningServer) -> None:
    """Requests are not joined where an input has no batch axis: each runs alone, with its own threshold."""
    def infer(threshold: float) -> list[float]:
        body = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [0.0, 1.0, 2.0, 3.0]},
                           {"name": "threshold", "shape": [], "datatype": "FP32", "data": [threshold]}]}
        response = httpx.post(f"http://{server.url}/v2/models/threshold/infer", json=body, timeout=30)
        assert response.status_code == 200, response.text
        return list(response.json()["outputs"][0]["data"])

    with ThreadPoolExecutor(4) as pool:
        masks = list(pool.map(infer, [0.5, 1.5, 2.5, -1.0]))
    assert masks == [[0, 1, 1, 1], [0, 0, 1, 1], [0, 0, 0, 1], [1, 1, 1, 1]]
