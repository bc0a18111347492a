"""A tiny FPN level, built with onnx.helper from a seeded generator: what DBNet's and PP-PicoDet's necks do with a
backbone map (a lateral 1x1 convolution, a strided convolution upsampled back, the two joined by an Add or a
Concat and read by a head convolution)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _init(array: np.ndarray, name: str) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array, dtype=np.float32), name)


def fpn(rng: np.random.Generator, *, join: str = "Add", down_scale: float = 0.2,
        side_reader: str | None = None) -> onnx.ModelProto:
    """stem Conv -> (lateral 1x1 Conv, strided Conv -> nearest Resize x2) -> ``join`` (Add or Concat) -> head Conv,
    input [1, 3, 16, 16]. The lateral map and the upsampled one are read by the join alone, the join's output by the
    head. ``down_scale``: the strided convolution's weight scale (its map's range against the lateral's, which is
    0.4). ``side_reader``: "down" or "lateral", whose map a second output convolves too (an FPN level's own head)."""
    joined_channels = 16 if join == "Concat" else 8
    inits = [_init(rng.standard_normal((8, 3, 3, 3)) * 0.4, "w_stem"), _init(rng.standard_normal(8), "b_stem"),
             _init(rng.standard_normal((8, 8, 1, 1)) * 0.4, "w_lat"), _init(rng.standard_normal(8), "b_lat"),
             _init(rng.standard_normal((8, 8, 3, 3)) * down_scale, "w_down"), _init(rng.standard_normal(8), "b_down"),
             _init(rng.standard_normal((4, joined_channels, 3, 3)) * 0.2, "w_head"), _init(np.zeros(4), "b_head"),
             _init(np.array([1.0, 1.0, 2.0, 2.0]), "scales")]
    join_node = (helper.make_node("Concat", ["lateral", "up"], ["joined"], name="join", axis=1) if join == "Concat"
                 else helper.make_node("Add", ["lateral", "up"], ["joined"], name="join"))
    nodes = [
        helper.make_node("Conv", ["x", "w_stem", "b_stem"], ["stem"], name="stem", pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["stem", "w_lat", "b_lat"], ["lateral"], name="lateral"),
        helper.make_node("Conv", ["stem", "w_down", "b_down"], ["down"], name="down", pads=[1, 1, 1, 1],
                         strides=[2, 2]),
        helper.make_node("Resize", ["down", "", "scales"], ["up"], name="upsample", mode="nearest"),
        join_node,
        helper.make_node("Conv", ["joined", "w_head", "b_head"], ["y"], name="head", pads=[1, 1, 1, 1]),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])]
    if side_reader is not None:
        size = 8 if side_reader == "down" else 16
        inits.append(_init(rng.standard_normal((4, 8, 3, 3)) * 0.2, "w_side"))
        nodes.append(helper.make_node("Conv", [side_reader, "w_side", "b_head"], ["y_side"], name="side_head",
                                      pads=[1, 1, 1, 1]))
        outputs.append(helper.make_tensor_value_info("y_side", TensorProto.FLOAT, [1, 4, size, size]))
    graph = helper.make_graph(nodes, "fpn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
