"""Fallback units: the groups of quantised nodes that go back to FP32 together (step 1 of the accuracy budget,
:mod:`sensitivity`).

A tensor's Q/DQ only disappears when none of its readers is quantised, so a unit is the readers of one activation
tensor, plus, where quantised nodes also write their outputs through Q/DQ, the node that writes it. A module of its own
because both the ranking (:mod:`ranking`) and the probe model it runs (:mod:`error_probe`, which reads through
:class:`Writers` the Q/DQ an input stays behind) need what it knows of the quantized graph's writers.
"""

from __future__ import annotations

import onnx

from trtpipe.graph_index import GraphIndex
from trtpipe.optimize.int8.qdq.keep_fp32 import reading_dequantized
from trtpipe.optimize.int8.qdq.profiles import QuantProfile
from trtpipe.optimize.int8.qdq.quantize import quantizable_nodes


def fallback_units(model: onnx.ModelProto, profile: QuantProfile,
                   quantized: onnx.ModelProto | None = None) -> list[tuple[str, ...]]:
    """Groups of quantisable nodes that go back to FP32 together, in graph order: the readers of one activation
    tensor (its Q/DQ only disappears when none of them is quantised); where quantised nodes also write their
    output through Q/DQ (``profile.int8_outputs``), the node that wrote the tensor too, since an FP32 reader of
    an INT8 node's output still reads it after that Q/DQ. A node whose inputs are all weights or graph constants
    is a unit of its own. With ``quantized``: only the nodes that read a dequantized tensor there (an activation
    the quantizer folded into its layer has nothing to give back)."""
    quantizable = quantizable_nodes(model, profile)
    if quantized is not None:
        dequantized_readers = reading_dequantized(quantized)
        quantizable = [name for name in quantizable if name in dequantized_readers]
    wanted = set(quantizable)
    constants = {i.name for i in model.graph.initializer}
    readers: dict[str, list[str]] = {}
    for node in model.graph.node:
        if node.name in wanted:
            for name in node.input:
                if name and name not in constants:
                    readers.setdefault(name, []).append(node.name)
    if quantized is not None and profile.int8_outputs:
        writer = Writers(model, quantized, wanted)
        groups = [(*names, *((w,) if (w := writer.of(tensor)) and w not in names else ()))
                  for tensor, names in readers.items()]
    else:
        groups = [tuple(names) for names in readers.values()]
    units = list(dict.fromkeys(groups))
    covered = {n for unit in units for n in unit}
    return units + [(n,) for n in quantizable if n not in covered]


class Writers:
    """The quantised node whose output Q/DQ an FP32 tensor is read through, if there is one: its producer, or
    the layer before an activation the quantizer folded into it (a Relu or Clip the quantized graph lacks)."""

    def __init__(self, model: onnx.ModelProto, quantized: onnx.ModelProto, wanted: set[str]) -> None:
        index = GraphIndex.of(model)
        self.producer = index.producer
        self.present = {node.name for node in quantized.graph.node}
        self.constants = set(index.constants)
        self.wanted = wanted

    def of(self, tensor: str) -> str | None:
        node = self.producer.get(tensor)
        while node is not None and node.name not in self.wanted:
            data = [name for name in node.input if name and name not in self.constants]
            if node.name in self.present or len(data) != 1:
                return None  # a float node of the INT8 model: its readers read its float output
            node = self.producer.get(data[0])
        return node.name if node is not None else None

