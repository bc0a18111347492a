"""Pooling gets Q/DQ on the tensorrt target (#26, defect 4): ONNX Runtime's quantizer writes Q/DQ on a MaxPool's or
AveragePool's input only when that input is already quantized, which TensorRT's placement (no Q/DQ on a
convolution's output) never leaves it, so every pool stayed float and TensorRT ran the convolution before it with a
float output. Checked on Conv -> Relu -> pool -> Conv against the FP32 model on ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from tests.builders import minmax_int8, x_to_y
from tests.optimize.conftest import run
from trtpipe.conformance.check import check_model
from trtpipe.optimize.int8.qdq.profiles import profile_for
from trtpipe.vocab import Target

RNG = np.random.default_rng(3)


def _pooled(pool: str) -> onnx.ModelProto:
    """Conv 3->8 -> Relu -> ``pool`` -> Conv 8->4, the pool between two INT8 convolutions."""
    window = {} if pool.startswith("Global") else {"kernel_shape": [2, 2], "strides": [2, 2]}
    inits = [numpy_helper.from_array(RNG.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(RNG.standard_normal(8).astype(np.float32), "b1"),
             numpy_helper.from_array(RNG.standard_normal((4, 8, 1, 1)).astype(np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node(pool, ["r1"], ["p"], name="pool", **window),
             helper.make_node("Conv", ["p", "w2"], ["y"], name="conv2")]
    side = 1 if pool.startswith("Global") else 4
    return x_to_y(nodes, inits, ["n", 3, 8, 8], ["n", 4, side, side], name="pool")


@pytest.mark.parametrize("pool", ["AveragePool", "MaxPool", "GlobalAveragePool"])
def test_a_pool_reads_and_writes_through_qdq_on_tensorrt(pool: str) -> None:
    model = _pooled(pool)
    batches = [RNG.standard_normal((4, 3, 8, 8)).astype(np.float32) for _ in range(4)]
    quantized = minmax_int8(model, batches, profile_for(Target.TENSORRT), symmetric=True)
    producer = {o: n for n in quantized.graph.node for o in n.output}
    node = next(n for n in quantized.graph.node if n.name == "pool")
    read = producer[node.input[0]]
    assert read.op_type == "DequantizeLinear" and producer[read.input[0]].op_type == "QuantizeLinear"
    assert producer[read.input[0]].input[0] == "r1"  # the Relu's output is quantized: conv1 writes INT8
    readers = [n for n in quantized.graph.node if node.output[0] in n.input]
    assert [n.op_type for n in readers] == ["QuantizeLinear"]  # the pool's output is conv2's quantized input
    assert check_model(quantized, Target.TENSORRT).passed
    x = RNG.standard_normal((8, 3, 8, 8)).astype(np.float32)
    reference, candidate = run(model, x), run(quantized, x, "disable")
    cosine = float(np.sum(reference * candidate) / (np.linalg.norm(reference) * np.linalg.norm(candidate)))
    assert cosine > 0.999, cosine
    assert np.abs(candidate - reference).mean() < 0.01 * np.abs(reference).max()
