"""Optimization passes, one per file: graph passes (fuse) and one pass per precision (fp16, int8)."""

from trtpipe.optimize.passes.registry import graph_pass, graph_pass_names, parse_passes, precision_pass

__all__ = ["graph_pass", "graph_pass_names", "parse_passes", "precision_pass"]
