"""Where Q/DQ goes beyond the quantizer's per-op rules: named placement rules, each with the reason it exists.

ONNX Runtime's quantizer decides per operator type. Detectors and dense-prediction heads need decisions that
depend on where a node sits: NNCF keeps such decisions in ignored patterns and ModelOpt's ONNX PTQ in its
partitioning (which ops stay high precision, Concat inputs sharing one scale). Each rule here names the nodes it
keeps in float (or the tensors whose ranges it ties together) and why; the INT8 pass applies them before writing
Q/DQ and records, per node, which rule placed it (manifest ``int8.placement``).

- ``post-processing``: nodes from which no weighted op can be reached compute only the head's decoding (box
  arithmetic, the Concat of coordinates in pixels with probabilities, output Sigmoids and Softmaxes, Reshape and
  Transpose into the output layout). No INT8 kernel reads their results, so a Q/DQ there saves nothing and rounds
  what a detector is for: a per-tensor scale over coordinates up to 640 and probabilities below 1 leaves the
  probabilities a few levels.
- ``distribution-expectation``: a weighted op that reads a Softmax (distribution focal loss heads of YOLOv8,
  PP-PicoDet, GFL: the box side is the expectation of a softmax over bins, computed as a 1x1 Conv or MatMul with
  fixed weights 0..n) stays float: quantizing the probabilities shifts every box side by up to half a bin.
- ``constant-arithmetic``: an Add, Sub, Mul or Div with a constant operand is part of an activation
  (HardSwish's ``x + 3``) or of decoding, not a residual join; TensorRT fuses it into the convolution's pointwise
  epilogue, and a Q/DQ on its input forces that convolution to write INT8 for nothing (measured:
  docs/results/int8-design.md, 'Placement rules').
- ``lone-activation`` (cpu): a Relu, Clip or HardSwish that no weighted op writes. ONNX Runtime folds a Relu or
  ReLU6 into the convolution before it (the output's quantization clamps), and a HardSwish's input is quantized
  only so that the convolution before it runs in integer; elsewhere (the Clip inside an exported HardSwish) a Q/DQ
  on its input only rounds.
- ``outside-swish`` (cpu): a Sigmoid or Mul that is not part of the SiLU (``x * sigmoid(x)``) or the exact GELU
  (``x * 0.5 * (1 + erf(x / sqrt 2))``, its outer Mul) of a weighted op's output or of a residual join of one
  (:func:`swishes`). The cpu profile quantizes SiLU's Sigmoid and Mul so that the
  convolution before it writes uint8: ONNX Runtime fuses a convolution into QLinearConv only with a Q right after it,
  and with the SiLU in float it ran all 83 convolutions of a YOLOX detector in float between their Q/DQ, slower than
  the FP32 file (0.82x); with the SiLU quantized (QLinearSigmoid, QLinearMul) 74 run in QLinearConv, 2.5x the FP32
  file, as ONNX Runtime's own quantize_static's file does (docs/results/int8-design.md, 'SiLU on the cpu target').
  Every other Sigmoid and Mul stays float, as before the cpu profile quantized the two types, except a
  squeeze-excitation gate (below).
- ``softmax-transpose`` (cpu): a Transpose from which a Softmax is reached with no weighted op on the way stays
  float (:func:`softmax_transposes`); every other Transpose is quantized on its input's scale (one on the way to a
  graph output alone is ``post-processing``'s), so the convolution before a channels-last LayerNorm (ConvNeXt)
  writes uint8.
- ``squeeze-gate`` (cpu; an exception to ``outside-swish``): the Mul that gates a feature map with a
  squeeze-and-excitation branch's output is quantized (QLinearMul), as ONNX Runtime's quantize_static quantizes it.
  With the gate float, the convolution that writes the gated map (timm's SE blocks pool it with a ReduceMean, which
  has no Q/DQ) had no quantized reader and ran in float between its Q/DQ: on SE-ResNeXt-26D 24 of 48 convolutions
  ran in integer and the file ran at 0.85x quantize_static's; with the gate quantized, 32 of 48 (the other 16 are
  the float branch's) and 1.07x (issue 57; 1.37x, 95 % 1.25-1.56x, in the model-zoo sweep's first run at 224x224).
- ``squeeze-excitation``: the branch of a squeeze-and-excitation block between its global pooling and the Mul
  that gates the feature map (1x1 convolutions on one pooled value per channel, their activations) stays float, as
  NNCF's ``se_block`` ignored pattern keeps it: INT8 saves nothing on GEMMs that small, and on OpenVINO the
  requantizations around them cost more than they do (measured: docs/results/int8-design.md, 'Placement rules').
- ``channel-gain``: the per-channel Mul that ``scale_depthwise`` put before a depthwise convolution stays float
  (a per-tensor scale on gains up to 1024x apart would undo them), and so does the ``Mul(1/g)`` before a HardSwish
  whose gain it carried into the convolution (cpu); on cpu both go into integer ops after quantization
  (``integer_hardswish.py``).
- ``concat-shared-scale`` (tensorrt): every input of a quantized Concat gets the union of their ranges, so one
  scale serves all and TensorRT concatenates INT8 in place instead of requantizing each input (ModelOpt does
  the same).
- ``concat-in-place`` (openvino): after quantization, a Concat whose inputs are zero-point-free Q/DQ pairs takes
  the widest input's scale on all of them and loses the Q/DQ on its output, as in NNCF's graphs; OpenVINO otherwise
  requantizes each input twice (``concat_in_place.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import onnx

from trtpipe.graph_index import producers_of, readers_of
from trtpipe.optimize.graph.gains import gain_kind, preactivation_writer
from trtpipe.optimize.int8.calibration.calibrate import Ranges
from trtpipe.optimize.int8.qdq.concat_in_place import concatenated_in_place
from trtpipe.optimize.int8.qdq.profiles import WEIGHTED_OPS, QuantProfile
from trtpipe.vocab import Target

ARITHMETIC = ("Add", "Sub", "Mul", "Div")
LAYOUT = ("Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze")  # what sits between a Softmax and its reader


@dataclass(frozen=True)
class Rule:
    """One placement rule: which nodes it keeps in float, for which targets, and why."""

    name: str
    why: str
    targets: tuple[Target, ...]
    find: Callable[[onnx.GraphProto], list[str]]


def _constants(graph: onnx.GraphProto) -> set[str]:
    return {t.name for t in graph.initializer} | {o for n in graph.node if n.op_type == "Constant" for o in n.output}


def post_processing(graph: onnx.GraphProto) -> list[str]:
    """Nodes no weighted op can be reached from (walking readers), in graph order; constants aside."""
    readers = readers_of(graph)
    feeds_weighted: dict[str, bool] = {}
    for node in reversed(list(graph.node)):  # graph order is topological: readers are decided first
        feeds_weighted[node.name] = any(
            reader.op_type in WEIGHTED_OPS or feeds_weighted.get(reader.name, False)
            for output in node.output for reader in readers.get(output, []))
    return [n.name for n in graph.node if not feeds_weighted[n.name] and n.op_type != "Constant"
            and n.op_type not in WEIGHTED_OPS]


def post_processing_after_fused(graph: onnx.GraphProto) -> list[str]:
    """:func:`post_processing`, less a Relu or Clip a weighted op writes directly (its fused activation): on ONNX
    Runtime's and OpenVINO's CPU kernels a convolution runs in integer only where its output (after the activation
    it fuses) is quantized, so a classifier whose last convolution feeds a Relu and a mean (SqueezeNet's) kept that
    convolution, 20 % of the model's work, in float (tv:squeezenet1_1: 0.73x quantize_static's file,
    docs/results/model-zoo.md). Rounding a Relu's output before a mean over its positions costs little; a
    detector's head writes signed boxes and logits with no such activation, and keeps them float."""
    producer, found = producers_of(graph), set(post_processing(graph))
    return [node.name for node in graph.node if node.name in found
            and not (node.op_type in ("Relu", "Clip")
                     and getattr(producer.get(node.input[0]), "op_type", None) in WEIGHTED_OPS)]


