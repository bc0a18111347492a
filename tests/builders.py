"""The ONNX models tests build with onnx.helper, in one place, importable from every test folder.

Three kinds of things live here:
- the pieces every hand-built graph needs (a float32 constant, a value info, the model wrapper with its opset and IR
  version, a model saved into a serving repository's layout), so a test's own builder says only what its graph is;
- the two steps many INT8 tests run on such a graph (min/max calibration then quantization, and the op types ONNX
  Runtime's CPU provider actually runs after its graph optimisations);
- the small seeded models that tests in more than one file or folder read (an FPN level, a Conv -> HardSwish ->
  Conv, models with two inputs or NHWC uint8 pixels, and serving's failure models).

A builder used by one test file stays in that file, beside the tests that explain why its graph has that shape.
Every model here is real and runs in a real ONNX Runtime session; nothing here stands in for a dependency. Seeded
builders take the generator from their caller, so each test file keeps drawing from its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

if TYPE_CHECKING:
    from trtpipe.optimize.int8.qdq.profiles import QuantProfile

FLOAT = TensorProto.FLOAT
Shape = Sequence[int | str | None] | None


# --- pieces of a graph ---------------------------------------------------------------------------------------------

def constant(array: np.ndarray | Sequence[float] | float, name: str) -> onnx.TensorProto:
    """A float32 initializer named ``name`` (weights, biases and scalar operands alike)."""
    return numpy_helper.from_array(np.asarray(array, dtype=np.float32), name)


def tensor(name: str, shape: Shape, elem_type: int = FLOAT) -> onnx.ValueInfoProto:
    """A graph input or output: ``shape`` mixes fixed sizes and named (dynamic) axes; None leaves it unknown."""
    return helper.make_tensor_value_info(name, elem_type, None if shape is None else list(shape))


def onnx_model(nodes: Sequence[onnx.NodeProto], initializers: Sequence[onnx.TensorProto],
               inputs: Sequence[onnx.ValueInfoProto], outputs: Sequence[onnx.ValueInfoProto], *, name: str = "g",
               opset: int = 17, ir_version: int | None = 9) -> onnx.ModelProto:
    """The graph as a model of the default domain's ``opset``. ``ir_version`` is pinned (9 by default) so a model
    loads in the ONNX Runtime the project installs whatever IR version the installed onnx writes; None leaves
    onnx's own."""
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), list(initializers))
    pinned = {} if ir_version is None else {"ir_version": ir_version}
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], **pinned)


def x_to_y(nodes: Sequence[onnx.NodeProto], initializers: Sequence[onnx.TensorProto], x_shape: Shape, y_shape: Shape,
           *, name: str = "g", opset: int = 17, ir_version: int | None = 9) -> onnx.ModelProto:
    """The usual test graph: one float input ``x`` and one float output ``y`` (see ``onnx_model``)."""
    return onnx_model(nodes, initializers, [tensor("x", x_shape)], [tensor("y", y_shape)], name=name, opset=opset,
                      ir_version=ir_version)


def save_in_repository(graph: onnx.GraphProto, repository: Path, name: str) -> Path:
    """``graph`` as ``repository/name/1/model.onnx`` (opset 18, IR 9): the layout ``trtpipe serve`` reads."""
    path = repository / name / "1" / "model.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9), path)
    return path


# --- steps INT8 tests run on those graphs --------------------------------------------------------------------------

def minmax_int8(model: onnx.ModelProto, batches: Sequence[np.ndarray], profile: QuantProfile, *,
                symmetric: bool) -> onnx.ModelProto:
    """``model`` calibrated by min/max on ``batches`` and quantized with ``profile``'s placement: the plainest INT8
    graph trtpipe writes, which the tests of each rewrite start from."""
    from trtpipe.optimize.int8.calibration.calibrate import calibrate
    from trtpipe.optimize.int8.qdq.quantize import quantize
    from trtpipe.vocab import CalibMethod

    return quantize(model, calibrate(model, list(batches), CalibMethod.MINMAX, symmetric=symmetric), profile)


