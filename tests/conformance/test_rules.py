"""Each conformance rule on a tiny graph that breaks it and one that satisfies it (built with onnx.helper).

The good graphs also run on ONNX Runtime, so a rule can never pass a graph that is not even valid ONNX.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.builders import onnx_model, tensor
from trtpipe.conformance.check import check_model
from trtpipe.conformance.findings import Severity
from trtpipe.vocab import Target

RNG = np.random.default_rng(0)


def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(array, name)


def _model(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], *, opset: int = 18,
           input_type: int = TensorProto.FLOAT, out_shape: tuple[object, ...] = ("batch", 4, 8, 8),
           in_shape: tuple[object, ...] = ("batch", 3, 8, 8), output_type: int | None = None) -> onnx.ModelProto:
    return onnx_model(nodes, inits, [tensor("x", in_shape, input_type)],
                      [tensor("y", out_shape, output_type or input_type)], opset=opset)


def _qdq(name: str, source: str, scale: float = 0.05, zero: int = 0, kind: int = TensorProto.INT8
         ) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], str]:
    """Q -> DQ of ``source`` with a per-tensor scale; returns nodes, initializers and the dequantized name."""
    dtype = {TensorProto.INT8: np.int8, TensorProto.UINT8: np.uint8}[kind]
    inits = [_init(f"{name}_s", np.array(scale, np.float32)), _init(f"{name}_z", np.array(zero, dtype))]
    nodes = [helper.make_node("QuantizeLinear", [source, f"{name}_s", f"{name}_z"], [f"{name}_q"], name=f"{name}_Q"),
             helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [f"{name}_dq"],
                              name=f"{name}_DQ")]
    return nodes, inits, f"{name}_dq"


def _weight(name: str, shape: tuple[int, ...], axis: int = 0
            ) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], str]:
    """An int8 weight with per-channel scales along ``axis``, dequantized."""
    weight = RNG.integers(-100, 100, shape).astype(np.int8)
    inits = [_init(f"{name}_int8", weight), _init(f"{name}_s", np.full(shape[axis], 0.01, np.float32)),
             _init(f"{name}_z", np.zeros(shape[axis], np.int8))]
    node = helper.make_node("DequantizeLinear", [f"{name}_int8", f"{name}_s", f"{name}_z"], [f"{name}_dq"],
                            name=f"{name}_DQ", axis=axis)
    return [node], inits, f"{name}_dq"


def _conv_int8(*, bias_int32: bool = False, zero: int = 0, kind: int = TensorProto.INT8, scale: float = 0.05,
               axis: int = 0) -> onnx.ModelProto:
    """x -> Q/DQ -> Conv(int8 weight) -> y: TensorRT's placement, unless a keyword breaks it."""
    nodes, inits, x = _qdq("in", "x", scale, zero, kind)
    w_nodes, w_inits, w = _weight("w", (4, 3, 3, 3), axis=axis if axis == 0 else 1)
    if axis != 0:
        w_nodes[0].attribute[0].i = axis
    nodes += w_nodes
    inits += w_inits
    bias = "b"
    if bias_int32:
        inits += [_init("b_int32", np.arange(4, dtype=np.int32)), _init("b_s", np.full(4, 5e-4, np.float32))]
        nodes.append(helper.make_node("DequantizeLinear", ["b_int32", "b_s"], ["b_dq"], name="bias_DQ", axis=0))
        bias = "b_dq"
    else:
        inits.append(_init("b", np.zeros(4, np.float32)))
    nodes.append(helper.make_node("Conv", [x, w, bias], ["y"], name="conv", pads=[1, 1, 1, 1]))
    return _model(nodes, inits)


def _findings(model: onnx.ModelProto, rule: str, target: Target = Target.TENSORRT) -> list[str]:
    return [f.line() for f in check_model(model, target).findings if f.rule == rule]


def _runs(model: onnx.ModelProto) -> None:
    import onnxruntime as ort

    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    shape = [d.dim_value or 2 for d in model.graph.input[0].type.tensor_type.shape.dim]
    session.run(None, {"x": RNG.standard_normal(shape).astype(np.float32)})


def test_the_tensorrt_placement_passes_every_rule() -> None:
    model = _conv_int8()
    _runs(model)
    report = check_model(model, Target.TENSORRT)
    assert report.passed and not report.findings, [f.line() for f in report.findings]
    assert len(report.rules) == 12


