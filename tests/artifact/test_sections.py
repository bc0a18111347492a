"""The stages' own manifest sections as typed records: what convert, compile and optimize write reads back as the
same record, the JSON on disk keeps its layout (so a manifest written before the records reads back too), and a
section that is missing or of another shape reads as None (or, for a package, is refused in one line), never a
traceback."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.compile.packages import BATCH_RANGE, copy_package, digits_package
from trtpipe.artifact.records.manifest import manifest_path, read_manifest
from trtpipe.artifact.records.package import SECTION, AotiRecord, read_package
from trtpipe.artifact.records.sections import DataRecord, VerificationRecord
from trtpipe.artifact.tensors import TensorInfo
from trtpipe.compile.records import CompileRecord
from trtpipe.convert.records import ConvertRecord
from trtpipe.errors import BadInput
from trtpipe.pipeline.select import fit_to_caveat


def _sections(path: Path) -> dict[str, Any]:
    """The manifest's JSON as on disk, without its typed "artifact" part."""
    data = json.loads(manifest_path(path).read_text())
    return {k: v for k, v in data.items() if k not in ("schema", "trtpipe_version", "created", "artifact")}


def test_convert_writes_its_record_and_it_reads_back_the_same(digits_onnx: Path) -> None:
    from trtpipe.models.loader import load_model

    manifest = read_manifest(digits_onnx)
    assert manifest is not None
    record = ConvertRecord.of(manifest)
    assert record is not None
    written = _sections(digits_onnx)
    assert record.to_details() == {k: written[k] for k in record.to_details()}  # the JSON as the record writes it
    assert ConvertRecord.from_details(json.loads(json.dumps(record.to_details()))) == record
    assert record.export.exporter == "dynamo" and record.export.opset == 18 and record.export.dynamic_batch
    assert record.inputs == (TensorInfo("input", "float32", ("batch", 1, 32, 32)),)
    assert record.dynamic_axes == {"input": {"0": "batch"}, "output": {"0": "batch"}}
    loaded = load_model("digits_resnet")
    assert record.input_specs == tuple(replace(s, shape=(None, *s.sample_shape)) for s in loaded.inputs)
    assert record.source.weights_sha256 == loaded.weights_sha256()
    assert set(record.versions) == {"torch", "onnx", "onnxruntime"} and manifest.versions == record.versions
    verification = record.verification
    assert verification.passed and verification.eval_samples == 847 and verification.top1_agreement == 1.0
    assert len(verification.cases) == 4 and manifest.verification == verification


@pytest.mark.parametrize("edit", [
    {"export": None}, {"export": {"exporter": "dynamo"}}, {"verification": {"passed": "yes"}},
    {"verification": None}, {"inputs": ["input"]}, {"input_specs": [{"shape": [1]}]}, {"dynamic_axes": []},
    {"versions": "2.9"},
], ids=lambda edit: next(iter(edit)))
def test_a_convert_section_missing_or_of_another_shape_reads_as_no_record(digits_onnx: Path,
                                                                         edit: dict[str, Any]) -> None:
    details = _sections(digits_onnx) | edit
    details = {k: v for k, v in details.items() if v is not None}
    assert ConvertRecord.from_details(details) is None


def test_the_verification_record_is_none_for_a_malformed_section() -> None:
    good = {"passed": True, "tolerance": {"atol": 1e-4, "rtol": 1e-3, "min_cosine": 0.999}, "max_abs_err": 0,
            "max_rel_err": 0.0, "cosine": 1, "top1_agreement": None, "dataset": None, "reference_accuracy": None,
            "candidate_accuracy": None, "cases": []}
    record = VerificationRecord.from_dict(good)
    assert record is not None and record.to_dict() == good and record.eval_samples is None
    for broken in ({**good, "tolerance": [1e-4]}, {**good, "cosine": "1"}, {**good, "cases": ["case"]}, [good]):
        assert VerificationRecord.from_dict(broken) is None


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return digits_package(tmp_path_factory.getbasetemp())


