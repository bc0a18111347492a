"""A backend is one folder: each runtime/<engine>/ declares its own settings type, artifact kinds, Triton facts and the
facts and hooks other rooms ask of it (its ENTRY), the registry lists it in one line, and nothing else in the package
knows an engine.

The package is walked (its syntax trees, nothing run). Engine knowledge is any of: an import of an engine's library
(onnxruntime, openvino and nncf, tensorrt, torch._inductor) or of a backend folder's modules; a reference to a
``BackendKind`` or ``OnnxExecution`` member (in any expression: a comparison, a default, a table's key); a string
literal that is an engine's name (a backend kind but torch, which is also the model library's name, an ONNX execution,
an engine library, an execution provider). It is allowed only inside that engine's folder (and the folders of the
backends it is built on, ``builds_on``), in runtime/registry.py, in the stage package its ENTRY declares (``stage``:
engine/ for TensorRT, compile/ for AOTInductor), and in vocab.py only inside the ``BackendKind`` and ``OnnxExecution``
classes, which spell the names the CLI, the manifests and the registry's keys use, with the few relations among them
that the artifact room reads below the registry (every other fact about an engine lives in its folder), and in a
member's definition of another word that shares an engine's name (``Target.TENSORRT``, ``ArtifactKind.AOTI``). Prose
(docstrings, help sentences) is not read.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from trtpipe.errors import BadInput
from trtpipe.runtime import capabilities
from trtpipe.runtime.capabilities import OwnStage
from trtpipe.runtime.entry import BackendEntry
from trtpipe.runtime.onnxruntime.providers import PROVIDERS
from trtpipe.runtime.options import RunOptions
from trtpipe.runtime.registry import BACKENDS, abilities, backend_class, backend_of, own_stage, who_can
from trtpipe.vocab import BackendKind, OnnxExecution

PACKAGE = Path(__file__).resolve().parents[2] / "trtpipe"
FOLDERS = {kind: PACKAGE / "runtime" / kind.value for kind in BackendKind}
FOLDERS_BY_NAME = {kind.value for kind in BackendKind}
# An engine library's import name -> the backend whose folder alone may import it.
LIBRARIES = {"onnxruntime": BackendKind.ONNXRUNTIME, "openvino": BackendKind.OPENVINO, "nncf": BackendKind.OPENVINO,
             "tensorrt": BackendKind.TENSORRT, "tensorrt_lean": BackendKind.TENSORRT,
             "torch._inductor": BackendKind.AOTI}
# A string literal that is one of these names an engine ("torch" is also the model library's and the baselines' name).
WORDS = {**{kind.value: kind.value for kind in BackendKind if kind is not BackendKind.TORCH},
         **{execution.value: backend_of(execution).value for execution in OnnxExecution},
         **{library: kind.value for library, kind in LIBRARIES.items()},
         **{provider: BackendKind.ONNXRUNTIME.value for names in PROVIDERS.values() for provider in names}}
ENUMS = {"BackendKind": lambda member: BackendKind[member].value,
         "OnnxExecution": lambda member: backend_of(OnnxExecution[member]).value}


def _stages() -> dict[BackendKind, OwnStage]:
    return {kind: stage for kind in BACKENDS if (stage := own_stage(kind)) is not None}

def _library(module: str) -> str | None:
    return next((kind.value for name, kind in LIBRARIES.items() if module == name or module.startswith(f"{name}.")),
                None)


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _named(tree: ast.AST, *, skip_classes: tuple[str, ...] = (), union: bool = False) -> set[str]:
    """The engines a module knows (the module docstring above says what counts), outside the classes named; where
    any are named (the vocabulary), a member's definition in any class (``TENSORRT = "tensorrt"``: an INT8 target,
    a file kind) is a word of its own, not knowledge of an engine. ``union``: the edge's record of every backend's
    settings (runtime/options.py), whose fields' types are the folders' own, imports each folder's settings module
    and nothing else of it."""
    skipped = {id(sub) for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and node.name in skip_classes
               for sub in ast.walk(node)}
    if skip_classes:
        skipped |= {id(statement.value) for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
                    for statement in node.body if isinstance(statement, ast.Assign)}
    docstrings = _docstrings(tree)
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names |= {found for alias in node.names if (found := _library(alias.name))}
        elif isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if found := _library(node.module):
                names.add(found)
            elif parts[:2] == ["trtpipe", "runtime"] and len(parts) > 2 and parts[2] in FOLDERS_BY_NAME \
                    and not (union and parts[3:] == ["settings"]):
                names.add(parts[2])
            elif node.module == "trtpipe.runtime":
                names |= {alias.name for alias in node.names if alias.name in FOLDERS_BY_NAME}
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ENUMS:
            if node.attr.isupper():
                names.add(ENUMS[node.value.id](node.attr))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in WORDS \
                and id(node) not in docstrings:
            names.add(WORDS[node.value])
    return names


def _declared_for(relative: str) -> set[str]:
    """The engines a module may know because an ENTRY declares it: its own folder and the ones that folder is built
    on, or the backend whose stage package it is in (with the backends that one is built on)."""
    parts = relative.split("/")
    if parts[0] == "runtime" and len(parts) > 2 and parts[1] in FOLDERS_BY_NAME:
        kind = BackendKind(parts[1])
        stage = own_stage(kind)
        return {kind.value, *(base.value for base in (stage.builds_on if stage else ()))}
    return {name for kind, stage in _stages().items() if parts[0] == stage.package
            for name in (kind.value, *(base.value for base in stage.builds_on))}


def _outside_uses() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative == "runtime/registry.py":
            continue
        skip = ("BackendKind", "OnnxExecution") if relative == "vocab.py" else ()
        names = _named(ast.parse(path.read_text(), str(path)), skip_classes=skip,
                       union=relative == "runtime/options.py") - _declared_for(relative)
        if names:
            found[relative] = names
    return found


def test_no_engine_is_known_outside_its_folder_and_the_registry() -> None:
    outside = {file: sorted(names) for file, names in _outside_uses().items()}
    assert not outside, f"engines known outside their folder (ask the registry instead): {outside}"


def test_the_walk_sees_each_kind_of_engine_knowledge() -> None:
    """The walk is not blind: each kind of knowledge in a scrap of code is found, and a docstring is not."""
    code = ('"""onnxruntime in prose"""\nimport openvino\nfrom tensorrt import Builder\n'
            'from trtpipe.runtime.aoti.package import x\nA = {BackendKind.TORCH: 1}\n'
            'B = OnnxExecution.CUDA\nC = "nncf"\nD = "a sentence about onnxruntime"\n')
    assert _named(ast.parse(code)) == {"openvino", "tensorrt", "aoti", "torch", "onnxruntime"}
    assert _named(ast.parse("class BackendKind:\n    X = 'openvino'\n"), skip_classes=("BackendKind",)) == set()
    assert _named(ast.parse("P = ['CUDAExecutionProvider']\n")) == {"onnxruntime"}  # a provider is its engine's


def test_every_folder_is_one_registry_line_with_its_own_declarations() -> None:
    folders = {BackendKind(path.parent.name) for path in (PACKAGE / "runtime").glob("*/__init__.py")}
    assert set(BACKENDS) == folders and set(BackendKind) <= folders  # a folder is a kind, member or not
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


def test_the_choices_a_backends_settings_offer_are_its_own_words() -> None:
    """A setting's choices (ONNX Runtime's graph optimisation levels, OpenVINO's hints, cuDNN's searches) are declared
    in the folder of the backend whose setting it is; the vocabulary holds only words the stages share (a choice
    typed by a vocabulary enum is one other rooms use: a precision). So adding a backend's setting touches its folder
    and the edge's union (runtime/options.py), never vocab.py."""
    import enum
    import typing

    outside_runtime = "\n".join(path.read_text() for path in PACKAGE.rglob("*.py")
                                 if path.relative_to(PACKAGE).parts[0] != "runtime" and path.name != "vocab.py")
    for kind, entry in BACKENDS.items():
        hints = typing.get_type_hints(entry.settings)
        for field in dataclasses.fields(entry.settings):
            for typ in (hints[field.name], *typing.get_args(hints[field.name])):
                if not (isinstance(typ, type) and issubclass(typ, enum.Enum)):
                    continue
                if typ.__module__ == "trtpipe.vocab":
                    assert f"{typ.__name__}." in outside_runtime, f"{typ.__name__} is {kind}'s word: its folder's"
                else:
                    assert typ.__module__.startswith(f"trtpipe.runtime.{kind.value}."), (kind, field.name, typ)


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
    stages = {kind: stage.package for kind, stage in _stages().items()}
    assert stages == {BackendKind.TENSORRT: "engine", BackendKind.AOTI: "compile"}
    assert all((PACKAGE / stage / "__init__.py").is_file() for stage in stages.values())
    for kind, stage in _stages().items():
        assert all(base in BACKENDS and base is not kind for base in stage.builds_on)
    assert _declared_for("engine/builder.py") == {"tensorrt"} and _declared_for("bench/plan.py") == set()
    assert _declared_for("runtime/aoti/backend.py") == {"aoti", "torch"}


