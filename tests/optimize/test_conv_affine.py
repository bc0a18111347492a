"""Constant scales and shifts of a convolution's output folded into its weights and bias, outputs unchanged."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from tests.builders import constant, onnx_model, tensor
from tests.optimize.conftest import run
from trtpipe.optimize.graph.conv_affine import fold_conv_affine

RNG = np.random.default_rng(3)


def _model(after: list[onnx.NodeProto], constants: dict[str, np.ndarray], output: str = "y",
           extra_outputs: tuple[str, ...] = ()) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(RNG.standard_normal((6, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(RNG.standard_normal(6).astype(np.float32), "b"),
             *[constant(v, k) for k, v in constants.items()]]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["conv"], name="conv", pads=[1, 1, 1, 1]), *after]
    outputs = [tensor(name, [1, 6, 8, 8]) for name in (output, *extra_outputs)]
    return onnx_model(nodes, inits, [tensor("x", [1, 3, 8, 8])], outputs, name="affine")


def _folded(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int, float]:
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    reference = run(model, x)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    folded, count = fold_conv_affine(copy)
    onnx.checker.check_model(folded)
    return folded, count, float(np.abs(run(folded, x) - reference).max())


def test_a_scalar_scale_then_a_per_channel_shift_fold_into_the_convolution() -> None:
    """MobileOne's ``w0 * conv + w1`` with the constant first, then a per-channel Sub and Div, before a Relu."""
    model = _model([helper.make_node("Mul", ["s", "conv"], ["m"]), helper.make_node("Add", ["m", "t"], ["a"]),
                    helper.make_node("Sub", ["a", "u"], ["d"]), helper.make_node("Div", ["d", "v"], ["q"]),
                    helper.make_node("Relu", ["q"], ["y"])],
                   {"s": 0.7, "t": RNG.standard_normal((1, 6, 1, 1)), "u": RNG.standard_normal(6).reshape(6, 1, 1),
                    "v": np.full((1, 6, 1, 1), 2.5)})
    folded, count, error = _folded(model)
    assert count == 4 and [n.op_type for n in folded.graph.node] == ["Conv", "Relu"]
    assert error < 1e-5


@pytest.mark.parametrize("case", ["spatial constant", "second reader", "constant minus conv", "graph output"])
def test_what_cannot_fold_is_left_alone(case: str) -> None:
    if case == "spatial constant":  # varies over the image: not a per-channel affine
        model = _model([helper.make_node("Add", ["conv", "t"], ["y"])], {"t": RNG.standard_normal((1, 1, 8, 8))})
    elif case == "second reader":  # the unscaled output is needed too
        model = _model([helper.make_node("Mul", ["conv", "s"], ["y"]), helper.make_node("Relu", ["conv"], ["r"])],
                       {"s": 2.0}, extra_outputs=("r",))
    elif case == "constant minus conv":
        model = _model([helper.make_node("Sub", ["t", "conv"], ["y"])], {"t": 1.0})
    else:
        model = _model([helper.make_node("Mul", ["conv", "s"], ["y"])], {"s": 2.0}, extra_outputs=("conv",))
    folded, count, error = _folded(model)
    assert count == 0 and len(folded.graph.node) == len(model.graph.node) and error == 0.0