def distribution_expectation(graph: onnx.GraphProto) -> list[str]:
    """Weighted ops that read a Softmax's output, through layout ops only."""
    producer = producers_of(graph)
    found = []
    for node in graph.node:
        if node.op_type not in WEIGHTED_OPS:
            continue
        source = producer.get(node.input[0])
        while source is not None and source.op_type in LAYOUT:
            source = producer.get(source.input[0])
        if source is not None and source.op_type == "Softmax":
            found.append(node.name)
    return found


def constant_arithmetic(graph: onnx.GraphProto) -> list[str]:
    """Elementwise arithmetic with a constant operand."""
    constants = _constants(graph)
    return [n.name for n in graph.node if n.op_type in ARITHMETIC and any(i in constants for i in n.input)]


def lone_activations(graph: onnx.GraphProto) -> list[str]:
    """Relu, Clip and HardSwish nodes whose input no weighted op writes (ONNX Runtime folds a Relu or Clip only into
    its producer, and quantizes a HardSwish's input only so that its producer can run in integer)."""
    producer = producers_of(graph)
    return [n.name for n in graph.node if n.op_type in ("Relu", "Clip", "HardSwish")
            and getattr(preactivation_writer(producer, n.input[0]), "op_type", None) not in WEIGHTED_OPS]


