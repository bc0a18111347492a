"""One room for model sources: each kind of MODEL resolves in its own module of ``trtpipe.models.sources``, the
table orders them, and nothing outside the room knows a source's SHA-256 or preprocessing rule."""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import trtpipe
from trtpipe.errors import BadInput
from trtpipe.inputs import InputSpec, Layout
from trtpipe.models.packaged import LAYOUT_DETECTOR, PACKAGED, TEXT_DETECTOR, packaged_onnx
from trtpipe.models.sources import SOURCES, find_module, for_file, natural_data, onnx_source, source_for

PACKAGE = Path(trtpipe.__file__).parent
ROOM = PACKAGE / "models" / "sources"
SHARED = {"__init__", "base"}  # the table and what every kind shares; every other module is one kind


def _kind_modules() -> list[str]:
    return sorted(p.stem for p in ROOM.glob("*.py") if p.stem not in SHARED)


def test_every_kind_module_is_one_line_of_the_table() -> None:
    """Adding a model source touches its own module and one line of SOURCES: a kind module missing from the table,
    or a kind the table names from elsewhere, fails here."""
    table = [type(source) for source in SOURCES]
    modules = {cls.__module__.rsplit(".", 1)[-1]: cls for cls in table}
    assert sorted(modules) == _kind_modules() and len(modules) == len(table), "one kind per module, each in SOURCES"
    assert all(cls.__module__.startswith("trtpipe.models.sources.") for cls in table)
    kinds = [cls.kind for cls in table]
    assert len(set(kinds)) == len(kinds), f"kinds must be unique: {kinds}"
    for name in _kind_modules():  # a module's only source class is the one in the table
        module = importlib.import_module(f"trtpipe.models.sources.{name}")
        own = [v for v in vars(module).values()
               if isinstance(v, type) and v.__module__ == module.__name__ and "kind" in vars(v)]
        assert own == [modules[name]], f"{name}.py: {own}"


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names imported from it) for every import in the file, nested ones included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found.extend((a.name, []) for a in node.names)
    return found


def test_nothing_outside_the_room_imports_a_kind_module() -> None:
    """Callers ask the table (find_module, onnx_source, for_file, natural_data), never one kind directly."""
    kinds = {f"trtpipe.models.sources.{name}" for name in [*_kind_modules(), "base"]}
    found = [f"{path.relative_to(PACKAGE)}: {module}" for path in sorted(PACKAGE.rglob("*.py"))
             if ROOM not in path.parents for module, _ in _imports(path) if module in kinds]
    assert not found, "import these from trtpipe.models.sources instead:\n" + "\n".join(found)


def test_no_stage_knows_a_packaged_models_facts() -> None:
    """Bench, optimize, debug and the pipeline ask the source for a file's task, decoder, size and data: none looks
    up a SHA-256 or reads the packaged table (drawing a DATA spec's inputs, natural_batch, is the one thing they may
    take from it)."""
    stages = [PACKAGE / name for name in ("bench", "optimize", "debug", "pipeline", "convert", "compile", "cli")]
    found = []
    for path in sorted(p for stage in stages for p in stage.rglob("*.py")):
        for module, names in _imports(path):
            if module == "trtpipe.models.packaged" and set(names) - {"natural_batch"}:
                found.append(f"{path.relative_to(PACKAGE)}: {module} {names}")
        text = path.read_text()
        found += [f"{path.relative_to(PACKAGE)}: {word}" for word in ("packaged_by_sha256", ".preprocessing.size")
                  if word in text]
    assert not found, "ask trtpipe.models.sources instead:\n" + "\n".join(found)


