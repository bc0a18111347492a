"""Placement rules for detector and dense heads, and depthwise scaling, on tiny graphs: each rule keeps what it
names in float (or ties the ranges it names), and the outputs are compared with the FP32 reference computation."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.builders import constant, minmax_int8, x_to_y
from tests.optimize.conftest import run
from trtpipe.errors import BadInput
from trtpipe.optimize.graph.activations import channel_ranges
from trtpipe.optimize.graph.gains import GAIN, GAIN_SUFFIX, gain_kind
from trtpipe.optimize.int8.calibration.calibrate import calibrate
from trtpipe.optimize.int8.qdq.placement import float_nodes, placement_record
from trtpipe.optimize.int8.qdq.profiles import profile_for
from trtpipe.optimize.int8.qdq.quantize import quantize
from trtpipe.optimize.int8.recipes import RECIPES, recipe_for
from trtpipe.optimize.passes.scale_depthwise import find_sites, scale_depthwise
from trtpipe.vocab import CalibMethod, Quality, Target

RNG = np.random.default_rng(7)
STRIDE = 8.0
ANCHORS = 4 * 4


def _detector() -> onnx.ModelProto:
    """A one-stage head in miniature: Conv 3->8 -> Relu -> Conv 8->(4 box + 3 class) on a 4x4 grid; boxes are
    decoded to pixels ((d + grid) * stride), classes go through a Sigmoid, and the two are concatenated into
    [N, 7, anchors]: the layout that puts coordinates up to ~40 and probabilities below 1 in one tensor."""
    grid = np.stack(np.meshgrid(np.arange(4), np.arange(4)), 0).reshape(2, ANCHORS)
    grid = np.concatenate([grid, grid], 0)[None].astype(np.float32)  # [1, 4, anchors]
    inits = [constant(RNG.standard_normal((8, 3, 3, 3)) * 0.5, "w1"), constant(RNG.standard_normal(8) * 0.1, "b1"),
             constant(RNG.standard_normal((7, 8, 1, 1)) * 0.5, "w2"), constant(np.zeros(7), "b2"),
             constant(grid, "grid"), constant(np.array(STRIDE), "stride"),
             numpy_helper.from_array(np.array([1, 7, ANCHORS], np.int64), "flat"),
             numpy_helper.from_array(np.array([4, 3], np.int64), "split")]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["head"], name="head"),
        helper.make_node("Reshape", ["head", "flat"], ["flat_head"], name="flatten"),
        helper.make_node("Split", ["flat_head", "split"], ["box", "cls"], name="split", axis=1),
        helper.make_node("Add", ["box", "grid"], ["shifted"], name="add_grid"),
        helper.make_node("Mul", ["shifted", "stride"], ["pixels"], name="to_pixels"),
        helper.make_node("Sigmoid", ["cls"], ["scores"], name="sigmoid"),
        helper.make_node("Concat", ["pixels", "scores"], ["y"], name="concat_out", axis=1),
    ]
    return x_to_y(nodes, inits, [1, 3, 8, 8], [1, 7, ANCHORS], name="det")


def _calibrated(model: onnx.ModelProto, target: Target, samples: int = 16) -> dict[str, tuple[float, float]]:
    batches = [RNG.standard_normal((1, 3, 8, 8)).astype(np.float32) for _ in range(samples)]
    return calibrate(model, batches, CalibMethod.MINMAX, symmetric=target is Target.TENSORRT)


def _readers_of_dequantized(model: onnx.ModelProto) -> set[str]:
    dequantized = {o for n in model.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    return {n.name for n in model.graph.node if any(i in dequantized for i in n.input)}


@pytest.mark.parametrize("target", list(Target))
def test_detector_decoding_stays_float_and_keeps_its_coordinates(target: Target) -> None:
    model = _detector()
    profile = profile_for(target)
    quantized = quantize(model, _calibrated(model, target), profile)
    read_quantized = _readers_of_dequantized(quantized)
    for name in ("add_grid", "to_pixels", "sigmoid", "concat_out", "split", "flatten"):
        assert name not in read_quantized, f"{name} reads a dequantized tensor"
    assert float_nodes(model, profile)["concat_out"] == "post-processing"
    assert "post-processing" in placement_record(model, profile)
    # Against the FP32 reference: the only rounding left is the convolutions', so the probabilities (rows 4..6)
    # keep far more than the 1/255-of-40 a shared per-tensor scale would leave them.
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    reference = run(model, x)
    candidate = run(quantized, x, "disable" if target is Target.TENSORRT else "all")
    scores_error = np.abs(candidate[:, 4:] - reference[:, 4:]).max()
    assert scores_error < np.abs(reference[:, :4]).max() / 255, scores_error


def test_distribution_expectation_reads_the_softmax_in_float() -> None:
    """Conv -> Reshape to bins -> Softmax -> 1x1 Conv with weights 0..7 (a DFL box side) -> Conv after it (so the
    expectation is not post-processing): the expectation's input has no Q/DQ; the convolutions' inputs do."""
    bins = np.arange(8, dtype=np.float32).reshape(1, 8, 1, 1)
    inits = [constant(RNG.standard_normal((8, 3, 1, 1)), "w1"), constant(bins, "proj"),
             constant(RNG.standard_normal((2, 1, 1, 1)), "w3")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["logits"], name="conv1"),
             helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1),
             helper.make_node("Conv", ["probs", "proj"], ["side"], name="expectation"),
             helper.make_node("Conv", ["side", "w3"], ["y"], name="after")]
    graph = helper.make_graph(nodes, "dfl", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    for target in Target:
        profile = profile_for(target)
        assert float_nodes(model, profile)["expectation"] == "distribution-expectation"
        quantized = quantize(model, _calibrated(model, target), profile)
        read_quantized = _readers_of_dequantized(quantized)
        assert "expectation" not in read_quantized and "conv1" in read_quantized


def _concat_model() -> onnx.ModelProto:
    """Two convolutions whose outputs differ 50x in range, concatenated and read by a third (an FPN's fusion)."""
    inits = [constant(RNG.standard_normal((4, 3, 1, 1)), "wa"), constant(RNG.standard_normal((4, 3, 1, 1)) * 50, "wb"),
             constant(RNG.standard_normal((2, 8, 1, 1)), "wc")]
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], name="conv_a"),
             helper.make_node("Conv", ["x", "wb"], ["b"], name="conv_b"),
             helper.make_node("Concat", ["a", "b"], ["ab"], name="concat", axis=1),
             helper.make_node("Conv", ["ab", "wc"], ["y"], name="conv_c")]
    return x_to_y(nodes, inits, [1, 3, 8, 8], [1, 2, 8, 8], name="cat")


