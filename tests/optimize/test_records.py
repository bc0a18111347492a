"""Each pass records what it did as a typed record; the stage writes them into the manifest under their sections, in
the JSON earlier manifests carried, and reads them back typed (the CPU record takes INT8's final figure from it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trtpipe.comparison import compare
from trtpipe.optimize.data import Dataset
from trtpipe.optimize.options import OptimizeOptions
from trtpipe.optimize.passes.context import PassContext
from trtpipe.optimize.records import EqualizeRecord, FusionRecord, Int8Calibration, Int8Record, RecipeRecord
from trtpipe.vocab import Target


def _context(tmp_path: Path) -> PassContext:
    probe = Dataset(np.zeros((2, 3), np.float32), None, "two zero samples")
    return PassContext(OptimizeOptions(), Target.CPU, None, None, probe, None, tmp_path / "model.onnx")


def test_records_land_in_the_manifest_under_their_sections_and_read_back_typed(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    reference = rng.standard_normal((8, 10))
    check = compare(reference, reference + 1e-3 * rng.standard_normal((8, 10)))
    context = _context(tmp_path)
    context.details["input"] = {"path": "fp32.onnx"}
    context.record(FusionRecord({"Conv": 2, "Relu": 2}, {"Conv": 2}, 100, 90, check))
    context.record(EqualizeRecord(pairs=0))
    int8 = Int8Record({"weights": "int8"}, Int8Calibration("minmax", "digits", 8, "ab" * 32, "c.json", 4), check,
                      check, RecipeRecord("fast", ["scale_depthwise"], []), fp32_layers=["conv1"])
    context.record(int8)

    details = context.manifest_details()
    assert details["input"] == {"path": "fp32.onnx"}
    assert details["fusion"]["nodes_before"] == 4 and details["fusion"]["nodes_after"] == 2
    assert details["fusion"]["verification"]["cosine"] == check.cosine
    assert details["equalize"] == {"pairs": 0}
    assert details["int8"]["final"] == check.to_dict() and details["int8"]["fp32_layers"] == ["conv1"]
    assert details["int8"]["recipe"] == {"quality": "fast", "steps": ["scale_depthwise"], "measured": []}
    assert details["int8"]["calibration"]["samples"] == 8
    assert context.recorded(Int8Record) is int8
    assert context.recorded(FusionRecord) is not None


def test_a_pass_that_runs_again_replaces_its_record(tmp_path: Path) -> None:
    context = _context(tmp_path)
    context.record(EqualizeRecord(pairs=0))
    context.record(EqualizeRecord(pairs=3, probe="digits", ranges_for="cpu", relu6_pairs=1, max_scale_spread=4.0))
    assert len(context.records) == 1
    assert context.manifest_details()["equalize"]["pairs"] == 3
