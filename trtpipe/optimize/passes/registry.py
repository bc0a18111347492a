"""The optimization passes: one module per pass in this folder, each declaring at its top what it is.

A graph pass, which `--passes` names by its module's name, declares ``PASS = GraphPass("what it does")``; the
pass that writes a precision into the graph declares ``PASS = PrecisionPass(Precision.FP16, "what it does")``.
Both also have ``apply(model, context) -> model``, and :mod:`~trtpipe.optimize.passes.loader` hands the stage each
one as a :class:`~trtpipe.optimize.passes.loader.Pass`. A module without a declaration (``context``, this one, any
helper added later) is no pass and never becomes a choice. The declarations are read from the modules' source
with ``ast``, not imported, so the CLI's choices cost no onnx import; no pass registers itself as a side effect
of an import, and a new pass is one file.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from trtpipe.vocab import Precision

_FOLDER = Path(__file__).parent
MARKER = "PASS"  # the module-level name a pass declares itself with


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
_KINDS: dict[str, type[GraphPass] | type[PrecisionPass]] = {"GraphPass": GraphPass, "PrecisionPass": PrecisionPass}


def _literal(node: ast.expr, path: Path) -> Any:
    """A declaration's argument: a literal, or a member of Precision (``Precision.FP16``); Any, as the source wrote
    it, for the declaration's class to take."""
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == Precision.__name__
            and node.attr in Precision.__members__):
        return Precision[node.attr]
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise ValueError(f"{path}: the arguments of {MARKER} must be literals or Precision members, so that the "
                         "pass can be found without importing it") from None


def read_declaration(path: Path) -> Declaration | None:
    """The pass ``path`` declares at module level, read from its source without importing it; None for a module
    that declares none."""
    for node in ast.parse(path.read_text(encoding="utf-8"), str(path)).body:
        targets: list[ast.expr]
        call: ast.expr | None
        if isinstance(node, ast.Assign):
            targets, call = node.targets, node.value
        elif isinstance(node, ast.AnnAssign):
            targets, call = [node.target], node.value
        else:
            continue
        if not any(isinstance(t, ast.Name) and t.id == MARKER for t in targets):
            continue
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in _KINDS):
            raise ValueError(f"{path}: {MARKER} must be GraphPass(...) or PrecisionPass(...)")
        args = [_literal(arg, path) for arg in call.args]
        kwargs = {kw.arg: _literal(kw.value, path) for kw in call.keywords if kw.arg is not None}
        return _KINDS[call.func.id](*args, **kwargs)
    return None


def declared_passes(folder: Path) -> dict[str, Declaration]:
    """{module name: declaration} for each module in ``folder`` that declares a pass, by name."""
    found = {path.stem: read_declaration(path) for path in sorted(folder.glob("*.py"))}
    return {name: declaration for name, declaration in found.items() if declaration is not None}


@lru_cache(maxsize=1)
def _passes() -> dict[str, Declaration]:
    return declared_passes(_FOLDER)


def graph_pass_names() -> tuple[str, ...]:
    return tuple(name for name, declaration in _passes().items() if isinstance(declaration, GraphPass))


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
    """{module name: declaration} of every shipped pass (read once, from the source)."""
    return dict(_passes())


def precision_pass_name(precision: Precision) -> str | None:
    """The module of the pass that writes ``precision`` into the graph; None for FP32 (nothing to write)."""
    if precision is Precision.FP32:
        return None
    name = next((name for name, declaration in _passes().items()
                 if isinstance(declaration, PrecisionPass) and declaration.precision is precision), None)
    if name is None:
        raise ValueError(f"no optimization pass writes {precision}")
    return name