def test_concat_inputs_share_one_scale_for_tensorrt() -> None:
    model = _concat_model()
    ranges = _calibrated(model, Target.TENSORRT)
    assert ranges["a"] != ranges["b"]
    quantized = quantize(model, ranges, profile_for(Target.TENSORRT))
    inits = {t.name: numpy_helper.to_array(t) for t in quantized.graph.initializer}
    scales = {n.input[0]: float(inits[n.input[1]]) for n in quantized.graph.node if n.op_type == "QuantizeLinear"}
    assert scales["a"] == scales["b"]
    assert "concat-shared-scale" in placement_record(model, profile_for(Target.TENSORRT))
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    reference, candidate = run(model, x), run(quantized, x, "disable")
    cosine = float(np.dot(reference.ravel(), candidate.ravel())
                   / (np.linalg.norm(reference) * np.linalg.norm(candidate)))
    assert cosine > 0.99
    from trtpipe.conformance.check import check_model

    assert not [f for f in check_model(quantized, Target.TENSORRT).findings if f.rule == "concat-scales"]
    dq_a = next(n for n in quantized.graph.node if n.op_type == "DequantizeLinear" and n.output[0] != "a"
                and any(m.op_type == "Concat" and n.output[0] in m.input for m in quantized.graph.node)
                and n.input[0].startswith("a"))
    own = numpy_helper.from_array(np.array(2 * scales["a"], np.float32), "a_own_scale")  # as ONNX Runtime writes it
    quantized.graph.initializer.append(own)
    dq_a.input[1] = own.name
    flagged = [f for f in check_model(quantized, Target.TENSORRT).findings if f.rule == "concat-scales"]
    assert len(flagged) == 1 and "concat" in flagged[0].line() and "requantizes" in flagged[0].line()