def test_compile_writes_its_record_and_loading_reads_the_same(package: Path) -> None:
    import torch

    manifest = read_manifest(package)
    assert manifest is not None
    record = CompileRecord.of(manifest)
    assert record is not None
    written = _sections(package)
    assert record.to_details() == {k: written[k] for k in record.to_details()}
    assert CompileRecord.from_details(json.loads(json.dumps(record.to_details()))) == record
    assert record.package == AotiRecord.from_dict(written[SECTION])
    assert record.package.batch_range == BATCH_RANGE and record.package.torch_version == torch.__version__
    assert record.run.options["batch_range"] == list(BATCH_RANGE) and record.run.compile_seconds > 0
    assert record.verification.passed and record.verification.eval_samples is None
    _, loaded = read_package(package)  # what loading reads is the record compile wrote
    assert loaded.record == record.package and loaded.record.inputs == record.inputs == record.package.inputs


@pytest.mark.parametrize(("drop", "edit", "detail"), [
    (SECTION, {}, f"no '{SECTION}' section"), ("batch_range", {}, "'batch_range' is missing"),
    (None, {"batch_range": 4}, "not iterable"), (None, {"inputs": ["input"]}, "string indices"),
])
def test_a_package_whose_section_is_missing_or_of_another_shape_is_refused_in_one_line(
        package: Path, tmp_path: Path, drop: str | None, edit: dict[str, Any], detail: str) -> None:
    copy = copy_package(package, tmp_path)
    data = json.loads(manifest_path(copy).read_text())
    if drop == SECTION:
        del data[SECTION]
    else:
        data[SECTION] = {k: v for k, v in data[SECTION].items() if k != drop} | edit
    manifest_path(copy).write_text(json.dumps(data))
    manifest = read_manifest(copy)
    assert manifest is not None and CompileRecord.of(manifest) is None
    with pytest.raises(BadInput, match="is not a valid AOTInductor manifest") as refused:
        read_package(copy)
    assert detail in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize("samples", [16, 48])  # too few to hold any out; cross-fitted
def test_optimize_data_section_reads_back_as_the_same_record(digits_onnx: Path, tmp_path: Path, samples: int,
                                                               run_cli) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "int8.onnx"
    result = run_cli("optimize", digits_onnx, "-o", out, "--precision", "int8", "--calib", "digits",
                     "--calib-samples", str(samples), "--quality", "fast")
    assert result.exit_code == 0, result.output
    manifest = read_manifest(out)
    assert manifest is not None and manifest.data is not None
    written = _sections(out)["data"]
    assert manifest.data.to_dict() == written  # every field optimize writes is in the record
    calibration, judged = manifest.data.calibration, manifest.data.judged_on
    assert calibration is not None and len(manifest.data.calibration_fingerprints) == calibration.samples
    assert judged is not None and judged.optimistic is (samples == 16)
    assert calibration.samples == samples  # the written file is fit to all of them, cross-fitted or not
    expected = ("calibration", False) if samples == 16 else ("cross-fitted", False)
    assert (judged.data, judged.indices is not None) == expected
    assert (fit_to_caveat(manifest.data) is not None) is (samples == 16)


def test_a_data_section_of_another_shape_is_read_as_far_as_it_is_one() -> None:
    """A part of ``data`` that is not the record reads as None (a caveat is drawn from what is left, no crash);
    a ``data`` that is not an object is no record."""
    judged = {"data": "calibration", "source": "digits", "samples": 16, "sha256": "ab" * 32, "optimistic": True,
              "why": "16 samples are too few"}
    record = DataRecord.from_dict({"calibration": ["not", "a", "record"], "eval": None, "judged_on": judged})
    assert record is not None and record.calibration is None and record.calibration_fingerprints == frozenset()
    assert record.judged_on is not None and record.judged_on.to_dict() == judged
    assert "optimistic" in (fit_to_caveat(record) or "")
    assert DataRecord.from_dict({"judged_on": {"data": "eval"}}) == DataRecord()
    assert DataRecord.from_dict("calibration") is None and DataRecord.from_dict(None) is None
