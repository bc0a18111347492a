"""HardSwish and HardSigmoid written out as arithmetic, replaced by the one ONNX operator each is (part of ``fuse``).

Exporters that predate opset 14, and PaddlePaddle's, write a HardSwish as four nodes (``x * clip(x + 3, 0, 6) /
6``); onnxslim keeps them. ONNX Runtime's CPU provider then runs four passes over the tensor and cannot keep its
blocked (NCHWc) layout across them, so it reorders around every convolution; OpenVINO recognises the pattern itself
(measured: docs/results/int8-design.md, 'HardSwish fusion'). TensorRT fuses either form into the convolution's
epilogue.

A chain is recognised by what it computes, not by how it is spelled: every elementwise chain of one tensor
(:mod:`trtpipe.optimize.graph.elementwise`) is evaluated on a grid and compared with HardSwish and HardSigmoid(1/6,
1/2). Below opset 14, where HardSwish does not exist, a HardSwish becomes ``x * HardSigmoid(x)`` (two nodes)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from trtpipe.errors import BadInput
from trtpipe.optimize.graph.elementwise import Chain, Chains, hard_sigmoid, hard_swish
from trtpipe.optimize.graph.opset import default_opset, upgrade_opset

HARD_SWISH_OPSET = 14
# Dense near the kinks at -3 and 3, wide enough for any activation a network computes.
_GRID = np.concatenate([np.linspace(-8.0, 8.0, 3201), np.linspace(-1e4, 1e4, 4001)])
_ALPHA = 1.0 / 6.0


def _matches(values: np.ndarray, reference: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(values)) and np.allclose(values, reference, rtol=1e-6, atol=1e-6))


def _closed_part(chain: Chain, tensor: str, readers: dict[str, list[onnx.NodeProto]]) -> list[onnx.NodeProto] | None:
    """The nodes of ``chain`` that ``tensor`` depends on, when nothing outside them reads their other outputs (so
    they can all go); None otherwise."""
    producer = {node.output[0]: node for node in chain.nodes}
    part: list[onnx.NodeProto] = []
    pending = [tensor]
    while pending:
        node = producer.get(pending.pop())
        if node is not None and not any(node is p for p in part):
            part.append(node)
            pending.extend(node.input)
    members = {id(node) for node in part}
    for node in part:
        if node.output[0] != tensor and any(id(r) not in members for r in readers.get(node.output[0], [])):
            return None
    return part


def _find(chain: Chain, readers: dict[str, list[onnx.NodeProto]], swish: np.ndarray,
          sigmoid: np.ndarray) -> tuple[str, str, list[onnx.NodeProto]] | None:
    """(operator, tensor, nodes): the first tensor of ``chain`` that is a HardSwish of its source (else a
    HardSigmoid), computed by two or more nodes that can all be replaced; None when there is none. A chain may go
    on after it (PP-LCNetV3 scales and shifts each HardSwish's output by learned scalars)."""
    with np.errstate(all="ignore"):
        values = chain.values(_GRID)
    for operator, reference in (("HardSwish", swish), ("HardSigmoid", sigmoid)):
        for node in chain.nodes:
            tensor = node.output[0]
            if not _matches(values[tensor], reference):
                continue
            part = _closed_part(chain, tensor, readers)
            if part is not None and len(part) > 1:
                return operator, tensor, part
    return None


def fuse_hard_activations(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, int]]:
    """``model`` with each elementwise chain that computes a HardSwish or a HardSigmoid(1/6, 1/2) replaced by that
    one operator, and how many of each it fused. A model below opset 14 with a HardSwish to fuse is upgraded to 14
    first (ONNX's version converter; where it cannot convert the model, the two-node form is written instead):
    OpenVINO runs ``x * HardSigmoid(x)`` as two ops between its integer convolutions, slower than one HardSwish
    (measured: docs/results/int8-design.md, 'HardSwish fusion')."""
    opset = default_opset(model)
    if opset < HARD_SWISH_OPSET and _finds_hard_swish(model):
        try:
            model, _ = upgrade_opset(model, HARD_SWISH_OPSET, reason="HardSwish is an operator from opset 14")
            opset = HARD_SWISH_OPSET
        except BadInput:
            pass
    return model, _fuse(model, opset)


def _finds_hard_swish(model: onnx.ModelProto) -> bool:
    return any(found[0] == "HardSwish" for found in _each(model))


def _each(model: onnx.ModelProto) -> list[tuple[str, str, str, list[onnx.NodeProto]]]:
    """(operator, source, tensor, nodes) for each replaceable activation, none sharing a node."""
    chains = Chains(model)
    swish, sigmoid = hard_swish(_GRID), hard_sigmoid(_GRID, _ALPHA, 0.5)
    found: list[tuple[str, str, str, list[onnx.NodeProto]]] = []
    taken: set[int] = set()
    for source in [i.name for i in model.graph.input] + [o for node in model.graph.node for o in node.output if o]:
        chain = chains.of(source)
        if chain is None or len(chain.nodes) < 2:
            continue
        match = _find(chain, chains.readers, swish, sigmoid)
        if match is None or any(id(n) in taken for n in match[2]):
            continue
        taken.update(id(n) for n in match[2])
        found.append((match[0], source, match[1], match[2]))
    return found


def _fuse(model: onnx.ModelProto, opset: int) -> dict[str, int]:
    graph = model.graph
    fused = {"HardSwish": 0, "HardSigmoid": 0}
    for operator, source, tensor, nodes in _each(model):
        name = (nodes[-1].name or tensor) + "_" + operator.lower()
        if operator == "HardSigmoid":
            new = [helper.make_node("HardSigmoid", [source], [tensor], name=name, alpha=_ALPHA, beta=0.5)]
        elif opset >= HARD_SWISH_OPSET:
            new = [helper.make_node("HardSwish", [source], [tensor], name=name)]
        elif len(nodes) > 2:
            gate = f"{tensor}_hardsigmoid"
            new = [helper.make_node("HardSigmoid", [source], [gate], name=f"{name}_gate", alpha=_ALPHA, beta=0.5),
                   helper.make_node("Mul", [source, gate], [tensor], name=name)]
        else:
            continue
        index = min(i for i, node in enumerate(graph.node) if any(node is n for n in nodes))
        for node in nodes:
            graph.node.remove(node)
        for offset, node in enumerate(new):
            graph.node.insert(index + offset, node)
        fused[operator] += 1
    return fused