def _hardswish_depthwise(project: bool = True) -> onnx.ModelProto:
    """Conv 3->8 with channel ranges 0.01..30 -> HardSwish as exporters write it (x * Clip(x + 3, 0, 6) / 6) ->
    depthwise 3x3 [-> Conv 1x1]: what PP-PicoDet's and MobileNetV3's blocks look like after BatchNorm folding."""
    spread = np.logspace(-2, 1.5, 8).astype(np.float32)
    inits = [constant(RNG.standard_normal((8, 3, 3, 3)) * spread[:, None, None, None], "w1"),
             constant(RNG.standard_normal((8, 1, 3, 3)), "w2"), constant(RNG.standard_normal((4, 8, 1, 1)), "w3"),
             constant(np.array(3.0), "three"), constant(np.array(0.0), "zero"), constant(np.array(6.0), "six"),
             constant(np.array(6.0), "six_div")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c1", "three"], ["p3"], name="hs_add"),
             helper.make_node("Clip", ["p3", "zero", "six"], ["gate"], name="hs_clip"),
             helper.make_node("Mul", ["c1", "gate"], ["m"], name="hs_mul"),
             helper.make_node("Div", ["m", "six_div"], ["hs"], name="hs_div"),
             helper.make_node("Conv", ["hs", "w2"], ["dw" if project else "y"], name="depthwise", pads=[1, 1, 1, 1],
                              group=8)]
    if project:
        nodes.append(helper.make_node("Conv", ["dw", "w3"], ["y"], name="project"))
    return x_to_y(nodes, inits, ["n", 3, 8, 8], ["n", 4 if project else 8, 8, 8], name="hs")


def test_depthwise_scaling_is_exact_folds_into_the_hardswish_and_evens_the_channels() -> None:
    model = _hardswish_depthwise()
    batches = [RNG.standard_normal((4, 3, 8, 8)).astype(np.float32) for _ in range(4)]
    assert [s.tensor for s in find_sites(model)] == ["hs"]
    peaks = channel_ranges(model, ["hs"], batches)
    assert peaks["hs"].max() / peaks["hs"].min() > 100
    scaled, applied = scale_depthwise(model, peaks)
    assert applied["hs"] > 100
    assert not any(n.name.endswith(GAIN_SUFFIX) for n in scaled.graph.node), "the gain should fold into the Div"
    assert len(scaled.graph.node) == len(model.graph.node)
    x = batches[0]
    np.testing.assert_allclose(run(scaled, x), run(model, x), rtol=1e-4, atol=1e-4)
    after = channel_ranges(scaled, ["hs"], batches)["hs"]
    assert after.max() / after.min() < 10  # from over 100: the narrowest channels reach the 1024x gain cap


@pytest.mark.parametrize("target", list(Target))
def test_depthwise_scaling_brings_int8_closer_to_fp32(target: Target) -> None:
    """Relative error per output channel (each depthwise channel is its own answer), against the FP32 model."""
    model = _hardswish_depthwise(project=False)
    batches = [RNG.standard_normal((4, 3, 8, 8)).astype(np.float32) for _ in range(4)]
    scaled, _ = scale_depthwise(model, channel_ranges(model, ["hs"], batches))
    profile = profile_for(target)
    x = RNG.standard_normal((8, 3, 8, 8)).astype(np.float32)
    reference = run(model, x)
    mode = "disable" if target is Target.TENSORRT else "all"
    errors = []
    for graph in (model, scaled):
        ranges = calibrate(graph, batches, CalibMethod.MINMAX, symmetric=profile.symmetric_activations)
        error = np.abs(run(quantize(graph, ranges, profile), x, mode) - reference)
        errors.append(float((error.mean(axis=(0, 2, 3)) / np.abs(reference).mean(axis=(0, 2, 3))).mean()))
    assert errors[1] < errors[0] / 2, errors