def test_dq_input_type_rejects_an_int32_bias_and_uint8() -> None:
    found = _findings(_conv_int8(bias_int32=True), "dq-input-type")
    assert len(found) == 1 and "bias_DQ" in found[0] and "INT32 (a quantized bias)" in found[0]
    assert _findings(_conv_int8(kind=TensorProto.UINT8, zero=0), "dq-input-type")
    assert not _findings(_conv_int8(bias_int32=True), "dq-input-type", Target.CPU)  # ONNX Runtime takes it


def test_zero_points_must_be_zero() -> None:
    found = _findings(_conv_int8(zero=3), "zero-point")
    assert found and "zero point is [3], not 0" in found[0]
    assert not _findings(_conv_int8(), "zero-point")


@pytest.mark.parametrize("scale", [0.0, -0.1, float("inf"), float("nan")])
def test_scales_must_be_finite_and_positive(scale: float) -> None:
    assert _findings(_conv_int8(scale=scale), "scale")
    assert _findings(_conv_int8(scale=scale), "scale", Target.CPU)


def test_per_channel_axis_follows_the_consumer() -> None:
    found = _findings(_conv_int8(axis=1), "per-channel-axis")
    assert found and "needs axis 0" in found[0]
    assert not _findings(_conv_int8(), "per-channel-axis")
    # Gemm with transB=1 wants axis 0; with transB=0, axis 1.
    for trans_b, axis, bad in ((1, 0, False), (1, 1, True), (0, 1, False), (0, 0, True)):
        w_nodes, w_inits, w = _weight("w", (4, 6) if trans_b else (6, 4), axis=axis)
        gemm = helper.make_node("Gemm", ["x", w], ["y"], name="gemm", transB=trans_b)
        model = _model([*w_nodes, gemm], w_inits, in_shape=("batch", 6))
        assert bool(_findings(model, "per-channel-axis")) is bad, (trans_b, axis)


def test_quantize_feeds_only_dequantize() -> None:
    nodes, inits, _ = _qdq("in", "x")
    cast = helper.make_node("Cast", ["in_q"], ["y"], name="cast", to=TensorProto.FLOAT)
    broken = _model([*nodes[:1], cast], inits)
    assert any("consumed by cast (Cast)" in f for f in _findings(broken, "qdq-pairs"))
    lone_dq = _model([helper.make_node("Cast", ["x"], ["x8"], to=TensorProto.INT8, name="to_int8"),
                      helper.make_node("DequantizeLinear", ["x8", "s"], ["y"], name="dq")],
                     [_init("s", np.array(0.1, np.float32))])
    assert any("no QuantizeLinear produced" in f for f in _findings(lone_dq, "qdq-pairs"))
    assert not _findings(_conv_int8(), "qdq-pairs")


def test_no_output_quantization_of_weighted_ops() -> None:
    model = _conv_int8()
    model.graph.node[-1].output[0] = "conv_out"
    nodes, inits, _ = _qdq("out", "conv_out")
    nodes[-1].output[0] = "y"
    model.graph.node.extend(nodes)
    model.graph.initializer.extend(inits)
    _runs(model)
    found = _findings(model, "weighted-output")
    assert found and "conv (Conv)" in found[0] and "the graph output" in found[0]
    assert check_model(model, Target.TENSORRT).passed  # a warning: it builds, only slower


def _residual(quantize_conv_branch: bool) -> onnx.ModelProto:
    model = _conv_int8()
    model.graph.node[-1].output[0] = "conv_out"
    nodes, inits, short = _qdq("short", "x")
    conv_input = "conv_out"
    if quantize_conv_branch:
        more, more_inits, conv_input = _qdq("main", "conv_out")
        nodes += more
        inits += more_inits
    inits.append(_init("pad_w", np.ones((4, 3, 1, 1), np.float32)))
    nodes.append(helper.make_node("Conv", [short, "pad_w"], ["short_4"], name="project"))
    residual_nodes, residual_inits, residual = _qdq("res", "short_4")  # the residual input: quantized
    nodes += [*residual_nodes, helper.make_node("Add", [conv_input, residual], ["y"], name="add")]
    inits += residual_inits
    model.graph.node.extend(nodes)
    model.graph.initializer.extend(inits)
    return model