def softmax_transposes(graph: onnx.GraphProto) -> list[str]:
    """Transpose nodes from which a Softmax is reached without a weighted op on the way (the bins of YOLOv8's box
    distribution laid out before their Softmax): quantized, the convolution before them would round the logits the
    Softmax sharpens to 256 levels (on NudeNet's YOLOv8n the DFL's Transpose quantized turned bias correction's +2.7
    points into -5.7 on its judged fold). A Transpose on the way to a graph output alone is ``post-processing``'s.
    Every other Transpose runs on uint8 (ONNX Runtime moves the bytes), so the convolution before a channels-last
    LayerNorm writes uint8 (ConvNeXt: with Transposes float, 13 of ConvNeXt-atto's 41 convolutions ran in float and
    its INT8 file ran 0.68x its FP32 file; with them uint8, all 41 in integer and 1.15x)."""
    readers = readers_of(graph)

    def reaches_softmax(start: str) -> bool:
        seen, frontier = set(), [start]
        while frontier:
            for node in readers.get(frontier.pop(), []):
                if node.op_type in ("Softmax", "LogSoftmax"):
                    return True
                if node.op_type not in WEIGHTED_OPS and node.name not in seen:
                    seen.add(node.name)
                    frontier.extend(node.output)
        return False

    return [n.name for n in graph.node if n.op_type == "Transpose" and reaches_softmax(n.output[0])]


SQUEEZE_OPS = ("GlobalAveragePool", "ReduceMean")
SQUEEZE_BRANCH_OPS = (*WEIGHTED_OPS, *ARITHMETIC, *LAYOUT, "Relu", "Clip", "HardSwish", "HardSigmoid", "Sigmoid",
                      "Tanh", "LeakyRelu", "PRelu", "Elu")


def squeeze_excitation(graph: onnx.GraphProto) -> list[str]:
    """The nodes of each squeeze-and-excitation branch: what is computed from a global pooling's output alone
    (weighted ops, activations, layout), up to the Mul that gates the feature map with it. The pool and the gate
    stay as the quantizer places them."""
    return [name for branch, _ in squeeze_blocks(graph) for name in branch]


def squeeze_gates(graph: onnx.GraphProto) -> set[str]:
    """The Mul nodes that gate a feature map with a squeeze-and-excitation branch's output (:func:`squeeze_blocks`)."""
    return {name for _, gates in squeeze_blocks(graph) for name in gates}


def squeeze_blocks(graph: onnx.GraphProto) -> list[tuple[list[str], list[str]]]:
    """Each squeeze-and-excitation block as (its branch's nodes, its gating Muls), in graph order."""
    readers = readers_of(graph)
    constants = _constants(graph)
    outputs = {o.name for o in graph.output}
    nodes = list(graph.node)
    found: list[tuple[list[str], list[str]]] = []
    for index, pool in enumerate(nodes):
        if pool.op_type not in SQUEEZE_OPS:
            continue
        derived, branch, gates = {pool.output[0]}, [], []
        for node in nodes[index + 1:]:  # graph order is topological
            inputs = [i for i in node.input if i and i not in constants]
            if not any(i in derived for i in inputs):
                continue
            if all(i in derived for i in inputs) and node.op_type in SQUEEZE_BRANCH_OPS:
                branch.append(node)
                derived.update(node.output)
            elif node.op_type == "Mul":
                gates.append(node)
            else:
                break  # the pooled value goes somewhere else (a Concat, a classifier head): not a gate
        else:
            ends = {id(node) for node in [*branch, *gates]}
            closed = not derived & outputs and all(id(reader) in ends for tensor in derived
                                                   for reader in readers.get(tensor, []))
            if gates and closed and any(node.op_type in WEIGHTED_OPS for node in branch):
                found.append(([node.name for node in branch], [node.name for node in gates]))
    return found


