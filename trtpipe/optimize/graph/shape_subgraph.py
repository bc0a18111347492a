"""Shape computations: the nodes whose values come from tensor shapes and constants, never from activations.

Detection heads build their anchor grid from the feature map's size at run time (YOLOv8's ``make_anchors``
exports as Shape -> Gather -> Cast to float -> Range -> Add 0.5 -> meshgrid's Reshape/Expand -> Concat, and a
ConstantOfShape of strides), and exported graphs compute Reshape targets, Expand and Tile sizes, Slice ends and
Resize scales the same way whenever an axis is dynamic. Their values are integers or index math on them: exact in
FP32, rounded in FP16 past 2048, and small (one value per row or column of a feature map), so a precision pass
gains nothing by converting them. Converting part of them breaks the graph: ONNX Runtime's float16 converter holds
``Range`` in FP32 but turns the ``Cast`` that feeds it into a Cast to FP16, and a YOLOv8 exported with dynamic
height and width then fails to load (``Type parameter (T) of Optype (Range) bound to different types``).
"""

from __future__ import annotations

import onnx

from trtpipe.graph_index import GraphIndex

# Nodes that read only the shape of their input, whatever its values and type: where shape computations start.
SHAPE_SOURCES = frozenset({"Shape", "Size"})


def shape_computations(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The nodes of ``model`` that compute shape arithmetic in float, in graph order.

    A node is a shape computation when every input it reads is a constant or a shape computation's result and at
    least one comes from a ``Shape`` or ``Size`` (which are not listed themselves: they read an activation); a
    constant node read only by shape computations belongs to them too, so their constants keep FP32's values. Of
    those, the nodes that read or write a float tensor (or one whose type shape inference cannot tell) are listed:
    integer index math is left alone by every precision pass anyway. The graph is read in its stored order, which
    ONNX requires to be topological; a node stored before its producer is not listed.
    """
    index = GraphIndex.of(model)
    nodes = index.nodes
    constant: set[str] = set(index.constants)  # initializers and Constant nodes' outputs
    from_shape: set[str] = set()
    members: set[int] = set()
    for position, node in enumerate(nodes):
        read = [name for name in node.input if name]
        if node.op_type in SHAPE_SOURCES:
            from_shape.update(node.output)
        elif not _plain(node) or not read or not all(name in constant or name in from_shape for name in read):
            continue
        elif any(name in from_shape for name in read):
            from_shape.update(node.output)
            members.add(position)
        else:
            constant.update(node.output)
    # Constants that only shape computations read join them, last reader first, so a chain of them joins whole.
    position_of = {id(node): position for position, node in enumerate(nodes)}
    for position in reversed(range(len(nodes))):
        node = nodes[position]
        if position in members or node.op_type in SHAPE_SOURCES or not node.output:
            continue
        if not all(name in constant for name in node.output) or set(node.output) & index.graph_outputs:
            continue
        read_by = [position_of[id(reader)] for name in node.output for reader in index.readers.get(name, [])]
        if read_by and all(reader in members for reader in read_by):
            members.add(position)
    return [node for position, node in enumerate(nodes) if position in members and _touches_float(node, index)]


def _plain(node: onnx.NodeProto) -> bool:
    """A node whose outputs depend on its inputs alone: no subgraph reading outer values, no random draw."""
    if any(attribute.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for attribute in node.attribute):
        return False
    return node.domain in ("", "ai.onnx") and not node.op_type.startswith(("Random", "Bernoulli", "Multinomial"))


def _touches_float(node: onnx.NodeProto, index: GraphIndex) -> bool:
    """Whether ``node`` reads or writes FP32 (or a tensor of unknown type), the type a float16 converter changes."""
    names = [name for name in [*node.input, *node.output] if name]
    return any(index.types.get(name, onnx.TensorProto.UNDEFINED) in (onnx.TensorProto.FLOAT,
                                                                    onnx.TensorProto.UNDEFINED) for name in names)
