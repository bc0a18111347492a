"""What an x86 CPU without VNNI computes for a U8S8 layer, in numpy: int8 dot products that saturate at 16 bits.

Without VNNI, x86's int8 dot product is ``vpmaddubsw``: it multiplies uint8 activations by int8 weights and adds
adjacent pairs of products into int16 with saturation; ``vpmaddwd`` by ones then widens those pairs to int32 exactly.
A pair of uint8 x int8 products reaches 2 x 255 x 127 = 64770, beyond int16's 32767, so with full 8-bit weights a
layer's sum can clip wherever large activations meet large weights of one sign; with 7-bit weights (reduce_range, at
most 63) a pair stays within 2 x 255 x 63 = 32130 and never clips. VNNI (``vpdpbusd``) adds four products straight
into int32 and never clips. The activation zero point is compensated separately (exactly, in int32) by both
runtimes, so the pairs are of raw uint8 values. Depthwise convolutions do not go through ``vpmaddubsw``: ONNX
Runtime's (MLAS) and oneDNN's depthwise kernels widen both operands to 16 bits first, subtract the zero point, and
accumulate each product in 32 bits, so they are exact here too.

ONNX Runtime has no switch that makes a VNNI CPU compute as an AVX2 one (OpenVINO's oneDNN honours
``ONEDNN_MAX_CPU_ISA``), so this is how an artifact's accuracy on such a CPU is measured on any machine:
``emulate`` runs a Q/DQ ONNX with ONNX's reference evaluator, every quantized convolution and Gemm (uint8 activations
into int8 weights through Q/DQ) computed as ``u8s8_dot`` would. Pairs are taken along the reduction in the order the
x86 kernels lay it out: input channels innermost (NHWC), then the kernel window. A reference evaluator is slow: it is
for small models and a handful of samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from trtpipe.graph_index import producers_of
from trtpipe.onnx_info import topologically_sorted

DOMAIN = "trtpipe.emulation"
INT16_MIN, INT16_MAX = -(2**15), 2**15 - 1
CHUNK_ELEMENTS = 1 << 24  # int32 products per chunk of rows (64 MiB)


def u8s8_dot(activations: np.ndarray, weights: np.ndarray, *, vnni: bool) -> np.ndarray:
    """Rows of uint8 ``activations`` (M, K) against rows of int8 ``weights`` (N, K): int32 sums (M, N), as a CPU
    with VNNI (exact) or without it (adjacent pairs of products clipped to int16, then summed in int32) computes
    them."""
    a = np.asarray(activations, dtype=np.int32)
    w = np.asarray(weights, dtype=np.int32)
    if vnni:
        return a @ w.T
    if a.shape[1] % 2:
        a, w = np.pad(a, ((0, 0), (0, 1))), np.pad(w, ((0, 0), (0, 1)))
    out = np.empty((a.shape[0], w.shape[0]), dtype=np.int32)
    rows = max(1, CHUNK_ELEMENTS // max(1, w.shape[0] * a.shape[1] // 2))
    for start in range(0, a.shape[0], rows):
        block = a[start : start + rows]
        pairs = block[:, None, 0::2] * w[None, :, 0::2] + block[:, None, 1::2] * w[None, :, 1::2]
        out[start : start + rows] = np.clip(pairs, INT16_MIN, INT16_MAX).sum(axis=2, dtype=np.int32)
    return out


def saturated_pairs(activations: np.ndarray, weights: np.ndarray) -> int:
    """How many adjacent product pairs of ``u8s8_dot`` leave int16 (0: a CPU without VNNI computes it exactly)."""
    a = np.asarray(activations, dtype=np.int32)
    w = np.asarray(weights, dtype=np.int32)
    if a.shape[1] % 2:
        a, w = np.pad(a, ((0, 0), (0, 1))), np.pad(w, ((0, 0), (0, 1)))
    count = 0
    rows = max(1, CHUNK_ELEMENTS // max(1, w.shape[0] * a.shape[1] // 2))
    for start in range(0, a.shape[0], rows):
        block = a[start : start + rows]
        pairs = block[:, None, 0::2] * w[None, :, 0::2] + block[:, None, 1::2] * w[None, :, 1::2]
        count += int(np.count_nonzero((pairs < INT16_MIN) | (pairs > INT16_MAX)))
    return count


def conv_u8s8(x: np.ndarray, x_zero: int, w: np.ndarray, *, group: int = 1, strides: Sequence[int] = (1, 1),
              pads: Sequence[int] = (0, 0, 0, 0), dilations: Sequence[int] = (1, 1), vnni: bool) -> np.ndarray:
    """A 2-D convolution of uint8 ``x`` (N, C, H, W; zero point ``x_zero``) with int8 ``w`` (O, C/group, kH, kW): the
    int32 accumulator (N, O, oH, oW) of ``sum((x - x_zero) * w)`` as the CPU computes it (module docstring)."""
    n, c, h, wid = x.shape
    o, cg, kh, kw = w.shape
    top, left, bottom, right = pads
    padded = np.pad(x.astype(np.int32), ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=x_zero)
    oh = (h + top + bottom - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (wid + left + right - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    windows = np.empty((n, oh, ow, kh, kw, c), dtype=np.int32)  # NHWC patches: channels innermost
    for i in range(kh):
        for j in range(kw):
            rows = padded[:, :, i * dilations[0] : i * dilations[0] + strides[0] * oh : strides[0],
                          j * dilations[1] : j * dilations[1] + strides[1] * ow : strides[1]]
            windows[:, :, :, i, j, :] = rows.transpose(0, 2, 3, 1)
    out = np.empty((n * oh * ow, o), dtype=np.int32)
    per_group = o // group
    depthwise = cg == 1 and group == c and group > 1
    for g in range(group):
        cols = windows[..., g * cg : (g + 1) * cg].reshape(n * oh * ow, kh * kw * cg)
        kernel = w[g * per_group : (g + 1) * per_group].transpose(0, 2, 3, 1).reshape(per_group, kh * kw * cg)
        kernel = kernel.astype(np.int32)
        if depthwise:  # widened to 16 bits, zero point subtracted first, exact (module docstring)
            out[:, g * per_group : (g + 1) * per_group] = (cols - x_zero) @ kernel.T
        else:
            out[:, g * per_group : (g + 1) * per_group] = (u8s8_dot(cols, kernel, vnni=vnni)
                                                           - x_zero * kernel.sum(axis=1)[None, :])
    return out.reshape(n, oh, ow, o).transpose(0, 3, 1, 2)


def _constant(model: onnx.ModelProto, name: str) -> np.ndarray | None:
    for tensor in model.graph.initializer:
        if tensor.name == name:
            return numpy_helper.to_array(tensor)
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output[0] == name:
            return numpy_helper.to_array(node.attribute[0].t)
    return None


def emulated(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """A copy of ``model`` whose quantized convolutions and Gemms (uint8 activation and int8 weight, each through a
    DequantizeLinear) read the integers themselves through this module's ops; and how many it rewrote."""
    model = topologically_sorted(onnx.ModelProto.FromString(model.SerializeToString()))
    producer = producers_of(model.graph)
    rewritten = 0
    for index, node in enumerate(model.graph.node):
        if node.op_type not in ("Conv", "Gemm") or len(node.input) < 2:
            continue
        x_dq, w_dq = producer.get(node.input[0]), producer.get(node.input[1])
        if x_dq is None or w_dq is None or x_dq.op_type != "DequantizeLinear" or w_dq.op_type != "DequantizeLinear":
            continue
        x_zero = _constant(model, x_dq.input[2]) if len(x_dq.input) > 2 else None
        w_int = _constant(model, w_dq.input[0])
        if x_zero is None or x_zero.dtype != np.uint8 or w_int is None or w_int.dtype != np.int8:
            continue
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if attributes.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            continue  # explicit pads only (what trtpipe's converter and ONNX Runtime's quantizer write)
        if node.op_type == "Gemm" and (attributes.get("transA", 0) or attributes.get("alpha", 1.0) != 1.0
                                       or attributes.get("beta", 1.0) != 1.0):
            continue
        inputs = [x_dq.input[0], x_dq.input[1], x_dq.input[2], w_dq.input[0], w_dq.input[1], *node.input[2:3]]
        kept = {k: v for k, v in attributes.items() if k in ("group", "strides", "pads", "dilations", "transB")}
        replacement = helper.make_node(f"Saturating{node.op_type}", inputs, list(node.output), name=node.name,
                                       domain=DOMAIN, **kept)
        model.graph.node.remove(node)
        model.graph.node.insert(index, replacement)
        rewritten += 1
    if rewritten and not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    return model, rewritten


