"""Graph simplification with onnxslim: constant folding, Conv+BatchNorm folding, dead-node and identity
removal, redundant Cast/Reshape elimination and shape simplification.

onnxslim is a maintained library that does all of this in standard ONNX operators, which is what TensorRT's
parser needs; ONNX Runtime's own offline optimiser would write com.microsoft fused ops TensorRT cannot read.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass

import onnx

from trtpipe.errors import TrtpipeError
from trtpipe.onnx_info import op_counts

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
        slimmed = onnxslim.slim(model)
    foreign = sorted({f"{n.domain}::{n.op_type}" for n in slimmed.graph.node if n.domain not in STANDARD_DOMAINS})
    if foreign:
        raise TrtpipeError(f"Simplification produced non-standard operators ({', '.join(foreign)}), which "
                           "TensorRT cannot parse: rerun with --no-fuse.")
    return slimmed, FusionReport(before, op_counts(slimmed), size_before, slimmed.ByteSize())