@pytest.mark.parametrize(("spec", "kind"), [
    ("resnet18", "registry"), ("no_such_model", "registry"), ("model.py:make", "user-code"),
    ("package.module:make", "user-code"), ("weights.pt", "pytorch-file"), ("dir/model", "pytorch-file"),
    ("model.ts", "pytorch-file"), ("exported.ONNX", "onnx-file"), ("dir/model.onnx", "onnx-file"),
    (TEXT_DETECTOR, "packaged"), (LAYOUT_DETECTOR, "packaged"),
])
def test_each_kind_of_spec_goes_to_its_source(spec: str, kind: str) -> None:
    assert source_for(spec).kind == kind


def test_a_file_named_like_code_is_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.py:make").write_bytes(b"")
    assert source_for("model.py:make").kind == "pytorch-file"


def test_onnx_sources_refuse_to_be_pytorch_models(tmp_path: Path) -> None:
    """convert needs the PyTorch model: an ONNX file or a packaged model's name says where it goes instead."""
    with pytest.raises(BadInput, match="does not exist"):
        find_module(str(tmp_path / "missing.onnx"), None, False)
    (tmp_path / "model.onnx").write_bytes(b"")
    with pytest.raises(BadInput, match="already ONNX"):
        find_module(str(tmp_path / "model.onnx"), None, False)
    with pytest.raises(BadInput, match=f"'{LAYOUT_DETECTOR}' is a packaged ONNX model.*'trtpipe run'"):
        find_module(LAYOUT_DETECTOR, None, False)


def _plain_onnx(path: Path) -> Path:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, "h", "w"])])
    onnx.save(helper.make_model(graph), str(path))
    return path


def test_a_plain_onnx_file_brings_nothing_beyond_its_graph(tmp_path: Path) -> None:
    for found in (onnx_source(str(tmp_path / "m.onnx")), for_file(_plain_onnx(tmp_path / "m.onnx"))):
        assert found is not None and found.path == tmp_path / "m.onnx"
        assert (found.name, found.task, found.decoder(), found.data_spec) == (None, None, None, None)
        assert found.sample_dims(0, (1, 3, "h", "w")) is None
        assert found.natural_batch(InputSpec("x", (1, 3, 8, 8)), 2, 0) is None
        found.check_inputs(3)  # several inputs are fine where the source feeds none
    assert onnx_source("resnet18") is None and onnx_source("model.py:make") is None


def test_which_sources_bring_data() -> None:
    assert natural_data(LAYOUT_DETECTOR) == f"packaged:{LAYOUT_DETECTOR}"
    assert natural_data(TEXT_DETECTOR) == f"packaged:{TEXT_DETECTOR}"
    assert natural_data("resnet18") is None and natural_data("model.onnx") is None


@pytest.mark.skipif(importlib.util.find_spec(PACKAGED[LAYOUT_DETECTOR].package) is None,
                    reason=PACKAGED[LAYOUT_DETECTOR].install)
def test_a_packaged_models_file_is_that_model_by_name_or_by_path() -> None:
    """Given by name or by its file's path (optimize and debug see only the file), the source is the packaged model:
    its task, its decoder, the size its image is made at and its natural inputs."""
    by_name = onnx_source(LAYOUT_DETECTOR)
    by_path = for_file(packaged_onnx(LAYOUT_DETECTOR))
    assert by_name is not None and by_name == by_path and by_path.name == LAYOUT_DETECTOR
    assert by_path.task is PACKAGED[LAYOUT_DETECTOR].task and by_path.decoder() is not None
    assert by_path.data_spec == f"packaged:{LAYOUT_DETECTOR}"
    assert by_path.sample_dims(0, (1, 3, "h", "w")) == (3, 800, 608) and by_path.sample_dims(1, (1, 2)) is None
    with pytest.raises(BadInput, match="has 2 inputs; its natural inputs feed one"):
        by_path.check_inputs(2)
    batch = by_path.natural_batch(InputSpec("image", (1, 800, 608, 3), "uint8", layout=Layout.NHWC), 2, seed=0)
    assert batch is not None and batch.inputs.shape == (2, 800, 608, 3) and batch.inputs.dtype == np.uint8
