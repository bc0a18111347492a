"""An artifact and its manifest are committed as one: the manifest describes the bytes its own run wrote, two runs
writing one path end with one run's pair, and a pair left mismatched is reported, never trusted."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from trtpipe.artifact.records.manifest import ArtifactManifest, commit_artifact, manifest_path, read_manifest
from trtpipe.errors import BadInput
from trtpipe.files import lock_path, staged_path
from trtpipe.vocab import Precision

ROOT = Path(__file__).resolve().parents[2]


def _commit(output: Path, content: bytes, between_renames: object = None) -> None:
    """One run: its bytes staged, described from the staged file, committed with its manifest."""
    with staged_path(output) as tmp:
        tmp.write_bytes(content)
        manifest = ArtifactManifest.describe(output, Precision.FP32, content=tmp,
                                             details={"run": content.decode()})
        commit_artifact(tmp, output, manifest, between_renames=between_renames)  # type: ignore[arg-type]


def _assert_one_runs_pair(output: Path) -> str:
    """The manifest is trusted and is the one written with the file now on disk; returns that run's name."""
    manifest = read_manifest(output)
    assert manifest is not None, "the manifest describes another file than the one at the path"
    assert manifest.details["run"] == output.read_text()
    return output.read_text()


def test_the_manifest_records_the_bytes_this_run_wrote_not_the_file_at_the_path(tmp_path: Path) -> None:
    output = tmp_path / "model.onnx"
    with staged_path(output) as tmp:
        tmp.write_bytes(b"run A")
        manifest = ArtifactManifest.describe(output, Precision.FP32, content=tmp)
        output.write_bytes(b"run B, renamed into place meanwhile")
    assert manifest.path == "model.onnx" and manifest.size_bytes == len(b"run A")
    assert manifest.sha256 == ArtifactManifest.describe(output, Precision.FP32, content=b"run A").sha256


def test_two_threads_writing_one_path_end_with_one_runs_pair(tmp_path: Path) -> None:
    """Run A pauses between its model's rename and its manifest's; run B commits during the pause. Without the
    commit lock, B's model would end beside A's manifest (whose hash, of A's bytes, would not match)."""
    output = tmp_path / "model.onnx"
    paused = threading.Event()

    def pause() -> None:
        paused.set()
        time.sleep(0.5)

    first = threading.Thread(target=_commit, args=(output, b"run A", pause))
    first.start()
    assert paused.wait(30)
    started = time.monotonic()
    _commit(output, b"run B")  # waits for A's manifest, then replaces both
    waited = time.monotonic() - started
    first.join()
    assert _assert_one_runs_pair(output) == "run B"
    assert waited > 0.2  # B was held until A's pair was whole


def test_two_processes_writing_one_path_end_with_one_runs_pair(tmp_path: Path) -> None:
    output, ready = tmp_path / "model.onnx", tmp_path / "ready"
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from pathlib import Path
        from tests.artifact.test_manifest import _commit

        def pause():
            Path({str(ready)!r}).write_text("renamed")
            time.sleep(1.0)

        _commit(Path({str(output)!r}), b"child run", pause)
    """)], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert child.poll() is None and time.monotonic() < deadline, "the child never reached its pause"
            time.sleep(0.02)
        _commit(output, b"parent run")
    finally:
        assert child.wait(60) == 0
    assert _assert_one_runs_pair(output) == "parent run"


def test_a_run_killed_between_the_renames_leaves_an_unverified_pair_and_no_lock(tmp_path: Path) -> None:
    output = tmp_path / "model.onnx"
    _commit(output, b"earlier run")
    killed = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from tests.artifact.test_manifest import _commit

        _commit(Path({str(output)!r}), b"killed run", lambda: os.kill(os.getpid(), signal.SIGKILL))
    """)], cwd=ROOT, check=False)
    assert killed.returncode == -9
    assert output.read_bytes() == b"killed run"  # the new model, beside the earlier run's manifest
    said: list[str] = []
    assert read_manifest(output, on_mismatch=said.append) is None
    assert len(said) == 1 and "model.manifest.json describes another file" in said[0] and "unverified" in said[0]
    _commit(output, b"next run")  # the dead run's lock went with it; its staged manifest is cleaned up
    assert _assert_one_runs_pair(output) == "next run"
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_a_committed_pair_honours_the_umask(tmp_path: Path, umask: int, mode: int) -> None:
    output = tmp_path / "model.onnx"
    previous = os.umask(umask)
    try:
        _commit(output, b"model")
    finally:
        os.umask(previous)
    for path in (output, manifest_path(output)):
        assert stat.S_IMODE(path.stat().st_mode) == mode, path
    assert not lock_path(output).exists()  # removed when the commit let go of it


def test_a_manifest_that_does_not_describe_the_staged_file_is_refused(tmp_path: Path) -> None:
    output = tmp_path / "model.onnx"
    with staged_path(output) as tmp:
        tmp.write_bytes(b"what was written")
        stale = ArtifactManifest.describe(output, Precision.FP32, content=b"something else")
        with pytest.raises(ValueError, match="describe it with content=staged"):
            commit_artifact(tmp, output, stale)
    assert not output.exists()