def emulate(model: onnx.ModelProto, inputs: dict[str, np.ndarray], *, vnni: bool) -> list[np.ndarray]:
    """``model``'s outputs for ``inputs`` with every quantized convolution and Gemm computed as a CPU with (``vnni``)
    or without VNNI computes it, the rest as ONNX's reference evaluator does."""
    from onnx.reference import ReferenceEvaluator

    rewritten, _ = emulated(model)
    session: Any = ReferenceEvaluator(rewritten, new_ops=[*_saturating_ops(vnni), *_opset13_qdq_ops()])
    return list(session.run(None, inputs))


def _scaled(acc: np.ndarray, x_scale: np.ndarray, w_scale: np.ndarray, bias: np.ndarray | None,
            axis: int) -> np.ndarray:
    """An integer accumulator back in float: times the activation's scale and the weights' (per output channel,
    along ``axis``, where they are per channel), plus the bias."""
    shape = [1] * acc.ndim
    shape[axis] = -1
    out = acc.astype(np.float32) * np.float32(x_scale) * np.asarray(w_scale, np.float32).reshape(
        shape if np.ndim(w_scale) else [])
    return out + (np.asarray(bias, np.float32).reshape(shape) if bias is not None else 0)


def _broadcast(value: np.ndarray, like: np.ndarray, axis: int | None) -> np.ndarray:
    """A Q/DQ scale or zero point shaped to broadcast against ``like``: a scalar as it is, a vector along ``axis``
    (ONNX's default, 1, when none is given)."""
    if np.ndim(value) == 0:
        return np.asarray(value)
    shape = [1] * like.ndim
    shape[axis if axis is not None else 1] = -1
    return np.asarray(value).reshape(shape)


