"""The artifact room: ``Artifact.open(path)`` with its kind, records, input specs and lineage; and the two pieces
that used to be written in several places ("graph inputs minus initializers", input-spec resolution) each kept
in its one home by a walk of the package's source."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

import trtpipe
from tests.builders import constant, onnx_model, tensor
from trtpipe.artifact import Artifact
from trtpipe.artifact.records.manifest import ArtifactManifest, write_manifest
from trtpipe.errors import BadInput
from trtpipe.files import sha256_file
from trtpipe.inputs import InputSpec, Layout, guess_layout
from trtpipe.onnx_info import graph_inputs, input_signature
from trtpipe.shapes import FIRST
from trtpipe.vocab import ArtifactKind, Precision

PACKAGE = Path(trtpipe.__file__).parent
GRAPH_INPUTS_HOME = PACKAGE / "onnx_info.py"
RESOLUTION_HOME = PACKAGE / "artifact" / "inputs.py"


def _old_exporter_model() -> onnx.ModelProto:
    """y = x * w, with the weight ``w`` listed among the graph's inputs too, as old exporters wrote every weight."""
    return onnx_model([helper.make_node("Mul", ["x", "w"], ["y"])], [constant(np.full((1, 3, 1, 1), 2.0), "w")],
                      [tensor("x", ["N", 3, 4, 4]), tensor("w", [1, 3, 1, 1])], [tensor("y", ["N", 3, 4, 4])])


@pytest.fixture
def recorded_onnx(tmp_path: Path) -> Path:
    """The model saved with a manifest recording x's range (0..255), layout (NHWC, not what its shape suggests)
    and the fixed shape it was calibrated at."""
    path = tmp_path / "model.onnx"
    onnx.save(_old_exporter_model(), str(path))
    recorded = InputSpec("x", (2, 3, 4, 4), "float32", (0.0, 255.0), Layout.NHWC)
    details = {"input_specs": [recorded.to_dict(), InputSpec("gone", (1,)).to_dict()]}
    write_manifest(path, ArtifactManifest.describe(path, Precision.FP32, details=details))
    return path


def test_graph_inputs_leave_out_initializers_listed_as_inputs() -> None:
    model = _old_exporter_model()
    assert [v.name for v in model.graph.input] == ["x", "w"]
    assert [v.name for v in graph_inputs(model)] == [v.name for v in graph_inputs(model.graph)] == ["x"]
    assert input_signature(model) == [("x", (None, 3, 4, 4), "float32")]


def test_an_artifact_opens_with_its_kind_records_and_lineage(recorded_onnx: Path) -> None:
    artifact = Artifact.open(recorded_onnx)
    assert artifact.kind is ArtifactKind.ONNX
    assert artifact.manifest is not None and artifact.manifest.sha256 == sha256_file(recorded_onnx)
    assert artifact.lineage.hashes == (sha256_file(recorded_onnx),) and artifact.lineage.source is None
    assert artifact.tuned == {}
    assert [t.name for t in artifact.describe().inputs] == ["x"]
    with pytest.raises(BadInput, match="only a TensorRT engine has a sidecar"):
        _ = artifact.sidecar


def test_open_refuses_a_missing_file_and_one_trtpipe_does_not_run(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="does not exist"):
        Artifact.open(tmp_path / "absent.onnx")
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(BadInput, match="trtpipe runs"):
        Artifact.open(tmp_path / "notes.txt")


def test_input_specs_lay_the_record_under_the_user_over_the_graph(recorded_onnx: Path) -> None:
    artifact = Artifact.open(recorded_onnx)
    (spec,) = artifact.input_specs()
    assert spec.shape == (None, 3, 4, 4)  # the graph's: a dynamic batch stays dynamic
    assert spec.value_range == (0.0, 255.0) and spec.layout is Layout.NHWC != guess_layout(spec.shape)
    (spec,) = artifact.input_specs(recorded_shapes=True)
    assert spec.shape == (2, 3, 4, 4)  # the shape the record was calibrated at
    (spec,) = artifact.input_specs(shapes={FIRST: (5, 3, 4, 4)}, ranges={FIRST: (-1.0, 1.0)}, recorded_shapes=True)
    assert spec.shape == (5, 3, 4, 4) and spec.value_range == (-1.0, 1.0)  # the user's win over the record
    with pytest.raises(BadInput, match="--input-dtype"):
        artifact.input_specs(dtypes={"x": "int8"})
    with pytest.raises(BadInput, match="--input-shape"):
        artifact.input_specs(shapes={"x": (1, 4, 4, 4)})


