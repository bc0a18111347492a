"""A backend is one folder: each runtime/<engine>/ declares its own settings type, artifact kinds, Triton facts and
the facts and hooks other rooms ask of it (its ENTRY), the registry lists it in one line, and nothing else in the
package branches on it.

The package is walked: a comparison with a ``BackendKind`` member, or an import of a backend folder's modules, is
allowed only inside that folder, in runtime/registry.py, and where the backend's ENTRY says so: the stage package
that exists to make its artifacts (``stage``: engine/ for TensorRT, compile/ for AOTInductor) and the folders of
backends it is built on (``builds_on``: AOTInductor's packages run on torch). No module names one otherwise, and
the test fails on the first that does.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from trtpipe.errors import BadInput
from trtpipe.runtime.entry import BackendEntry
from trtpipe.runtime.options import RunOptions
from trtpipe.runtime.registry import BACKENDS, backend_class
from trtpipe.vocab import BackendKind

PACKAGE = Path(__file__).resolve().parents[2] / "trtpipe"
FOLDERS = {kind: PACKAGE / "runtime" / kind.value for kind in BackendKind}


def _named(tree: ast.AST) -> set[str]:
    """The backends a module names: imports of trtpipe.runtime.<engine>, and comparisons with BackendKind.<X>."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if parts[:2] == ["trtpipe", "runtime"] and len(parts) > 2 and parts[2] in FOLDERS_BY_NAME:
                names.add(parts[2])
            elif node.module == "trtpipe.runtime":
                names |= {alias.name for alias in node.names if alias.name in FOLDERS_BY_NAME}
        elif isinstance(node, ast.Compare | ast.Call):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) \
                        and sub.value.id == "BackendKind" and sub.attr in BackendKind.__members__:
                    names.add(BackendKind[sub.attr].value)
    return names


FOLDERS_BY_NAME = {kind.value for kind in BackendKind}


def _declared_for(relative: str) -> set[str]:
    """The backends a module may name because an ENTRY declares it: its own folder and the ones that folder is built
    on, or the backend whose stage package it is in."""
    parts = relative.split("/")
    if parts[0] == "runtime" and len(parts) > 2 and parts[1] in FOLDERS_BY_NAME:
        own = BACKENDS[BackendKind(parts[1])]
        return {own.kind.value, *(kind.value for kind in own.builds_on)}
    return {entry.kind.value for entry in BACKENDS.values() if entry.stage and parts[0] == entry.stage}


def _outside_uses() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in ("runtime/registry.py", "vocab.py"):
            continue
        names = _named(ast.parse(path.read_text(), str(path))) - _declared_for(relative)
        if names:
            found[relative] = names
    return found


def test_no_backend_is_named_outside_its_folder_and_the_registry() -> None:
    found = {file: sorted(names) for file, names in _outside_uses().items()}
    assert not found, f"backends named outside their folder (ask the registry's entry instead): {found}"


def test_every_folder_is_one_registry_line_with_its_own_declarations() -> None:
    assert set(BACKENDS) == set(BackendKind) == {kind for kind in FOLDERS if FOLDERS[kind].is_dir()}
    for kind, entry in BACKENDS.items():
        assert isinstance(entry, BackendEntry) and entry.kind is kind
        folder = f"trtpipe.runtime.{kind.value}."
        assert entry.implementation.startswith(folder) and entry.settings.__module__.startswith(folder)
        assert backend_class(kind).settings_type is entry.settings


def test_run_options_at_the_edge_is_the_union_of_the_backends_settings() -> None:
    """Every flag is some backend's setting with the same default; every backend setting is a flag."""
    edge = {f.name: f for f in dataclasses.fields(RunOptions)}
    owned: set[str] = set()
    for entry in BACKENDS.values():
        for field in dataclasses.fields(entry.settings):
            assert field.name in edge, f"{entry.kind}'s setting {field.name} has no RunOptions field"
            assert RunOptions().__getattribute__(field.name) == entry.settings().__getattribute__(field.name)
            owned.add(field.name)
    assert owned == set(edge)


def test_a_backend_receives_only_its_own_settings_type() -> None:
    onnxruntime = BACKENDS[BackendKind.ONNXRUNTIME].settings
    settings = RunOptions(threads=2, spinning=False).only(onnxruntime, BackendKind.ONNXRUNTIME)
    assert type(settings) is onnxruntime and settings.threads == 2 and not settings.spinning
    assert not hasattr(settings, "hint")  # OpenVINO's
    openvino = BACKENDS[BackendKind.OPENVINO].settings
    with pytest.raises(BadInput, match="openvino backend has no setting spinning"):
        RunOptions(spinning=False).only(openvino, BackendKind.OPENVINO)


def test_a_backends_own_stage_and_foundations_are_declared_on_its_entry() -> None:
    """What lets a module name a backend outside its folder is on the backend's ENTRY, and names real places: each
    stage is a package of trtpipe/, each backend built on is another registered one."""
    stages = {entry.kind: entry.stage for entry in BACKENDS.values() if entry.stage}
    assert stages == {BackendKind.TENSORRT: "engine", BackendKind.AOTI: "compile"}
    assert all((PACKAGE / stage / "__init__.py").is_file() for stage in stages.values())
    for entry in BACKENDS.values():
        assert all(base in BACKENDS and base is not entry.kind for base in entry.builds_on)
    assert _declared_for("engine/builder.py") == {"tensorrt"} and _declared_for("bench/plan.py") == set()
    assert _declared_for("runtime/aoti/backend.py") == {"aoti", "torch"}
