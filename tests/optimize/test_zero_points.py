"""The openvino INT8 flavour on a tiny FPN: zero points 0 on the tensors only joins and upsampling read, uint8
wherever a convolution reads (ONNX Runtime's and OpenVINO's integer convolutions), and the outputs against the FP32
reference. (What it buys, OpenVINO running an FPN's joins without a Convert and a Subtract per zero point, shows
on real models only: OpenVINO fuses a tiny graph's joins into its convolutions either way; see `make peers`.)"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from tests.builders import fpn, minmax_int8
from tests.optimize.conftest import run
from trtpipe.optimize.int8.qdq.profiles import profile_for
from trtpipe.optimize.int8.qdq.zero_points import zero_point_free_joins
from trtpipe.vocab import Target

RNG = np.random.default_rng(11)


def _quantized(target: Target, model: onnx.ModelProto | None = None, *,
               rewrite: bool = True) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    model = model or fpn(RNG)
    batches = [RNG.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(16)]
    profile = profile_for(target)
    if not rewrite:
        profile = replace(profile, zero_point_free_joins=False)
    return model, minmax_int8(model, batches, profile, symmetric=False)


def _dequantized_inputs(model: onnx.ModelProto) -> dict[str, list[tuple[int, float, int]]]:
    """Each node's dequantized activation inputs as (zero point's ONNX type, scale, zero point)."""
    constants = {t.name: t for t in model.graph.initializer}
    dq_of = {n.output[0]: n for n in model.graph.node if n.op_type == "DequantizeLinear"
             and n.input[0] not in constants}
    found: dict[str, list[tuple[int, float, int]]] = {}
    for node in model.graph.node:
        for name in node.input:
            dq = dq_of.get(name)
            if dq is not None:
                zero = constants[dq.input[2]]
                found.setdefault(node.name, []).append(
                    (zero.data_type, float(numpy_helper.to_array(constants[dq.input[1]])),
                     int(numpy_helper.to_array(zero))))
    return found


def test_joins_and_upsampling_get_zero_points_0_and_convolutions_keep_uint8() -> None:
    model, quantized = _quantized(Target.OPENVINO)
    inputs = _dequantized_inputs(quantized)
    for conv in ("lateral", "down", "head"):
        assert [kind for kind, _, _ in inputs[conv]] == [TensorProto.UINT8], conv
    assert all(kind == TensorProto.INT8 and zero == 0 for kind, _, zero in inputs["join"]), inputs["join"]
    (resize_in,) = inputs["upsample"]
    assert resize_in[0] == TensorProto.INT8 and resize_in[2] == 0
    up = next(entry for entry in inputs["join"] if abs(entry[1] - resize_in[1]) < 1e-9)  # one scale both sides
    assert up[1] == resize_in[1]
    x = RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)
    reference = run(model, x)
    _, as_cpu = _quantized(Target.CPU)
    error = np.abs(run(quantized, x, "all") - reference).max()
    # Zero point 0 spends at most one bit of a join's range; the result stays within 2x the uint8 flavour's error
    # and far inside the outputs' own range.
    assert error < 2 * np.abs(run(as_cpu, x, "all") - reference).max() + 1e-3, error
    assert error < 0.05 * np.abs(reference).max(), error


def test_the_cpu_flavour_keeps_uint8_everywhere() -> None:
    _, quantized = _quantized(Target.CPU)
    kinds = {kind for entries in _dequantized_inputs(quantized).values() for kind, _, _ in entries}
    assert kinds == {TensorProto.UINT8}
    assert zero_point_free_joins(quantized) > 0  # the same graph has joins the openvino flavour would rewrite


def test_a_tensor_a_convolution_reads_is_never_rewritten_nor_its_upsampled_copy() -> None:
    """The strided map is read by a convolution and by the Resize: its pair stays uint8, and so does the pair on
    the Resize's output (one group: OpenVINO drops the requantization only while both sides agree), while the
    lateral's output, which only the Add reads, is rewritten."""
    _, quantized = _quantized(Target.OPENVINO, fpn(RNG, side_reader="down"), rewrite=False)
    before = _dequantized_inputs(quantized)
    assert zero_point_free_joins(quantized) == 1
    after = _dequantized_inputs(quantized)
    for name in ("side_head", "upsample", "head", "lateral", "down"):
        assert after[name] == before[name], name
    changed = [entry for entry in after["join"] if entry not in before["join"]]
    assert len(changed) == 1 and changed[0][0] == TensorProto.INT8 and changed[0][2] == 0

