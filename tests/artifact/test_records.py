"""The artifact's records: the calibration range cache read and written by its record (same bytes as optimize
always wrote, a stale one ignored, a damaged one refused in one line), and the one commit of an artifact with its
record."""

from __future__ import annotations

from pathlib import Path

import pytest

from trtpipe.artifact.records.calibration import CalibrationKey, calibration_path, read_ranges, write_ranges
from trtpipe.artifact.records.commit import commit
from trtpipe.artifact.records.document import record_bytes
from trtpipe.errors import BadInput
from trtpipe.files import staged_path, write_json_atomic
from trtpipe.vocab import CalibMethod

KEY = CalibrationKey("a" * 64, "b" * 64, CalibMethod.ENTROPY, True)

# A cache as trtpipe has written it since the key had a schema: the record must read it back and write it so.
WRITTEN = """{
  "key": {
    "schema": "trtpipe.calibration/1",
    "model_sha256": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "data_sha256": "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
    "method": "entropy",
    "symmetric": true
  },
  "ranges": {
    "x": [
      -1.5,
      2.0
    ],
    "conv_out": [
      0.0,
      6.25
    ]
  }
}
"""


def test_the_cache_path_is_beside_the_output_unless_chosen(tmp_path: Path) -> None:
    assert calibration_path(tmp_path / "q.onnx") == tmp_path / "q.calib.json"
    assert calibration_path(tmp_path / "q.onnx", tmp_path / "mine.json") == tmp_path / "mine.json"


def test_a_cache_written_by_the_record_reads_back_with_the_bytes_optimize_wrote(tmp_path: Path) -> None:
    ranges = {"x": (-1.5, 2.0), "conv_out": (0.0, 6.25)}
    cache = tmp_path / "q.calib.json"
    write_ranges(cache, KEY, ranges)
    assert cache.read_text() == WRITTEN
    assert read_ranges(cache, KEY) == ranges
    earlier = tmp_path / "earlier.calib.json"  # one an earlier trtpipe wrote
    earlier.write_text(WRITTEN)
    assert read_ranges(earlier, KEY) == ranges


def test_a_missing_or_stale_cache_reads_as_none(tmp_path: Path) -> None:
    cache = tmp_path / "q.calib.json"
    assert read_ranges(cache, KEY) is None
    write_ranges(cache, KEY, {"x": (0.0, 1.0)})
    for other in (CalibrationKey("c" * 64, KEY.data_sha256, KEY.method, True),
                  CalibrationKey(KEY.model_sha256, "c" * 64, KEY.method, True),
                  CalibrationKey(KEY.model_sha256, KEY.data_sha256, CalibMethod.MSE, True),
                  CalibrationKey(KEY.model_sha256, KEY.data_sha256, KEY.method, False)):
        assert read_ranges(cache, other) is None
    cache.write_text(WRITTEN.replace("calibration/1", "calibration/2"))  # another layout's: calibrated afresh
    assert read_ranges(cache, KEY) is None


@pytest.mark.parametrize(("content", "why"), [
    (b"{\"key\": {\"schema\": \"trtpipe.calibration/1\",", "not valid JSON"),
    (b"\xff\xfe binary", "cannot be read"),
    (b"[" * 100_000, "nested too deeply"),
    (b"[1, 2]", "no calibration key"),
    (b"{\"schema\": \"trtpipe.manifest/2\", \"artifact\": {}}", "no calibration key"),
    (WRITTEN.replace("0.0,\n", "\"zero\",\n").encode(), "'ranges.conv_out' is not a [low, high] pair"),
    (WRITTEN.replace("      2.0\n", "      2.0,\n      3.0\n").encode(), "'ranges.x' is not a [low, high] pair"),
    (WRITTEN.replace("-1.5", "true").encode(), "'ranges.x' is not a [low, high] pair"),
])
def test_a_damaged_cache_is_refused_in_one_line(tmp_path: Path, content: bytes, why: str) -> None:
    cache = tmp_path / "q.calib.json"
    cache.write_bytes(content)
    with pytest.raises(BadInput) as raised:
        read_ranges(cache, KEY)
    message = str(raised.value)
    assert "\n" not in message and str(cache) in message and why in message and "delete it" in message
    assert cache.read_bytes() == content  # refused, not overwritten


def test_commit_puts_the_bytes_and_their_record_in_place_as_one(tmp_path: Path) -> None:
    engine, sidecar = tmp_path / "model.plan", tmp_path / "model.plan.json"
    document = {"schema": "test/1", "engine_sha256": "0" * 64, "inputs": [{"name": "x", "shape": [-1, 3]}]}
    assert commit(engine, b"engine bytes", sidecar, document) == sidecar
    assert engine.read_bytes() == b"engine bytes"
    reference = tmp_path / "reference.json"
    write_json_atomic(reference, document)  # every record file holds the same JSON layout
    assert sidecar.read_bytes() == record_bytes(document) == reference.read_bytes()
    model, manifest, described = tmp_path / "model.onnx", tmp_path / "model.manifest.json", {"artifact": {}}
    with staged_path(model) as staged:
        staged.write_bytes(b"onnx bytes")
        commit(model, staged, manifest, described)
        assert not staged.exists()  # renamed into place, not copied
    assert model.read_bytes() == b"onnx bytes" and manifest.read_bytes() == record_bytes(described)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.manifest.json", "model.onnx", "model.plan",
                                                          "model.plan.json", "reference.json"]  # no temporaries


@pytest.mark.parametrize("reader", ["manifest", "sidecar", "tuned", "calibration"])
def test_every_record_refuses_json_nested_too_deeply_in_one_line(tmp_path: Path, reader: str) -> None:
    """A hostile record file nested past the parser's recursion limit is refused in one line naming it, by every
    record (the tuned-runs reader once let the RecursionError through as a traceback)."""
    from trtpipe.artifact.records.engine import read_sidecar, sidecar_path
    from trtpipe.artifact.records.manifest import manifest_path, read_manifest
    from trtpipe.artifact.records.tuned import read_tuned, tuned_path

    artifact = tmp_path / ("model.plan" if reader == "sidecar" else "model.onnx")
    artifact.write_bytes(b"artifact bytes")
    path = {"manifest": manifest_path, "sidecar": sidecar_path, "tuned": tuned_path,
            "calibration": calibration_path}[reader](artifact)
    path.write_bytes(b"[" * 200_000 + b"]" * 200_000)
    read = {"manifest": read_manifest, "sidecar": read_sidecar, "tuned": read_tuned,
            "calibration": lambda a: read_ranges(path, CalibrationKey("m", "d", CalibMethod.MINMAX, True))}[reader]
    with pytest.raises(BadInput) as refused:
        read(artifact)
    assert str(path) in refused.value.message and "nested too deeply" in refused.value.message
    assert "\n" not in refused.value.message
