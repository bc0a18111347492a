"""Typing of INT8 with FP16 elsewhere: a QuantizeLinear's scale has its input's type (fp16-typing), FP16 scales need
opset 19 and a Q/DQ pair holds one scale value whatever its two types (qdq-scale-type). The consistent graph also
runs on ONNX Runtime, so the rules never pass a graph that is not valid ONNX."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.builders import x_to_y
from trtpipe.conformance.check import check_model
from trtpipe.vocab import Target

HALF, FLOAT = TensorProto.FLOAT16, TensorProto.FLOAT


def _model(*, q_scale: type = np.float16, dq_scale: type = np.float16, opset: int = 19,
           dq_value: float = 0.05) -> onnx.ModelProto:
    """x (FP32) -> Cast FP16 -> Q -> DQ -> Sigmoid -> Cast FP32 -> y, the Q's and the DQ's scales of the given
    types (the DQ's value can differ from the Q's). With an FP32 Q scale the Q reads x itself: an FP32 writer."""
    inits = [numpy_helper.from_array(np.array(0.05, q_scale), "q_s"),
             numpy_helper.from_array(np.array(dq_value, dq_scale), "dq_s"),
             numpy_helper.from_array(np.array(0, np.int8), "z")]
    nodes = [helper.make_node("Cast", ["x"], ["h"], to=HALF, name="to_half"),
             helper.make_node("QuantizeLinear", ["x" if q_scale is np.float32 else "h", "q_s", "z"], ["q"], name="Q"),
             helper.make_node("DequantizeLinear", ["q", "dq_s", "z"], ["d"], name="DQ"),
             helper.make_node("Sigmoid", ["d"], ["s"], name="sigmoid"),
             helper.make_node("Cast", ["s"], ["y"], to=FLOAT, name="to_float")]
    return x_to_y(nodes, inits, ["n", 4], ["n", 4], opset=opset)


def _lines(model: onnx.ModelProto, rule: str) -> list[str]:
    return [f.line() for f in check_model(model, Target.TENSORRT).findings if f.rule == rule]


def test_fp16_qdq_at_opset_19_with_one_scale_passes_and_runs() -> None:
    model = _model()
    assert check_model(model, Target.TENSORRT).passed
    assert not _lines(model, "qdq-scale-type") and not _lines(model, "fp16-typing")
    onnx.checker.check_model(model, full_check=True)
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.linspace(-3, 3, 8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_allclose(session.run(None, {"x": x})[0], 1 / (1 + np.exp(-x)), atol=0.02)


def test_a_quantize_whose_scale_type_differs_from_its_input_is_flagged() -> None:
    model = _model(q_scale=np.float32)
    model.graph.node[1].input[0] = "h"  # the FP16 tensor, quantized with an FP32 scale
    found = _lines(model, "fp16-typing")
    assert len(found) == 1 and "Q (QuantizeLinear): mixes float16 and float32 inputs" in found[0]


def test_fp16_scales_below_opset_19_are_flagged() -> None:
    found = _lines(_model(opset=18), "qdq-scale-type")
    assert len(found) == 2 and all("float16 scale at opset 18" in line for line in found)


def test_a_pair_of_mixed_scale_types_is_fine_but_not_two_values() -> None:
    """A Q with an FP32 scale feeding a DQ with an FP16 one is the border between an FP32 writer and an FP16 reader;
    what matters is one value (0.05 in FP16 is 0.04999, within FP16's rounding of 0.05)."""
    border = _model(q_scale=np.float32, dq_scale=np.float16)
    assert check_model(border, Target.TENSORRT).passed and not _lines(border, "qdq-scale-type")
    found = _lines(_model(dq_value=0.06), "qdq-scale-type")
    assert len(found) == 1 and "DQ (DequantizeLinear): reads Q (QuantizeLinear)'s integers with scale" in found[0]