def _saturating_ops(vnni: bool) -> list[type]:
    """The reference evaluator's implementations of :func:`emulated`'s SaturatingConv and SaturatingGemm: integer
    accumulation as a CPU with (``vnni``) or without VNNI does it, then scaled back to float."""
    from onnx.reference.op_run import OpRun

    class SaturatingConv(OpRun):
        op_domain = DOMAIN

        def _run(self, x, x_scale, x_zero, w, w_scale, bias=None, group=None, strides=None, pads=None,
                 dilations=None):
            acc = conv_u8s8(x, int(x_zero), w, group=group or 1, strides=strides or (1, 1),
                            pads=pads or (0, 0, 0, 0), dilations=dilations or (1, 1), vnni=vnni)
            return (_scaled(acc, x_scale, w_scale, bias, 1),)

    class SaturatingGemm(OpRun):
        op_domain = DOMAIN

        def _run(self, x, x_scale, x_zero, w, w_scale, bias=None, transB=None):
            weights = w if transB else w.T
            acc = u8s8_dot(x, weights, vnni=vnni) - int(x_zero) * weights.astype(np.int32).sum(axis=1)[None, :]
            return (_scaled(acc, x_scale, w_scale, bias, 1),)

    return [SaturatingConv, SaturatingGemm]


def _opset13_qdq_ops() -> list[type]:
    """DequantizeLinear and QuantizeLinear as opset 13 defines them (per tensor or per axis), for the reference
    evaluator, which implements Q/DQ from opset 19 only."""
    from onnx.reference.op_run import OpRun

    class DequantizeLinear(OpRun):
        op_domain = ""

        def _run(self, x, scale, zero=None, axis=None, **_: Any):
            shifted = x.astype(np.float32) - (_broadcast(zero, x, axis).astype(np.float32) if zero is not None else 0)
            return ((shifted * _broadcast(scale, x, axis)).astype(np.float32),)

    class QuantizeLinear(OpRun):
        op_domain = ""

        def _run(self, x, scale, zero=None, axis=None, **_: Any):
            kind = zero.dtype if zero is not None else np.dtype(np.uint8)
            info = np.iinfo(kind)
            value = np.rint(x / _broadcast(scale, x, axis)) + (_broadcast(zero, x, axis).astype(np.float32)
                                                               if zero is not None else 0)
            return (np.clip(value, info.min, info.max).astype(kind),)

    return [DequantizeLinear, QuantizeLinear]
