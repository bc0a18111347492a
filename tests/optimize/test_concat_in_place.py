"""The openvino INT8 flavour on a tiny FPN fusion (``builders.fpn`` with a Concat: DBNet's neck, a lateral map
and an upsampled one concatenated and read by a convolution): one scale into the Concat and no Q/DQ after it, the
outputs against the FP32 reference, and the cases left alone."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
from onnx import numpy_helper

from tests.builders import fpn, minmax_int8
from tests.optimize.conftest import run
from trtpipe.graph_index import producers_of, readers_of
from trtpipe.optimize.int8.qdq.concat_in_place import concatenate_in_place
from trtpipe.optimize.int8.qdq.placement import placement_record
from trtpipe.optimize.int8.qdq.profiles import profile_for
from trtpipe.vocab import Target

RNG = np.random.default_rng(5)


def _quantized(model: onnx.ModelProto, target: Target, *, rewrite: bool = True) -> onnx.ModelProto:
    batches = [RNG.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(16)]
    profile = profile_for(target)
    if not rewrite:
        profile = replace(profile, concat_in_place=False)
    return minmax_int8(model, batches, profile, symmetric=False)


def _concat_io(model: onnx.ModelProto) -> tuple[list[tuple[str, str]], list[str]]:
    """The (scale, zero point) names of the DQs in front of the Concat, and the op types reading its output."""
    producer, readers = producers_of(model.graph), readers_of(model.graph)
    concat = next(n for n in model.graph.node if n.op_type == "Concat")
    inputs = [(producer[name].input[1], producer[name].input[2]) for name in concat.input
              if producer[name].op_type == "DequantizeLinear"]
    return inputs, [r.op_type for r in readers.get(concat.output[0], [])]


def _rectified(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with a Relu after its lateral and strided convolutions: the Concat's inputs never go below zero."""
    nodes = []
    for node in model.graph.node:
        nodes.append(node)
        if node.name in ("lateral", "down"):
            rectified = node.output[0]
            node.output[0] = f"{rectified}_pre"
            nodes.append(onnx.helper.make_node("Relu", [node.output[0]], [rectified], name=f"{node.name}_relu"))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def test_the_inputs_share_one_scale_and_nothing_requantizes_after_the_concat() -> None:
    model = _rectified(fpn(RNG, join="Concat", down_scale=1.6))
    quantized = _quantized(model, Target.OPENVINO)
    inputs, after = _concat_io(quantized)
    assert len(inputs) == 2 and len(set(inputs)) == 1, inputs  # both inputs dequantized with the same parameters
    assert after == ["Conv"]  # the head reads the Concat itself: no Q/DQ between them
    record = placement_record(model, profile_for(Target.OPENVINO), quantized)["concat-in-place"]
    assert record["nodes"] == ["join"]
    constants = {t.name: numpy_helper.to_array(t) for t in quantized.graph.initializer}
    scale, zero = (constants[name] for name in inputs[0])
    assert zero.dtype == np.uint8 and int(zero) == 0  # unsigned, as the convolution reading it needs
    unshared = _quantized(model, Target.OPENVINO, rewrite=False)
    before, after_unshared = _concat_io(unshared)
    assert len(set(before)) == 2 and after_unshared == ["QuantizeLinear"]
    widest = max(float(constants[s]) if s in constants else float(numpy_helper.to_array(
        next(t for t in unshared.graph.initializer if t.name == s))) for s, _ in before)
    assert float(scale) == widest  # the widest input's scale: no input saturates
    x = RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)
    reference = run(model, x)
    error = np.abs(run(quantized, x) - reference).max()
    error_unshared = np.abs(run(unshared, x) - reference).max()
    # The Concat's output Q/DQ had covered both inputs' ranges already: one scale for both loses nothing beyond it
    # (up to the symmetric range's one bit on the narrower side), and the outputs stay close to FP32's.
    assert error < 1.5 * error_unshared + 1e-4, (error, error_unshared)
    assert error < 0.05 * np.abs(reference).max(), error


def test_signed_inputs_a_convolution_reads_through_the_concat_are_left_alone() -> None:
    """Inputs that go below zero are int8 (zero_points.py: only the Concat reads them) while the convolution after
    the Concat reads uint8: in place, the convolution would read a signed tensor, which OpenVINO ran as uint8 (PP-
    PicoDet's openvino file lost nearly every detection there), so the Concat keeps its own Q/DQ."""
    model = fpn(RNG, join="Concat", down_scale=1.6)
    quantized = _quantized(model, Target.OPENVINO, rewrite=False)
    before = quantized.SerializeToString()
    assert concatenate_in_place(quantized) == []
    assert quantized.SerializeToString() == before
    assert _concat_io(_quantized(model, Target.OPENVINO))[1] == ["QuantizeLinear"]


def test_a_concat_input_a_convolution_also_reads_is_left_alone() -> None:
    """The lateral map keeps its uint8 zero point for the convolution that reads it besides the Concat, so the
    inputs cannot share one zero-point-free scale: the Concat keeps its own Q/DQ, and the rewrite changes nothing."""
    model = fpn(RNG, join="Concat", down_scale=1.6, side_reader="lateral")
    quantized = _quantized(model, Target.OPENVINO, rewrite=False)
    before = quantized.SerializeToString()
    assert concatenate_in_place(quantized) == []
    assert quantized.SerializeToString() == before
    assert _concat_io(quantized)[1] == ["QuantizeLinear"]


def test_the_cpu_flavour_keeps_the_q_dq_after_the_concat() -> None:
    """ONNX Runtime runs the head as a QLinearConv only with a Q/DQ right before it."""
    assert _concat_io(_quantized(fpn(RNG, join="Concat", down_scale=1.6), Target.CPU))[1] == ["QuantizeLinear"]
