"""Which tensor of an optimized ONNX holds the same value as which tensor of its FP32 reference.

``trtpipe optimize`` keeps node and tensor names: fusion renames nothing that survives, the FP16 pass changes
types only, and ONNX Runtime's Q/DQ quantizer writes ``X -> QuantizeLinear -> DequantizeLinear ->
X_DequantizeLinear_Output`` (``_1``, ``_2``... when each reader gets its own pair), or, for a graph output,
``X_QuantizeLinear_Input -> Q -> DQ -> X`` (onnxruntime/quantization/qdq_quantizer.py,
``_add_qdq_pair_for_activation``; the suffixes are quant_utils' ``DEQUANT_OUTPUT_SUFFIX`` and
``QUANT_INPUT_SUFFIX``). So, as Polygraphy's comparator does for ``--mark all`` (``compare.py``: outputs are paired
by name, the rest skipped with a note, and a run that pairs none is an error), tensors are paired by name, and a
Q/DQ'd name is paired with the FP32 tensor it rounds: the row then shows what rounding that tensor cost.

One case is left out on purpose: where the quantizer folds an activation into the Q/DQ that follows it
(``try_replacing_upstream_output``: a Conv then writes the Relu's name directly and the Q/DQ does the clamping),
the raw tensor holds the pre-activation in the model and the activation in the reference. Comparing them would
report a jump that is not one; its ``_DequantizeLinear_Output`` is compared instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

import onnx

from trtpipe.onnx_info import graph_inputs, topologically_sorted

FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}
# Activations ONNX Runtime's QDQ quantizer folds into the Q/DQ after them (onnxruntime/quantization/registry.py
# maps Relu and Clip to QDQRemovableActivation; it folds them only for asymmetric activations, the cpu target's):
# the tensor keeps the activation's name but is made by the layer before it.
FOLDED_ACTIVATIONS = {"Relu", "Clip"}
_ALIAS = re.compile(r"^(?P<base>.+)_(?P<kind>DequantizeLinear_Output|QuantizeLinear_Input)(?:_\d+)?$")


class Relation(StrEnum):
    """How a model's tensor relates to the reference tensor it is compared with."""

    SAME = "same"  # the same name: the same value, computed in the model's precision
    AFTER_QDQ = "after Q/DQ"  # X_DequantizeLinear_Output: X as the readers see it, rounded to INT8
    BEFORE_QDQ = "before Q/DQ"  # X_QuantizeLinear_Input: a graph output X before its own Q/DQ


@dataclass(frozen=True)
class TensorPair:
    tensor: str  # in the model
    reference: str  # in the reference
    op: str  # the op type of the model's node that makes it
    node: str
    relation: Relation


@dataclass(frozen=True)
class Skipped:
    tensor: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"tensor": self.tensor, "reason": self.reason}


@dataclass
class Matching:
    pairs: list[TensorPair]  # in the model's topological order
    skipped: list[Skipped]
    unmatched: int  # float tensors of the model with no counterpart in the reference (Casts, new Q/DQ, gains...)
    upstream: dict[str, tuple[str, ...]]  # a pair's tensor -> the nearest paired tensors it is computed from
    reference_inputs: tuple[str, ...]  # the reference's graph inputs: their values are the feeds themselves


def tensor_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every tensor shape inference can type (empty where inference fails: custom ops)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # onnx raises InferenceError and friends on graphs it cannot type; types then stay unknown
        inferred = model
    values = [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]
    return {v.name: v.type.tensor_type.elem_type for v in values if v.type.HasField("tensor_type")}


def _is_float(types: dict[str, int], name: str) -> bool:
    """Unknown types pass: the run checks the arrays' dtypes."""
    found = types.get(name, onnx.TensorProto.UNDEFINED)
    return found == onnx.TensorProto.UNDEFINED or found in FLOAT_TYPES


def match_tensors(model: onnx.ModelProto, reference: onnx.ModelProto) -> Matching:
    """Pair every float tensor the model's nodes make with the reference tensor that holds the same value."""
    sorted_model = onnx.ModelProto()
    sorted_model.CopyFrom(model)
    nodes = list(topologically_sorted(sorted_model).graph.node)
    model_types, reference_types = tensor_types(model), tensor_types(reference)
    # Constant nodes hold weights (old exporters write them so); weights are not activations, and a pass that folds
    # a BatchNormalization changes them on purpose.
    reference_producer = {out: node for node in reference.graph.node if node.op_type != "Constant"
                          for out in node.output if out}
    reference_inputs = tuple(i.name for i in graph_inputs(reference))
    known = set(reference_producer) | set(reference_inputs)
    initializers = {i.name for i in model.graph.initializer}
    made = {out for node in nodes for out in node.output if out}

    pairs: list[TensorPair] = []
    skipped: list[Skipped] = []
    unmatched = 0
    for node in nodes:
        if node.op_type == "Constant":
            continue
        for out in node.output:
            if not out or out in initializers or not _is_float(model_types, out):
                continue
            paired = _counterpart(out, known)
            if paired is None:
                unmatched += 1
                continue
            name, relation = paired
            if not _is_float(reference_types, name):
                skipped.append(Skipped(out, f"'{name}' is not a float tensor in the reference"))
                continue
            source = reference_producer.get(name)
            alias = f"{out}_DequantizeLinear_Output"
            if (relation is Relation.SAME and source is not None and source.op_type in FOLDED_ACTIVATIONS
                    and node.op_type != source.op_type and alias in made):
                skipped.append(Skipped(out, f"made by {node.op_type} here and by {source.op_type} in the reference, "
                                            f"which the Q/DQ after it does here: {alias} is compared instead"))
                continue
            pairs.append(TensorPair(out, name, node.op_type, node.name, relation))
    return Matching(pairs, skipped, unmatched, _upstream(nodes, {p.tensor for p in pairs}), reference_inputs)


def _counterpart(name: str, known: set[str]) -> tuple[str, Relation] | None:
    if name in known:
        return name, Relation.SAME
    alias = _ALIAS.match(name)
    if alias and alias["base"] in known:
        relation = Relation.AFTER_QDQ if alias["kind"] == "DequantizeLinear_Output" else Relation.BEFORE_QDQ
        return alias["base"], relation
    return None


def _upstream(nodes: list[onnx.NodeProto], compared: set[str]) -> dict[str, tuple[str, ...]]:
    """For each compared tensor, the compared tensors its value is computed from, looking back through tensors that
    are not compared (a Q output, a Cast, a shape op); graph inputs and weights end the search. Nodes come in
    topological order, so one pass suffices."""
    reach: dict[str, frozenset[str]] = {}
    upstream: dict[str, tuple[str, ...]] = {}
    for node in nodes:
        sources = frozenset().union(*(reach.get(name, frozenset()) for name in node.input if name))
        for out in node.output:
            if not out:
                continue
            if out in compared:
                upstream[out] = tuple(sorted(sources))
                reach[out] = frozenset({out})
            else:
                reach[out] = sources
    return upstream