def cpu_optimized_ops(model: onnx.ModelProto, folder: Path) -> list[str]:
    """The op types ONNX Runtime's CPU provider runs after its graph optimisations (its QDQ fusions into integer
    kernels), read from the optimised model it writes into ``folder``."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.optimized_model_filepath = str(folder / "optimized.onnx")
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return [node.op_type for node in onnx.load(options.optimized_model_filepath).graph.node]


# --- models shared across test files -------------------------------------------------------------------------------

def fpn(rng: np.random.Generator, *, join: str = "Add", down_scale: float = 0.2,
        side_reader: str | None = None) -> onnx.ModelProto:
    """A tiny FPN level (what DBNet's and PP-PicoDet's necks do with a backbone map): stem Conv -> (lateral 1x1 Conv,
    strided Conv -> nearest Resize x2) -> ``join`` (Add or Concat) -> head Conv, input [1, 3, 16, 16]. The lateral
    map and the upsampled one are read by the join alone, the join's output by the head. ``down_scale``: the strided
    convolution's weight scale (its map's range against the lateral's, which is 0.4). ``side_reader``: "down" or
    "lateral", whose map a second output convolves too (an FPN level's own head)."""
    joined_channels = 16 if join == "Concat" else 8
    inits = [constant(rng.standard_normal((8, 3, 3, 3)) * 0.4, "w_stem"), constant(rng.standard_normal(8), "b_stem"),
             constant(rng.standard_normal((8, 8, 1, 1)) * 0.4, "w_lat"), constant(rng.standard_normal(8), "b_lat"),
             constant(rng.standard_normal((8, 8, 3, 3)) * down_scale, "w_down"),
             constant(rng.standard_normal(8), "b_down"),
             constant(rng.standard_normal((4, joined_channels, 3, 3)) * 0.2, "w_head"), constant(np.zeros(4), "b_head"),
             constant(np.array([1.0, 1.0, 2.0, 2.0]), "scales")]
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
    outputs = [tensor("y", [1, 4, 16, 16])]
    if side_reader is not None:
        size = 8 if side_reader == "down" else 16
        inits.append(constant(rng.standard_normal((4, 8, 3, 3)) * 0.2, "w_side"))
        nodes.append(helper.make_node("Conv", [side_reader, "w_side", "b_head"], ["y_side"], name="side_head",
                                      pads=[1, 1, 1, 1]))
        outputs.append(tensor("y_side", [1, 4, size, size]))
    return onnx_model(nodes, inits, [tensor("x", [1, 3, 16, 16])], outputs, name="fpn")


def conv_hardswish(rng: np.random.Generator, bias_shift: float = -20.0) -> onnx.ModelProto:
    """Conv -> HardSwish -> Conv, input [1, 3, 16, 16], the first convolution's bias pushing most pre-activations far
    below -3 (where HardSwish gives 0), as BatchNorm-folded convolutions in PP-LCNet do: min/max calibration on
    inputs of scale 2 spans about [-40, 10]."""
    inits = [constant(rng.standard_normal((8, 3, 3, 3)) * 0.5, "w1"),
             constant(np.full(8, bias_shift) + np.arange(8) * 4, "b1"),
             constant(rng.standard_normal((4, 8, 1, 1)) * 0.5, "w2"), constant(np.zeros(4), "b2")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["pre"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("HardSwish", ["pre"], ["act"], name="hswish"),
             helper.make_node("Conv", ["act", "w2", "b2"], ["y"], name="conv2")]
    return x_to_y(nodes, inits, [1, 3, 16, 16], [1, 4, 16, 16], name="conv_hswish")


def conv_hardswish_ranges(model: onnx.ModelProto, rng: np.random.Generator) -> dict[str, tuple[float, float]]:
    """``conv_hardswish``'s tensor ranges as the cpu target calibrates them (min/max, asymmetric) on 16 inputs of
    scale 2 drawn from ``rng``."""
    from trtpipe.optimize.int8.calibration.calibrate import calibrate
    from trtpipe.vocab import CalibMethod

    batches = [rng.standard_normal((1, 3, 16, 16)).astype(np.float32) * 2 for _ in range(16)]
    return calibrate(model, batches, CalibMethod.MINMAX, symmetric=False)


MULTI_INPUT_OPSET = 17


def _weights(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
    return constant(rng.standard_normal(shape) * 0.3, name)


def two_input_onnx(path: Path) -> Path:
    """A model from elsewhere with two inputs, saved at ``path``: image [N, 3, 16, 16] float through two
    convolutions, aux [N, 4] float through a Gemm, added, then the classifier: logits [N, 10]."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["pooled"], name="pool"),
        helper.make_node("Flatten", ["pooled"], ["features"], name="flatten"),
        helper.make_node("Gemm", ["aux", "wa", "ba"], ["aux_features"], transB=1, name="aux_fc"),
        helper.make_node("Add", ["features", "aux_features"], ["joined"], name="join"),
        helper.make_node("Gemm", ["joined", "wo", "bo"], ["logits"], transB=1, name="fc"),
    ]
    inits = [_weights(rng, "w1", (8, 3, 3, 3)), _weights(rng, "b1", (8,)), _weights(rng, "w2", (8, 8, 3, 3)),
             _weights(rng, "b2", (8,)), _weights(rng, "wa", (8, 4)), _weights(rng, "ba", (8,)),
             _weights(rng, "wo", (10, 8)), _weights(rng, "bo", (10,))]
    model = onnx_model(nodes, inits, [tensor("image", ["N", 3, 16, 16]), tensor("aux", ["N", 4])],
                       [tensor("logits", ["N", 10])], name="two_input", opset=MULTI_INPUT_OPSET, ir_version=None)
    onnx.save(model, str(path))
    return path


def nhwc_uint8_onnx(path: Path, *, dynamic_size: bool = False) -> Path:
    """A model from elsewhere that takes pixels as they come, saved at ``path``: pixels [N, 16, 16, 3] uint8
    (``dynamic_size``: [N, H, W, 3]) -> Cast -> Transpose to NCHW -> /255 -> -0.5 -> Conv -> Relu -> pool ->
    classifier: logits [N, 10]."""
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("Cast", ["pixels"], ["as_float"], to=TensorProto.FLOAT, name="cast"),
        helper.make_node("Transpose", ["as_float"], ["nchw"], perm=[0, 3, 1, 2], name="to_nchw"),
        helper.make_node("Div", ["nchw", "scale"], ["scaled"], name="div"),
        helper.make_node("Sub", ["scaled", "mean"], ["normalised"], name="sub"),
        helper.make_node("Conv", ["normalised", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("GlobalAveragePool", ["r1"], ["pooled"], name="pool"),
        helper.make_node("Flatten", ["pooled"], ["features"], name="flatten"),
        helper.make_node("Gemm", ["features", "wo", "bo"], ["logits"], transB=1, name="fc"),
    ]
    side: list[int | str] = ["H", "W"] if dynamic_size else [16, 16]
    inits = [constant(255.0, "scale"), constant(0.5, "mean"), _weights(rng, "w1", (8, 3, 3, 3)),
             _weights(rng, "b1", (8,)), _weights(rng, "wo", (10, 8)), _weights(rng, "bo", (10,))]
    model = onnx_model(nodes, inits, [tensor("pixels", ["N", *side, 3], TensorProto.UINT8)],
                       [tensor("logits", ["N", 10])], name="nhwc_uint8", opset=MULTI_INPUT_OPSET, ir_version=None)
    onnx.save(model, str(path))
    return path


def two_input_data(path: Path, count: int = 40, *, labelled_by: Path | None = None) -> Path:
    """Data for ``two_input_onnx``: a .npz keyed by input name; with ``labelled_by`` (the model), labels that are its
    own FP32 top-1."""
    rng = np.random.default_rng(2)
    arrays = {"image": rng.standard_normal((count, 3, 16, 16), dtype=np.float32),
              "aux": rng.standard_normal((count, 4), dtype=np.float32)}
    if labelled_by is not None:
        import onnxruntime as ort

        session = ort.InferenceSession(str(labelled_by), providers=["CPUExecutionProvider"])
        arrays["labels"] = session.run(None, arrays)[0].argmax(1)
    np.savez(path, **arrays)
    return path


# Serving's failure models: ONNX Runtime failing the ways a served model can (on one request's data, on memory, and
# by outputs that do not keep the batch axis), each saved into a model repository.

TABLE = 10  # rows of the lookup table: an index past it is refused by ONNX Runtime's Gather (INVALID_ARGUMENT)


def lookup(repository: Path, name: str = "lookup") -> Path:
    """``output[i] = table[int(input[i])]`` for a table of 10: index 100 is refused, by this request's data alone."""
    table = numpy_helper.from_array(np.arange(TABLE, dtype=np.float32), "table")
    graph = helper.make_graph(
        [helper.make_node("Cast", ["input"], ["index"], to=TensorProto.INT64),
         helper.make_node("Gather", ["table", "index"], ["output"], axis=0)], "lookup",
        [tensor("input", ["n", 1])], [tensor("output", ["n", 1])], initializer=[table])
    return save_in_repository(graph, repository, name)


def regroup(repository: Path, name: str = "regroup", *, declared: str | None = "m") -> Path:
    """Reshape ``[n, k]`` to ``[-1, 4]``: ``n * k / 4`` rows, so the batch axis changes, and a ``k`` that is not a
    multiple of 4 is refused (ONNX Runtime: FAIL from the Reshape node, with its source path in the message).
    ``declared`` names the output's first dimension (None: left for ONNX Runtime, which cannot name it)."""
    shape = numpy_helper.from_array(np.array([-1, 4], np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["input", "shape"], ["output"])], "regroup",
        [tensor("input", ["n", "k"])], [tensor("output", [declared, 4])], initializer=[shape])
    return save_in_repository(graph, repository, name)


def wide(repository: Path, width: int, name: str = "wide") -> Path:
    """Each row expanded to ``width`` float32 values, then reduced to its maximum: a batch of ``n`` rows needs
    ``4 * width * n`` bytes at once, from a request of ``n`` numbers."""
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    shape = numpy_helper.from_array(np.array([1, width], np.int64), "width")
    graph = helper.make_graph(
        [helper.make_node("Expand", ["input", "width"], ["wide"]),
         helper.make_node("ReduceMax", ["wide", "axes"], ["output"], keepdims=1)], "wide",
        [tensor("input", ["n", 1])], [tensor("output", ["n", 1])], initializer=[axes, shape])
    return save_in_repository(graph, repository, name)


def ctc_reader(layout: str = "tnc", *, batch_free: bool = False, steps: int = 24) -> onnx.ModelProto:
    """A tiny CRNN-like CTC reader of ``x [n, 1, 8, steps]``: Conv, ReLU, the mean over the height, a projection to 37
    classes whose class 0 (the blank) leads at about half the timesteps. ``layout`` "tnc": logits ``[steps, n, 37]``,
    time first as PyTorch's CTC loss takes them (the batch axis named as the input's); "ntc": ``[n, steps, 37]`` with
    the batch axis named otherwise (only runs tell where it is). ``batch_free``: a second output, a constant ``[5, 4]``
    (a detector's anchors) with no batch axis."""
    rng = np.random.default_rng(0)
    channels, classes = 16, 37
    bias = np.zeros(classes, np.float32)
    bias[0] = 3.0
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("ReduceMean", ["r"], ["m"], axes=[2], keepdims=0, name="pool"),  # [n, C, T]
             helper.make_node("Transpose", ["m"], ["t"], perm=[2, 0, 1] if layout == "tnc" else [0, 2, 1], name="tr"),
             helper.make_node("MatMul", ["t", "proj"], ["p"], name="proj"),
             helper.make_node("Add", ["p", "bias"], ["logits"], name="bias")]
    initializers = [constant(rng.standard_normal((channels, 1, 3, 3)) * 0.5, "w"),
                    constant(rng.standard_normal((channels, classes)), "proj"), constant(bias, "bias")]
    outputs = [tensor("logits", [steps, "n", classes] if layout == "tnc" else ["n_out", steps, classes])]
    if batch_free:
        nodes.append(helper.make_node("Identity", ["anchor_grid"], ["anchors"], name="anchors"))
        initializers.append(constant(rng.standard_normal((5, 4)), "anchor_grid"))
        outputs.append(tensor("anchors", [5, 4]))
    return onnx_model(nodes, initializers, [tensor("x", ["n", 1, 8, steps])], outputs, name=f"ctc_{layout}", opset=13)


def misdeclared_reader(steps: int = 24) -> onnx.ModelProto:
    """A static-batch CTC reader of ``x [1, 1, 8, steps]`` laid out as ddddocr 1.6.1's CRNN is: time-major logits
    ``[steps, 1, 37]`` from a projection of the timesteps flattened to rows, reshaped back by a shape computed from
    the features' own (Shape, Gather, Concat), while the graph declares the output ``[1, "seqlen"]``, as that file
    does. A simplifier that trusts the declaration reshapes the logits to ``[1, steps * 37]``."""
    rng = np.random.default_rng(0)
    channels, classes = 16, 37
    bias = np.zeros(classes, np.float32)
    bias[0] = 3.0
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("ReduceMean", ["r"], ["m"], axes=[2], keepdims=0, name="pool"),  # [1, C, T]
             helper.make_node("Transpose", ["m"], ["t"], perm=[2, 0, 1], name="tr"),  # [T, 1, C]
             helper.make_node("Shape", ["t"], ["shape"], name="shape"),
             helper.make_node("Gather", ["shape", "zero"], ["time"], axis=0, name="time"),
             helper.make_node("Gather", ["shape", "one"], ["batch"], axis=0, name="batch"),
             helper.make_node("Concat", ["time", "batch", "classes"], ["target"], axis=0, name="target"),
             helper.make_node("Reshape", ["t", "rows"], ["flat"], name="flat"),  # [T * 1, C]
             helper.make_node("Gemm", ["flat", "proj", "bias"], ["p"], name="proj"),
             helper.make_node("Reshape", ["p", "target"], ["logits"], name="unflat")]
    integers = [numpy_helper.from_array(np.array([0], np.int64), "zero"),
                numpy_helper.from_array(np.array([1], np.int64), "one"),
                numpy_helper.from_array(np.array([classes], np.int64), "classes"),
                numpy_helper.from_array(np.array([-1, channels], np.int64), "rows")]
    initializers = [constant(rng.standard_normal((channels, 1, 3, 3)) * 0.5, "w"),
                    constant(rng.standard_normal((channels, classes)), "proj"), constant(bias, "bias"), *integers]
    return onnx_model(nodes, initializers, [tensor("x", [1, 1, 8, steps])], [tensor("logits", [1, "seqlen"])],
                      name="misdeclared_reader", opset=13)


