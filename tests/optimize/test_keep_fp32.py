"""Taking nodes of a quantized model back to FP32 by surgery: all of them gives the FP32 model back; on the
tensorrt target a mix equals what ONNX Runtime's quantizer writes when told to exclude those nodes; on the cpu
target the other layers keep their INT8 kernels; what was learned for the other layers is kept."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from tests.builders import cpu_optimized_ops, minmax_int8, x_to_y
from tests.optimize.conftest import run
from trtpipe.optimize.int8.calibration.calibrate import calibrate
from trtpipe.optimize.int8.qdq.keep_fp32 import keep_in_fp32
from trtpipe.optimize.int8.qdq.profiles import profile_for
from trtpipe.optimize.int8.qdq.quantize import quantize
from trtpipe.optimize.int8.steps.adaround.algorithm import adaround
from trtpipe.optimize.int8.steps.budget.fallback_units import fallback_units
from trtpipe.vocab import CalibMethod, Target

RNG = np.random.default_rng(5)


def _residual_depthwise_classifier() -> onnx.ModelProto:
    """Conv -> ReLU6 -> depthwise Conv -> Relu -> 1x1 Conv -> + ReLU6 output (residual) -> ReduceMean -> Gemm."""
    inits = [numpy_helper.from_array(a, n) for a, n in (
        (RNG.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.4, "w1"),
        (RNG.standard_normal(8).astype(np.float32) * 0.1, "b1"),
        (RNG.standard_normal((8, 1, 3, 3)).astype(np.float32) * 0.4, "w2"),
        (RNG.standard_normal(8).astype(np.float32) * 0.1, "b2"),
        (RNG.standard_normal((8, 8, 1, 1)).astype(np.float32) * 0.4, "w3"),
        (RNG.standard_normal((5, 8)).astype(np.float32) * 0.3, "w4"),
        (RNG.standard_normal(5).astype(np.float32), "b4"),
        (np.array(0, np.float32), "lo"), (np.array(6, np.float32), "hi"), (np.array([2, 3], np.int64), "axes"))]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["c1", "lo", "hi"], ["a1"], name="relu6"),
        helper.make_node("Conv", ["a1", "w2", "b2"], ["c2"], name="depthwise", pads=[1, 1, 1, 1], group=8),
        helper.make_node("Relu", ["c2"], ["a2"], name="relu"),
        helper.make_node("Conv", ["a2", "w3"], ["c3"], name="project"),
        helper.make_node("Add", ["c3", "a1"], ["s"], name="residual"),
        helper.make_node("ReduceMean", ["s", "axes"], ["m"], name="pool", keepdims=0),
        helper.make_node("Gemm", ["m", "w4", "b4"], ["y"], name="fc", transB=1),
    ]
    return x_to_y(nodes, inits, ["n", 3, 8, 8], ["n", 5], opset=18)


def _quantized(target: Target) -> tuple[onnx.ModelProto, onnx.ModelProto, list[np.ndarray]]:
    model = _residual_depthwise_classifier()
    calib = [RNG.standard_normal((16, 3, 8, 8)).astype(np.float32) * 2 for _ in range(2)]
    profile = profile_for(target)
    return model, minmax_int8(model, calib, profile, symmetric=profile.symmetric_activations), calib


@pytest.mark.parametrize("target", [Target.TENSORRT, Target.CPU])
def test_every_node_back_in_fp32_is_the_fp32_model(target: Target) -> None:
    """Folded activations come back and quantized outputs (cpu) are read as floats again: nothing of INT8 is left."""
    model, quantized, calib = _quantized(target)
    profile = profile_for(target)
    nodes = [n for unit in fallback_units(model, profile, quantized) for n in unit]
    assert {"conv1", "depthwise", "project", "fc"} <= set(nodes)
    back = keep_in_fp32(quantized, model, nodes, profile)
    onnx.checker.check_model(back, full_check=True)
    assert not {n.op_type for n in back.graph.node} & {"QuantizeLinear", "DequantizeLinear"}
    x, level = calib[0], "disable" if profile.measured_as_written else "all"
    assert np.abs(run(quantized, x, level) - run(model, x)).max() > 1e-3  # INT8 differs
    np.testing.assert_allclose(run(back, x, level), run(model, x), rtol=1e-5, atol=1e-5)


def test_tensorrt_mix_equals_the_quantizer_excluding_those_nodes() -> None:
    """The reference: ONNX Runtime's quantizer writing the same mix from scratch. (Where a unit does not hold
    every reader of a tensor, that quantizer still feeds it the tensor's Q/DQ; the surgery reads the float, so
    only units that do are compared.)"""
    model, quantized, calib = _quantized(Target.TENSORRT)
    profile = profile_for(Target.TENSORRT)
    ranges = calibrate(model, calib, CalibMethod.MINMAX, symmetric=True)
    constants = {t.name for t in model.graph.initializer} | {"x"}
    readers: dict[str, set[str]] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, set()).add(node.name)
    inputs = {node.name: [i for i in node.input if i not in constants] for node in model.graph.node}
    units = [unit for unit in fallback_units(model, profile, quantized)
             if all(readers[i] <= set(unit) for node in unit for i in inputs[node])]
    assert len(units) >= 3
    for unit in units:
        ours = run(keep_in_fp32(quantized, model, unit, profile), calib[1], "disable")
        reference = run(quantize(model, ranges, profile, exclude=list(unit)), calib[1], "disable")
        np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-5, err_msg=str(unit))


def test_cpu_fp32_node_leaves_its_neighbours_in_int8_kernels(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The depthwise conv back in FP32 must not take conv1 or project out of QLinearConv: conv1 keeps writing INT8
    and the FP32 node reads it after its Q/DQ."""
    model, quantized, calib = _quantized(Target.CPU)
    profile = profile_for(Target.CPU)
    assert cpu_optimized_ops(quantized, tmp_path).count("QLinearConv") == 3
    mixed = keep_in_fp32(quantized, model, ["depthwise"], profile)
    ops = cpu_optimized_ops(mixed, tmp_path)
    assert ops.count("QLinearConv") == 2 and ops.count("Conv") + ops.count("FusedConv") == 1
    # Wired right, one node back in FP32 computes the model about as well as INT8 everywhere (the logits come
    # out unquantized either way); a wrong wire would be off by the size of the logits.
    error = np.abs(run(mixed, calib[1]) - run(model, calib[1])).mean()
    assert error <= 1.1 * np.abs(run(quantized, calib[1]) - run(model, calib[1])).mean()


@pytest.mark.parametrize("target", [Target.TENSORRT, Target.CPU])
def test_learned_rounding_of_the_other_layers_is_kept(target: Target) -> None:
    model, quantized, calib = _quantized(target)
    rounded, flipped = adaround(model, quantized, calib, iterations=50)
    assert any(share > 0 for share in flipped.values())
    mixed = keep_in_fp32(rounded, model, ["project"], profile_for(target))
    learned = {t.name: numpy_helper.to_array(t) for t in rounded.graph.initializer}
    kept = {t.name: numpy_helper.to_array(t) for t in mixed.graph.initializer}
    for name in ("w1_quantized", "w2_quantized", "w4_quantized"):
        np.testing.assert_array_equal(kept[name], learned[name])
    assert "w3_quantized" not in kept and np.array_equal(kept["w3"], numpy_helper.to_array(model.graph.initializer[4]))
