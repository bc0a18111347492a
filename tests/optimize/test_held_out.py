"""Without --eval, optimize judges on data it was never fit to: a seeded held-out share of the calibration data (or
new draws of a generated source); with too few samples to split, one line says the figure is optimistic and gates
refuse to decide on it; the manifest records which data judged; select says when a figure is on calibration data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import error_line
from tests.pipeline.test_select import ROWS
from trtpipe.artifact.records.sections import DataRecord
from trtpipe.inputs import InputSpec
from trtpipe.models.data import load_split
from trtpipe.optimize.data import Dataset, sample_fingerprints
from trtpipe.optimize.judging.held_out import MIN_CALIBRATION, MIN_HELD_OUT, fewest_to_split, held_out_count, hold_out
from trtpipe.pipeline.select import choose, fit_to_caveat


def _manifest(out: Path) -> dict:  # type: ignore[type-arg]
    return json.loads(out.with_suffix(".manifest.json").read_text())


def test_the_held_out_share_is_disjoint_from_calibration_and_every_figure_is_measured_on_it(
        digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """--calib digits alone: the ranges come from the samples that were not held out, and the figures the budget
    and the final record are judged on are the held-out samples' (their count said, their indices recorded)."""
    out = tmp_path / "int8.onnx"
    result = run_cli("optimize", digits_onnx, "-o", out, "--precision", "int8", "--calib", "digits", "--quality",
                     "fast", "--max-accuracy-drop", "5")
    assert result.exit_code == 0, result.output
    split = load_split("digits", "calibration")
    held = held_out_count(len(split.images))
    manifest = _manifest(out)
    judged = manifest["data"]["judged_on"]
    assert judged["data"] == "held-out" and judged["optimistic"] is False and judged["samples"] == held
    indices = np.asarray(judged["indices"])
    rest = np.setdiff1d(np.arange(len(split.images)), indices)
    assert len(indices) == held and len(rest) == len(split.images) - held
    # What calibration used (the ranges' data, recorded by the INT8 pass) is exactly the rest, sample by sample.
    everything = Dataset(split.images, split.labels, "digits")
    fit = everything.subset(rest, "digits")
    assert manifest["int8"]["calibration"]["sha256"] == fit.sha256
    assert manifest["int8"]["calibration"]["samples"] == len(rest)
    calibration = set(manifest["data"]["calibration"]["fingerprints"])
    assert calibration == set(sample_fingerprints(split.images[rest]))
    assert not calibration & set(sample_fingerprints(split.images[indices]))
    # Every figure is the held-out samples': the first measurement, the final one, the data judged on.
    judge = everything.subset(indices, "digits")
    assert judged["sha256"] == judge.sha256
    assert manifest["int8"]["full_int8"]["samples"] == manifest["int8"]["final"]["samples"] == held
    assert f"on {held} held-out samples of digits calibration split" in result.output
    # Each figure with its interval over those samples, and the budget decided on the drop's best estimate: a few
    # dozen samples that all agree are within 5 points on it, but cannot show the drop is under 5 points, so the
    # line says undecided and about how many would decide.
    final = manifest["int8"]["final"]
    assert final["agreement_interval"]["units"] == held and final["agreement_interval"]["method"] == "wilson"
    assert final["agreement_interval"]["low"] <= final["agreement"] <= final["agreement_interval"]["high"]
    budget = manifest["int8"]["budget"]
    assert budget["decision"] == "within" and budget["sure"] is False
    assert budget["samples_to_decide"] > held  # the upper bound is >= 9 pp
    assert "within the budget of 5.0 pp on the best estimate, undecided" in " ".join(result.output.split())
    assert "95% CI" in result.output
    # Its ranges come from the calibration share only, and the line says why.
    assert f"calibration: {len(rest)} samples (not {len(split.images)}: the file is judged on the held-out" in \
        " ".join(result.output.split())


