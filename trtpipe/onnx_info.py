"""Facts read from an ONNX file without running it: validity, opset, IO tensors, precision."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from trtpipe.errors import BadInput
from trtpipe.files import require_file, require_onnx_bytes
from trtpipe.vocab import Precision, dtype

QUANTIZED_OPS = {"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "ConvInteger",
                 "MatMulInteger", "DynamicQuantizeLinear"}


def fresh_name(stem: str, taken: set[str]) -> str:
    """``stem``, or ``stem_2``, ``stem_3``... : the first that no name in ``taken`` has, added to it (a rewrite's
    new tensor or node beside the graph's own)."""
    candidate, count = stem, 1
    while candidate in taken:
        count += 1
        candidate = f"{stem}_{count}"
    taken.add(candidate)
    return candidate


def graph_inputs(graph: onnx.GraphProto | onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The inputs a caller feeds, in graph order: the graph's inputs less its initializers (old exporters list every
    weight as an input too). The one place this is written; ``tests/artifact/test_artifact_room.py`` keeps it so."""
    onnx_graph = graph.graph if isinstance(graph, onnx.ModelProto) else graph
    initializers = {tensor.name for tensor in onnx_graph.initializer}
    return [value for value in onnx_graph.input if value.name not in initializers]


def input_signature(model: onnx.GraphProto | onnx.ModelProto) -> list[tuple[str, tuple[int | None, ...], str]]:
    """Each fed input as (name, dims, numpy dtype name): a dimension the graph leaves free (named or unset) is None.
    What :func:`trtpipe.inputs.resolve` takes as a graph."""
    found = []
    for value in graph_inputs(model):
        tensor = value.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tensor.shape.dim)
        found.append((value.name, dims, np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type)).name))
    return found


# A tensor as a graph declares it: (name, numpy dtype name, dims); a dim is its size, or where the graph leaves it
# free the name it gives it (a str) or None. (The ONNX element type's number stands for a dtype numpy has not.)
Tensor = tuple[str, str, tuple[int | str | None, ...]]


@dataclass(frozen=True)
class GraphFacts:
    """What describing an ONNX graph needs of it, read in one call: its precision (from its operators and weights)
    and the tensors a caller feeds and gets back."""

    precision: Precision
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]


def graph_facts(model: onnx.ModelProto) -> GraphFacts:
    """The precision, fed inputs (:func:`graph_inputs`) and outputs of ``model``: all that
    :mod:`trtpipe.artifact.description` reads of a graph."""

    def tensor(value: onnx.ValueInfoProto) -> Tensor:
        typed = value.type.tensor_type
        entry = dtype(onnx=typed.elem_type)
        dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in typed.shape.dim)
        return value.name, entry.numpy if entry else str(typed.elem_type), dims

    return GraphFacts(detect_precision(model), tuple(tensor(v) for v in graph_inputs(model)),
                      tuple(tensor(v) for v in model.graph.output))


def load_onnx(path: Path, *, load_weights: bool = True) -> onnx.ModelProto:
    """Load an ONNX file; anything that is not one gives a clear BadInput. Its external-data locations are
    checked before any weight is read (see :func:`check_external_data`)."""
    require_file(Path(path), "ONNX file")
    require_onnx_bytes(Path(path))
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as error:  # protobuf's DecodeError and friends: the file is not ONNX
        raise BadInput(f"{path} is not a valid ONNX model ({type(error).__name__}): re-export it with "
                       "'trtpipe convert'.") from None
    check_external_data(model, Path(path))
    if load_weights:
        try:
            onnx.load_external_data_for_model(model, str(Path(path).parent))
        except (OSError, ValueError) as error:
            raise BadInput(f"{path}: its external weights cannot be read ({error}).") from None
    return model


def _tensors(graph: onnx.GraphProto) -> list[onnx.TensorProto]:
    """Every tensor a graph stores: initializers, sparse initializers, Constant values, and those of subgraphs."""
    found = list(graph.initializer)
    found += [t for sparse in graph.sparse_initializer for t in (sparse.values, sparse.indices)]
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                found.append(attribute.t)
            found += list(attribute.tensors)
            if attribute.HasField("sparse_tensor"):
                found += [attribute.sparse_tensor.values, attribute.sparse_tensor.indices]
            for sub in [attribute.g, *attribute.graphs] if attribute.HasField("g") else list(attribute.graphs):
                found += _tensors(sub)
    return found


def check_external_data(model: onnx.ModelProto, path: Path) -> None:
    """Refuse external-data locations that leave the model's folder.

    An ONNX file names the files its weights live in; a crafted one can name ``../../etc/passwd`` or a link that
    leads out, and whatever reads the weights (onnx, ONNX Runtime, TensorRT's parser) would serve that file's
    bytes as a tensor. trtpipe checks every location itself, whatever library versions are installed: relative,
    inside the folder once resolved, not a symbolic link leading out, not a second hard link to another file.
    """
    folder = Path(path).resolve().parent
    for tensor in _tensors(model.graph):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        entries = {entry.key: entry.value for entry in tensor.external_data}
        location = entries.get("location", "")
        where = f"{path}: tensor '{tensor.name}' keeps its data in {_shown(location)}"
        candidate = Path(location)
        if "\x00" in location:  # no file can be named so; os calls raise ValueError on it
            raise BadInput(f"{where}, which holds a NUL byte: refused (no file can have that name).")
        if not location or candidate.is_absolute() or ".." in candidate.parts or "\\" in location:
            raise BadInput(f"{where}, which is not a plain relative path inside the model's folder: refused.")
        target = folder / candidate
        try:
            resolved = target.resolve()
            if folder not in resolved.parents:
                raise BadInput(f"{where}, which leads outside the model's folder ({resolved}): refused.")
            if target.is_symlink():
                raise BadInput(f"{where}, a symbolic link: refused (copy the weights into the folder).")
            if target.exists() and (not target.is_file() or target.stat().st_nlink > 1):
                raise BadInput(f"{where}, which is not a regular file with a single link: refused.")
        except (OSError, RuntimeError, ValueError) as error:  # a name too long, a link loop (RuntimeError on 3.11)
            raise BadInput(f"{where}, which cannot be checked ({error}): refused.") from None


def _shown(location: str) -> str:
    """A location as the user can read it: quoted, with control characters (a NUL) escaped."""
    return repr(location) if any(not c.isprintable() for c in location) else f"'{location}'"


def external_data_files(model: onnx.ModelProto) -> list[str]:
    """The files (relative to the model's folder) its external weights live in, each once, in graph order;
    check_external_data has checked them when the model was loaded with load_onnx."""
    locations = []
    for tensor in _tensors(model.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            location = {entry.key: entry.value for entry in tensor.external_data}.get("location", "")
            if location and location not in locations:
                locations.append(location)
    return locations


def detect_precision(model: onnx.ModelProto) -> Precision:
    """int8 when the graph holds Q/DQ or integer ops, bf16 with BF16 weights, fp16 when it computes in half
    precision, else fp32."""
    ops = {node.op_type for node in model.graph.node}
    if ops & QUANTIZED_OPS:
        return Precision.INT8
    if any(init.data_type == onnx.TensorProto.BFLOAT16 for init in model.graph.initializer):
        return Precision.BF16
    half = onnx.TensorProto.FLOAT16
    if any(init.data_type == half for init in model.graph.initializer) or any(
        node.op_type == "Cast" and any(a.name == "to" and a.i == half for a in node.attribute)
        for node in model.graph.node
    ):
        return Precision.FP16
    return Precision.FP32


def op_counts(model: onnx.ModelProto) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in model.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return dict(sorted(counts.items()))


def topologically_sorted(model: onnx.ModelProto) -> onnx.ModelProto:
    """Reorder nodes so each comes after its producers (stable otherwise). Converters that append Cast or
    Q/DQ nodes leave them at the end; ONNX Runtime tolerates that, onnx.checker and TensorRT do not."""
    nodes = list(model.graph.node)
    producer = {output: i for i, node in enumerate(nodes) for output in node.output if output}
    dependencies = [{producer[name] for name in node.input if name in producer} for node in nodes]
    placed: set[int] = set()
    order: list[int] = []
    remaining = list(range(len(nodes)))
    while remaining:
        ready = [i for i in remaining if dependencies[i] <= placed]
        if not ready:
            raise ValueError("the graph has a cycle")
        placed.update(ready)
        order += ready
        remaining = [i for i in remaining if i not in placed]
    sorted_nodes = [nodes[i] for i in order]
    del model.graph.node[:]
    model.graph.node.extend(sorted_nodes)
    return model


def name_nodes(model: onnx.ModelProto) -> None:
    """Fallback lists and reports address nodes by name; give unnamed ones a stable name."""
    used = {n.name for n in model.graph.node if n.name}
    for index, node in enumerate(model.graph.node):
        if not node.name:
            name = f"{node.op_type}_{index}"
            while name in used:
                name += "_"
            node.name = name
            used.add(name)


def attribute(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    """A node attribute's value, or ``default`` when the node does not set it."""
    for found in node.attribute:
        if found.name == name:
            return helper.get_attribute_value(found)
    return default


def clip_bounds(node: onnx.NodeProto, constants: dict[str, np.ndarray]) -> tuple[float, float] | None:
    """(min, max) of a Clip whose bounds are constants (attributes before opset 11, inputs since); an absent
    bound is infinite. None when a bound is computed at run time."""
    low, high = float(attribute(node, "min", -np.inf)), float(attribute(node, "max", np.inf))
    for index, name in enumerate(node.input[1:3], start=1):
        if not name:
            continue
        if name not in constants or constants[name].size != 1:
            return None
        value = float(constants[name].reshape(()))
        low, high = (value, high) if index == 1 else (low, value)
    return low, high
