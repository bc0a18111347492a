"""AdaRound on tiny graphs: the layer it optimises is the layer ONNX Runtime runs (same output), every learned
integer is the floor or the ceiling of weight / scale, and the learned rounding reproduces FP32 better than
rounding to nearest, on both targets' Q/DQ."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import helper, numpy_helper

from tests.builders import x_to_y
from tests.optimize.conftest import run
from trtpipe.optimize.int8.calibration.calibrate import calibrate
from trtpipe.optimize.int8.qdq.profiles import profile_for
from trtpipe.optimize.int8.qdq.quantize import quantize
from trtpipe.optimize.int8.steps.adaround.algorithm import _layer_function, adaround, rounded_layers
from trtpipe.vocab import CalibMethod, Target

RNG = np.random.default_rng(2)


def _strided_grouped_classifier() -> onnx.ModelProto:
    """Conv 3->8 stride 2 with uneven pads -> Clip(0, 6) -> grouped Conv -> Relu -> Flatten -> Gemm 128->5."""
    inits = [numpy_helper.from_array(a, n) for a, n in (
        (RNG.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3, "w1"),
        (RNG.standard_normal(8).astype(np.float32) * 0.1, "b1"),
        (RNG.standard_normal((8, 2, 3, 3)).astype(np.float32) * 0.3, "w2"),
        (RNG.standard_normal((5, 128)).astype(np.float32) * 0.1, "w3"),
        (RNG.standard_normal(5).astype(np.float32), "b3"),
        (np.array(0, np.float32), "lo"), (np.array(6, np.float32), "hi"))]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", strides=[2, 2], pads=[0, 0, 1, 1]),
        helper.make_node("Clip", ["c1", "lo", "hi"], ["a1"], name="relu6"),
        helper.make_node("Conv", ["a1", "w2"], ["c2"], name="grouped", pads=[1, 1, 1, 1], group=4),
        helper.make_node("Relu", ["c2"], ["a2"], name="relu"),
        helper.make_node("Flatten", ["a2"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["y"], name="fc", transB=1),
    ]
    return x_to_y(nodes, inits, ["n", 3, 8, 8], ["n", 5], opset=18)


def test_layer_function_reproduces_onnxruntime() -> None:
    """The torch function AdaRound differentiates is exactly the ONNX node (and the activation after it)."""
    model = _strided_grouped_classifier()
    nodes = {n.name: n for n in model.graph.node}
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    x = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32) * 4
    constants = {name: value.copy() for name, value in constants.items()}
    truncated = onnx.ModelProto()
    truncated.CopyFrom(model)
    del truncated.graph.output[:]
    truncated.graph.output.append(helper.make_empty_tensor_value_info("a1"))
    fn = _layer_function(nodes["conv1"], nodes["relu6"], constants)
    ours = fn(torch.from_numpy(x), torch.from_numpy(constants["w1"]), torch.from_numpy(constants["b1"])).numpy()
    np.testing.assert_allclose(ours, run(truncated, x), rtol=1e-5, atol=1e-5)
    assert ours.max() == pytest.approx(6.0)  # the clip is part of it


@pytest.mark.parametrize("target", [Target.TENSORRT, Target.CPU])
def test_learned_rounding_beats_nearest(target: Target) -> None:
    model = _strided_grouped_classifier()
    calib = [RNG.standard_normal((16, 3, 8, 8)).astype(np.float32) for _ in range(4)]
    profile = profile_for(target)
    ranges = calibrate(model, calib, CalibMethod.MINMAX, symmetric=profile.symmetric_activations)
    nearest = quantize(model, ranges, profile)
    learned, flipped = adaround(model, nearest, calib, iterations=300)
    assert set(flipped) == {"conv1", "grouped", "fc"}
    fp32 = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for layer in rounded_layers(learned):
        ints = {t.name: numpy_helper.to_array(t) for t in learned.graph.initializer}
        weight_name = {"conv1": "w1", "grouped": "w2", "fc": "w3"}[layer.node.name]
        shape = [1] * fp32[weight_name].ndim
        shape[layer.axis] = -1
        ratio = fp32[weight_name] / ints[layer.scale].reshape(shape)
        chosen = ints[layer.integers].astype(np.float64)
        nearest_ints = {t.name: numpy_helper.to_array(t) for t in nearest.graph.initializer}[layer.integers]
        limit = np.abs(nearest_ints.astype(np.int64)).max()  # 127, or 64 for the cpu target's 7-bit weights
        assert np.abs(chosen).max() <= limit
        assert np.all((chosen == np.floor(ratio)) | (chosen == np.ceil(ratio)) | (np.abs(chosen) == limit))
    assert any(share > 0 for share in flipped.values())  # it did change some roundings
    x = np.concatenate(calib)
    reference = run(model, x)
    error = {name: np.mean((run(m, x, "disable") - reference) ** 2) for name, m in
             (("nearest", nearest), ("learned", learned))}
    assert error["learned"] < 0.8 * error["nearest"]


def test_option_records_what_it_did(digits_onnx: Path, tmp_path: Path) -> None:
    from trtpipe.artifact.records.manifest import read_manifest
    from trtpipe.optimize.options import OptimizeOptions
    from trtpipe.optimize.stage import optimize

    out = tmp_path / "ada.onnx"
    optimize(digits_onnx, out, OptimizeOptions(precision="int8", target=Target.TENSORRT, calib="digits",
                                               calib_samples=16, adaround=True, adaround_iterations=20))
    manifest = read_manifest(out)
    assert manifest is not None
    section = manifest.details["int8"]["adaround"]
    assert section["layers"] > 0 and section["samples"] == 16 and section["iterations"] == 20
    assert len(section["flipped_share"]) == section["layers"]
    assert all(0 <= share <= 1 for share in section["flipped_share"].values())
    assert manifest.details["int8"]["final"]["top1_agreement"] > 0.9