def test_input_specs_size_what_the_user_leaves_by_the_callers_rule(recorded_onnx: Path) -> None:
    """bench brings only its sizing rule: it is asked, with the graph's own dims (a free axis keeps its name), for
    each input the user does not size; the user's declaration wins, and one naming an input the model lacks is
    refused before the rule is asked anything."""
    artifact = Artifact.open(recorded_onnx)
    asked: list[tuple[int, str, tuple[object, ...]]] = []

    def size(index: int, name: str, dims: tuple[int | str | None, ...]) -> tuple[int, ...]:
        asked.append((index, name, dims))
        return (7, 3, 4, 4)

    (spec,) = artifact.input_specs(size=size)
    assert asked == [(0, "x", ("N", 3, 4, 4))] and spec.shape == (7, 3, 4, 4)
    assert spec.value_range == (0.0, 255.0) and spec.layout is Layout.NHWC  # the record still lies under it
    (spec,) = artifact.input_specs(shapes={FIRST: (5, 3, 4, 4)}, size=size)
    assert spec.shape == (5, 3, 4, 4) and len(asked) == 1
    with pytest.raises(BadInput, match="--input-shape names 'y'"):
        artifact.input_specs(shapes={"y": (1,)}, size=size)
    assert len(asked) == 1


def test_an_artifact_names_itself_and_the_weights_its_lineage_starts_from(recorded_onnx: Path, tmp_path: Path) -> None:
    artifact = Artifact.open(recorded_onnx)
    assert artifact.name == "model" and artifact.weights_sha256 is None  # a manifest, but no convert record
    versioned = tmp_path / "models" / "digits" / "3" / "model.onnx"
    versioned.parent.mkdir(parents=True)
    onnx.save(_old_exporter_model(), str(versioned))
    assert Artifact.open(versioned).name == "digits" and Artifact.open(versioned).weights_sha256 is None
    source = {"name": "tiny", "source": "tiny.py:make", "weights_sha256": "ab" * 32}
    write_manifest(versioned, ArtifactManifest.describe(versioned, Precision.FP32, details={"source": source}))
    opened = Artifact.open(versioned)
    assert opened.weights_sha256 == "ab" * 32 and opened.lineage.source == source


def test_a_graph_is_read_for_its_description_in_one_call(recorded_onnx: Path) -> None:
    """graph_facts gives all a description reads of a graph; describe_artifact and describe_model agree on it."""
    from trtpipe.artifact.description import describe_artifact, describe_model
    from trtpipe.onnx_info import graph_facts

    model = _old_exporter_model()
    facts = graph_facts(model)
    assert facts.precision is Precision.FP32
    assert facts.inputs == (("x", "float32", ("N", 3, 4, 4)),) and facts.outputs == (("y", "float32", ("N", 3, 4, 4)),)
    described = describe_model(model, recorded_onnx)
    assert [(t.name, t.dtype, t.shape) for t in described.inputs] == list(facts.inputs)
    (recorded_onnx.with_suffix(".manifest.json")).unlink()  # a file from elsewhere: described from its graph alone
    assert describe_artifact(recorded_onnx) == described


# -- each piece in its one home ------------------------------------------------------------------------------------

def _is_graph_inputs(node: ast.expr) -> bool:
    """``graph.input``, ``model.graph.input``, ``fp32.graph.input``...: a graph's declared inputs."""
    if not isinstance(node, ast.Attribute) or node.attr != "input":
        return False
    owner = node.value
    return (isinstance(owner, ast.Attribute) and owner.attr == "graph") or (
        isinstance(owner, ast.Name) and "graph" in owner.id)


def _tests_membership(nodes: list[ast.stmt] | list[ast.expr]) -> bool:
    return any(isinstance(c, ast.Compare) and any(isinstance(op, ast.In | ast.NotIn) for op in c.ops)
               for node in nodes for c in ast.walk(node))