def _valid_manifest(tmp_path: Path) -> tuple[Path, dict[str, object]]:
    output = tmp_path / "model.onnx"
    _commit(output, b"model")
    return output, json.loads(manifest_path(output).read_text())


@pytest.mark.parametrize(("field", "value", "reason"), [
    ("precision", "int3", "'artifact.precision' is 'int3', not one of fp32"),
    ("kind", "pickle", "'artifact.kind' is 'pickle'"),
    ("size_bytes", "12", "'artifact.size_bytes' is str, not int"),
    ("sha256", "abc", "'artifact.sha256' is not a SHA-256 hex digest"),
    ("fp32_nodes", [1, 2], "'artifact.fp32_nodes' holds something other than node names"),
])
def test_a_damaged_manifest_is_refused_naming_the_file_and_field(tmp_path: Path, field: str, value: object,
                                                                 reason: str) -> None:
    output, data = _valid_manifest(tmp_path)
    data["artifact"][field] = value  # type: ignore[index]
    manifest_path(output).write_text(json.dumps(data))
    with pytest.raises(BadInput) as caught:
        read_manifest(output)
    assert str(manifest_path(output)) in caught.value.message and reason in caught.value.message


def test_a_deeply_nested_manifest_is_refused_not_a_crash(tmp_path: Path) -> None:
    output, _ = _valid_manifest(tmp_path)
    manifest_path(output).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(BadInput, match=r"model\.manifest\.json is not a trtpipe manifest \(JSON nested too deeply\)"):
        read_manifest(output)


def test_a_manifest_of_another_layout_is_not_ours_to_judge(tmp_path: Path) -> None:
    output, _ = _valid_manifest(tmp_path)
    manifest_path(output).write_text(json.dumps({"schema": "trtpipe.manifest/1", "artifact": "old"}))
    assert read_manifest(output) is None


def test_an_onnx_file_and_a_package_of_one_model_keep_their_own_manifests() -> None:
    """trtpipe convert -o m.onnx and trtpipe compile -o m.pt2 in one folder: neither manifest replaces the other."""
    from trtpipe.artifact.records.manifest import manifest_path

    assert manifest_path(Path("out/m.onnx")) == Path("out/m.manifest.json")
    assert manifest_path(Path("out/m.pt2")) == Path("out/m.pt2.manifest.json")


def test_a_manifest_without_a_schema_version_is_ignored_with_one_line_saying_why(tmp_path: Path) -> None:
    """An older trtpipe's manifest (no "schema"): not trusted, and the caller is told in one line."""
    output, data = _valid_manifest(tmp_path)
    del data["schema"]
    manifest_path(output).write_text(json.dumps(data))
    told: list[str] = []
    assert read_manifest(output, on_other_layout=told.append) is None
    assert len(told) == 1 and "\n" not in told[0]
    assert "no schema version" in told[0] and "trtpipe.manifest/2" in told[0] and "model.onnx" in told[0]


def test_the_shared_sections_read_back_as_typed_records(tmp_path: Path) -> None:
    """What optimize and convert record for the next stage (its source file, the inputs, the options) reads back
    typed; an entry of another layout is left out rather than guessed at."""
    from trtpipe.artifact.records.sections import MadeFrom
    from trtpipe.inputs import InputSpec, Layout

    output = tmp_path / "model.onnx"
    spec = InputSpec("image", (None, 3, 8, 8), "uint8", (0.0, 255.0), Layout.NCHW)
    details = {"input": MadeFrom("fp32.onnx", "ab" * 32, Precision.FP32).to_dict(),
               "input_specs": [spec.to_dict(), {"name": "broken"}, "not an object"],
               "options": {"calib": "digits", "eval": None, "mean": [0.5, 0.25], "resize": 36},
               "source": {"weights_sha256": "cd" * 32, "preprocessing": {"std": [0.2]}}}
    with staged_path(output) as tmp:
        tmp.write_bytes(b"model")
        commit_artifact(tmp, output, ArtifactManifest.describe(output, Precision.INT8, content=tmp, details=details))
    manifest = read_manifest(output)
    assert manifest is not None
    assert manifest.made_from == MadeFrom("fp32.onnx", "ab" * 32, Precision.FP32)
    assert manifest.input_specs == {"image": spec}
    assert manifest.recorded_options.text("calib") == "digits" and manifest.recorded_options.text("eval") is None
    assert manifest.recorded_options.preprocessing.mean == (0.5, 0.25)
    assert manifest.recorded_options.preprocessing.resize == 36
    source = manifest.source_model
    assert source is not None and source.weights_sha256 == "cd" * 32 and source.preprocessing.std == (0.2,)
    assert json.loads(manifest_path(output).read_text())["input"]["precision"] == "fp32"  # the JSON as before