SWISH_OPS = ("Sigmoid", "Mul")


def swishes(graph: onnx.GraphProto) -> set[str]:
    """The Sigmoid and Mul nodes of each SiLU (``Mul(x, Sigmoid(x))``, either operand order) whose ``x`` a weighted
    op writes, or a residual join of one (an Add of two computed tensors, one a weighted op's output: ResNet-style
    blocks with SiLU after the join, timm's ``resnext26ts``). With the join's SiLU float, the Add before it ran in
    float too and the next convolution re-quantized its input: on ResNeXt-26ts the file ran at 0.83x quantize_static's
    (95 % 0.77-0.91x, model-zoo sweep of 2026-12-01), whose QLinearAdd, QLinearSigmoid and QLinearMul trtpipe's
    graph lacked."""
    producer = producers_of(graph)
    constants = _constants(graph)
    found: set[str] = set()
    for mul in graph.node:
        if mul.op_type != "Mul" or len(mul.input) != 2:
            continue
        for x, gate in (mul.input, reversed(mul.input)):
            sigmoid = producer.get(gate)
            writer = producer.get(x)
            if sigmoid is not None and sigmoid.op_type == "Sigmoid" and sigmoid.input[0] == x \
                    and writer is not None and _weighted_or_its_join(writer, producer, constants):
                found |= {mul.name, sigmoid.name}
            elif writer is not None and _weighted_or_its_join(writer, producer, constants) \
                    and _erf_gate_of(gate, x, producer, constants):
                found.add(mul.name)  # a GELU's x * gate(x): its gate's arithmetic stays float (constant-arithmetic)
    return found


GATE_ARITHMETIC = ("Div", "Mul", "Add", "Sub", "Erf")
GATE_DEPTH = 6  # torch's exact GELU gate is four ops deep (Div, Erf, Add, Mul)


def _erf_gate_of(tensor: str, x: str, producer: dict[str, onnx.NodeProto], constants: set[str]) -> bool:
    """Whether ``tensor`` is an exact GELU's gate of ``x``, 0.5 * (1 + erf(x / sqrt 2)) as torch exports it: a chain of
    arithmetic with constants and one Erf that reads ``x`` alone (ConvNeXt's MLP activation; with its Mul float, the
    convolution before it had no quantized reader and ran in float: 25 of ConvNeXt-atto's 41 convolutions)."""
    erf = False
    for _ in range(GATE_DEPTH):
        node = producer.get(tensor)
        if node is None or node.op_type not in GATE_ARITHMETIC:
            return False
        computed = [name for name in node.input if name not in constants]
        if len(computed) != 1:
            return False
        erf = erf or node.op_type == "Erf"
        if computed[0] == x:
            return erf
        tensor = computed[0]
    return False


def _weighted_or_its_join(node: onnx.NodeProto, producer: dict[str, onnx.NodeProto], constants: set[str]) -> bool:
    """A weighted op, or a residual Add whose two operands are computed and one a weighted op writes."""
    if node.op_type in WEIGHTED_OPS:
        return True
    if node.op_type != "Add" or len(node.input) != 2 or any(i in constants for i in node.input):
        return False
    return any((writer := producer.get(i)) is not None and writer.op_type in WEIGHTED_OPS for i in node.input)


def outside_swish(graph: onnx.GraphProto) -> list[str]:
    """Sigmoid and Mul nodes that are not part of a weighted op's SiLU (:func:`swishes`) nor a squeeze-and-excitation
    gate (:func:`squeeze_gates`)."""
    kept = swishes(graph) | squeeze_gates(graph)
    return [n.name for n in graph.node if n.op_type in SWISH_OPS and n.name not in kept]


def channel_gains(graph: onnx.GraphProto) -> list[str]:
    return [n.name for n in graph.node if gain_kind(n) is not None]