def restorer() -> onnx.ModelProto:
    """A tiny image-to-image network of ``x [n, 3, 16, 16]`` (pixels in 0..1): the image plus a small 3x3 correction
    of each colour from all three, halved in size (AveragePool 2x2) and clipped to 0..1, ``y [n, 3, 8, 8]``: what a
    demosaicking or denoising net's output looks like (an RGB image, smaller than its input)."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((3, 3, 3, 3)) * 0.02
    weight[np.arange(3), np.arange(3), 1, 1] += 1.0  # mostly the pixel itself
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("AveragePool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
             helper.make_node("Clip", ["p", "low", "high"], ["y"], name="clip")]
    return onnx_model(nodes, [constant(weight, "w"), constant(0.0, "low"), constant(1.0, "high")],
                      [tensor("x", ["n", 3, 16, 16])], [tensor("y", ["n", 3, 8, 8])], name="restorer", opset=13)


def photo_like(count: int, size: int = 16, seed: int = 1) -> np.ndarray:
    """``count`` smooth RGB images [count, 3, size, size] in 0..1 whose colours share their brightness, as photos'."""
    rng = np.random.default_rng(seed)
    ys, xs = np.mgrid[0:size, 0:size] / size
    images = []
    for _ in range(count):
        light = 0.5 + 0.4 * np.sin(rng.uniform(2, 8) * xs + rng.uniform(0, 3)) * np.cos(rng.uniform(2, 8) * ys)
        tint = rng.uniform(0.7, 1.0, 3)[:, None, None]
        images.append(np.clip(light[None] * tint + rng.normal(0, 0.02, (3, size, size)), 0, 1))
    return np.stack(images).astype(np.float32)
