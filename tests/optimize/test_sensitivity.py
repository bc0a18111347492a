"""The accuracy budget's ranking and search: each unit's own INT8 error is what a direct measurement gives; on a
model with one clearly sensitive tensor that unit ranks first and is the one kept; the search takes the shortest
run of the ranking that meets the budget in a logarithmic number of evaluations, never takes a mix that is worse
than the last, and stops at its cap."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.builders import minmax_int8, x_to_y
from trtpipe import console
from trtpipe.comparison import Comparison
from trtpipe.optimize.data import Dataset
from trtpipe.optimize.int8.qdq.profiles import profile_for
from trtpipe.optimize.int8.steps.budget import sensitivity
from trtpipe.optimize.int8.steps.budget.error_probe import CHANNEL_ENERGY_FLOOR, removed_errors
from trtpipe.optimize.int8.steps.budget.fallback_search import add_until_within_budget, default_max_attempts
from trtpipe.optimize.int8.steps.budget.ranking import MIN_PROBE_SAMPLES, PROBE_SAMPLES, probe_samples
from trtpipe.optimize.int8.steps.budget.sensitivity import fall_back_until_within_budget, print_table
from trtpipe.optimize.judging.evaluate import outputs
from trtpipe.vocab import Target, Task

OUTLIER = 1000.0


def _outlier_model() -> onnx.ModelProto:
    """conv1 -> Relu -> conv2 (its channel 0 scaled up by OUTLIER) -> Relu -> conv3 (reading channel 0 scaled back
    down) -> Relu -> mean -> Gemm. Identical in FP32 to the model without the outlier; in INT8, a2's per-tensor
    scale follows channel 0 and rounds every other channel to zero, so conv3, the tensor's one reader, is the
    unit to keep (with conv2, a2's writer, where quantised nodes write through Q/DQ)."""
    rng = np.random.default_rng(11)
    w2 = rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.3
    b2 = rng.standard_normal(8).astype(np.float32) * 0.1
    w3 = rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.3
    b2[0] = 1.0  # channel 0 stays active through the Relu, so its range is the tensor's
    w2[0] *= OUTLIER
    b2[0] *= OUTLIER
    w3[:, 0] /= OUTLIER
    inits = [numpy_helper.from_array(a, n) for a, n in (
        (rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.4, "w1"),
        (rng.standard_normal(8).astype(np.float32) * 0.1, "b1"),
        (w2, "w2"), (b2, "b2"), (w3, "w3"),
        (rng.standard_normal((6, 8)).astype(np.float32), "w4"),
        (np.zeros(6, np.float32), "b4"), (np.array([2, 3], np.int64), "axes"))]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["a1"], name="relu1"),
        helper.make_node("Conv", ["a1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["a2"], name="relu2"),
        helper.make_node("Conv", ["a2", "w3"], ["c3"], name="conv3", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c3"], ["a3"], name="relu3"),
        helper.make_node("ReduceMean", ["a3", "axes"], ["m"], name="pool", keepdims=0),
        helper.make_node("Gemm", ["m", "w4", "b4"], ["y"], name="fc", transB=1),
    ]
    return x_to_y(nodes, inits, ["n", 3, 8, 8], ["n", 6], opset=18)


def _images(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, 3, 8, 8)).astype(np.float32)


def _quantized(model: onnx.ModelProto, target: Target, calib: np.ndarray) -> onnx.ModelProto:
    profile = profile_for(target)
    return minmax_int8(model, [calib], profile, symmetric=profile.symmetric_activations)


def _with_outputs(model: onnx.ModelProto, names: list[str]) -> ort.InferenceSession:
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    exposed.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(exposed.SerializeToString(), options, providers=["CPUExecutionProvider"])


def test_a_first_layers_own_error_is_its_error_in_the_int8_model() -> None:
    """conv1 reads the graph input, so its INT8 twin fed with FP32 values computes what the whole INT8 model
    computes there: the probe's figure must equal that direct measurement, channel by channel."""
    model = _outlier_model()
    calib = _images(32, seed=1)
    quantized = _quantized(model, Target.TENSORRT, calib)
    profile = profile_for(Target.TENSORRT)
    [score] = removed_errors(model, quantized, profile, [("conv1",)], calib, None)
    int8_name = next(n.output[0] for n in quantized.graph.node if n.name == "conv1")
    fp32 = _with_outputs(model, ["c1"]).run(["c1"], {"x": calib})[0]
    int8 = _with_outputs(quantized, [int8_name]).run([int8_name], {"x": calib})[0]
    error = ((int8 - fp32) ** 2).sum(axis=(0, 2, 3))
    energy = (fp32**2).sum(axis=(0, 2, 3))
    expected = np.mean(error / np.maximum(energy, CHANNEL_ENERGY_FLOOR * energy.mean()))
    assert expected > 0
    assert score == pytest.approx(expected, rel=1e-4)


@pytest.mark.parametrize(("target", "unit"), [(Target.TENSORRT, ("conv3",)), (Target.CPU, ("conv3", "conv2"))])
def test_the_one_sensitive_unit_ranks_first_and_is_all_that_is_kept(target: Target, unit: tuple[str, ...],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    model = _outlier_model()
    calib, images = _images(64, seed=1), _images(200, seed=2)
    quantized = _quantized(model, target, calib)
    profile = profile_for(target)
    reference = outputs(model, images)
    labels = reference[0].argmax(1)  # FP32's own answers: the budget is on agreement with it
    calls: list[int] = []
    counting = sensitivity.compare  # what judges a mix on the eval data, and nothing else

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return counting(*args, **kwargs)

    monkeypatch.setattr(sensitivity, "compare", counted)
    result = fall_back_until_within_budget(
        model, quantized, profile, probe=calib, evaluation=Dataset(images, labels, "test"),
        fp32_outputs=reference, task=Task.CLASSIFY, budget_pp=2.0, batch=None)
    assert result.ranking[0][0] == unit
    assert result.ranking[0][1] > 0.5  # alone in FP32, it removes most of full INT8's output error
    assert set(result.excluded) == set(unit)
    assert result.comparison.drop_pp is not None and result.comparison.drop_pp <= 2.0
    assert len(calls) == len(result.attempts) + 1  # the attempts, and full INT8's figure (none was given)
    assert len(result.attempts) <= default_max_attempts(len(result.ranking))
    kept = [a for a in result.attempts if a["kept"]]
    assert kept and kept[-1]["fp32_layers"] == len(unit)


def _figure(drop: float) -> Comparison:
    return Comparison(max_abs_err=drop, mean_abs_err=drop, max_rel_err=0.0, cosine=1.0, top1_agreement=None,
                      ref_max_abs=1.0, samples=100, task=Task.DENSE, agreement=1 - drop / 100,
                      agreement_name="F1")


def _search(drop, units: list[tuple[str, ...]], budget: float, *, limit: int = 1000,  # type: ignore[no-untyped-def]
            max_attempts: int = 100):
    judged: list[list[str]] = []

    def judge(excluded: list[str]) -> tuple[str, Comparison]:
        judged.append(list(excluded))
        return "mix of " + ",".join(excluded), _figure(drop(set(excluded)))

    found = add_until_within_budget(units, judge, _figure(drop(set())), budget, limit=limit,
                                    max_attempts=max_attempts)
    return found, judged


def _kept_drops(found) -> list[float]:  # type: ignore[no-untyped-def]
    return [a["drop_pp"] for a in found.attempts if a["kept"]]  # type: ignore[misc]


def test_steps_grow_while_progress_is_slow_and_shrink_as_the_gap_closes() -> None:
    """Forty units each remove a quarter point: steps double (1, 2, 4, 8), then shrink to what the rate says
    is still needed, ending on the fewest units that meet the budget."""
    units = [(f"n{i}",) for i in range(64)]
    useful = {f"n{i}" for i in range(40)}
    found, judged = _search(lambda excluded: 10.0 - 0.25 * len(excluded & useful), units, 1.0)
    assert [len(j) for j in judged] == [1, 3, 7, 15, 26, 31, 34, 35, 36]
    assert found.excluded == [f"n{i}" for i in range(36)]  # 35 would lose 1.25 points
    assert found.model == "mix of " + ",".join(found.excluded)
    assert len(judged) <= default_max_attempts(len(units))
    drops = _kept_drops(found)
    assert drops == sorted(drops, reverse=True) and drops[-1] == 1.0


def test_a_step_that_jumps_past_the_budget_is_bisected_back() -> None:
    """Small gains until n12, which removes nine points: the step of eight that holds it is cut back to the
    shortest prefix that still meets the budget."""
    units = [(f"n{i}",) for i in range(64)]
    small = {f"n{i}" for i in range(12)}
    found, judged = _search(lambda excluded: 10.0 - 0.1 * len(excluded & small) - 9.0 * ("n12" in excluded),
                            units, 0.5)
    assert [len(j) for j in judged] == [1, 3, 7, 15, 11, 13, 12]
    assert found.excluded == [f"n{i}" for i in range(13)]
    assert [a["kept"] for a in found.attempts] == [True, True, True, False, False, True, False]
    drops = _kept_drops(found)
    assert drops == sorted(drops, reverse=True) and drops[-1] == pytest.approx(-0.2)


def test_a_unit_that_does_not_help_is_passed_over_and_the_figure_only_improves() -> None:
    """n1 costs 3 points wherever it is; every other of the first eight gains one. Its step is halved, then n1
    alone turns out worse and is passed over; the mixes taken only ever improve."""
    units = [(f"n{i}",) for i in range(20)]
    useful = {"n0", *(f"n{i}" for i in range(2, 8))}
    found, judged = _search(lambda excluded: 7.0 - len(excluded & useful) + 3.0 * ("n1" in excluded), units, 0.5)
    assert [len(j) for j in judged] == [1, 3, 2, 2, 4, 6, 7]
    assert [a["kept"] for a in found.attempts] == [True, False, False, True, True, True, True]
    assert "n1" not in found.excluded and set(found.excluded) == useful
    assert _kept_drops(found) == [6.0, 5.0, 3.0, 1.0, 0.0]
    assert [a["drop_removed_pp"] for a in found.attempts if a["kept"]] == [1.0, 1.0, 2.0, 2.0, 1.0]


def test_a_unit_passed_over_is_tried_again_once_the_others_have_joined() -> None:
    """n1 hurts until n5 is in, then gains a point: passed over at first, it is what meets the budget on the
    second pass."""
    units = [(f"n{i}",) for i in range(10)]
    useful = {"n0", "n2", "n3", "n4", "n5"}

    def drop(excluded: set[str]) -> float:
        effect = (-1.0 if "n5" in excluded else 3.0) if "n1" in excluded else 0.0
        return 6.0 - len(excluded & useful) + effect

    found, judged = _search(drop, units, 0.5)
    assert [len(j) for j in judged] == [1, 3, 2, 2, 4, 5, 6, 6, 6, 6, 6]
    assert set(found.excluded) == useful | {"n1"} and found.comparison.drop_pp == 0.0


def test_the_node_limit_and_the_attempt_cap_bound_an_unreachable_budget() -> None:
    units = [(f"a{i}", f"b{i}") for i in range(40)]  # two nodes a unit
    found, judged = _search(lambda excluded: 5.0 - 0.01 * len(excluded), units, 1.0, limit=21)
    assert [len(j) for j in judged] == [2, 6, 14, 20]  # the step of 8 units shrinks to the 3 that fit, then stop
    assert len(found.excluded) == 20 and found.comparison.drop_pp == pytest.approx(4.8)
    found, judged = _search(lambda excluded: 5.0, units, 1.0, max_attempts=12)  # nothing ever helps
    assert 1 < len(judged) <= 12 and not found.excluded and found.model is None
    assert len(judged[-1]) == 80  # the last resort: every unit at once


def test_the_probe_shrinks_with_the_input() -> None:
    assert probe_samples(np.zeros((64, 3, 224, 224), np.float32)) == PROBE_SAMPLES
    assert probe_samples(np.zeros((16, 3, 640, 640), np.float32)) < 8  # a 640x640 image: ~8 of 224x224
    assert probe_samples(np.zeros((16, 3, 2048, 2048), np.float32)) == MIN_PROBE_SAMPLES
    assert probe_samples(np.zeros((10, 1, 32, 32), np.float32)) == 10  # never more than there are
    assert probe_samples({"a": np.zeros((64, 3, 640, 640), np.float32), "b": np.zeros((64, 4), np.float32)}) < 8


def test_the_table_names_each_kept_unit_and_the_drop_its_step_removed() -> None:
    ranking = [(("conv3", "conv2"), 0.9), (("fc",), 0.06), (("conv1",), 0.04)]
    attempts = [{"nodes": ["conv3", "conv2"], "kept": True, "drop_removed_pp": 41.5, "drop_pp": 0.5}]
    with console.err.capture() as captured:
        print_table(ranking, ["conv3", "conv2"], rows=1, attempts=attempts)
    text = captured.get()
    assert "conv3, conv2" in text and "90.0 %" in text and "41.50 pp removed" in text
    assert "fc" not in text and "2 less sensitive unit(s) not shown" in text
    with console.err.capture() as captured:
        print_table(ranking, ["conv1"])  # as the INT8 pass calls it: a kept unit is shown even below the rows
    assert "conv1" in captured.get() and "yes" in captured.get()
