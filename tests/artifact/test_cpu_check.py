"""A CPU-class mismatch is never silent: load, bench and serve compare the CPU they run on with the class a
cpu-target INT8 artifact was made and measured for; unsafe is refused in one line unless allowed, weaker warns, an
old manifest warns that its accuracy was measured on an unknown CPU; the Triton export carries the requirement."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format

import trtpipe
from tests.conftest import error_line
from trtpipe import console
from trtpipe.artifact.description import check_cpu, describe_artifact
from trtpipe.artifact.records.manifest import read_manifest, write_manifest
from trtpipe.artifact.records.sections import CpuRecord
from trtpipe.errors import BadInput
from trtpipe.hardware import cpu_class
from trtpipe.vocab import CpuClass

FIGURE = {"agreement": 0.995, "agreement_name": "top-1 agreement", "cosine": 0.9998, "samples": 64}
HERE = cpu_class()


@pytest.fixture(scope="module")
def vnni_int8(digits_onnx: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits model's cpu-target INT8, made for avx512-vnni (full 8-bit weights)."""
    from trtpipe.optimize import OptimizeOptions, optimize

    out = tmp_path_factory.mktemp("cpu_class") / "model.onnx"
    optimize(digits_onnx, out, OptimizeOptions(precision="int8", target="cpu", calib="digits", calib_samples=64,
                                               quality="fast", cpu_class="avx512-vnni"))
    return out


def _recorded(artifact: Path, folder: Path, record: CpuRecord | None) -> Path:
    """A copy of ``artifact`` whose manifest holds ``record`` as its CPU record (None: a manifest from before the
    record existed)."""
    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / "model.onnx"
    shutil.copyfile(artifact, copy)
    manifest = read_manifest(artifact)
    assert manifest is not None
    write_manifest(copy, replace(manifest, cpu=record))
    return copy


def test_the_check_follows_the_record(vnni_int8: Path, tmp_path: Path) -> None:
    eight_bit = describe_artifact(_recorded(vnni_int8, tmp_path / "8", CpuRecord(
        CpuClass.AVX512_VNNI, {CpuClass.AVX512_VNNI: FIGURE}, (CpuClass.PORTABLE, CpuClass.AVX2))))
    assert check_cpu(eight_bit, CpuClass.AVX512_VNNI) is None  # measured here
    assert check_cpu(eight_bit, CpuClass.AMX) is None  # a stronger class
    weaker = check_cpu(eight_bit, CpuClass.AVX_VNNI)
    assert weaker is not None and "measured on CPU class avx512-vnni (top-1 agreement 99.50 %)" in weaker
    assert "weaker class" in weaker and "--cpu-class avx-vnni" in weaker
    for unsafe in (CpuClass.AVX2, CpuClass.PORTABLE):
        with pytest.raises(BadInput) as refused:
            check_cpu(eight_bit, unsafe)
        line = refused.value.message
        assert "\n" not in line and f"unsafe on this CPU ({unsafe})" in line and "saturate at 16 bits" in line
        assert f"--cpu-class {unsafe}" in line and "--allow-cpu-mismatch" in line
        allowed = check_cpu(eight_bit, unsafe, allow=True)
        assert allowed is not None and "running it anyway" in allowed

    seven_bit = describe_artifact(_recorded(vnni_int8, tmp_path / "7", CpuRecord(
        CpuClass.AVX2, {CpuClass.AVX512_VNNI: FIGURE}, ())))
    warning = check_cpu(seven_bit, CpuClass.AVX2)  # made for avx2, but measured on a VNNI machine only
    assert warning is not None and "weaker class" in warning and "saturate" not in warning
    assert check_cpu(seven_bit, CpuClass.AVX2, allow=True) == warning  # nothing to allow: a warning, not a refusal


def test_load_refuses_an_artifact_recorded_unsafe_here_unless_allowed(vnni_int8: Path, tmp_path: Path) -> None:
    unsafe_here = _recorded(vnni_int8, tmp_path, CpuRecord(CpuClass.AMX, {CpuClass.AMX: FIGURE}, (HERE,)))
    with pytest.raises(BadInput, match=rf"unsafe on this CPU \({HERE}\).*allow_cpu_mismatch=True"):
        trtpipe.load(unsafe_here)
    with console.recording_warnings() as warnings:
        model = trtpipe.load(unsafe_here, allow_cpu_mismatch=True)
    assert len(warnings) == 1 and "running it anyway" in warnings[0]
    assert model.predict(np.zeros((2, 1, 32, 32), np.float32)).shape == (2, 10)
    model.close()


