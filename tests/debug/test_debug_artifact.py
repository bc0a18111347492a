"""``trtpipe debug`` reads its two files through the artifact room: ``Artifact.open`` once each, then the model's
manifest, the reference it records (found where optimize's recorded path or the model's folder puts it, checked by
hash), both descriptions, the input specs (the reference's graph under the model's record) and both graphs are
asked of those objects. compare.py keeps only its own job: pairing tensors, running both graphs, the report."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

import trtpipe.debug.compare as compare
from tests.debug.test_debug import tiny
from trtpipe.artifact import Artifact
from trtpipe.artifact.records.manifest import ArtifactManifest, manifest_path, write_manifest
from trtpipe.debug.compare import debug_model
from trtpipe.debug.options import DebugOptions
from trtpipe.errors import BadInput
from trtpipe.files import sha256_file
from trtpipe.inputs import InputSpec
from trtpipe.vocab import Precision

# What reads a file or a graph's facts for itself: the artifact room's to call, no longer debug's.
FILE_READERS = {"read_manifest", "load_onnx", "sha256_file", "require_file", "resolve_inputs", "input_signature",
                "detect_precision"}


@pytest.fixture
def relative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder holding fp32.onnx and the FP16 graph optimize made of it, given as relative paths from that folder
    (the manifest records "fp32.onnx"), with 8 calibration samples; the working directory is then left."""
    from trtpipe.optimize.options import OptimizeOptions
    from trtpipe.optimize.stage import optimize

    folder = tmp_path / "made"
    folder.mkdir()
    onnx.save(tiny(), folder / "fp32.onnx")
    np.save(folder / "calib.npy", np.random.default_rng(5).standard_normal((8, 3, 16, 16)).astype(np.float32))
    monkeypatch.chdir(folder)
    optimize(Path("fp32.onnx"), Path("fp16.onnx"), OptimizeOptions(calib="calib.npy", precision="fp16", target="cpu",
                                                                   quality="fast"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return folder


def _moved(folder: Path, to: Path) -> Path:
    """The FP16 graph, its manifest and its FP32 source moved together into ``to``."""
    to.mkdir()
    for name in ("fp16.onnx", manifest_path(folder / "fp16.onnx").name, "fp32.onnx"):
        shutil.move(folder / name, to / name)
    return to / "fp16.onnx"


def test_the_recorded_source_is_found_beside_a_model_moved_with_it(relative: Path, tmp_path: Path) -> None:
    model = Artifact.open(_moved(relative, tmp_path / "moved"))
    made_from = model.made_from
    assert made_from is not None and made_from.recorded == Path("fp32.onnx")
    assert made_from.found == tmp_path / "moved" / "fp32.onnx" and set(made_from.present) == {made_from.found}
    report = debug_model(model.path, DebugOptions(data=str(relative / "calib.npy"), samples=2))
    assert Path(report.reference) == tmp_path / "moved" / "fp32.onnx" and report.first_jump is None


def test_a_changed_or_gone_source_is_refused_in_one_line(relative: Path, tmp_path: Path) -> None:
    path = _moved(relative, tmp_path / "moved")
    onnx.save(tiny(gain=np.full(8, 2.0)), path.parent / "fp32.onnx")  # another file at the recorded place
    made_from = Artifact.open(path).made_from
    assert made_from is not None and made_from.found is None and made_from.present
    with pytest.raises(BadInput, match=r"fp32\.onnx has changed since fp16\.onnx was optimized from it"):
        debug_model(path)
    (path.parent / "fp32.onnx").unlink()
    with pytest.raises(BadInput, match=r"was optimized from fp32\.onnx, which is not there any more: give it with "
                                       r"--reference"):
        debug_model(path)


def test_the_reference_inputs_are_sized_by_the_models_record(tmp_path: Path) -> None:
    onnx.save(tiny(), tmp_path / "fp32.onnx")
    onnx.save(tiny(), tmp_path / "model.onnx")
    recorded = InputSpec("x", (2, 3, 16, 16), "float32", (0.0, 1.0))
    write_manifest(tmp_path / "model.onnx", ArtifactManifest.describe(
        tmp_path / "model.onnx", Precision.FP32, details={"input_specs": [recorded.to_dict()]}))
    model, reference = Artifact.open(tmp_path / "model.onnx"), Artifact.open(tmp_path / "fp32.onnx")
    assert reference.manifest is None  # saved by hand: no record of its own
    (own,) = reference.input_specs(recorded_shapes=True)
    (spec,) = reference.input_specs(recorded_shapes=True, recorded_by=model)
    assert own.shape == (None, 3, 16, 16) and own.value_range is None  # the graph's: nothing records more
    assert spec.shape == (2, 3, 16, 16) and spec.value_range == (0.0, 1.0)  # what the model's record says
    assert reference.sha256 == sha256_file(reference.path)
    assert model.manifest is not None and model.sha256 == model.manifest.sha256 == sha256_file(model.path)
    assert [v.name for v in reference.graph.graph.input] == ["x"] and reference.graph is reference.graph  # read once
    report = debug_model(model.path, DebugOptions(reference=reference.path, samples=3))
    assert report.samples == 3 and report.data.startswith("seeded random inputs") and "[0, 1]" in report.data


def test_a_missing_model_or_reference_is_named_as_an_onnx_file(tmp_path: Path) -> None:
    absent = tmp_path / "absent.onnx"
    with pytest.raises(BadInput, match=f"^{re.escape(f'ONNX file {absent} does not exist.')}$"):
        debug_model(tmp_path / "absent.onnx")
    onnx.save(tiny(), tmp_path / "model.onnx")
    with pytest.raises(BadInput, match=r"^Reference ONNX file .*absent\.onnx does not exist\.$"):
        debug_model(tmp_path / "model.onnx", DebugOptions(reference=tmp_path / "absent.onnx"))


def test_compare_reads_no_file_itself() -> None:
    """compare.py asks the artifact room; none of the functions that read a file or a graph's facts is named there."""
    tree = ast.parse(Path(compare.__file__).read_text())
    named = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    named |= {alias.asname or alias.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for alias in n.names}
    assert named & FILE_READERS == set()