def inputs_minus_initializers(tree: ast.AST) -> set[str]:
    """Functions that filter a graph's inputs by membership in its initializers (a loop or comprehension over
    ``graph.input`` that tests ``in``/``not in``, in a function that reads initializers)."""
    found = set()
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if "initializer" not in ast.unparse(function):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.comprehension) and _is_graph_inputs(node.iter) and _tests_membership(node.ifs):
                found.add(function.name)
            if isinstance(node, ast.For) and _is_graph_inputs(node.iter) and _tests_membership(node.body):
                found.add(function.name)
    return found


def input_spec_resolution(tree: ast.AST) -> set[str]:
    """Where input specs are resolved by hand: ``trtpipe.inputs.resolve`` imported, or a function that reads a
    manifest's recorded ``input_specs`` and lays their ``layout`` or ``value_range`` over something."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "trtpipe.inputs" and any(
                alias.name == "resolve" for alias in node.names):
            found.add("import of trtpipe.inputs.resolve")
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            read = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
            if "input_specs" in read and read & {"layout", "value_range"}:
                found.add(node.name)
    return found


def _modules() -> list[tuple[Path, ast.AST]]:
    return [(path, ast.parse(path.read_text(), str(path))) for path in sorted(PACKAGE.rglob("*.py"))]


OLD_OPTIMIZE = '''
def input_specs(model, options, manifest):
    initializers = {i.name for i in model.graph.initializer}
    for value in model.graph.input:
        if value.name in initializers:
            continue
    recorded = manifest.input_specs if manifest is not None else {}
    return [replace(spec, layout=recorded[spec.name].layout) for spec in resolve(graph)]
'''
OLD_MATCH = '''
from trtpipe.inputs import Batch, resolve
def graph_inputs(model):
    initializers = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in initializers]
'''


def test_the_checks_find_the_copies_that_were_removed() -> None:
    assert inputs_minus_initializers(ast.parse(OLD_OPTIMIZE)) == {"input_specs"}
    assert inputs_minus_initializers(ast.parse(OLD_MATCH)) == {"graph_inputs"}
    assert input_spec_resolution(ast.parse(OLD_OPTIMIZE)) == {"input_specs"}
    assert input_spec_resolution(ast.parse(OLD_MATCH)) == {"import of trtpipe.inputs.resolve"}


def test_graph_inputs_minus_initializers_is_written_once() -> None:
    found = {f"{path.relative_to(PACKAGE)}: {name}" for path, tree in _modules() if path != GRAPH_INPUTS_HOME
             for name in inputs_minus_initializers(tree)}
    assert not found, f"use trtpipe.onnx_info.graph_inputs instead of filtering graph.input by hand: {sorted(found)}"
    assert inputs_minus_initializers(ast.parse(GRAPH_INPUTS_HOME.read_text())) == {"graph_inputs"}


def test_input_specs_are_resolved_in_the_artifact_room_only() -> None:
    found = {f"{path.relative_to(PACKAGE)}: {name}" for path, tree in _modules() if path != RESOLUTION_HOME
             for name in input_spec_resolution(tree)}
    assert not found, f"use trtpipe.artifact.inputs.resolve_inputs (or Artifact.input_specs): {sorted(found)}"
    assert input_spec_resolution(ast.parse(RESOLUTION_HOME.read_text()))


def test_two_lineages_are_one_model_by_a_shared_file_or_the_same_weights_and_unknown_where_a_chain_is_short() -> None:
    """The lineage check bench refuses a comparison on: a file along both chains, or the same PyTorch weights at
    both starts, is one model; two complete chains sharing neither are two; a chain that tells nothing is neither."""
    from trtpipe.artifact.lineage import Lineage

    reference = Lineage(("fp32",), {"weights_sha256": "w1"})
    assert Lineage(("int8", "fp32")).same_model_as(reference) is True  # optimized from the reference itself
    assert Lineage(("other",), {"weights_sha256": "w1"}).same_model_as(reference) is True  # same weights
    assert Lineage(("other",), {"weights_sha256": "w2"}).same_model_as(reference) is False  # other weights
    assert Lineage(("int8", "x"), made_from=Path("x.onnx")).same_model_as(reference) is False  # from another file
    assert Lineage(("int8", "x"), made_from=Path("x.onnx"), complete=False).same_model_as(reference) is None
    assert Lineage(("elsewhere",)).same_model_as(reference) is None  # an ONNX from elsewhere tells nothing
