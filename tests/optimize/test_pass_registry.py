"""The passes are a plain table (optimize/passes/registry.py): a module in optimize/passes/ is a `--passes` choice
or a precision's pass only when the table names it, and every module the table names is a pass with its apply;
helper modules beside the passes are never offered. The INT8 steps likewise: each step module in
optimize/int8/steps/ is in the steps' table, and no other module names it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import trtpipe
from trtpipe.optimize.int8.steps import STEPS
from trtpipe.optimize.passes.loader import DeclaredPass, graph_pass, precision_pass
from trtpipe.optimize.passes.registry import PASSES, GraphPass, graph_pass_names, parse_passes
from trtpipe.vocab import Precision

PACKAGE = Path(trtpipe.__file__).parent


def _defines_apply(path: Path) -> bool:
    return any(isinstance(node, ast.FunctionDef) and node.name == "apply"
               for node in ast.parse(path.read_text(encoding="utf-8")).body)


def test_the_table_names_every_pass_module_and_only_those() -> None:
    folder = PACKAGE / "optimize" / "passes"
    passes = {path.stem for path in folder.glob("*.py") if _defines_apply(path)}
    assert passes == set(PASSES)  # a pass is its file and one line in the table


def test_the_shipped_passes() -> None:
    assert graph_pass_names() == tuple(name for name, kind in PASSES.items() if isinstance(kind, GraphPass))
    assert {"equalize", "fuse", "scale_depthwise"} <= set(graph_pass_names())  # the shipped ones
    for helper in ("context", "registry"):
        with pytest.raises(ValueError, match=f"unknown pass {helper}"):
            parse_passes(helper)
    assert parse_passes("fuse, equalize") == ("fuse", "equalize") and parse_passes("none") == ()
    for name in graph_pass_names():
        loaded = graph_pass(name)  # a Pass: its name, what it does, apply()
        assert isinstance(loaded, DeclaredPass) and isinstance(loaded.declaration, GraphPass)
        assert loaded.name == name and loaded.description == PASSES[name].description
    assert precision_pass(Precision.FP32) is None
    for precision in Precision:
        if precision.optimizable and precision is not Precision.FP32:
            loaded = precision_pass(precision)
            assert isinstance(loaded, DeclaredPass) and loaded.declaration.precision is precision  # type: ignore[union-attr]
            assert callable(loaded.module.apply)


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
    return names


def test_an_int8_step_is_its_module_and_one_line_in_the_steps_table() -> None:
    """Every module in int8/steps/ holds a step in STEPS, each step's name is unique, and no module outside the
    steps' own folder imports a step module: adding an INT8 algorithm touches its file and one table line."""
    folder = PACKAGE / "optimize" / "int8" / "steps"
    modules = {f"trtpipe.optimize.int8.steps.{path.stem}" for path in folder.glob("*.py") if path.stem != "__init__"}
    assert {type(step).__module__ for step in STEPS} == modules
    assert len({step.name for step in STEPS}) == len(STEPS)
    for path in PACKAGE.rglob("*.py"):
        if path.parent == folder:
            continue
        named = {name for name in _imports(path) if name in modules}
        assert not named, f"{path} names the step module(s) {named}; only the steps' table may"
