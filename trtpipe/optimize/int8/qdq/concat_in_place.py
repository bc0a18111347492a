"""One scale into each quantized Concat and no requantization after it (the openvino target).

ONNX Runtime's quantizer gives each input of a Concat its own scale and the Concat's output another (the union of
theirs), so the graph reads ``DQ(a), DQ(b) -> Concat -> Q -> DQ -> Conv``. OpenVINO's low-precision transformations
move that output FakeQuantize back onto every input, where each input's own FakeQuantize already is: two
requantizations per input, fused into whatever writes it (an upsampling, a residual join). On PP-OCRv4's DBNet
(AMD EPYC AVX-512 VNNI, 2 threads) that was one of the two structural differences left from NNCF's graph (the
other: a depthwise gain that could not fold, ``scale_depthwise.py``), whose Concat inputs share one scale and whose
Concat output is not quantized again; with the same parameters on the inputs and on the output, OpenVINO still
requantized each input twice.

So where every input of a Concat is a Q/DQ pair with zero point 0 (``zero_points.py`` makes them so where no
weighted op reads them) read by that Concat alone, and only a Q reads its output, the inputs take the widest
input's scale and the output's Q/DQ goes: its readers read the Concat of the dequantized inputs, which is exact in
that one scale. Nothing is lost that the output's quantization did not already lose: its scale covered the union of
the inputs' ranges, so it was at least as coarse as the widest input's (up to the step between its asymmetric
range and the symmetric one). A Resize before a Concat input keeps its input's scale and requantizes to the shared
one, as in NNCF's graphs.

The Concat's output keeps the type its readers were given: where its inputs are int8 (``zero_points.py`` makes
them so, since only the Concat reads them) and its output uint8 (a convolution reads it), it is left as it is.
Rewritten, a convolution would read a signed tensor, which this placement never gives one elsewhere; OpenVINO 2026.4
ran such a Concat and the upsampling before it as uint8 (its runtime model says so), clipping every negative value to
zero, on every ISA: PP-PicoDet's openvino file, whose FPN concatenates HardSwish outputs (down to -0.375), lost
nearly all its detections on OpenVINO while ONNX Runtime ran the same file as closely as the cpu one.

Only the openvino target does this: ONNX Runtime fuses a convolution into QLinearConv only with a Q/DQ right
before it, so on ONNX Runtime the convolution after such a Concat runs in float (measured: docs/results/int8-design.md,
'Zero points and Concats in place'; the cpu file, which keeps the quantizer's layout, is the one for ONNX
Runtime).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from trtpipe.graph_index import producers_of, readers_of


def concatenate_in_place(model: onnx.ModelProto) -> list[str]:
    """Rewrite each Concat that qualifies (module docstring) in place; returns the names of those rewritten."""
    graph = model.graph
    constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    producer = producers_of(graph)
    readers = readers_of(graph)
    outputs = {o.name for o in graph.output}
    rewritten: list[str] = []
    dropped: list[onnx.NodeProto] = []
    for concat in [n for n in graph.node if n.op_type == "Concat"]:
        found = [_input_pair(name, concat, constants, producer, readers) for name in concat.input]
        pairs = [pair for pair in found if pair is not None]
        after = readers.get(concat.output[0], [])
        if not pairs or len(pairs) != len(found) or concat.output[0] in outputs or not after \
                or any(r.op_type != "QuantizeLinear" for r in after):
            continue
        kinds = {constants[quantize.input[2]].dtype for quantize, _ in pairs}
        if len(kinds) != 1:
            continue  # uint8 and int8 inputs: no one zero-point type serves both
        if any(len(q.input) < 3 or q.input[2] not in constants or constants[q.input[2]].dtype not in kinds
               for q in after):
            continue  # its readers were given another type (int8 inputs, a uint8 output): module docstring
        widest, _ = max(pairs, key=lambda pair: float(constants[pair[0].input[1]]))
        scale, zero = widest.input[1], widest.input[2]
        for quantize, dequantize in pairs:
            for node in (quantize, dequantize):
                node.input[1], node.input[2] = scale, zero
        for quantize in after:
            for dequantize in readers.get(quantize.output[0], []):
                for reader in readers.get(dequantize.output[0], []):
                    reader.input[:] = [concat.output[0] if i == dequantize.output[0] else i for i in reader.input]
                dropped.append(dequantize)
            dropped.append(quantize)
        rewritten.append(concat.name)
    for node in dropped:
        graph.node.remove(node)
    return rewritten


def concatenated_in_place(model: onnx.ModelProto) -> list[str]:
    """The Concats of a quantized ``model`` that run as ``concatenate_in_place`` leaves them: every input dequantized
    with the same scale and zero point, and no Q reading the output (for the manifest's placement record)."""
    producer, readers = producers_of(model.graph), readers_of(model.graph)
    found = []
    for concat in (n for n in model.graph.node if n.op_type == "Concat"):
        sources = [producer.get(name) for name in concat.input]
        dequantized = [s for s in sources if s is not None and s.op_type == "DequantizeLinear"]
        if len(dequantized) == len(sources) and len({tuple(s.input[1:3]) for s in dequantized}) == 1 \
                and not any(r.op_type == "QuantizeLinear" for r in readers.get(concat.output[0], [])):
            found.append(concat.name)
    return found


def _input_pair(name: str, concat: onnx.NodeProto, constants: dict[str, np.ndarray],
                producer: dict[str, onnx.NodeProto], readers: dict[str, list[onnx.NodeProto]],
                ) -> tuple[onnx.NodeProto, onnx.NodeProto] | None:
    """The (Q, DQ) pair in front of ``concat``'s input ``name``: per tensor, zero point 0, nothing else reading it;
    None otherwise."""
    dequantize = producer.get(name)
    if dequantize is None or dequantize.op_type != "DequantizeLinear" or readers.get(name) != [concat]:
        return None
    quantize = producer.get(dequantize.input[0])
    if quantize is None or quantize.op_type != "QuantizeLinear" or quantize.input[0] in constants \
            or readers.get(quantize.output[0]) != [dequantize] or len(quantize.input) < 3:
        return None
    scale, zero = (constants.get(quantize.input[i]) for i in (1, 2))
    if scale is None or zero is None or scale.size != 1 or zero.size != 1 or int(zero) != 0 \
            or list(dequantize.input[1:3]) != list(quantize.input[1:3]):
        return None
    return quantize, dequantize
