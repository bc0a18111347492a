from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import error_line
from trtpipe.artifact.records.engine import (
    EngineSidecar,
    check_compatibility,
    check_engine_file,
    commit_engine,
    read_sidecar,
    sidecar_path,
)
from trtpipe.errors import BadInput
from trtpipe.files import sha256_file


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


def _valid_sidecar_dict(engine: Path) -> dict[str, object]:
    return {"schema": "trtpipe.engine/1", "tensorrt_version": "10.13.0.35", "gpu_name": "H100",
            "compute_capability": "9.0", "engine_sha256": sha256_file(engine),
            "inputs": [{"name": "input", "dtype": "float", "shape": [-1, 3, 8, 8]}],
            "outputs": [{"name": "output", "dtype": "float", "shape": [-1, 10]}],
            "profiles": [[{"input": "input", "min": [1, 3, 8, 8], "opt": [4, 3, 8, 8], "max": [8, 3, 8, 8]}]]}


@pytest.mark.parametrize(("change", "reason"), [
    ({"precision": "int3"}, "'precision' is 'int3', not one of fp32"),
    ({"inputs": ["input"]}, "'inputs[0]' is str, not an object"),
    ({"outputs": [{"name": "output", "dtype": "float", "shape": "1x10"}]}, "'outputs[0].shape' is str, not list"),
    ({"outputs": [{"name": "output", "shape": [1]}]}, "'outputs[0].dtype' is missing, not str"),
    ({"profiles": [{"input": "x"}]}, "'profiles[0]' is dict, not list"),
    ({"profiles": [[{"input": "input", "min": [1], "opt": [1], "max": ["64"]}]]},
     "'profiles[0][0].max' holds something other than integers"),
])
def test_a_sidecar_field_of_the_wrong_shape_is_named(tmp_path: Path, change: dict[str, object], reason: str) -> None:
    engine = tmp_path / "m.plan"
    engine.write_bytes(b"engine")
    sidecar_path(engine).write_text(json.dumps({**_valid_sidecar_dict(engine), **change}))
    with pytest.raises(BadInput) as caught:
        read_sidecar(engine)
    assert str(sidecar_path(engine)) in caught.value.message and reason in caught.value.message


def test_a_deeply_nested_or_int3_sidecar_is_one_error_line(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    engine = tmp_path / "m.plan"
    engine.write_bytes(b"engine")
    sidecar_path(engine).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(BadInput, match="JSON nested too deeply"):
        read_sidecar(engine)
    for content in ("[" * 100_000 + "]" * 100_000, json.dumps({**_valid_sidecar_dict(engine), "precision": "int3"})):
        sidecar_path(engine).write_text(content)
        result = run_cli("export-triton", engine, "--name", "m", "-o", tmp_path / "triton")
        assert result.exit_code == 1 and "Traceback" not in result.output
        line = error_line(result.output)
        assert str(sidecar_path(engine)) in line and "rebuild with 'trtpipe build'" in line
    assert "'precision' is 'int3'" in line


def test_an_engine_and_its_sidecar_are_committed_as_one(tmp_path: Path) -> None:
    """Build A pauses between its engine's rename and its sidecar's; build B commits during the pause and waits
    for A's pair to be whole. The sidecar's hash is of the bytes each build made."""
    import threading
    import time

    engine = tmp_path / "m.plan"
    paused = threading.Event()

    def pause() -> None:
        paused.set()
        time.sleep(0.5)

    first = threading.Thread(target=commit_engine, args=(engine, b"engine A", _sidecar(engine_sha256="0" * 64)),
                             kwargs={"between_renames": pause})
    first.start()
    assert paused.wait(30)
    written = commit_engine(engine, b"engine B", _sidecar(engine_sha256="0" * 64))
    first.join()
    assert engine.read_bytes() == b"engine B" and read_sidecar(engine) == written
    check_engine_file(engine, read_sidecar(engine))


def test_an_engine_whose_build_died_between_the_renames_is_refused(tmp_path: Path) -> None:
    engine = tmp_path / "m.plan"
    commit_engine(engine, b"earlier engine", _sidecar(engine_sha256="0" * 64))

    def die() -> None:
        raise KeyboardInterrupt  # Ctrl-C after the engine's rename, before the sidecar's

    with pytest.raises(KeyboardInterrupt):
        commit_engine(engine, b"new engine", _sidecar(engine_sha256="0" * 64), between_renames=die)
    with pytest.raises(BadInput, match="does not match its sidecar"):
        check_engine_file(engine, read_sidecar(engine))
    assert not list(tmp_path.glob(".*.tmp"))
