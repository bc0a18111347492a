"""What one sample costs a model's pass, worked out from the graph, so that optimize's time budgets decide the
same on any machine under any load.

Four of an INT8 run's choices spend a time budget: how many calibration samples to use (``sample_plan``), how many
samples a learned step learns from (``int8.step``), how many folds cross-fit (``passes.int8``) and how many folds
judge a learned step (``int8.cross_fit``). Timed on the wall clock, each followed the machine's load: the same model
and data gave a file judged on 64 samples on a quiet machine and on 32 beside a test run, and its decisions changed
with them (docs/results/int8-decisions.md, 2026-12-01). So the budgets are spent in *work*: each sample's
multiply-accumulates (convolutions, matrix products) and the activation elements every node writes, counted once from
the graph at the sample's shape, turned into seconds at a stated reference pace (``REFERENCE_*``: an FP32 pass on 2
cores of the machine docs/guides/optimize.md names). A faster machine finishes early, a loaded one late; the file is
the same. Where shape inference cannot follow the graph, the pass is timed instead, and the choice then follows the
clock as before.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import onnx

from trtpipe.inputs import Batch, named, take
from trtpipe.onnx_info import attribute, graph_inputs
from trtpipe.runtime.registry import open_model

# An FP32 pass on ONNX Runtime's CPU provider, 2 threads, batch 8, Intel Xeon with AVX-512 (quiet, 2026-12-02),
# fitted by relative least squares over the 43 FP32 files of the model-zoo sweep (ResNets, depthwise nets, attention
# hybrids, 3D video, segmentation): seconds = MACs / MACS_PER_S + elements / ELEMENTS_PER_S. The measured pass is
# 0.87-1.46x the estimate for 80 % of them (median 1.05x; MixNet-S 1.56x and R3D-18 1.65x at the slow end,
# NF-ResNet-26 0.59x at the fast end): docs/results/int8-decisions.md, 'Budgets in work'.
REFERENCE_MACS_PER_S = 187e9
REFERENCE_ELEMENTS_PER_S = 6.3e9
WEIGHTED = ("Conv", "ConvTranspose", "Gemm", "MatMul")


@dataclass(frozen=True)
class Work:
    """One sample's work through a model: multiply-accumulates and activation elements written."""

    macs: int
    elements: int

    @property
    def seconds(self) -> float:
        """The sample's pass at the reference pace."""
        return self.macs / REFERENCE_MACS_PER_S + self.elements / REFERENCE_ELEMENTS_PER_S

    def line(self) -> str:
        return f"{self.macs / 1e9:.2f} GMAC a sample"


def sample_work(model: onnx.ModelProto, images: Batch) -> Work | None:
    """The work of one sample of ``images`` through ``model``, from shape inference at that sample's shapes; None
    where inference leaves a weighted node's output or input shape unknown (the caller times a pass instead)."""
    one = named(take(images, 0, 1), [i.name for i in graph_inputs(model)])
    weights = {i.name: tuple(i.dims) for i in model.graph.initializer}
    shaped = _without_weights(model)
    declared = {value.name for value in shaped.graph.input}
    dropped = [t for t in model.graph.initializer if not _shape_data(t)]
    for tensor in dropped:  # the weights' values are not needed, their shapes are
        if tensor.name not in declared:
            shaped.graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, tensor.dims))
    for value in graph_inputs(shaped):  # the fed inputs, at the sample's shape
        if value.name in one:
            dims = value.type.tensor_type.shape.dim
            del dims[:]
            for size in one[value.name].shape:
                dims.add().dim_value = int(size)
    try:
        inferred = onnx.shape_inference.infer_shapes(shaped, data_prop=True)
    except Exception:  # a graph inference cannot follow (custom ops, bad declarations): the caller times a pass
        return None
    shapes = dict(weights)
    for value in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        dims = value.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            shapes[value.name] = tuple(d.dim_value for d in dims)
        elif value.type.tensor_type.HasField("shape") and not dims:
            shapes[value.name] = ()
    macs = elements = 0
    for node in model.graph.node:
        out = shapes.get(node.output[0]) if node.output else None
        if node.op_type in WEIGHTED:
            found = _macs(node, shapes, out)
            if found is None:
                return None
            macs += found
        elements += sum(math.prod(shapes[name]) for name in node.output if name in shapes)
    return Work(macs, elements)


def _without_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` for shape inference that leaves its weights behind (only the initializers that may carry
    shape data come along): copying a large model's weights to read their shapes would cost more than inferring."""
    shaped = onnx.ModelProto(ir_version=model.ir_version)
    shaped.opset_import.extend(model.opset_import)
    shaped.functions.extend(model.functions)
    graph, source = shaped.graph, model.graph
    graph.name = source.name
    graph.node.extend(source.node)
    graph.input.extend(source.input)
    graph.output.extend(source.output)
    graph.value_info.extend(source.value_info)
    graph.sparse_initializer.extend(source.sparse_initializer)
    graph.initializer.extend(t for t in source.initializer if _shape_data(t))  # a Reshape's target: data inference
    return shaped


def _shape_data(tensor: onnx.TensorProto) -> bool:
    """Whether an initializer may carry shape data (an integer tensor, or a small one): kept for inference."""
    return tensor.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32) or math.prod(tensor.dims) <= 16


def _macs(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]], out: tuple[int, ...] | None) -> int | None:
    """A weighted node's multiply-accumulates: each output element's dot product."""
    left = shapes.get(node.input[0])
    right = shapes.get(node.input[1]) if len(node.input) > 1 else None
    if out is None or left is None or right is None:
        return None
    if node.op_type == "Conv":  # weight (M, C/group, k...): each output element sums C/group x k...
        return math.prod(out) * math.prod(right[1:])
    if node.op_type == "ConvTranspose":  # weight (C, M/group, k...): each input element spreads over M/group x k...
        return math.prod(left) * math.prod(right[1:])
    if node.op_type == "Gemm":
        inner = left[0] if attribute(node, "transA", 0) else left[-1]
        return math.prod(out) * inner
    return math.prod(out) * (left[-1] if left else 1)  # MatMul: the shared axis


def pace(model: onnx.ModelProto, images: Batch, static_batch: int | None = None) -> tuple[float, bool]:
    """Seconds one sample takes a pass of ``model``, and whether that is the reference pace (True: from the
    graph's work, the same under any load) or was timed here (False: shape inference could not follow)."""
    work = sample_work(model, images)
    if work is not None:
        return work.seconds, True
    return timed_pace(model, images, static_batch), False


def timed_pace(model: onnx.ModelProto, images: Batch, static_batch: int | None = None) -> float:
    """One batch (the static batch, else one sample) run twice, the second timed (the first pays for the session's
    first-run allocations): seconds a sample, on this machine now."""
    size = static_batch or 1
    batch = take(images, 0, size)
    with open_model(model) as backend:
        backend.run(batch)
        started = time.perf_counter()
        backend.run(batch)
        return (time.perf_counter() - started) / size

