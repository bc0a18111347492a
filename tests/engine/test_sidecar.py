from __future__ import annotations

import json
from pathlib import Path

import pytest

from trtpipe.errors import BadInput
from trtpipe.files import sha256_file
from trtpipe.runtime.tensorrt.sidecar import (
    EngineSidecar,
    check_compatibility,
    check_engine_file,
    read_sidecar,
    sidecar_path,
)


def _sidecar(**changes: object) -> EngineSidecar:
    base = {"tensorrt_version": "10.13.0.35", "gpu_name": "NVIDIA H100", "compute_capability": "9.0"}
    return EngineSidecar(**{**base, **changes})  # type: ignore[arg-type]


def test_round_trip_and_engine_hash(tmp_path: Path) -> None:
    engine = tmp_path / "m.plan"
    engine.write_bytes(b"engine bytes")
    sidecar = _sidecar(engine_sha256=sha256_file(engine), precision="int8")
    sidecar_path(engine).write_text(json.dumps(sidecar.to_dict()))
    loaded = read_sidecar(engine)
    assert loaded == sidecar
    check_engine_file(engine, loaded)
    engine.write_bytes(b"engine bytes, truncated or swapped")
    with pytest.raises(BadInput, match="does not match its sidecar"):
        check_engine_file(engine, loaded)


def test_missing_or_foreign_sidecar(tmp_path: Path) -> None:
    engine = tmp_path / "m.plan"
    engine.write_bytes(b"x")
    with pytest.raises(BadInput, match=r"has no metadata sidecar.*trtpipe build"):
        read_sidecar(engine)
    sidecar_path(engine).write_text('{"schema": "something else"}')
    with pytest.raises(BadInput, match="is not a trtpipe engine sidecar"):
        read_sidecar(engine)


def test_same_version_and_gpu_passes() -> None:
    check_compatibility(_sidecar(), tensorrt_version="10.13.0.35", compute_capability="9.0")


def test_other_tensorrt_version_names_both_and_the_fix() -> None:
    with pytest.raises(BadInput, match=r"built with TensorRT 10\.13\.0\.35; this machine has TensorRT "
                                       r"11\.4\.0\.106 \(it was not built with --version-compat\): rebuild it "
                                       r"here with 'trtpipe build'"):
        check_compatibility(_sidecar(), tensorrt_version="11.4.0.106", compute_capability="9.0")


def test_version_compatible_engines_run_on_newer_runtimes_the_support_matrix_allows() -> None:
    compatible = _sidecar(version_compatible=True)
    check_compatibility(compatible, tensorrt_version="10.15.1", compute_capability="9.0")
    check_compatibility(compatible, tensorrt_version="11.4.0", compute_capability="9.0")  # 10 -> 11: allowed
    with pytest.raises(BadInput):
        check_compatibility(compatible, tensorrt_version="10.8.0", compute_capability="9.0")  # older runtime
    built_on_11 = _sidecar(version_compatible=True, tensorrt_version="11.4.0")
    with pytest.raises(BadInput):
        check_compatibility(built_on_11, tensorrt_version="10.15.1", compute_capability="9.0")  # back to 10
    with pytest.raises(BadInput):
        check_compatibility(built_on_11, tensorrt_version="12.0.0", compute_capability="9.0")  # unknown major


def test_other_gpu() -> None:
    with pytest.raises(BadInput, match=r"built for NVIDIA H100 \(compute capability 9\.0\); this machine has "
                                       r"NVIDIA A10 \(compute capability 8\.6\).*--hardware-compat ampere\+"):
        check_compatibility(_sidecar(), tensorrt_version="10.13.0.35", compute_capability="8.6",
                            gpu_name="NVIDIA A10")
    portable = _sidecar(hardware_compat="ampere+")
    check_compatibility(portable, tensorrt_version="10.13.0.35", compute_capability="8.6")
    with pytest.raises(BadInput, match="Ampere and newer"):
        check_compatibility(portable, tensorrt_version="10.13.0.35", compute_capability="7.5")


@pytest.mark.parametrize(("content", "reason"), [
    ("[1, 2]", "schema None"),
    ('{"schema": "trtpipe.engine/1", "tensorrt_version": "10.13", "gpu_name": "H100", "compute_capability": "9.0"}',
     "'engine_sha256' is missing"),
    ('{"schema": "trtpipe.engine/1", "tensorrt_version": "10.13", "gpu_name": "H100", "compute_capability": "9.0", '
     '"engine_sha256": 12345}', "'engine_sha256' is int, not str"),
    ('{"schema": "trtpipe.engine/1", "tensorrt_version": "10.13", "gpu_name": "H100", "compute_capability": "9.0", '
     '"engine_sha256": "abc"}', "not a SHA-256 hex digest"),
    ('{"schema": "trtpipe.engine/1", "tensorrt_version": 10, "gpu_name": "H100", "compute_capability": "9.0", '
     f'"engine_sha256": "{"0" * 64}"}}', "'tensorrt_version' is int, not str"),
])
def test_a_malformed_sidecar_is_refused_in_one_line(tmp_path: Path, content: str, reason: str) -> None:
    engine = tmp_path / "m.plan"
    engine.write_bytes(b"engine")
    sidecar_path(engine).write_text(content)
    with pytest.raises(BadInput) as caught:
        read_sidecar(engine)
    assert reason in caught.value.message and "rebuild with 'trtpipe build'" in caught.value.message