@pytest.mark.skipif(HERE is CpuClass.AMX, reason="this CPU is of the strongest class: no class is stronger")
def test_load_warns_once_on_a_weaker_class_than_measured(vnni_int8: Path, tmp_path: Path) -> None:
    stronger = _recorded(vnni_int8, tmp_path, CpuRecord(CpuClass.AMX, {CpuClass.AMX: FIGURE}, ()))
    with console.recording_warnings() as warnings:
        trtpipe.load(stronger).close()
    assert len(warnings) == 1 and f"this CPU is {HERE}, a weaker class" in warnings[0]


def test_an_old_manifest_loads_with_one_warning(vnni_int8: Path, tmp_path: Path) -> None:
    old = _recorded(vnni_int8, tmp_path, None)
    with console.recording_warnings() as warnings:
        trtpipe.load(old).close()
    assert len(warnings) == 1 and "measured on an unknown CPU" in warnings[0]


def test_bench_refuses_in_one_line(vnni_int8: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    unsafe_here = _recorded(vnni_int8, tmp_path, CpuRecord(CpuClass.AMX, {CpuClass.AMX: FIGURE}, (HERE,)))
    result = run_cli("bench", "digits_resnet", unsafe_here, "--batch", "1", "--iters", "1")
    assert result.exit_code == 1
    assert f"unsafe on this CPU ({HERE})" in error_line(result.output)


def test_serve_refuses_the_model_unless_allowed(vnni_int8: Path, tmp_path: Path) -> None:
    from trtpipe.serve.options import ServeOptions
    from trtpipe.serve.repository.loading import close_repository, load_repository

    _recorded(vnni_int8, tmp_path / "repo" / "digits_int8" / "1",
              CpuRecord(CpuClass.AMX, {CpuClass.AMX: FIGURE}, (HERE,)))
    served = load_repository(tmp_path / "repo", ServeOptions(batching=False))
    entry = served["digits_int8"]["1"]
    assert not entry.ready and entry.error is not None and f"unsafe on this CPU ({HERE})" in entry.error
    served = load_repository(tmp_path / "repo", ServeOptions(batching=False, allow_cpu_mismatch=True))
    assert served["digits_int8"]["1"].ready
    close_repository(served)


def test_triton_export_carries_the_requirement(vnni_int8: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    from tritonclient.grpc import model_config_pb2

    result = run_cli("export-triton", vnni_int8, "--name", "digits_int8", "-o", tmp_path / "triton")
    assert result.exit_code == 0, result.output
    text = (tmp_path / "triton" / "digits_int8" / "config.pbtxt").read_text()
    first = text.splitlines()[0]
    assert first.startswith("# trtpipe: INT8 made for CPU class avx512-vnni (8-bit weights); accuracy measured on "
                            f"{HERE} (top-1 agreement ")
    assert "unsafe on portable, avx2" in first
    config = text_format.Parse(text, model_config_pb2.ModelConfig())  # Triton's parser takes the comment
    assert config.platform == "onnxruntime_onnx"
    copied = tmp_path / "triton" / "digits_int8" / "1" / "model.manifest.json"
    assert copied.read_bytes() == vnni_int8.with_suffix(".manifest.json").read_bytes()
    manifest = read_manifest(tmp_path / "triton" / "digits_int8" / "1" / "model.onnx")
    assert manifest is not None and manifest.cpu is not None and manifest.cpu.made_for is CpuClass.AVX512_VNNI


def test_a_damaged_cpu_record_is_named(vnni_int8: Path, tmp_path: Path) -> None:
    import json

    copy = _recorded(vnni_int8, tmp_path, CpuRecord(CpuClass.AVX2, {CpuClass.AVX2: FIGURE}, ()))
    path = copy.with_suffix(".manifest.json")
    data = json.loads(path.read_text())
    data["artifact"]["cpu_class"]["made_for"] = "avx3"
    path.write_text(json.dumps(data))
    with pytest.raises(BadInput, match=r"'artifact\.cpu_class\.made_for' is 'avx3', not one of portable, avx2"):
        describe_artifact(copy)