def test_the_split_is_seeded_and_labels_follow_their_samples() -> None:
    """The same data splits the same way every time, fit and held-out together are all of it, and a detector's
    label boxes move with their images."""
    images = np.arange(40 * 4, dtype=np.float32).reshape(40, 1, 2, 2)
    boxes = np.zeros(40, dtype=[("boxes", np.float32, (4,)), ("classes", np.int64), ("image", np.int64)])
    boxes["image"], boxes["classes"] = np.arange(40), np.arange(40) * 10
    data = Dataset(images, boxes, "forty")
    spec = InputSpec("x", (None, 1, 2, 2), "float32")
    one, two = (hold_out(data, "forty.npz", (spec,)) for _ in range(2))
    assert one.held_out is not None and two.held_out is not None
    assert one.record.indices == two.record.indices
    held = np.asarray(one.record.indices)
    assert len(held) == held_out_count(40) and len(one.calibration) == 40 - len(held)
    seen = set(one.calibration.images[:, 0, 0, 0].tolist()) | set(one.held_out.images[:, 0, 0, 0].tolist())
    assert seen == set(images[:, 0, 0, 0].tolist())
    assert not set(one.calibration.fingerprints()) & set(one.held_out.fingerprints())
    labels = one.held_out.labels
    assert labels is not None and labels["image"].tolist() == list(range(len(held)))
    assert labels["classes"].tolist() == (held * 10).tolist()  # each box still names its own image's class
    fewest = fewest_to_split()
    assert fewest == MIN_CALIBRATION + MIN_HELD_OUT
    assert hold_out(data.head(fewest - 1), "forty.npz", (spec,)).held_out is None
    smallest = hold_out(data.head(fewest), "forty.npz", (spec,))
    assert smallest.held_out is not None and len(smallest.calibration) == MIN_CALIBRATION
    # A static batch of 4: whole batches held out.
    assert hold_out(data, "forty.npz", (spec,), static_batch=4).record.samples % 4 == 0


def test_a_generated_source_is_judged_on_new_draws(tmp_path: Path) -> None:
    """'random' calibrates on seed 0 and is judged on as many draws of seed 1: nothing shared, nothing taken."""
    from trtpipe.inputs import random_batch

    spec = InputSpec("x", (None, 1, 8, 8), "float32")
    calib = Dataset(random_batch((spec,), 16, np.random.default_rng(0)), None, "random noise")
    judging = hold_out(calib, "random", (spec,))
    assert judging.held_out is not None and len(judging.calibration) == 16 and len(judging.held_out) == 16
    assert not set(calib.fingerprints()) & set(judging.held_out.fingerprints())
    assert judging.record.data == "held-out" and "seed 1" in (judging.record.drawn or "")


