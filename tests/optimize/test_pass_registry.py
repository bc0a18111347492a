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


def test_an_int8_step_is_its_folder_and_one_line_in_the_steps_table() -> None:
    """Every folder in int8/steps/ holds one step (its ``step.py``) in STEPS beside its algorithm, each step's name
    is unique, no module outside the steps' table imports a step module, and no module outside a step's folder
    imports its algorithm: adding an INT8 algorithm touches its folder and one table line (as NNCF keeps an
    algorithm)."""
    folder = PACKAGE / "optimize" / "int8" / "steps"
    folders = sorted(path for path in folder.iterdir() if path.is_dir() and path.name != "__pycache__")
    modules = {f"trtpipe.optimize.int8.steps.{path.name}.step" for path in folders}
    assert {type(step).__module__ for step in STEPS} == modules
    assert not [path.name for path in folder.glob("*.py") if path.stem != "__init__"]  # nothing loose beside them
    assert len({step.name for step in STEPS}) == len(STEPS)
    for path in PACKAGE.rglob("*.py"):
        named = {name for name in _imports(path) if name in modules}
        assert folder in path.parents or not named, f"{path} names the step module(s) {named}; only the steps may"
        own = next((f.name for f in folders if f in path.parents), None)
        parts = [name.split(".") for name in _imports(path) if name.startswith("trtpipe.optimize.int8.steps.")]
        algorithms = {".".join(p[:6]) for p in parts if len(p) >= 6 and p[5] != "step" and p[4] != own}
        assert not algorithms, f"{path} imports another step's algorithm {algorithms}"
