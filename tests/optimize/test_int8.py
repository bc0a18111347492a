"""INT8: both targets keep the digits model's accuracy; the budget's fallback really triggers; the cache works."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

import trtpipe
from tests.conftest import error_line
from tests.optimize.conftest import run
from trtpipe.hardware import has_vnni
from trtpipe.models.data import load_split
from trtpipe.optimize.graph.activations import RunningStats
from trtpipe.optimize.int8.calibration.calibrate import mse_range
from trtpipe.vocab import CalibMethod


def _initializer_types(model: onnx.ModelProto, op: str, input_index: int) -> set[int]:
    inits = {i.name: i for i in model.graph.initializer}
    return {inits[n.input[input_index]].data_type for n in model.graph.node
            if n.op_type == op and n.input[input_index] in inits}


@pytest.mark.parametrize(("target", "method"), [("tensorrt", "minmax"), ("cpu", "minmax"), ("tensorrt", "mse"),
                                                 ("cpu", "percentile")])
def test_digits_int8_keeps_accuracy(digits_onnx: Path, tmp_path: Path, run_cli, target: str,  # type: ignore[no-untyped-def]
                                    method: str) -> None:
    out = tmp_path / f"int8_{target}.onnx"
    result = run_cli("optimize", digits_onnx, "-o", out, "--precision", "int8", "--target", target, "--calib",
                     "digits", "--calib-method", method, "--eval", "digits")
    assert result.exit_code == 0, result.output
    model = onnx.load(str(out))
    ops = {n.op_type for n in model.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    zero_point_types = _initializer_types(model, "QuantizeLinear", 2)
    if target == "tensorrt":
        assert zero_point_types == {onnx.TensorProto.INT8}  # signed symmetric activations
    else:
        assert zero_point_types == {onnx.TensorProto.UINT8}  # U8 activations
    split = load_split("digits", "eval")
    fp32_acc = np.mean(run(digits_onnx, split.images).argmax(1) == split.labels)
    with trtpipe.load(out) as loaded:  # as the artifact must run: tensorrt's Q/DQ as float ops, FP16 rounded per op
        assert loaded.backend.optimization == ("disable" if target == "tensorrt" else "all")
        int8_acc = np.mean(loaded.predict(split.images).argmax(1) == split.labels)
    assert 100 * (fp32_acc - int8_acc) <= 0.5
    manifest = json.loads(out.with_suffix(".manifest.json").read_text())
    assert manifest["int8"]["final"]["accuracy"] == pytest.approx(int8_acc)
    assert manifest["int8"]["final"]["samples"] == 847
    assert manifest["int8"]["profile"]["reduce_range"] == (target == "cpu" and not has_vnni())
    assert manifest["data"]["calibration"]["samples"] == 150 and manifest["data"]["calibration"]["sha256"]


def test_accuracy_budget_falls_back_to_fp32_layers(outlier_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "budget.onnx"
    result = run_cli("optimize", outlier_onnx, "-o", out, "--precision", "int8", "--target", "tensorrt",
                     "--calib", "digits", "--eval", "digits", "--max-accuracy-drop", "0.5")
    assert result.exit_code == 0, result.output
    assert "ranking layers by sensitivity" in result.output
    section = json.loads(out.with_suffix(".manifest.json").read_text())["int8"]
    assert section["full_int8"]["accuracy_drop_pp"] > 20  # the case really needs the fallback
    assert section["fp32_layers"] and section["final"]["accuracy_drop_pp"] <= 0.5
    # The outlier lives in one tensor read by two convolutions, plus the residual Add before it: both readers fall
    # back together as one unit, and three nodes suffice (the earlier one-node-at-a-time schedule needed five).
    assert len(section["fp32_layers"]) <= 3
    assert len(section["sensitivity"]) > 1 and {"nodes", "error_removed", "kept"} <= set(section["sensitivity"][0])
    kept = [a for a in section["fallback_attempts"] if a["kept"]]
    drops = [section["full_int8"]["accuracy_drop_pp"], *(a["drop_pp"] for a in kept)]
    assert drops == sorted(drops, reverse=True), drops  # the figure never gets worse as layers are added
    kept = set(section["fp32_layers"])
    model = onnx.load(str(out))
    float_weights = {i.name for i in model.graph.initializer if i.data_type == onnx.TensorProto.FLOAT}
    for node in model.graph.node:
        if node.op_type == "Conv":  # fallen-back convolutions keep FP32 weights; the others read INT8 ones
            assert (node.input[1] in float_weights) == (node.name in kept), node.name


def test_no_mix_within_the_fp32_node_limit_fails_clearly(outlier_onnx: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                          run_cli) -> None:
    result = run_cli("optimize", outlier_onnx, "-o", tmp_path / "x.onnx", "--precision", "int8", "--target",
                     "tensorrt", "--calib", "digits", "--eval", "digits", "--max-accuracy-drop", "0.5",
                     "--max-fp32-nodes", "1")
    assert result.exit_code == 1
    line = error_line(result.output)
    assert "No INT8 mix meets the accuracy budget of 0.5 pp" in line and "tried keeping up to 1" in line
    assert not (tmp_path / "x.onnx").exists()


def test_calibration_cache_is_reused_only_when_inputs_match(digits_onnx: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                            run_cli) -> None:
    args = ["optimize", digits_onnx, "-o", tmp_path / "q.onnx", "--precision", "int8", "--target", "cpu",
            "--calib", "digits"]
    first = run_cli(*args)
    assert first.exit_code == 0 and "Reusing calibration ranges" not in first.output
    cache = tmp_path / "q.calib.json"
    assert cache.is_file()
    assert "Reusing calibration ranges" in run_cli(*args).output
    changed = run_cli(*args, "--calib-samples", "100")
    assert changed.exit_code == 0 and "Reusing calibration ranges" not in changed.output


def test_a_damaged_calibration_cache_is_refused_in_one_line(digits_onnx: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                            run_cli) -> None:
    """Not overwritten (``--calib-cache`` may name another file by mistake), not a traceback: one line, the fix."""
    cache = tmp_path / "notes.txt"
    cache.write_text("my notes, not ranges\n")
    result = run_cli("optimize", digits_onnx, "-o", tmp_path / "q.onnx", "--precision", "int8", "--target", "cpu",
                     "--calib", "digits", "--calib-cache", cache)
    line = error_line(result.output)
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert f"{cache} is not a trtpipe calibration cache" in line and "--calib-cache" in line
    assert cache.read_text() == "my notes, not ranges\n" and not (tmp_path / "q.onnx").exists()


def _histogram(values: np.ndarray) -> RunningStats:
    stats = RunningStats()
    stats.update(values)
    counts, stats.edges = np.histogram(values, bins=2048, range=(-stats.abs_max, stats.abs_max))
    stats.histogram = counts.astype(np.float64)
    return stats


def test_mse_range_matches_the_analytic_optimum_for_a_laplace_tail() -> None:
    """For Laplace(b=1) data and 8 bits the MSE-optimal symmetric clip is about 9.89 (Banner et al., ACIQ),
    well inside the sample maximum (~13.5 here)."""
    values = np.random.default_rng(0).laplace(size=200_000)
    stats = _histogram(values)
    low, high = mse_range(stats, symmetric=True)
    assert low == -high and 9.89 * 0.95 < high < 9.89 * 1.05 and high < 0.8 * stats.abs_max
    low, high = mse_range(_histogram(np.abs(values)), symmetric=False)  # a ReLU-like output: [0, clip]
    assert low == 0.0 and 9.0 < high < 0.9 * stats.abs_max


def test_mse_range_keeps_a_uniform_range() -> None:
    values = np.random.default_rng(0).uniform(-1, 1, 200_000)  # no tail: clipping only adds error
    _, high = mse_range(_histogram(values), symmetric=True)
    assert high > 0.95


def test_calibration_streams_and_minmax_sees_every_batch(digits_onnx: Path) -> None:
    """Statistics are folded in a few batches at a time (memory stays flat with more data); the ranges still
    cover every batch: equal to a running min/max over all of them."""
    from trtpipe.optimize.graph.activations import float_activations, observe
    from trtpipe.optimize.int8.calibration.calibrate import calibrate
    from trtpipe.runtime.onnxruntime.quantization import STREAM_BATCHES

    model = onnx.load(str(digits_onnx))
    images = load_split("digits", "eval").images[:320]
    batches = [images[i : i + 32] for i in range(0, 320, 32)]
    assert len(batches) > 2 * STREAM_BATCHES
    ranges = calibrate(model, batches, CalibMethod.MINMAX, symmetric=False)
    reference = observe(model, float_activations(model), batches)
    for name, (low, high) in ranges.items():
        if name in reference:
            assert np.isclose(low, min(reference[name].minimum, 0.0), atol=1e-5), name
            assert np.isclose(high, max(reference[name].maximum, 0.0), atol=1e-5), name
