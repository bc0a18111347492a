"""Every task figure comes with its 95 % interval over the samples it was judged on (trtpipe/tasks, comparison.py),
never a point at 100 %; an accuracy budget judges the interval of the drop; bench rows carry the intervals."""

from __future__ import annotations

import numpy as np
import pytest

from trtpipe.bench.rows import BenchRow
from trtpipe.bench.timing import LatencyStats
from trtpipe.comparison import OVER, WITHIN, compare, judge_budget
from trtpipe.errors import MissingDependency
from trtpipe.intervals import wilson
from trtpipe.vocab import BackendKind, Device, Precision, Task

UNSEEN_CROPS = 0.937  # the written YOLOv8n's mAP@0.5 on 200 unseen crops, where 32 held-out crops said 100 %


def _maps(rng: np.random.Generator, images: int, channels: int) -> np.ndarray:
    return rng.standard_normal((images, channels, 16, 16))


@pytest.mark.parametrize("task, reference", [
    (Task.CLASSIFY, lambda rng: rng.standard_normal((32, 10))),
    (Task.SEGMENT, lambda rng: _maps(rng, 32, 4)),
    (Task.DENSE, lambda rng: 1 / (1 + np.exp(-_maps(rng, 32, 1)))),
])
def test_a_perfect_figure_on_32_samples_is_not_a_point(task: Task, reference) -> None:  # type: ignore[no-untyped-def]
    """32 of 32 samples agreeing give 89.3-100 %, Wilson's interval, whether the figure is a share of samples
    (top-1) or pooled over their pixels (the image is the unit, and a bootstrap alone would say 100-100 %)."""
    outputs = reference(np.random.default_rng(0))
    comparison = compare(outputs, outputs, task=task)
    interval = comparison.agreement_interval
    assert comparison.agreement == 1.0 and interval is not None and interval.units == 32
    assert interval.high == 1.0 and interval.low == pytest.approx(wilson(32, 32).low)
    assert "(95% CI 89.3-100.0 %)" in comparison.line()
    assert comparison.to_dict()["agreement_interval"]["low"] == interval.low  # and in the manifest's record


@pytest.mark.parametrize("task", [Task.CLASSIFY, Task.SEGMENT, Task.DENSE, Task.EMBED])
def test_each_interval_holds_its_figure_and_narrows_with_more_samples(task: Task) -> None:
    rng = np.random.default_rng(1)
    shape = {Task.CLASSIFY: (400, 10), Task.SEGMENT: (400, 3, 8, 8), Task.DENSE: (400, 1, 8, 8),
             Task.EMBED: (400, 16)}[task]
    reference = rng.standard_normal(shape)
    if task is Task.DENSE:
        reference = 1 / (1 + np.exp(-reference))
    candidate = reference + 0.6 * rng.standard_normal(shape)
    few, many = compare(reference[:40], candidate[:40], task=task), compare(reference, candidate, task=task)
    for comparison in (few, many):
        interval = comparison.agreement_interval
        assert comparison.agreement is not None and interval is not None
        assert interval.low < comparison.agreement < interval.high
    assert many.agreement_interval.width < few.agreement_interval.width  # type: ignore[union-attr]


def test_with_labels_the_accuracy_and_its_paired_drop_have_intervals() -> None:
    """Identical answers on 32 labelled samples: the drop is 0, and its interval is about +-10.7 points (an error
    no sample showed may still occur that often), not 0-0; a budget of 1 point cannot be decided on them."""
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((32, 10))
    labels = np.where(rng.random(32) < 0.8, logits.argmax(1), (logits.argmax(1) + 1) % 10)
    comparison = compare(logits, logits, labels)
    drop = comparison.drop_interval_pp
    assert comparison.accuracy_drop_pp == 0.0 and comparison.accuracy_interval is not None
    assert drop is not None and drop.low == pytest.approx(-100 * wilson(0, 32).high) and drop.high > 10
    verdict = judge_budget(comparison, 1.0)  # decided on the point (no drop: within), undecided in the claim
    assert verdict.decision == WITHIN and not verdict.sure and verdict.undecided
    assert verdict.needed is not None and verdict.needed > 32
    assert f"about {verdict.needed} samples" in verdict.line and "too few to be sure" in verdict.line


def test_a_budget_is_judged_by_the_drop_s_bounds() -> None:
    """Within where the drop's upper bound is within the budget, over where its lower bound is beyond it."""
    rng = np.random.default_rng(3)
    reference = rng.standard_normal((2000, 10))
    same, far = reference.copy(), reference + 2.0 * rng.standard_normal(reference.shape)
    assert judge_budget(compare(reference, same), 1.0).decision == WITHIN
    over = judge_budget(compare(reference, far), 5.0)
    assert over.decision == OVER and "the interval's lower bound" in over.line


def test_a_perfect_detector_on_32_crops_states_an_interval_that_holds_the_unseen_figure() -> None:
    """The packaged PP-PicoDet layout detector against itself on 32 crops: mAP@0.5 vs FP32 is 100 %, and the
    interval printed with it reaches below the 93.7 % that unseen crops gave a detector judged so (issue 47)."""
    from trtpipe.models.packaged import LAYOUT_DETECTOR, natural_batch, packaged_model, packaged_onnx
    from trtpipe.runtime.onnxruntime.backend import OnnxRuntimeBackend

    try:
        path = packaged_onnx(LAYOUT_DETECTOR)
    except MissingDependency as missing:
        pytest.skip(missing.message)
    batch = natural_batch(LAYOUT_DETECTOR, count=32)
    with OnnxRuntimeBackend(path) as backend:
        name = backend.inputs[0].name
        outputs = [backend.run({name: image[None]}) for image in batch.inputs]  # its batch is fixed at 1
    joined = [np.concatenate([o[i] for o in outputs]) for i in range(len(outputs[0]))]
    comparison = compare(joined, joined, task=Task.DETECT, decoder=packaged_model(LAYOUT_DETECTOR).decoder())
    interval = comparison.agreement_interval
    assert comparison.agreement == 1.0 and comparison.figures["reference_boxes"] > 32
    assert interval is not None and interval.contains(UNSEEN_CROPS) and interval.units == 32
    assert "mAP@0.5 vs FP32 100.00% (95% CI 89.3-100.0 %)" in comparison.line()


def test_bench_rows_carry_the_intervals_and_read_back_without_them() -> None:
    """A row's agreement and accuracy intervals survive the results JSON; a row written before them reads back
    with None."""
    reference = np.random.default_rng(4).standard_normal((32, 10))
    comparison = compare(reference, reference, reference.argmax(1))
    row = BenchRow("onnxruntime-int8", BackendKind.ONNXRUNTIME, Precision.INT8, Device.CPU, 1,
                   LatencyStats.from_samples(np.array([1.0, 1.1, 1.2]), 1), agreement=comparison.agreement,
                   agreement_interval=comparison.agreement_interval, accuracy_interval=comparison.accuracy_interval)
    data = row.to_dict()
    assert data["agreement_interval"] == comparison.agreement_interval.to_dict()  # type: ignore[union-attr]
    back = BenchRow.from_dict(data)
    assert back.agreement_interval == comparison.agreement_interval
    assert back.accuracy_interval == comparison.accuracy_interval
    old = {k: v for k, v in data.items() if k not in ("agreement_interval", "accuracy_interval")}
    assert BenchRow.from_dict(old).agreement_interval is None
