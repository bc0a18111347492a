"""A backend is one folder: each runtime/<engine>/ declares its own settings type, artifact kinds, Triton facts and
describe hook (its ENTRY), the registry lists it in one line, and nothing else in the package branches on it.

The package is walked: a comparison with a ``BackendKind`` member, or an import of a backend folder's modules, is
allowed only inside that folder and in runtime/registry.py. ``KNOWN`` lists the places that still do (issue #51
item 2's remainder); the test fails on any new one, and on a listed one that no longer does (so the list only
shrinks)."""

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

# file (relative to trtpipe/) -> the backends it still names outside their folder; only shrinks.
KNOWN: dict[str, set[str]] = {
    "bench/peers.py": {"onnxruntime", "openvino"},
    "bench/plan.py": {"tensorrt"},
    "bench/variants.py": {"tensorrt"},
    "compile/export.py": {"aoti"},
    "engine/build.py": {"tensorrt"},
    "engine/builder.py": {"tensorrt"},
    "engine/doctor.py": {"tensorrt"},
    "engine/inspect.py": {"tensorrt"},
    "runtime/aoti/__init__.py": {"torch"},
    "runtime/aoti/backend.py": {"torch"},
    "runtime/aoti/graphs.py": {"torch"},
}


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


def _outside_uses() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in ("runtime/registry.py", "vocab.py"):
            continue
        own = relative.split("/")[1] if relative.startswith("runtime/") and relative.count("/") >= 2 else None
        names = _named(ast.parse(path.read_text(), str(path))) - {own}
        if names:
            found[relative] = names
    return found


def test_no_backend_is_named_outside_its_folder_and_the_registry() -> None:
    found = _outside_uses()
    new = {f: sorted(n - KNOWN.get(f, set())) for f, n in found.items() if n - KNOWN.get(f, set())}
    gone = {f: sorted(n - found.get(f, set())) for f, n in KNOWN.items() if n - found.get(f, set())}
    assert not new, f"backends named outside their folder (ask the registry's entry instead): {new}"
    assert not gone, f"no longer named here: take them off KNOWN: {gone}"


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
