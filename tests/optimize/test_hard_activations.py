"""HardSwish and HardSigmoid written as arithmetic become one operator in the ``fuse`` pass, whatever the spelling,
and nothing else does; the model computes what it computed (ONNX Runtime, against numpy's reference)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from tests.builders import constant, onnx_model, tensor
from tests.optimize.conftest import run
from trtpipe.optimize.graph.hard_activations import fuse_hard_activations
from trtpipe.optimize.passes.fuse import simplify

RNG = np.random.default_rng(3)


def _model(body: list[onnx.NodeProto], scalars: dict[str, float], opset: int = 17,
           second_input: bool = False) -> onnx.ModelProto:
    """x [n, 4, 5, 5] -> Conv 1x1 -> ``body`` (reading "c", writing "y")."""
    inits = [numpy_helper.from_array(RNG.standard_normal((4, 4, 1, 1)).astype(np.float32) * 3, "w"),
             *(constant(v, k) for k, v in scalars.items())]
    inputs = [tensor("x", ["n", 4, 5, 5])]
    if second_input:
        inputs.append(tensor("z", ["n", 4, 5, 5]))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"), *body]
    return onnx_model(nodes, inits, inputs, [tensor("y", None)], opset=opset, ir_version=8)


def _hard_swish(x: np.ndarray) -> np.ndarray:
    return x * np.clip(x + 3.0, 0.0, 6.0) / 6.0


def _conv(x: np.ndarray, model: onnx.ModelProto) -> np.ndarray:
    w = numpy_helper.to_array(model.graph.initializer[0])[:, :, 0, 0]
    return np.einsum("oc,nchw->nohw", w, x)


SPELLINGS = {
    "x * clip(x + 3, 0, 6) / 6": ([
        helper.make_node("Add", ["c", "three"], ["a"]), helper.make_node("Clip", ["a", "zero", "six"], ["g"]),
        helper.make_node("Mul", ["c", "g"], ["m"]), helper.make_node("Div", ["m", "six"], ["y"])],
        {"three": 3.0, "zero": 0.0, "six": 6.0}),
    "clip(x + 3, 0, 6) * x * (1/6)": ([
        helper.make_node("Add", ["three", "c"], ["a"]), helper.make_node("Clip", ["a", "zero", "six"], ["g"]),
        helper.make_node("Mul", ["g", "c"], ["m"]), helper.make_node("Mul", ["m", "sixth"], ["y"])],
        {"three": 3.0, "zero": 0.0, "six": 6.0, "sixth": 1.0 / 6.0}),
    "x * (min(max(x + 3, 0), 6) / 6)": ([
        helper.make_node("Add", ["c", "three"], ["a"]), helper.make_node("Max", ["a", "zero"], ["r"]),
        helper.make_node("Min", ["r", "six"], ["g"]), helper.make_node("Div", ["g", "six"], ["h"]),
        helper.make_node("Mul", ["c", "h"], ["y"])],
        {"three": 3.0, "zero": 0.0, "six": 6.0}),
    "x * HardSigmoid(x)": ([
        helper.make_node("HardSigmoid", ["c"], ["h"], alpha=1.0 / 6.0, beta=0.5),
        helper.make_node("Mul", ["c", "h"], ["y"])], {}),
}


@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_each_spelling_of_hardswish_becomes_one_operator_and_computes_the_same(spelling: str) -> None:
    body, scalars = SPELLINGS[spelling]
    model = _model(body, scalars)
    x = RNG.standard_normal((2, 4, 5, 5)).astype(np.float32)
    fused, counts = fuse_hard_activations(model)
    assert counts == {"HardSwish": 1, "HardSigmoid": 0}
    assert [n.op_type for n in fused.graph.node] == ["Conv", "HardSwish"]
    np.testing.assert_allclose(run(fused, x), _hard_swish(_conv(x, model)), rtol=1e-5, atol=1e-5)


def test_below_opset_14_the_model_is_upgraded_to_write_hardswish() -> None:
    body, scalars = SPELLINGS["x * clip(x + 3, 0, 6) / 6"]
    model = _model(body, scalars, opset=13)
    fused, counts = fuse_hard_activations(model)
    assert counts["HardSwish"] == 1
    assert next(o.version for o in fused.opset_import if o.domain == "") == 14
    onnx.checker.check_model(fused, full_check=True)
    x = RNG.standard_normal((1, 4, 5, 5)).astype(np.float32)
    np.testing.assert_allclose(run(fused, x), _hard_swish(_conv(x, model)), rtol=1e-5, atol=1e-5)


def test_a_squeeze_gate_becomes_hardsigmoid_and_a_chain_that_goes_on_keeps_its_tail() -> None:
    """relu6(z + 3) / 6 gating another tensor is a HardSigmoid; a HardSwish followed by a learned scale and shift
    (PP-LCNetV3) becomes HardSwish -> Mul -> Add."""
    body = [helper.make_node("Add", ["z", "three"], ["a"]), helper.make_node("Clip", ["a", "zero", "six"], ["g"]),
            helper.make_node("Div", ["g", "six"], ["gate"]), helper.make_node("Mul", ["c", "gate"], ["gated"]),
            helper.make_node("Add", ["gated", "three"], ["b"]), helper.make_node("Clip", ["b", "zero", "six"], ["h"]),
            helper.make_node("Mul", ["gated", "h"], ["m"]), helper.make_node("Div", ["m", "six"], ["hs"]),
            helper.make_node("Mul", ["hs", "scale"], ["s"]), helper.make_node("Add", ["s", "shift"], ["y"])]
    model = _model(body, {"three": 3.0, "zero": 0.0, "six": 6.0, "scale": 1.7, "shift": -0.2}, second_input=True)
    fused, counts = fuse_hard_activations(model)
    assert counts == {"HardSwish": 1, "HardSigmoid": 1}
    assert [n.op_type for n in fused.graph.node] == ["Conv", "HardSigmoid", "Mul", "HardSwish", "Mul", "Add"]
    x, z = (RNG.standard_normal((2, 4, 5, 5)).astype(np.float32) * 4 for _ in range(2))
    session_inputs = {"x": x, "z": z}
    import onnxruntime as ort

    got = ort.InferenceSession(fused.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, session_inputs)[0]
    gated = _conv(x, model) * np.clip(z + 3.0, 0.0, 6.0) / 6.0
    np.testing.assert_allclose(got, _hard_swish(gated) * 1.7 - 0.2, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["divides by 5", "an intermediate read elsewhere", "another tensor's clip"])
def test_what_is_not_a_hardswish_is_left_alone(case: str) -> None:
    scalars = {"three": 3.0, "zero": 0.0, "six": 6.0, "five": 5.0}
    body = [helper.make_node("Add", ["c", "three"], ["a"]), helper.make_node("Clip", ["a", "zero", "six"], ["g"]),
            helper.make_node("Mul", ["c", "g"], ["m"]),
            helper.make_node("Div", ["m", "five" if case == "divides by 5" else "six"], ["d"])]
    if case == "an intermediate read elsewhere":
        body.append(helper.make_node("Add", ["d", "g"], ["y"]))  # the gate is also an output's operand
    elif case == "another tensor's clip":
        body[0] = helper.make_node("Add", ["z", "three"], ["a"])
        body.append(helper.make_node("Identity", ["d"], ["y"]))
    else:
        body.append(helper.make_node("Identity", ["d"], ["y"]))
    model = _model(body, scalars, second_input=case == "another tensor's clip")
    fused, counts = fuse_hard_activations(model)
    assert counts["HardSwish"] == 0
    assert "HardSwish" not in {n.op_type for n in fused.graph.node}


def test_the_fuse_pass_fuses_and_drops_the_constants_it_no_longer_reads() -> None:
    body, scalars = SPELLINGS["x * clip(x + 3, 0, 6) / 6"]
    model = _model(body, scalars)
    fused, report = simplify(model)
    assert report.ops_after.get("HardSwish") == 1 and "Clip" not in report.ops_after
    assert {t.name for t in fused.graph.initializer} == {"w"}
    x = RNG.standard_normal((3, 4, 5, 5)).astype(np.float32)
    np.testing.assert_allclose(run(fused, x), run(model, x), rtol=1e-5, atol=1e-5)
