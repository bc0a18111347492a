"""fp16-typing: Clip's min/max and Pad's constant_value must have the data's type (ONNX: T), so an FP16 Clip with
FP32 bounds is flagged; and the FP16 pass's output gives them the data's type."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.builders import x_to_y
from trtpipe.conformance.check import check_model
from trtpipe.vocab import Target


def _model(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], out_shape: list[object]) -> onnx.ModelProto:
    return x_to_y(nodes, inits, ["n", 3, 4, 4], out_shape)


def _fp16_typing(model: onnx.ModelProto) -> list[str]:
    return [f.line() for f in check_model(model, Target.TENSORRT).findings if f.rule == "fp16-typing"]


def _bounds(dtype: type) -> list[onnx.TensorProto]:
    return [numpy_helper.from_array(np.array(0, dtype), "lo"), numpy_helper.from_array(np.array(6, dtype), "hi"),
            numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads"),
            numpy_helper.from_array(np.array(0.5, dtype), "fill")]


def _half_clip_and_pad(bound_type: type) -> onnx.ModelProto:
    """x -> Cast(FP16) -> Clip(lo, hi) -> Pad(fill) -> Cast(FP32), with bounds of ``bound_type``."""
    nodes = [helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16, name="to_half"),
             helper.make_node("Clip", ["h", "lo", "hi"], ["c"], name="clip"),
             helper.make_node("Pad", ["c", "pads", "fill"], ["p"], name="pad"),
             helper.make_node("Cast", ["p"], ["y"], to=TensorProto.FLOAT, name="to_float")]
    return _model(nodes, _bounds(bound_type), ["n", 3, 6, 6])


def test_an_fp16_clip_or_pad_with_fp32_bounds_is_flagged() -> None:
    found = _fp16_typing(_half_clip_and_pad(np.float32))
    assert any("clip (Clip): mixes float16 and float32" in line for line in found)
    assert any("pad (Pad): mixes float16 and float32" in line for line in found)
    agreeing = _half_clip_and_pad(np.float16)
    assert _fp16_typing(agreeing) == []
    import onnxruntime as ort

    session = ort.InferenceSession(agreeing.SerializeToString(), providers=["CPUExecutionProvider"])
    out = session.run(None, {"x": np.full((1, 3, 4, 4), 9.0, np.float32)})[0]
    assert out.shape == (1, 3, 6, 6) and out.max() == 6.0 and out[0, 0, 0, 0] == 0.5


def test_the_fp16_pass_gives_clip_and_pad_bounds_the_datas_type() -> None:
    from trtpipe.optimize.passes.fp16 import convert_fp16

    # clip_hot overflows FP16 on the calibration data and stays FP32; it shares lo/hi with the FP16 clip, so the
    # converter must give each Clip bounds of its own data's type.
    nodes = [helper.make_node("Mul", ["x", "big"], ["hot"], name="scale_up"),
             helper.make_node("Clip", ["hot", "lo", "hi"], ["hot_c"], name="clip_hot"),
             helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Clip", ["r", "lo", "hi"], ["c"], name="clip"),
             helper.make_node("Pad", ["c", "pads", "fill"], ["p"], name="pad"),
             helper.make_node("Pad", ["hot_c", "pads", "fill"], ["p_hot"], name="pad_hot"),
             helper.make_node("Add", ["p", "p_hot"], ["y"], name="add")]
    model = _model(nodes, [*_bounds(np.float32), numpy_helper.from_array(np.array(1e5, np.float32), "big")],
                   ["n", 3, 6, 6])
    x = np.random.default_rng(0).uniform(-1, 1, (4, 3, 4, 4)).astype(np.float32)
    converted, report = convert_fp16(model, [x])
    assert {"scale_up", "clip_hot"} <= {item["node"] for item in report.kept_fp32}
    assert _fp16_typing(converted) == []
    import onnxruntime as ort

    session = ort.InferenceSession(converted.SerializeToString(), providers=["CPUExecutionProvider"])
    assert np.isfinite(session.run(None, {"x": x})[0]).all()
