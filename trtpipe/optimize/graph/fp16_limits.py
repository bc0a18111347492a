"""What FP16 cannot hold, and the round trips ONNX Runtime's float16 converter leaves between FP32-kept nodes.

Shared by the FP16 pass and INT8's high-precision layers (``int8/steps/high_precision/algorithm.py``), which both
keep a node FP32 for the same reasons and convert with the same converter; a module of its own so that ``int8/``
never imports a pass."""

from __future__ import annotations

import onnx

from trtpipe.graph_index import readers_of

FP16_MAX = 65504.0
# Headroom for inputs the calibration data did not show: a node whose activations pass half of FP16's range
# on calibration data is likely to overflow on some real input.
OVERFLOW_MARGIN = 0.5

UNSAFE_FP16_OPS = {
    "Exp": "exponential overflows FP16 above ~11",
    "Log": "loses precision near 0 in FP16",
    "Pow": "overflows or underflows in FP16",
    "Reciprocal": "overflows in FP16 for small inputs",
    "Softmax": "exponentials overflow in FP16",
    "LogSoftmax": "exponentials overflow in FP16",
    "ReduceSum": "long sums lose precision in FP16",
    "ReduceSumSquare": "squares overflow FP16",
    "ReduceL2": "squares overflow FP16",
    "ReduceLogSumExp": "exponentials overflow in FP16",
    "ReduceProd": "products overflow FP16",
    "CumSum": "long sums lose precision in FP16",
    "LayerNormalization": "variance of large activations overflows FP16",
    "InstanceNormalization": "variance of large activations overflows FP16",
    "GroupNormalization": "variance of large activations overflows FP16",
}


def remove_fp16_round_trips(model: onnx.ModelProto) -> int:
    """Remove Cast-to-FP16 nodes whose every reader casts straight back to FP32.

    ONNX Runtime's float16 converter casts each FP32-kept node's output to FP16 and back before the next kept
    node, so a value FP16 cannot hold (the reason the nodes were kept) still overflows between them. The readers
    of such a round trip are rewired to the FP32 tensor, and both casts go. A round trip that starts from another
    type (an integer Cast to float that the converter made a Cast to FP16, read by a node kept FP32) keeps its
    Cast to FP32, which then reads the integer itself: only FP32 may take the FP32 tensor's place, and FP16 would
    round integers past 2048 on the way. Returns how many round trips it removed.
    """
    graph = model.graph
    readers = readers_of(graph)
    outputs = {o.name for o in graph.output}
    types = _element_types(graph)

    def cast_to(node: onnx.NodeProto) -> int | None:
        return next((a.i for a in node.attribute if a.name == "to"), None) if node.op_type == "Cast" else None

    dead: set[int] = set()
    removed = 0
    for down in graph.node:
        if cast_to(down) != onnx.TensorProto.FLOAT16 or down.output[0] in outputs:
            continue
        ups = readers.get(down.output[0], [])
        if not ups or any(cast_to(up) != onnx.TensorProto.FLOAT or up.output[0] in outputs for up in ups):
            continue
        source = down.input[0]
        for up in ups:
            if types.get(source) != onnx.TensorProto.FLOAT:
                up.input[0] = source  # a Cast from the source's own type to FP32
                continue
            for reader in readers.get(up.output[0], []):
                for index, name in enumerate(reader.input):
                    if name == up.output[0]:
                        reader.input[index] = source
            dead.add(id(up))
        dead.add(id(down))
        removed += 1
    kept = [n for n in graph.node if id(n) not in dead]
    del graph.node[:]
    graph.node.extend(kept)
    return removed


def _element_types(graph: onnx.GraphProto) -> dict[str, int]:
    """The element type of each tensor ``graph`` declares or a Cast writes. The converter keeps the value infos of
    the tensors it retypes; a tensor missing here has an unknown type."""
    found = {value.name: value.type.tensor_type.elem_type
             for value in [*graph.value_info, *graph.input, *graph.output] if value.type.HasField("tensor_type")}
    found |= {tensor.name: tensor.data_type for tensor in graph.initializer}
    for node in graph.node:
        to = next((a.i for a in node.attribute if a.name == "to"), None) if node.op_type == "Cast" else None
        if to is not None:
            found[node.output[0]] = to
    return found