def test_too_few_samples_say_so_once_and_the_gates_refuse_to_decide(
        digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """16 samples are too few to hold any out: one line says the figure is on calibration data and optimistic, the
    manifest says so, a learned step is kept undecided (not 'kept because it measured better'), an accuracy budget
    is refused in one line naming --eval and --calib, and select says so when it chooses that artifact."""
    out = tmp_path / "int8.onnx"
    result = run_cli("optimize", digits_onnx, "-o", out, "--precision", "int8", "--calib", "digits",
                     "--calib-samples", "16", "--quality", "balanced")
    assert result.exit_code == 0, result.output
    assert result.output.count("optimistic") == 1 and "--eval DATA or more --calib samples" in result.output
    manifest = _manifest(out)
    judged = manifest["data"]["judged_on"]
    assert judged["data"] == "calibration" and judged["optimistic"] is True and judged["samples"] == 16
    assert manifest["int8"]["bias_correction"]["kept"] is True
    assert manifest["int8"]["bias_correction"]["decided"] is False

    refused = tmp_path / "budget.onnx"
    result = run_cli("optimize", digits_onnx, "-o", refused, "--precision", "int8", "--calib", "digits",
                     "--calib-samples", "16", "--quality", "fast", "--max-accuracy-drop", "1")
    assert result.exit_code == 1
    line = error_line(result.output)
    assert "--max-accuracy-drop cannot be judged" in line and "--eval" in line and "--calib" in line
    assert not refused.exists()

    # select: this artifact's figure is on its calibration data; under a limit another variant is preferred.
    caveat = fit_to_caveat(DataRecord.from_dict(manifest["data"]))
    assert caveat is not None and "calibration samples" in caveat
    fastest = min((r for r in ROWS if r.batch == 1 and r.artifact), key=lambda r: r.p50_ms).variant
    choice = choose(ROWS, batch=1, latency_budget_ms=None, max_accuracy_drop=None, fit_to={fastest: caveat})
    assert choice is not None and choice.variant == fastest and caveat in choice.reason
    choice = choose(ROWS, batch=1, latency_budget_ms=None, max_accuracy_drop=5.0, fit_to={fastest: caveat})
    assert choice is not None and choice.variant != fastest and f"not the faster {fastest}" in choice.reason
    # Bench judging it on the very samples it was calibrated on is said too, whatever optimize could judge on.
    split = load_split("digits", "calibration")
    same = frozenset(sample_fingerprints(split.images[:16]))
    record = DataRecord.from_dict(manifest["data"])
    assert "judged only on samples it was calibrated on" in (fit_to_caveat(record, same) or "")
    other = frozenset(sample_fingerprints(split.images[100:116]))
    assert fit_to_caveat(record, other) is None


def test_eval_data_judges_when_given_and_nothing_is_held_out(
        digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "int8.onnx"
    result = run_cli("optimize", digits_onnx, "-o", out, "--precision", "int8", "--calib", "digits", "--eval",
                     "digits", "--quality", "fast")
    assert result.exit_code == 0, result.output
    manifest = _manifest(out)
    assert manifest["data"]["calibration"]["samples"] == len(load_split("digits", "calibration").images)
    judged = manifest["data"]["judged_on"]
    assert judged["data"] == "eval" and judged["optimistic"] is False
    assert judged["samples"] == manifest["int8"]["final"]["samples"] == len(load_split("digits", "eval").images)


def test_without_a_budget_a_fixed_set_is_cross_fitted_every_sample_calibrates_and_judges(
        digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """--calib digits without a budget: four folds each judged by a file fit on the other three, pooled into one
    figure on every sample; the written file's ranges come from all of them (none is given up to judging)."""
    out = tmp_path / "int8.onnx"
    result = run_cli("optimize", digits_onnx, "-o", out, "--precision", "int8", "--calib", "digits", "--quality",
                     "fast")
    assert result.exit_code == 0, result.output
    split = load_split("digits", "calibration")
    manifest = _manifest(out)
    judged = manifest["data"]["judged_on"]
    assert judged["data"] == "cross-fitted" and judged["optimistic"] is False
    assert judged["samples"] == judged["calibration_samples"] == len(split.images)
    everything = Dataset(split.images, split.labels, "digits")
    assert manifest["int8"]["calibration"]["sha256"] == everything.sha256  # the written file: fit on all
    assert manifest["int8"]["full_int8"]["samples"] == manifest["int8"]["final"]["samples"] == len(split.images)
    assert f"Judged on all {len(split.images)} calibration samples, cross-fitted" in " ".join(result.output.split())


def test_cross_fitted_folds_are_disjoint_seeded_and_cover_every_sample() -> None:
    from trtpipe.optimize.judging.held_out import FOLDS, cross_fitted

    images = np.arange(40 * 4, dtype=np.float32).reshape(40, 1, 2, 2)
    judging = cross_fitted(Dataset(images, None, "forty"))
    assert judging.folds is not None and len(judging.folds) == FOLDS
    joined = np.concatenate(judging.folds)
    assert sorted(joined.tolist()) == list(range(40))  # each sample judged once, by the fold that left it out
    again = cross_fitted(Dataset(images, None, "forty"))
    assert all(np.array_equal(a, b) for a, b in zip(judging.folds, again.folds or (), strict=True))
    assert len(judging.calibration) == 40 and judging.held_out is not None and len(judging.held_out) == 40


def test_cross_fitting_uses_fewer_folds_where_they_would_break_the_time_budget(
        digits_onnx: Path, tmp_path: Path, run_cli, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """A model whose folds would take longer than the budget is judged on the folds that fit (at least one), said
    in one line and recorded; the written file still calibrates on every sample."""
    import trtpipe.optimize.passes.int8 as int8_pass

    monkeypatch.setattr(int8_pass, "FOLD_BUDGET_S", 0.0)
    out = tmp_path / "int8.onnx"
    result = run_cli("optimize", digits_onnx, "-o", out, "--precision", "int8", "--calib", "digits", "--quality",
                     "fast")
    assert result.exit_code == 0, result.output
    split = load_split("digits", "calibration")
    manifest = _manifest(out)
    judged = manifest["data"]["judged_on"]
    assert judged["folds_used"] == 1 and judged["folds"] == 4 and judged["samples"] < len(split.images)
    assert manifest["int8"]["final"]["samples"] == judged["samples"]
    assert manifest["int8"]["calibration"]["samples"] == len(split.images)
    assert "Cross-fitted in 1 of 4 folds" in " ".join(result.output.split())


@pytest.mark.default_recipe
def test_a_learned_step_too_slow_for_every_fold_is_judged_on_fewer_said_and_recorded(
        digits_onnx: Path, tmp_path: Path, run_cli, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """Bias correction costs a pass per layer: where running it in every fold would pass its budget, the later
    folds are let go (at least one stays), the figures narrowed to the folds kept, and one line says so."""
    import trtpipe.optimize.int8.cross_fit as cross_fit

    monkeypatch.setattr(cross_fit, "STEP_BUDGET_S", 1e-9)
    out = tmp_path / "int8.onnx"
    result = run_cli("optimize", digits_onnx, "-o", out, "--precision", "int8", "--calib", "digits")  # balanced
    assert result.exit_code == 0, result.output
    manifest = _manifest(out)
    judged = manifest["data"]["judged_on"]
    assert judged["folds_used"] == 1 and judged["folds"] == 4
    assert manifest["int8"]["final"]["samples"] == judged["samples"] < judged["calibration_samples"]
    assert "judged on 1 of 4 folds" in " ".join(result.output.split())
    decided = [line for line in manifest["int8"]["recipe"]["measured"] if line["step"] == "bias_correction"]
    assert decided and "change_pp" in decided[0]  # the step still ran, and was decided on the folds kept


@pytest.mark.parametrize("named", [False, True])
def test_a_model_too_slow_for_every_sample_calibrates_and_judges_on_fewer_unless_the_count_is_named(
        digits_onnx: Path, tmp_path: Path, run_cli, monkeypatch: pytest.MonkeyPatch, named: bool) -> None:  # type: ignore[no-untyped-def]
    """The time budget (optimize/judging/sample_plan.py): where the passes over every sample would overrun it (here the
    reference pace is made 100,000 times slower instead of the model larger: the budget spends the graph's
    work, not the clock's seconds, which on this small model never run out), the first MIN_SAMPLES calibrate and
    judge, said in one line with the pace; --calib-samples N is the user's count and is kept."""
    import trtpipe.optimize.judging.sample_plan as plan
    from trtpipe.optimize.judging import work

    monkeypatch.setattr(work, "REFERENCE_MACS_PER_S", work.REFERENCE_MACS_PER_S / 1e5)
    monkeypatch.setattr(work, "REFERENCE_ELEMENTS_PER_S", work.REFERENCE_ELEMENTS_PER_S / 1e5)
    import trtpipe.optimize.passes.int8 as int8_pass

    monkeypatch.setattr(int8_pass, "FOLD_BUDGET_S", float("inf"))  # the folds' own budget: the test above
    out = tmp_path / "int8.onnx"
    asked = ["--calib-samples", "100"] if named else []
    result = run_cli("optimize", digits_onnx, "-o", out, "--precision", "int8", "--calib", "digits", "--quality",
                     "fast", *asked)
    assert result.exit_code == 0, result.output
    judged = _manifest(out)["data"]["judged_on"]
    said = " ".join(result.output.split())
    if named:
        assert judged["calibration_samples"] == 100 and "Time budget" not in said
    else:
        assert judged["calibration_samples"] == judged["samples"] == plan.MIN_SAMPLES  # cross-fitted on them
        assert f"the first {plan.MIN_SAMPLES} are used" in said
        assert "through the FP32 model (at the reference pace of its work" in said
