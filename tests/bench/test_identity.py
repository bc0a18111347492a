"""bench compares an artifact only with the model it was made from: the weights' SHA-256 in the manifest chain
(convert's manifest, or optimize's input back to it) must be the reference's."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import textwrap
from pathlib import Path

import pytest

from tests.conftest import error_line
from trtpipe.artifact import Artifact
from trtpipe.artifact.description import describe_artifact
from trtpipe.artifact.records.engine import EngineSidecar
from trtpipe.bench.identity import check_weights
from trtpipe.errors import BadInput
from trtpipe.files import sha256_file
from trtpipe.models.loader import load_model
from trtpipe.vocab import ArtifactKind

FACTORIES = textwrap.dedent("""
    from pathlib import Path

    import torch

    class Tiny(torch.nn.Module):
        input_shape = (1, 3, 16, 16)

        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)
            self.bn = torch.nn.BatchNorm2d(4)

        def forward(self, x):
            return self.bn(self.conv(x)).mean((2, 3))

    def unseeded():
        return Tiny()

    def seeded():  # its weights follow seed.txt: a changed seed is a changed model
        torch.manual_seed(int(Path(__file__).with_name("seed.txt").read_text()))
        return Tiny()
""")
QUICK = ("--batch", "1", "--iters", "2", "--warmup", "0", "--rounds", "1", "--threads", "1")
HASH = re.compile(r"\b[0-9a-f]{12}\b")


@pytest.fixture()
def factories(tmp_path: Path) -> Path:
    (tmp_path / "tiny.py").write_text(FACTORIES)
    (tmp_path / "seed.txt").write_text("0")
    return tmp_path


def _weights(onnx: Path) -> str:
    return str(json.loads(onnx.with_suffix(".manifest.json").read_text())["source"]["weights_sha256"])


def test_unseeded_factory_is_refused_with_one_line(factories: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    model, onnx = f"{factories}/tiny.py:unseeded", factories / "unseeded.onnx"
    assert run_cli("convert", model, "-o", onnx).exit_code == 0
    result = run_cli("bench", model, onnx, *QUICK)
    assert result.exit_code == 1
    line = error_line(result.output)
    assert f"The factory {model} builds different weights on each call" in line
    assert "seed it (torch.manual_seed" in line and "re-run convert" in line
    hashes = HASH.findall(line)
    assert len(hashes) == 2 and hashes[0] == _weights(onnx)[:12] and hashes[1] != hashes[0]
    assert "p50" not in result.output  # refused before anything was measured


def test_seeded_factory_passes_through_the_optimize_chain_and_stale_weights_are_refused(
        factories: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    model, onnx, fused = f"{factories}/tiny.py:seeded", factories / "seeded.onnx", factories / "fused.onnx"
    assert run_cli("convert", model, "-o", onnx).exit_code == 0
    assert run_cli("optimize", onnx, "-o", fused).exit_code == 0  # fuses the BatchNorm: another file, same weights
    assert Artifact.open(fused).weights_sha256 == _weights(onnx) == load_model(model).weights_sha256()
    result = run_cli("bench", model, onnx, fused, *QUICK)
    assert result.exit_code == 0, result.output
    assert "could not be matched" not in result.output

    (factories / "seed.txt").write_text("1")  # the factory now builds another model; the artifacts are stale
    result = run_cli("bench", model, fused, *QUICK)
    assert result.exit_code == 1
    line = error_line(result.output)
    assert f"{fused} is not made from seeded" in line and "Re-run convert" in line
    assert HASH.findall(line) == [_weights(onnx)[:12], load_model(model).weights_sha256()[:12]]


def test_optimized_file_moved_with_its_input_still_leads_back(factories: Path, run_cli, tmp_path_factory) -> None:  # type: ignore[no-untyped-def]
    """optimize records its input's path as given: a folder moved as a whole is followed by the files' hashes."""
    onnx, fused = factories / "seeded.onnx", factories / "fused.onnx"
    assert run_cli("convert", f"{factories}/tiny.py:seeded", "-o", onnx).exit_code == 0
    assert run_cli("optimize", onnx, "-o", fused).exit_code == 0
    moved = tmp_path_factory.mktemp("moved")
    for path in factories.glob("*.*"):
        shutil.copy(path, moved / path.name)
    onnx.unlink()
    assert Artifact.open(moved / "fused.onnx").weights_sha256 == _weights(moved / "seeded.onnx")
    (moved / "seeded.onnx").write_bytes(b"another file")
    assert Artifact.open(moved / "fused.onnx").weights_sha256 is None  # the hash optimize recorded decides


def test_a_chain_recorded_relative_to_the_folder_optimize_ran_in_is_followed_from_any_other(  # type: ignore[no-untyped-def]
        factories: Path, run_cli, monkeypatch, tmp_path_factory) -> None:
    """optimize records its input as given, relative to the folder it ran in (``models/x/1/model.onnx``); bench run
    from another folder finds it from the folders above the artifact, and the recorded hash still decides."""
    monkeypatch.chdir(factories)
    onnx, fused = Path("models/seeded/1/model.onnx"), Path("models/fused/1/model.onnx")
    onnx.parent.mkdir(parents=True)
    fused.parent.mkdir(parents=True)
    converted = run_cli("convert", "tiny.py:seeded", "-o", onnx)
    assert converted.exit_code == 0, converted.output
    assert run_cli("optimize", onnx, "-o", fused).exit_code == 0
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    assert Artifact.open(factories / fused).lineage.complete
    assert Artifact.open(factories / fused).weights_sha256 == _weights(factories / onnx)
    (factories / onnx).write_bytes(b"another file")
    assert Artifact.open(factories / fused).weights_sha256 is None


def test_onnx_from_elsewhere_is_benched_with_one_note(factories: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    model, onnx, elsewhere = f"{factories}/tiny.py:seeded", factories / "seeded.onnx", factories / "elsewhere.onnx"
    assert run_cli("convert", model, "-o", onnx).exit_code == 0
    shutil.copy(onnx, elsewhere)  # no manifest beside it
    result = run_cli("bench", model, elsewhere, *QUICK)
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if "could not be matched" in line]
    assert len(notes) == 1 and str(elsewhere) in notes[0] and "no trtpipe manifest leads back" in notes[0]


def test_an_engine_is_matched_through_the_onnx_it_was_built_from(digits_onnx: Path, tmp_path: Path) -> None:
    onnx = describe_artifact(digits_onnx)
    sidecar = EngineSidecar(tensorrt_version="10.0", gpu_name="test", compute_capability="9.0",
                            onnx_sha256=sha256_file(digits_onnx), engine_sha256="0" * 64)
    engine = dataclasses.replace(onnx, path=tmp_path / "model.plan", kind=ArtifactKind.TENSORRT_ENGINE,
                                 engine=sidecar)
    check_weights(load_model("digits_resnet"), [engine, onnx])  # the same weights: nothing to say
    other = load_model("resnet18")
    with pytest.raises(BadInput, match=r"model\.plan is not made from resnet18 .* Re-run convert"):
        check_weights(other, [engine, onnx])


def test_with_an_onnx_reference_an_artifact_of_another_onnx_is_refused(factories: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """The reference is an FP32 ONNX: each artifact's chain must pass through it (or back to its weights)."""
    model, ours, theirs = f"{factories}/tiny.py:seeded", factories / "ours.onnx", factories / "theirs.onnx"
    assert run_cli("convert", model, "-o", ours).exit_code == 0
    (factories / "seed.txt").write_text("1")  # another model, converted the same way
    assert run_cli("convert", model, "-o", theirs).exit_code == 0
    for onnx in (ours, theirs):
        assert run_cli("optimize", onnx, "-o", onnx.with_name(f"{onnx.stem}_fused.onnx")).exit_code == 0

    matched = run_cli("bench", ours, factories / "ours_fused.onnx", *QUICK)  # optimized from the reference itself
    assert matched.exit_code == 0, matched.output
    assert "could not be matched" not in matched.output

    result = run_cli("bench", ours, factories / "theirs_fused.onnx", *QUICK)
    assert result.exit_code == 1
    line = error_line(result.output)
    assert f"theirs_fused.onnx was optimized from {theirs} (" in line
    assert f"not from the reference {ours} (" in line and "p50" not in result.output
    converted = error_line(run_cli("bench", ours, theirs, *QUICK).output)  # convert's outputs of other weights
    assert f"{theirs} was converted from {model} (weights {_weights(theirs)[:12]})" in converted
    assert f"the reference {ours} from {model} (weights {_weights(ours)[:12]})" in converted

    # Files from elsewhere (no manifests): the chain optimize recorded still tells them apart.
    elsewhere = {name: factories / f"{name}_elsewhere.onnx" for name in ("ours", "theirs")}
    for name, path in elsewhere.items():
        shutil.copy(factories / f"{name}.onnx", path)
    assert run_cli("optimize", elsewhere["theirs"], "-o", factories / "e_fused.onnx").exit_code == 0
    other = error_line(run_cli("bench", elsewhere["ours"], factories / "e_fused.onnx", *QUICK).output)
    assert f"optimized from {elsewhere['theirs']}" in other and f"not from the reference {elsewhere['ours']}" in other
    # An artifact from elsewhere says nothing of its origin: benched, with one line.
    untraced = run_cli("bench", elsewhere["ours"], elsewhere["theirs"], *QUICK)
    assert untraced.exit_code == 0, untraced.output
    assert len([x for x in untraced.output.splitlines() if "could not be matched with the reference" in x]) == 1
    # A file optimized from the reference's own source matches a copy of it made elsewhere: the hashes decide.
    assert run_cli("bench", elsewhere["ours"], factories / "ours_fused.onnx", *QUICK).exit_code == 0


