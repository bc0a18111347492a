"""Empirical bias correction on tiny graphs: after it, each corrected layer's output mean per channel equals
FP32's on the calibration data (the reference computation), for a float bias and for an int32 one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from tests.builders import x_to_y
from trtpipe.optimize.int8.steps.bias_correction.algorithm import channel_means, correct_biases

RNG = np.random.default_rng(0)
W = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
B = RNG.standard_normal(4).astype(np.float32)


def _graph(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto]) -> onnx.ModelProto:
    return x_to_y(nodes, inits, ["n", 3, 8, 8], ["n", 4, 8, 8], opset=18)


def _fp32() -> onnx.ModelProto:
    return _graph([helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", pads=[1, 1, 1, 1])],
                  [numpy_helper.from_array(W, "w"), numpy_helper.from_array(B, "b")])


def _quantized(int32_bias: bool) -> onnx.ModelProto:
    """Coarse 4-level weights and activations: a visible mean shift to correct."""
    scale_w = np.abs(W).max(axis=(1, 2, 3)) / 2
    w_q = np.clip(np.round(W / scale_w[:, None, None, None]), -2, 2).astype(np.int8)
    inits = [numpy_helper.from_array(w_q, "w_q"), numpy_helper.from_array(scale_w.astype(np.float32), "w_s"),
             numpy_helper.from_array(np.array(0.4, np.float32), "x_s"), numpy_helper.from_array(np.int8(0), "x_z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_s", "x_z"], ["x_q"]),
             helper.make_node("DequantizeLinear", ["x_q", "x_s", "x_z"], ["x_dq"]),
             helper.make_node("DequantizeLinear", ["w_q", "w_s"], ["w_dq"], axis=0)]
    if int32_bias:
        b_s = (0.4 * scale_w).astype(np.float32)
        inits += [numpy_helper.from_array(np.round(B / b_s).astype(np.int32), "b_q"),
                  numpy_helper.from_array(b_s, "b_s")]
        nodes.append(helper.make_node("DequantizeLinear", ["b_q", "b_s"], ["b_dq"], axis=0))
        bias = "b_dq"
    else:
        inits.append(numpy_helper.from_array(B, "b"))
        bias = "b"
    nodes.append(helper.make_node("Conv", ["x_dq", "w_dq", bias], ["y"], name="conv", pads=[1, 1, 1, 1]))
    return _graph(nodes, inits)


@pytest.mark.parametrize("int32_bias", [False, True])
def test_corrected_layer_means_equal_fp32(int32_bias: bool) -> None:
    batches = [np.abs(RNG.standard_normal((8, 3, 8, 8))).astype(np.float32) for _ in range(4)]  # mean != 0
    fp32, quantized = _fp32(), _quantized(int32_bias)
    reference = channel_means(fp32, ["y"], batches)["y"]
    before = channel_means(quantized, ["y"], batches)["y"]
    corrected, shifts = correct_biases(fp32, quantized, batches)
    after = channel_means(corrected, ["y"], batches)["y"]
    assert np.abs(before - reference).max() > 0.05  # there was a shift to correct
    tolerance = 1e-5 if not int32_bias else float((0.4 * np.abs(W).max(axis=(1, 2, 3)) / 2).max())  # one int32 step
    np.testing.assert_allclose(after, reference, atol=tolerance)
    assert set(shifts) == {"conv"}


def test_bias_correction_option_records_what_it_did(digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    import json

    out = tmp_path / "bc.onnx"
    result = run_cli("optimize", digits_onnx, "-o", out, "--precision", "int8", "--target", "tensorrt", "--calib",
                     "digits", "--eval", "digits", "--bias-correction")
    assert result.exit_code == 0, result.output
    section = json.loads(out.with_suffix(".manifest.json").read_text())["int8"]
    assert section["bias_correction"]["layers"] == 10 and section["bias_correction"]["samples"] == 64
    assert section["final"]["accuracy_drop_pp"] <= 0.5


def test_a_recipe_step_is_kept_unless_its_point_change_is_negative_and_the_manifest_says_so() -> None:
    """A learned step (bias correction, AdaRound) costs nothing at run time, so it is kept unless its point change on
    the judging samples is negative (optimize/judging/step_rule.py: decide by expected value): a loss drops it, no
    change or a gain keeps it, and the manifest records the point change, its interval and why."""
    from types import SimpleNamespace

    from trtpipe.comparison import compare
    from trtpipe.optimize.int8.step import Candidate, Outcome
    from trtpipe.optimize.int8.steps.bias_correction.step import BiasCorrection, BiasCorrectionRecord
    from trtpipe.optimize.judging.step_rule import judge_step

    rng = np.random.default_rng(0)
    reference = rng.standard_normal((200, 10))
    close, far = reference + 0.05 * rng.standard_normal((200, 10)), reference + 1.5 * rng.standard_normal((200, 10))
    good, bad = compare(reference, close), compare(reference, far)
    assert good.agreement is not None and bad.agreement is not None and bad.agreement < good.agreement
    before, after = onnx.ModelProto(), onnx.ModelProto()
    after.producer_name = "after the step"
    options = SimpleNamespace(bias_correction=False)  # asked for by the recipe, not by name
    run = SimpleNamespace(judge=SimpleNamespace(source="eval data"), decides=True,
                          context=SimpleNamespace(options=options))
    step = BiasCorrection()
    # (figure without the step, figure with it, kept, claim): a loss, no change at all, a gain beyond the noise
    for start_check, step_check, expect_kept, change in ((good, bad, False, "loss"), (good, good, True,
                                                         "within the noise"), (bad, good, True, "gain")):
        start = Candidate(before, start_check)
        outcome = Outcome(Candidate(after, step_check), BiasCorrectionRecord(3, 64, {}))
        settled = step.settle(run, start, outcome, judge_step(start_check, step_check, step.purpose))  # type: ignore[arg-type]
        assert (settled.candidate.model is after) is expect_kept
        assert settled.candidate.check is (step_check if expect_kept else start_check)
        recorded = settled.record.to_dict()["bias_correction"]
        assert recorded["layers"] == 3 and recorded["kept"] is expect_kept and recorded["change"] == change
        point = 100 * (step_check.agreement - start_check.agreement)
        assert recorded["change_pp"] == pytest.approx(point)
        interval = recorded["change_interval_pp"]
        assert interval["low"] <= point <= interval["high"]
        assert settled.measured is not None and settled.measured["kept"] is expect_kept


def test_a_step_the_user_names_is_applied_even_where_the_data_suggest_it_hurt(capsys: pytest.CaptureFixture[str]) \
        -> None:
    """--bias-correction asked by name: the file is what was asked for, and one warning gives the figures."""
    from types import SimpleNamespace

    from trtpipe.comparison import compare
    from trtpipe.optimize.int8.step import Candidate, Outcome
    from trtpipe.optimize.int8.steps.bias_correction.step import BiasCorrection, BiasCorrectionRecord
    from trtpipe.optimize.judging.step_rule import judge_step

    rng = np.random.default_rng(0)
    reference = rng.standard_normal((200, 10))
    good = compare(reference, reference + 0.05 * rng.standard_normal((200, 10)))
    bad = compare(reference, reference + 1.5 * rng.standard_normal((200, 10)))
    run = SimpleNamespace(judge=SimpleNamespace(source="eval data"), decides=True,
                          context=SimpleNamespace(options=SimpleNamespace(bias_correction=True)))
    after = onnx.ModelProto()
    settled = BiasCorrection().settle(run, Candidate(onnx.ModelProto(), good),  # type: ignore[arg-type]
                                      Outcome(Candidate(after, bad), BiasCorrectionRecord(3, 64, {})),
                                      judge_step(good, bad, BiasCorrection.purpose))
    assert settled.candidate.model is after
    recorded = settled.record.to_dict()["bias_correction"]
    assert recorded["kept"] is True and recorded["named"] is True and recorded["change"] == "loss"
    said = capsys.readouterr()
    assert "was asked for (--bias-correction) and is applied" in said.out + said.err
    assert "its point change is negative" in said.out + said.err  # the rule's reason, in its own words


def test_a_step_dropped_on_a_tie_says_the_tie_and_what_broke_it(capsys: pytest.CaptureFixture[str]) -> None:
    """32 of 32 agree with and without the step: the line says no change on the figure and that the worst cosine
    fell, never that the step lowered the figure."""
    from types import SimpleNamespace

    from trtpipe.comparison import compare
    from trtpipe.optimize.int8.step import Candidate, Outcome
    from trtpipe.optimize.int8.steps.bias_correction.step import BiasCorrection, BiasCorrectionRecord
    from trtpipe.optimize.judging.step_rule import judge_step

    rng = np.random.default_rng(0)
    reference = rng.standard_normal((32, 10)) + 6 * np.eye(10)[rng.integers(0, 10, 32)]  # clear winners: ties
    close = compare(reference, reference + 0.01 * rng.standard_normal((32, 10)))
    closer_but_one = compare(reference, reference + 0.02 * rng.standard_normal((32, 10)))
    assert close.agreement == closer_but_one.agreement == 1.0 and closer_but_one.cosine < close.cosine
    run = SimpleNamespace(judge=SimpleNamespace(source="held-out data"), decides=True,
                          context=SimpleNamespace(options=SimpleNamespace(bias_correction=False)))
    before = onnx.ModelProto()
    settled = BiasCorrection().settle(run, Candidate(before, close),  # type: ignore[arg-type]
                                      Outcome(Candidate(onnx.ModelProto(), closer_but_one),
                                              BiasCorrectionRecord(3, 64, {})),
                                      judge_step(close, closer_but_one, BiasCorrection.purpose))
    assert settled.candidate.model is before
    said = capsys.readouterr()
    line = said.out + said.err
    assert "Bias correction dropped on held-out data: no change on the task figure, but the worst cosine" in line
    assert "lowered" not in line


def test_a_learned_step_takes_fewer_samples_where_its_passes_would_overrun_the_time_budget(
        digits_onnx: Path, tmp_path: Path, run_cli, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """A large dense model's bias correction (a pass of the model per layer over every sample) would run for many
    minutes: its sample count is cut to what the step's time budget buys at the pace measured on the judged
    candidate, never below the floor, and one line says so. Here the budget is made tiny instead of the model big."""
    import json

    from trtpipe.optimize.int8 import step

    # 64 samples of a small model fit its 90 s; 49 of a U-Net at 0.4 s a sample and 29 passes buy 7
    assert step.timed_samples(64, 11, 0.01) == 64 and step.timed_samples(49, 29, 0.4) == 7
    monkeypatch.setattr(step, "STEP_TIME_S", 1e-6)
    out = tmp_path / "bc.onnx"
    result = run_cli("optimize", digits_onnx, "-o", out, "--precision", "int8", "--target", "tensorrt", "--calib",
                     "digits", "--eval", "digits", "--bias-correction")
    assert result.exit_code == 0, result.output
    section = json.loads(out.with_suffix(".manifest.json").read_text())["int8"]
    assert section["bias_correction"]["samples"] == step.MIN_TIMED_SAMPLES
    assert f"Bias correction learns from {step.MIN_TIMED_SAMPLES} of 64 calibration samples" in result.output