def test_residual_add_is_quantized_on_the_shortcut_only() -> None:
    good, bad = _residual(False), _residual(True)
    _runs(good)
    assert not _findings(good, "residual-add")
    found = _findings(bad, "residual-add")
    assert found and "add (Add)" in found[0] and "cannot fuse" in found[0]


def test_operators_standard_domain_and_opset() -> None:
    custom = _model([helper.make_node("FusedConv", ["x"], ["y"], domain="com.microsoft", name="fused")], [])
    custom.opset_import.extend([helper.make_opsetid("com.microsoft", 1)])
    assert any("domain 'com.microsoft'" in f for f in _findings(custom, "operators"))
    identity = [helper.make_node("Identity", ["x"], ["y"], name="id")]
    assert any("opset 7 is outside" in f for f in _findings(_model(identity, [], opset=7), "operators"))
    newer = check_model(_model(identity, [], opset=22), Target.TENSORRT)
    assert newer.passed and any("needs TensorRT 11" in f.line() for f in newer.warnings)
    assert not _findings(_model(identity, []), "operators")


def test_fp16_graphs_never_mix_input_types() -> None:
    half = [helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16, name="to_half")]
    inits = [_init("w32", np.ones((1, 3, 8, 8), np.float32)), _init("w16", np.ones((1, 3, 8, 8), np.float16))]
    mixed = _model([*half, helper.make_node("Add", ["x16", "w32"], ["y"], name="add")], inits,
                   output_type=TensorProto.FLOAT16, out_shape=("batch", 3, 8, 8))
    found = _findings(mixed, "fp16-typing")
    assert found and "add (Add): mixes float16 and float32" in found[0]
    agreeing = _model([*half, helper.make_node("Add", ["x16", "w16"], ["y"], name="add")], inits,
                      output_type=TensorProto.FLOAT16, out_shape=("batch", 3, 8, 8))
    _runs(agreeing)
    assert not _findings(agreeing, "fp16-typing")


def test_dynamic_axes_besides_the_batch_need_shapes() -> None:
    identity = [helper.make_node("Identity", ["x"], ["y"], name="id")]
    free = _model(identity, [], in_shape=("batch", 3, "height", "width"))
    found = check_model(free, Target.TENSORRT).findings
    assert [f.severity for f in found if f.rule == "dynamic-axes"] == [Severity.WARNING]
    assert "axes [2, 3]" in found[0].message
    assert not _findings(_model(identity, []), "dynamic-axes")


def _concat(first: float, second: float, *, zero: int = 0, shape: tuple[int, ...] = ()) -> onnx.ModelProto:
    """x -> two Q/DQ of scales ``first`` and ``second`` -> Concat -> y (the second's zero point ``zero``; its scale
    a tensor of ``shape``)."""
    a_nodes, a_inits, a = _qdq("a", "x", first)
    b_nodes, b_inits, b = _qdq("b", "x", second, zero, TensorProto.UINT8 if zero else TensorProto.INT8)
    b_inits[0] = _init("b_s", np.full(shape, second, np.float32))
    nodes = [*a_nodes, *b_nodes, helper.make_node("Concat", [a, b], ["y"], axis=1, name="cat")]
    return _model(nodes, [*a_inits, *b_inits], out_shape=("batch", 6, 8, 8))


def _concat_findings(model: onnx.ModelProto) -> list[str]:
    return [f.line() for f in check_model(model, Target.TENSORRT).findings if f.rule == "concat-scales"]


def test_concat_scales_that_differ_in_their_last_bits_are_one_scale() -> None:
    """1/127 written by two writers (float32 and float64 rounding, a scalar and a [1] tensor): no warning."""
    assert _concat_findings(_concat(np.float32(1 / 127), float(np.nextafter(np.float32(1 / 127), 1)),
                                    shape=(1,))) == []


def test_concat_scales_that_truly_differ_are_shown_apart_with_a_fix_on_the_file() -> None:
    (line,) = _concat_findings(_concat(0.007874, 0.0079))
    assert "different scales (0.007874, 0.0079: 0.33 % apart)" in line
    assert "set the scale of a_DQ, b_DQ and of the QuantizeLinear before each to 0.0079" in line
    (line,) = _concat_findings(_concat(0.01, 0.05))
    assert "(0.01, 0.05: 5x apart)" in line


def test_concat_inputs_with_one_scale_but_two_zero_points_say_so() -> None:
    (line,) = _concat_findings(_concat(0.05, 0.05, zero=128))
    assert "share a scale but not a zero point (0, 128)" in line
