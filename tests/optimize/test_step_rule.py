"""The step rule (optimize/judging/step_rule.py): decide by expected value, claim by interval. Synthetic steps on 32
classification samples: the decision follows the paired point change and the step's purpose, the words follow the
interval."""

from __future__ import annotations

import numpy as np
import pytest

from trtpipe.comparison import Comparison, compare
from trtpipe.optimize.judging.step_rule import ACCURACY, ACCURACY_AT_COST, GAIN, LOSS, NOISE, SPEED, judge_step
from trtpipe.vocab import Task

SAMPLES = 32


def _with_changed(reference: np.ndarray, changed: int) -> Comparison:
    """The reference's logits with the top-1 class of its first ``changed`` samples flipped."""
    candidate = reference.copy()
    candidate[:changed] = -candidate[:changed]
    return compare(reference, candidate)


@pytest.fixture
def reference() -> np.ndarray:
    return np.random.default_rng(3).standard_normal((SAMPLES, 10))


def test_a_free_step_that_gains_ten_points_on_32_samples_is_kept_and_said_too_few_to_be_sure(
        reference: np.ndarray) -> None:
    before, after = _with_changed(reference, 3), _with_changed(reference, 0)  # 90.6 % -> 100 %: +9.4 pp
    verdict = judge_step(before, after, ACCURACY)
    assert verdict.kept and verdict.point_pp == pytest.approx(100 * 3 / SAMPLES)
    assert verdict.change == NOISE and verdict.interval_pp is not None and verdict.interval_pp.low < 0
    assert verdict.needed is not None and verdict.needed > SAMPLES
    assert "too few to be sure" in verdict.claim() and f"about {verdict.needed} would decide" in verdict.claim()
    assert "outside the noise" not in verdict.claim()


def test_a_free_step_that_loses_nine_points_on_32_samples_is_dropped(reference: np.ndarray) -> None:
    before, after = _with_changed(reference, 0), _with_changed(reference, 3)  # 100 % -> 90.6 %
    verdict = judge_step(before, after, ACCURACY)
    assert not verdict.kept and verdict.point_pp == pytest.approx(-100 * 3 / SAMPLES)
    assert verdict.change == NOISE  # the interval cannot show the loss, and it decides nothing


def test_no_change_keeps_a_free_step_and_drops_one_that_costs_run_time(reference: np.ndarray) -> None:
    same = _with_changed(reference, 2)
    assert judge_step(same, same, ACCURACY).kept
    costly = judge_step(same, same, ACCURACY_AT_COST)
    assert not costly.kept and "simpler, faster file" in costly.why


def test_a_speed_step_is_kept_only_within_its_tolerance_never_for_a_large_loss_within_the_noise(
        reference: np.ndarray) -> None:
    before = _with_changed(reference, 0)
    three_lost = judge_step(before, _with_changed(reference, 3), SPEED)  # -9.4 pp: inside the interval's noise
    assert three_lost.change == NOISE and not three_lost.kept and "beyond the tolerance of 1.00 pp" in three_lost.why
    assert judge_step(before, before, SPEED).kept
    assert judge_step(before, _with_changed(reference, 3), SPEED, tolerance_pp=10.0).kept  # a user's budget share


def test_a_gain_the_interval_excludes_zero_for_is_said_outside_the_noise() -> None:
    reference = np.random.default_rng(4).standard_normal((200, 10))
    verdict = judge_step(_with_changed(reference, 60), _with_changed(reference, 0), ACCURACY)
    assert verdict.kept and verdict.change == GAIN and verdict.sure
    assert verdict.claim().endswith("a gain outside the noise") and verdict.needed is None
    loss = judge_step(_with_changed(reference, 0), _with_changed(reference, 60), ACCURACY)
    assert not loss.kept and loss.change == LOSS


def test_without_a_task_figure_the_worst_cosine_decides() -> None:
    rng = np.random.default_rng(5)
    reference = rng.standard_normal((16, 3, 4, 4)).astype(np.float32)
    small = compare(reference, reference + 0.01 * rng.standard_normal(reference.shape).astype(np.float32),
                    task=Task.GENERIC)
    large = compare(reference, reference + 0.5 * rng.standard_normal(reference.shape).astype(np.float32),
                    task=Task.GENERIC)
    assert small.agreement is None and large.cosine < small.cosine
    assert judge_step(large, small, ACCURACY).kept and not judge_step(small, large, ACCURACY).kept
    assert not judge_step(small, large, SPEED).kept  # far beyond twice the error before it


def test_a_tie_at_the_ceiling_is_broken_by_the_worst_cosine(reference: np.ndarray) -> None:
    """32 of 32 agree with and without the step: the task figure cannot see a loss, the cosine against FP32 can."""
    rng = np.random.default_rng(6)
    close = compare(reference, reference + 0.01 * rng.standard_normal(reference.shape))
    closer = compare(reference, reference + 0.001 * rng.standard_normal(reference.shape))
    assert close.agreement == closer.agreement == 1.0 and closer.cosine > close.cosine
    worse = judge_step(closer, close, ACCURACY)
    assert not worse.kept and "the worst cosine against FP32 fell" in worse.why
    assert judge_step(close, closer, ACCURACY).kept
