"""The optimization passes: one module per pass in this folder, each with ``apply(model, context) -> model``, and
one line per pass in :data:`PASSES` below, the one place that names them and says what each does.

A graph pass (a rewrite that keeps the precision), which `--passes` names by its module's name, is a
:class:`GraphPass`; the pass that writes a precision into the graph is a :class:`PrecisionPass`.
:mod:`~trtpipe.optimize.passes.loader` imports a pass's module when the stage runs it and hands it over as a
:class:`~trtpipe.optimize.passes.loader.Pass`. A module the table does not name (``context``, this one, any helper
added later) is no pass and never becomes a choice. The table is read without importing the passes, so the CLI's
choices cost no onnx import; adding a pass is its file and one line here.
"""

from __future__ import annotations

from dataclasses import dataclass

from trtpipe.vocab import Precision


@dataclass(frozen=True)
class GraphPass:
    """Declares its module a graph pass: a rewrite that keeps the precision (fusion, equalization)."""

    description: str


@dataclass(frozen=True)
class PrecisionPass:
    """Declares its module the pass that writes ``precision`` into the graph."""

    precision: Precision
    description: str


Declaration = GraphPass | PrecisionPass

# module name -> what it is; the graph passes in the order `--passes` lists them
PASSES: dict[str, Declaration] = {
    "bf16": PrecisionPass(Precision.BF16, "BF16 weights behind Casts (convolutions, matrix products); run in BF16 "
                          "kernels by OpenVINO"),
    "equalize": GraphPass("cross-layer equalization of consecutive convolutions (for depthwise-separable nets; INT8)"),
    "fp16": PrecisionPass(Precision.FP16, "FP16 with ONNX Runtime's converter; overflow-prone operators, shape "
                          "arithmetic and measured hot nodes stay FP32"),
    "fuse": GraphPass("onnxslim: constant folding, Conv+BatchNorm folding, identity and redundant Cast/Reshape "
                      "removal; HardSwish/HardSigmoid written as arithmetic made one operator"),
    "int8": PrecisionPass(Precision.INT8, "INT8 Q/DQ for the target (tensorrt: S8S8 symmetric; cpu: U8S8), with an "
                          "accuracy budget"),
    "scale_depthwise": GraphPass("per-channel input gains for depthwise convolutions, folded into their weights "
                                 "(INT8)"),
}


def graph_pass_names() -> tuple[str, ...]:
    return tuple(name for name, declaration in PASSES.items() if isinstance(declaration, GraphPass))


def parse_passes(text: str) -> tuple[str, ...]:
    """``fuse`` or ``a,b`` or ``none`` -> the graph passes to run, in order."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if names in ((), ("none",)):
        return ()
    unknown = [n for n in names if n not in graph_pass_names()]
    if unknown:
        raise ValueError(f"unknown pass {', '.join(unknown)}: the passes are {', '.join(graph_pass_names())} "
                         "(or none)")
    return names


def declarations() -> dict[str, Declaration]:
    """{module name: declaration} of every shipped pass."""
    return dict(PASSES)


def precision_pass_name(precision: Precision) -> str | None:
    """The module of the pass that writes ``precision`` into the graph; None for FP32 (nothing to write)."""
    if precision is Precision.FP32:
        return None
    name = next((name for name, declaration in PASSES.items()
                 if isinstance(declaration, PrecisionPass) and declaration.precision is precision), None)
    if name is None:
        raise ValueError(f"no optimization pass writes {precision}")
    return name
