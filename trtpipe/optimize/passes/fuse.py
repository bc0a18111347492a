"""Pass ``fuse``: graph simplification with onnxslim: constant folding, Conv+BatchNorm folding, dead-node and identity
removal, redundant Cast/Reshape elimination and shape simplification; then constant scales and shifts of a
convolution's output are folded into it (:mod:`~trtpipe.optimize.graph.conv_affine`) and the HardSwish and HardSigmoid
that an exporter wrote as arithmetic become one operator each (:mod:`~trtpipe.optimize.graph.hard_activations`), which
onnxslim does not do.

onnxslim is a maintained library that does all of this in standard ONNX operators, which is what TensorRT's
parser needs; ONNX Runtime's own offline optimiser would write com.microsoft fused ops TensorRT cannot read.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass

import onnx

from trtpipe import console
from trtpipe.errors import TrtpipeError, VerificationFailed
from trtpipe.graph_index import read_names
from trtpipe.onnx_info import name_nodes, op_counts
from trtpipe.optimize.graph.conv_affine import fold_conv_affine
from trtpipe.optimize.graph.hard_activations import fuse_hard_activations
from trtpipe.optimize.passes.context import PassContext
from trtpipe.optimize.records import FusionRecord

# Fusion only reorders exact arithmetic: anything below this cosine is a bug, not rounding.
MIN_COSINE = 0.99999

STANDARD_DOMAINS = {"", "ai.onnx"}


@dataclass
class FusionReport:
    ops_before: dict[str, int]
    ops_after: dict[str, int]
    bytes_before: int
    bytes_after: int

    @property
    def nodes_before(self) -> int:
        return sum(self.ops_before.values())

    @property
    def nodes_after(self) -> int:
        return sum(self.ops_after.values())

    def to_dict(self) -> dict[str, object]:
        return {"nodes_before": self.nodes_before, "nodes_after": self.nodes_after,
                "bytes_before": self.bytes_before, "bytes_after": self.bytes_after,
                "ops_before": self.ops_before, "ops_after": self.ops_after}


def simplify(model: onnx.ModelProto) -> tuple[onnx.ModelProto, FusionReport]:
    """Return the simplified model and what changed; raises if a non-standard operator appears."""
    import onnxslim

    before = op_counts(model)
    size_before = model.ByteSize()
    with contextlib.redirect_stdout(io.StringIO()):
        slimmed = onnxslim.slim(_outputs_unshaped(model))
    _restore_outputs(slimmed.graph, model.graph)
    slimmed, affine = fold_conv_affine(slimmed)
    slimmed, activations = fuse_hard_activations(slimmed)
    if affine or any(activations.values()):
        _drop_unread_initializers(slimmed.graph)
    foreign = sorted({f"{n.domain}::{n.op_type}" for n in slimmed.graph.node if n.domain not in STANDARD_DOMAINS})
    if foreign:
        raise TrtpipeError(f"Simplification produced non-standard operators ({', '.join(foreign)}), which "
                           "TensorRT cannot parse: rerun with --passes none.")
    return slimmed, FusionReport(before, op_counts(slimmed), size_before, slimmed.ByteSize())


def _outputs_unshaped(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose graph outputs declare no shape. onnxslim trusts a graph output's declared shape as
    fact and folds the shape computations that feed it into constants: where an exporter declared a wrong one
    (ddddocr 1.6.1's CRNN declares ``[1, seqlen]`` for logits it computes as ``[T, 1, C]``), the slimmed graph then
    reshapes to the declared shape and computes another model. Without the declarations, it infers what the graph
    computes."""
    unshaped = onnx.ModelProto()
    unshaped.CopyFrom(model)
    for output in unshaped.graph.output:
        if output.type.HasField("tensor_type"):
            output.type.tensor_type.ClearField("shape")
    return unshaped


def _restore_outputs(graph: onnx.GraphProto, original: onnx.GraphProto) -> None:
    """The graph outputs of ``graph`` declared as ``original`` declared them (same names, same order where onnxslim
    kept them), so that simplifying changes nothing a caller reads from the outputs' declarations."""
    declared = {o.name: o for o in original.output}
    for output in graph.output:
        if output.name in declared:
            output.CopyFrom(declared[output.name])


def _drop_unread_initializers(graph: onnx.GraphProto) -> None:
    read = read_names(graph)
    for tensor in [t for t in graph.initializer if t.name not in read]:
        graph.initializer.remove(tensor)


def apply(model: onnx.ModelProto, context: PassContext) -> onnx.ModelProto:
    """Simplify ``model`` and prove on the probe data that it still computes the same outputs."""
    with console.step("Simplifying the graph (onnxslim)..."):
        fused, report = simplify(model)
    name_nodes(fused)
    check = context.compare(model, fused, context.probe)
    console.success(f"Fusion: {report.nodes_before} → {report.nodes_after} nodes, "
                    f"{report.bytes_before / 1e6:.2f} → {report.bytes_after / 1e6:.2f} MB; vs input: max error "
                    f"{check.max_abs_err:.2e}, cosine {check.cosine:.7f}")
    _print_op_table(report.ops_before, report.ops_after)
    if check.cosine < MIN_COSINE:
        raise VerificationFailed(f"The simplified graph differs from the input (cosine {check.cosine:.6f}, max "
                                 f"error {check.max_abs_err:.3g}): rerun with --passes none and report the model.")
    context.record(FusionRecord(report.ops_before, report.ops_after, report.bytes_before, report.bytes_after, check))
    return fused


def _print_op_table(before: dict[str, int], after: dict[str, int]) -> None:
    from rich.table import Table

    console.err.print("Operators before and after fusion:")
    table = Table()
    for header in ("Operator", "Before", "After"):
        table.add_column(header, justify="left" if header == "Operator" else "right")
    for op in sorted(set(before) | set(after)):
        table.add_row(op, str(before.get(op, 0)), str(after.get(op, 0)))
    table.add_row("[bold]total", f"[bold]{sum(before.values())}", f"[bold]{sum(after.values())}")
    console.err.print(table)
