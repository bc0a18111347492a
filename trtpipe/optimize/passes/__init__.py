"""Optimization passes, one per file: graph passes (fuse) and one pass per precision (fp16, int8)."""

from trtpipe.optimize.passes.loader import Pass, graph_pass, precision_pass
from trtpipe.optimize.passes.registry import graph_pass_names, parse_passes

__all__ = ["Pass", "graph_pass", "graph_pass_names", "parse_passes", "precision_pass"]
