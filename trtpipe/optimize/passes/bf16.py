"""Pass ``bf16``: the weights of convolutions and matrix products stored as BF16, read through a Cast.

BF16 keeps FP32's exponent range (nothing overflows, so no node needs to stay FP32) and 8 bits of mantissa. The
graph carries the precision: BF16 weight initializers (half the file) behind Casts to FP32, activations FP32.
ONNX Runtime runs it as FP32 arithmetic on BF16-rounded weights; OpenVINO, which the manifest names as its
runtime, folds the Casts and runs BF16 kernels on CPUs with AVX512-BF16 or AMX. The check here is against the
FP32 model on ONNX Runtime (the weights' rounding alone); the BF16 arithmetic's accuracy is what bench measures
on OpenVINO.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from trtpipe import console
from trtpipe.errors import VerificationFailed
from trtpipe.optimize.passes.context import PassContext
from trtpipe.optimize.records import Bf16Record

WEIGHTED_OPS = {"Conv": 1, "ConvTranspose": 1, "Gemm": 1, "MatMul": 1}  # op -> index of its weight input
MIN_COSINE = 0.999  # 8 mantissa bits: rounding the weights alone keeps the logits' direction to three nines


def to_bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """FP32 values as BF16 bit patterns (uint16), rounded to nearest even."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounding = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return ((bits + rounding) >> np.uint32(16)).astype(np.uint16)


def convert_weights(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``model`` whose weighted nodes read BF16 initializers through Casts; the converted names."""
    result = onnx.ModelProto()
    result.CopyFrom(model)
    graph = result.graph
    initializers = {init.name: init for init in graph.initializer}
    wanted = []
    for node in graph.node:
        index = WEIGHTED_OPS.get(node.op_type)
        if index is not None and len(node.input) > index:
            name = node.input[index]
            init = initializers.get(name)
            if init is not None and init.data_type == onnx.TensorProto.FLOAT and name not in wanted:
                wanted.append(name)
    casts = []
    for name in wanted:
        init = initializers[name]
        values = numpy_helper.to_array(init)
        stored = onnx.TensorProto(name=f"{name}_bf16", data_type=onnx.TensorProto.BFLOAT16, dims=list(values.shape),
                                  raw_data=to_bfloat16_bits(values).tobytes())
        graph.initializer.remove(init)
        graph.initializer.append(stored)
        casts.append(onnx.helper.make_node("Cast", [stored.name], [name], name=f"{name}_to_fp32",
                                           to=onnx.TensorProto.FLOAT))
    nodes = list(graph.node)
    del graph.node[:]
    graph.node.extend(casts + nodes)
    return result, wanted


def apply(model: onnx.ModelProto, context: PassContext) -> onnx.ModelProto:
    converted, names = convert_weights(model)
    check = context.compare(model, converted, context.evaluation or context.probe)
    context.record(Bf16Record(len(names), check))
    if check.cosine < MIN_COSINE:
        raise VerificationFailed(f"BF16 weights change the output beyond rounding (cosine {check.cosine:.5f} < "
                                 f"{MIN_COSINE}): {check.line()}.")
    console.success(f"BF16 weights ({len(names)} tensors) vs FP32: {check.line()}")  # only once it has passed
    return converted