def test_the_gain_folds_into_a_divisor_other_nodes_share() -> None:
    """Simplifiers share one scalar among every HardSwish's ``/ 6``: the folded node gets its own constant, and
    the other reader keeps the scalar."""
    model = _hardswish_depthwise(project=False)
    model.graph.node.append(helper.make_node("Div", ["y", "six_div"], ["z"], name="shares_the_six"))
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 8, 8, 8]))
    batches = [RNG.standard_normal((4, 3, 8, 8)).astype(np.float32)]
    scaled, applied = scale_depthwise(model, channel_ranges(model, ["hs"], batches))
    assert applied and not any(n.name.endswith(GAIN_SUFFIX) for n in scaled.graph.node)
    assert "six_div" in {t.name for t in scaled.graph.initializer}
    np.testing.assert_allclose(run(scaled, batches[0]), run(model, batches[0]), rtol=1e-4, atol=1e-4)


def _with_learnable_affine(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` (from ``_hardswish_depthwise``) with ``hs * 0.7 + 0.2`` between the HardSwish and the depthwise
    layer, as PP-LCNetV3 writes it."""
    graph = model.graph
    depthwise = next(n for n in graph.node if n.name == "depthwise")
    depthwise.input[0] = "affine"
    position = list(graph.node).index(depthwise)
    graph.node.insert(position, helper.make_node("Add", ["scaled", "beta"], ["affine"], name="affine_add"))
    graph.node.insert(position, helper.make_node("Mul", ["hs", "alpha"], ["scaled"], name="affine_mul"))
    graph.initializer.extend([constant(np.array(0.7), "alpha"), constant(np.array(0.2), "beta")])
    return model


def test_the_gain_folds_into_a_learnable_affine_after_the_activation() -> None:
    """PP-LCNetV3 writes ``act * alpha + beta`` (scalars) in front of its depthwise layers: the gains scale both
    constants, and the graph gains no node."""
    model = _with_learnable_affine(_hardswish_depthwise(project=False))
    batches = [RNG.standard_normal((4, 3, 8, 8)).astype(np.float32)]
    assert [s.tensor for s in find_sites(model)] == ["affine"]
    scaled, applied = scale_depthwise(model, channel_ranges(model, ["affine"], batches))
    assert applied["affine"] > 100
    assert len(scaled.graph.node) == len(model.graph.node)
    constants = {t.name: numpy_helper.to_array(t) for t in scaled.graph.initializer}
    assert {"alpha", "beta"}.isdisjoint(constants)  # each node has its per-channel constant now
    np.testing.assert_allclose(run(scaled, batches[0]), run(model, batches[0]), rtol=1e-4, atol=1e-4)
    after = channel_ranges(scaled, ["affine"], batches)["affine"]
    assert after.max() / after.min() < 10


def test_a_gain_folds_past_a_convolution_that_also_reads_the_tensor() -> None:
    """PP-LCNetV3's affine output feeds a depthwise layer and a neck's 1x1 convolution: the gains still fold into
    the affine's constants, and the other convolution's weights are divided by them along its input channels, so
    both outputs are unchanged and no Mul is added (which would requantize the tensor on its way to the depthwise
    layer)."""
    model = _with_learnable_affine(_hardswish_depthwise(project=False))
    graph = model.graph
    graph.node.append(helper.make_node("Conv", ["affine", "w_neck"], ["neck"], name="neck", pads=[1, 1, 1, 1]))
    graph.output.append(helper.make_tensor_value_info("neck", TensorProto.FLOAT, ["n", 4, 8, 8]))
    graph.initializer.append(constant(RNG.standard_normal((4, 8, 3, 3)), "w_neck"))
    batches = [RNG.standard_normal((4, 3, 8, 8)).astype(np.float32)]
    scaled, applied = scale_depthwise(model, channel_ranges(model, ["affine"], batches))
    assert applied["affine"] > 100
    assert len(scaled.graph.node) == len(model.graph.node)
    weights = {t.name: numpy_helper.to_array(t) for t in scaled.graph.initializer}
    original = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "w_neck"))
    per_input = original.sum(axis=(0, 2, 3)) / weights["w_neck"].sum(axis=(0, 2, 3))  # the gain of each channel
    assert per_input.max() / per_input.min() > 100
    for before, after in zip(_all_outputs(model, batches[0]), _all_outputs(scaled, batches[0]), strict=True):
        np.testing.assert_allclose(after, before, rtol=1e-4, atol=1e-4 * np.abs(before).max())


def _all_outputs(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})


def test_a_gain_that_cannot_fold_is_a_float_mul() -> None:
    """A depthwise input that another node also reads keeps its value for that reader: the gain goes into a Mul
    on the depthwise convolution's edge, which every target leaves in float."""
    model = _hardswish_depthwise()
    model.graph.node.append(helper.make_node("Relu", ["hs"], ["side"], name="other_reader"))
    model.graph.output.append(helper.make_tensor_value_info("side", TensorProto.FLOAT, ["n", 8, 8, 8]))
    batches = [RNG.standard_normal((4, 3, 8, 8)).astype(np.float32)]
    scaled, applied = scale_depthwise(model, channel_ranges(model, ["hs"], batches))
    gains = [n.name for n in scaled.graph.node if n.name.endswith(GAIN_SUFFIX)]
    assert applied and len(gains) == 1
    for target in Target:
        assert float_nodes(scaled, profile_for(target))[gains[0]] == "channel-gain"


def test_a_gain_is_found_by_its_mark_and_in_older_files_by_its_name() -> None:
    """scale_depthwise marks the Mul it adds, and the INT8 placement finds it by that mark whatever the node is
    called; in a file written before the marks, the name alone still says it is a gain."""
    model = _hardswish_depthwise()
    model.graph.node.append(helper.make_node("Relu", ["hs"], ["side"], name="other_reader"))
    model.graph.output.append(helper.make_tensor_value_info("side", TensorProto.FLOAT, ["n", 8, 8, 8]))
    batches = [RNG.standard_normal((4, 3, 8, 8)).astype(np.float32)]
    scaled, _ = scale_depthwise(model, channel_ranges(model, ["hs"], batches))
    [gain] = [n for n in scaled.graph.node if gain_kind(n) == GAIN]
    name = gain.name
    gain.name = "renamed"
    assert float_nodes(scaled, profile_for(Target.TENSORRT))["renamed"] == "channel-gain"
    gain.name = name
    del gain.metadata_props[:]  # as an older file holds it
    assert gain_kind(gain) == GAIN
    assert float_nodes(scaled, profile_for(Target.TENSORRT))[name] == "channel-gain"


def test_cpu_keeps_a_convolution_output_float_before_a_hardswish_and_integer_before_a_relu() -> None:
    """ONNX Runtime's QLinearConv needs a Q/DQ on its output; where a float HardSwish reads it, that rounding of the
    pre-activation is removed, and where a Relu folds into it, it stays."""
    model = _hardswish_depthwise()
    batches = [RNG.standard_normal((4, 3, 8, 8)).astype(np.float32)]
    quantized = minmax_int8(model, batches, profile_for(Target.CPU), symmetric=False)
    quantized_tensors = {n.input[0] for n in quantized.graph.node if n.op_type == "QuantizeLinear"}
    assert "c1" not in quantized_tensors and "hs" in quantized_tensors
    detector = _detector()
    quantized = quantize(detector, _calibrated(detector, Target.CPU), profile_for(Target.CPU))
    producers = {o: n for n in quantized.graph.node for o in n.output}
    relu_folded = [n for n in quantized.graph.node if n.op_type == "QuantizeLinear"
                   and producers.get(n.input[0]) is not None and producers[n.input[0]].name == "conv1"]
    assert relu_folded, "conv1's output (its Relu folded) should stay quantized for QLinearConv"


@pytest.mark.default_recipe
def test_recipes_refuse_too_few_samples_by_name_and_the_default_steps_down() -> None:
    with pytest.raises(BadInput, match=f"at least {RECIPES[Quality.BEST].min_samples} samples"):
        recipe_for(Quality.BEST, 4)
    recipe, note = recipe_for(None, 4)
    assert recipe.quality is Quality.FAST and note is not None and "too few" in note
    recipe, note = recipe_for(None, 64)
    assert recipe.quality is Quality.BALANCED and note is None and recipe.steps == ("bias_correction",)
    assert "adaround" in recipe_for(Quality.BEST, 16)[0].steps
    assert recipe_for(None, 64, random=True)[0].quality is Quality.FAST


def test_cpu_keeps_a_folded_relu_that_a_float_op_reads() -> None:
    """ONNX Runtime folds a Relu into its convolution's output quantization (the Relu node goes); a float reader of
    that tensor must still see the clamped value, not the convolution's raw output."""
    inits = [constant(RNG.standard_normal((8, 3, 3, 3)), "w1")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Sigmoid", ["r1"], ["y"], name="gate")]
    graph = helper.make_graph(nodes, "relu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    quantized = quantize(model, _calibrated(model, Target.CPU), profile_for(Target.CPU))
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    candidate = run(quantized, x)
    assert candidate.min() >= 0.5 - 1e-3, "the Relu's clamp was lost: a sigmoid below 0.5 read a negative value"
    np.testing.assert_allclose(candidate, run(model, x), atol=0.05)


def _squeeze_excitation(head: bool = False) -> onnx.ModelProto:
    """Conv 3->8 -> Relu -> [GlobalAveragePool -> Conv 8->2 -> Relu -> Conv 2->8 -> HardSigmoid] gating the
    feature map -> Conv 8->4: a MobileNetV3 / PP-LCNet block. With ``head``, the pooled value also feeds a
    classifier (Flatten -> Gemm), which makes the pool's branch no gate."""
    inits = [constant(RNG.standard_normal((8, 3, 3, 3)), "w1"), constant(RNG.standard_normal((2, 8, 1, 1)), "se_w1"),
             constant(RNG.standard_normal((8, 2, 1, 1)), "se_w2"), constant(RNG.standard_normal((4, 8, 1, 1)), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("GlobalAveragePool", ["r1"], ["pooled"], name="squeeze"),
             helper.make_node("Conv", ["pooled", "se_w1"], ["s1"], name="se_reduce"),
             helper.make_node("Relu", ["s1"], ["s2"], name="se_relu"),
             helper.make_node("Conv", ["s2", "se_w2"], ["s3"], name="se_expand"),
             helper.make_node("HardSigmoid", ["s3"], ["gate"], name="se_gate", alpha=1 / 6, beta=0.5),
             helper.make_node("Mul", ["r1", "gate"], ["excited"], name="excite"),
             helper.make_node("Conv", ["excited", "w2"], ["y"], name="project")]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4, 8, 8])]
    if head:
        inits.append(constant(RNG.standard_normal((5, 8)), "fc"))
        nodes += [helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten"),
                  helper.make_node("Gemm", ["flat", "fc"], ["logits"], name="classifier", transB=1)]
        outputs.append(helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n", 5]))
    graph = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 8, 8])],
                              outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("target", list(Target))
def test_a_squeeze_excitation_branch_stays_float_and_the_block_stays_quantized(target: Target) -> None:
    model = _squeeze_excitation()
    profile = profile_for(target)
    placed = float_nodes(model, profile)
    assert {n for n, rule in placed.items() if rule == "squeeze-excitation"} == {
        "se_reduce", "se_relu", "se_expand", "se_gate"}
    quantized = quantize(model, _calibrated(model, target), profile)
    read_quantized = _readers_of_dequantized(quantized)
    assert "se_reduce" not in read_quantized and "se_expand" not in read_quantized
    assert {"conv1", "project"} <= read_quantized  # the block's own convolutions are still INT8
    x = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)
    reference = run(model, x)
    got = run(quantized, x, "disable" if target is Target.TENSORRT else "all")
    assert np.abs(got - reference).max() < 0.05 * np.abs(reference).max()


def test_a_pooled_value_that_feeds_a_classifier_is_no_squeeze_excitation() -> None:
    model = _squeeze_excitation(head=True)
    assert "squeeze-excitation" not in set(float_nodes(model, profile_for(Target.CPU)).values())