def test_an_onnx_reference_names_the_pytorch_model_it_was_converted_from(factories: Path, run_cli,  # type: ignore[no-untyped-def]
                                                                         tmp_path: Path) -> None:
    model, onnx = f"{factories}/tiny.py:seeded", factories / "seeded.onnx"
    assert run_cli("convert", model, "-o", onnx).exit_code == 0
    fused = factories / "fused.onnx"
    assert run_cli("optimize", onnx, "-o", fused).exit_code == 0
    origin = Artifact.open(fused).lineage.source  # followed back through optimize's input
    assert origin is not None and origin["source"] == model and origin["weights_sha256"] == _weights(onnx)

    # The PyTorch model loads with the recorded weights: it is the reference, the ONNX benched beside the others.
    loaded = tmp_path / "loaded.json"
    result = run_cli("bench", onnx, fused, *QUICK, "--json", loaded)
    assert result.exit_code == 0, result.output
    assert f"{onnx} was converted from {model}" in result.output
    assert "benched against that PyTorch model" in result.output
    rows = json.loads(loaded.read_text())["results"]
    assert rows[0]["variant"] == "pytorch-fp32" and rows[0]["reference"]
    assert {r["artifact"] for r in rows[1:]} == {str(onnx), str(fused)}

    # Its factory now builds other weights: the FP32 ONNX is the reference, and the report names where it came from.
    (factories / "seed.txt").write_text("7")
    out = tmp_path / "bench.json"
    result = run_cli("bench", onnx, fused, *QUICK, "--json", out, "--markdown", tmp_path / "bench.md")
    assert result.exit_code == 0, result.output
    assert "whose weights have changed since" in result.output
    assert json.loads(out.read_text())["model"]["converted_from"]["weights_sha256"] == _weights(onnx)
    assert (f"latency vs the FP32 ONNX on ONNX Runtime CPU (converted from {model}, weights SHA-256 "
            f"{_weights(onnx)[:12]})") in (tmp_path / "bench.md").read_text()
    shutil.copy(onnx, tmp_path / "elsewhere.onnx")
    assert Artifact.open(tmp_path / "elsewhere.onnx").lineage.source is None


def test_a_factory_named_relative_to_one_folder_is_found_from_another(factories: Path, run_cli,  # type: ignore[no-untyped-def]
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """convert records the factory's absolute path beside the spec as written, so bench of the ONNX from another
    folder still loads the PyTorch model it came from."""
    monkeypatch.chdir(factories)
    assert run_cli("convert", "tiny.py:seeded", "-o", "seeded.onnx").exit_code == 0
    elsewhere = factories / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    result = run_cli("bench", "../seeded.onnx", *QUICK)
    assert result.exit_code == 0, result.output
    assert f"converted from {factories / 'tiny.py'}:seeded" in result.output
    assert "benched against that PyTorch model" in result.output


def test_identity_reads_lineage_from_the_artifact_room_and_imports_nothing_of_the_reference() -> None:
    """bench.reference imports the judgement here; were this module to import the reference back (even for typing
    only), the two would be a circle. The chain itself is read in the artifact room, not from manifests here."""
    import ast

    import trtpipe.bench.identity as identity

    tree = ast.parse(Path(identity.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "trtpipe.bench.reference" not in imported
    assert "trtpipe.artifact.records.manifest" not in imported and "trtpipe.artifact.artifact" in imported