RULES = (
    Rule("post-processing", "reaches no weighted op: decoding and output layout, where INT8 saves nothing",
         tuple(t for t in Target if t not in (Target.CPU, Target.OPENVINO)), post_processing),
    Rule("post-processing", "reaches no weighted op: decoding and output layout, where INT8 saves nothing (a "
         "weighted op's fused Relu or Clip aside: its output Q runs the op in integer)",
         (Target.CPU, Target.OPENVINO), post_processing_after_fused),
    Rule("distribution-expectation", "the expectation over a softmax's bins (a DFL box side) stays exact",
         tuple(Target), distribution_expectation),
    Rule("squeeze-excitation", "a squeeze-and-excitation branch computes a gate per channel from one pooled "
         "value each: INT8 saves nothing there, and its requantizations cost more than its GEMMs (NNCF ignores "
         "the same pattern)", tuple(Target), squeeze_excitation),
    Rule("channel-gain", "scale_depthwise's per-channel gains, which one per-tensor scale would undo",
         tuple(Target), channel_gains),
    Rule("constant-arithmetic", "an activation's or decoding's arithmetic, fused into the convolution's epilogue",
         tuple(Target), constant_arithmetic),
    Rule("lone-activation", "a Relu, Clip or HardSwish no weighted op writes: no integer producer, its Q/DQ only "
         "rounds",
         (Target.CPU, Target.OPENVINO), lone_activations),
    Rule("outside-swish", "a Sigmoid or Mul outside a weighted op's SiLU: the cpu profile quantizes those two types "
         "only so that the convolution before a SiLU runs in integer (QLinearConv)", (Target.CPU,), outside_swish),
    Rule("softmax-transpose", "a Transpose on the way to a Softmax with no weighted op between: quantized, it "
         "would round the logits the Softmax reads", (Target.CPU,), softmax_transposes),
)


def float_nodes(model: onnx.ModelProto, profile: QuantProfile) -> dict[str, str]:
    """{node: the first rule that keeps it in float} for ``profile``'s target."""
    placed: dict[str, str] = {}
    for rule in RULES:
        if profile.target in rule.targets:
            for name in rule.find(model.graph):
                placed.setdefault(name, rule.name)
    return placed


def share_concat_scales(model: onnx.ModelProto, ranges: Ranges, quantized: Iterable[str]) -> dict[str, list[str]]:
    """Give every input of each Concat in ``quantized`` (node names) the union of their ranges, in place; returns
    {concat: the tensors that now share its scale}. A tensor two Concats read takes the union of both."""
    constants = _constants(model.graph)
    chosen = set(quantized)
    groups: list[list[str]] = []
    for node in model.graph.node:
        if node.op_type == "Concat" and node.name in chosen:
            tensors = [t for t in node.input if t and t not in constants and t in ranges]
            if len(tensors) > 1:
                groups.append([node.name, *tensors])
    # Union-find over tensors, so chains of Concats that share inputs end with one range.
    parent: dict[str, str] = {}

    def root(tensor: str) -> str:
        while parent.setdefault(tensor, tensor) != tensor:
            tensor = parent[tensor]
        return tensor

    for _, first, *rest in groups:
        for tensor in rest:
            parent[root(tensor)] = root(first)
    union: dict[str, tuple[float, float]] = {}
    for tensor in parent:
        low, high = ranges[tensor]
        key = root(tensor)
        seen = union.get(key, (low, high))
        union[key] = (min(seen[0], low), max(seen[1], high))
    for tensor in parent:
        ranges[tensor] = union[root(tensor)]
    return {concat: tensors for concat, *tensors in groups}


def placement_record(model: onnx.ModelProto, profile: QuantProfile,
                     quantized: onnx.ModelProto | None = None) -> dict[str, dict[str, object]]:
    """The manifest's ``int8.placement``: per rule that placed anything, why, and the nodes it kept in float; with
    ``quantized`` (the result), the Concats it quantizes in place too (openvino)."""
    placed = float_nodes(model, profile)
    record: dict[str, dict[str, object]] = {}
    for rule in RULES:
        nodes = [name for name, by in placed.items() if by == rule.name]
        if nodes:
            record[rule.name] = {"why": rule.why, "nodes": nodes}
    if profile.shared_concat_scales:
        concats = [n.name for n in model.graph.node if n.op_type == "Concat" and n.name not in placed]
        if concats:
            record["concat-shared-scale"] = {"why": "one scale for all inputs: TensorRT concatenates INT8 in place",
                                             "nodes": concats}
    if profile.concat_in_place and quantized is not None and (concats := concatenated_in_place(quantized)):
        record["concat-in-place"] = {"why": "one scale for all inputs and no Q/DQ after: OpenVINO concatenates INT8 "
                                            "without requantizing each input twice", "nodes": concats}
    return record
