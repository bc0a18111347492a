"""Bench's report says what each INT8 file leaves float and why, from its manifest (issue 57, item 4)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from tests.optimize.test_speed_placement import _se_block
from trtpipe.bench.float_regions import _line, float_region_lines
from trtpipe.optimize.options import OptimizeOptions
from trtpipe.optimize.stage import optimize
from trtpipe.vocab import CpuClass, Precision, Target


def test_the_rules_and_the_measured_regions_are_said_with_their_reasons() -> None:
    int8 = {"speed_placement": {"regions": [
        {"region": "depthwise convolutions", "nodes": ["a", "b"], "float_speedup": 1.21, "kept": "float"},
        {"region": "pointwise convolutions", "nodes": ["c"], "float_speedup": 0.7, "kept": "int8"}]},
        "placement": {"squeeze-excitation": {"why": "a gate per channel", "nodes": ["s1", "s2"]},
                      "speed-float": {"why": "measured", "nodes": ["a", "b"]}},
        "fp32_layers": ["x"]}
    line = _line("m.onnx", int8)
    assert line == ("m.onnx leaves float: depthwise convolutions (2 nodes): 1.21x faster in float than in integer "
                    "where it was made (speed-aware placement); 2 nodes by rule 'squeeze-excitation' (a gate per "
                    "channel); 1 layers kept FP32 by the accuracy budget")
    assert _line("m.onnx", {}) is None


def test_a_written_cpu_file_reports_its_squeeze_excitation_branch_left_float(tmp_path: Path) -> None:
    source, calib, out = tmp_path / "se.onnx", tmp_path / "calib.npy", tmp_path / "int8.onnx"
    onnx.save(_se_block(), str(source))
    np.save(calib, np.random.default_rng(1).standard_normal((16, 3, 8, 8)).astype(np.float32))
    optimize(source, out, OptimizeOptions(precision=Precision.INT8, target=Target.CPU,
                                          cpu_class=CpuClass.AVX512_VNNI, calib=str(calib)))
    lines = float_region_lines([out, source])
    assert len(lines) == 1 and lines[0].startswith("int8.onnx leaves float: 4 nodes by rule 'squeeze-excitation'")