def test_the_vocabularys_relations_are_the_registrys() -> None:
    """What the artifact room reads from the vocabulary below the registry (the backends that run an artifact kind,
    its default first) is what the entries declare, in registry order."""
    from trtpipe.runtime.registry import runtimes
    from trtpipe.vocab import ArtifactKind

    for kind in ArtifactKind:
        assert set(kind.runtimes) <= set(runtimes(kind)) and kind.backend == runtimes(kind)[0]


def test_each_capability_a_backend_declares_is_implemented_in_its_own_folder() -> None:
    """Every capability an ENTRY declares is a capability type (runtime/capabilities.py), and what implements it
    offers every member the protocol names (or is the plain-data capability itself); one named by an import string
    lives in the backend's own folder."""
    kinds = {value for value in vars(capabilities).values() if isinstance(value, type)
             and value.__module__ == capabilities.__name__}
    for kind, entry in BACKENDS.items():
        for capability, implementation in entry.can.items():
            assert capability in kinds, f"{kind} declares {capability}, which is no capability"
            if isinstance(implementation, str):
                assert implementation.startswith(f"trtpipe.runtime.{kind.value}."), (kind, implementation)
            assert isinstance(entry.ability(capability), capability), f"{kind} does not implement {capability}"


def test_no_entry_field_serves_one_backend_only() -> None:
    """What only some backends offer is a capability they declare, not a field every entry carries: each field of
    BackendEntry with a default is set away from it by at least two backends (``can`` holds the rest)."""
    for field in dataclasses.fields(BackendEntry):
        if field.default is dataclasses.MISSING:  # the backend's own facts (kind, class, settings), and ``can``
            continue
        users = [kind for kind, entry in BACKENDS.items() if getattr(entry, field.name) != field.default]
        assert len(users) >= 2, f"BackendEntry.{field.name} serves {users} only: make it a capability"


def test_the_registry_answers_who_can_from_the_declarations() -> None:
    """"Who can X" is read from the entries, in registry order, without importing anything for the question."""
    from trtpipe.runtime.capabilities import QuantizesAsPeer, RunsModules, RunsOnnx, Tunes

    assert who_can(RunsOnnx) == (BackendKind.ONNXRUNTIME, BackendKind.OPENVINO)
    assert who_can(RunsModules) == (BackendKind.TORCH,)
    assert who_can(Tunes) == (BackendKind.ONNXRUNTIME,)
    assert [kind for kind, peer in abilities(QuantizesAsPeer)] == [BackendKind.ONNXRUNTIME, BackendKind.OPENVINO]
    assert dict((kind, peer.tools) for kind, peer in abilities(QuantizesAsPeer))[BackendKind.OPENVINO] == ("nncf",)
    with pytest.raises(TypeError, match="torch does not declare Tunes"):
        BACKENDS[BackendKind.TORCH].ability(Tunes)
