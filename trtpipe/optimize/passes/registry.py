"""The optimization passes: one module per pass in this folder, found by its file name.

A module named after a precision (``fp16.py``, ``int8.py``) is that precision's pass; every other module is a
graph pass that `--passes` can name. Each module has ``DESCRIPTION`` and ``apply(model, context) -> model``.
Finding passes by file name keeps the CLI's choices light (no onnx import) and makes a new pass one file; no
pass registers itself as a side effect of an import.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from types import ModuleType

from trtpipe.vocab import Precision

_FOLDER = Path(__file__).parent
_NOT_PASSES = {"registry", "context"}


def _modules() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules([str(_FOLDER)]) if m.name not in _NOT_PASSES)


def graph_pass_names() -> tuple[str, ...]:
    precisions = {str(p) for p in Precision}
    return tuple(name for name in _modules() if name not in precisions)


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


def graph_pass(name: str) -> ModuleType:
    if name not in graph_pass_names():
        raise ValueError(f"unknown pass {name}")
    return importlib.import_module(f"{__package__}.{name}")


def precision_pass(precision: Precision) -> ModuleType | None:
    """The pass that writes ``precision`` into the graph; None for FP32 (nothing to write)."""
    if precision is Precision.FP32:
        return None
    if str(precision) not in _modules():
        raise ValueError(f"no optimization pass writes {precision}")
    return importlib.import_module(f"{__package__}.{precision}")
