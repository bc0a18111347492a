"""A convolution before a HardSwish on the cpu target: its pre-activation quantized over the interval HardSwish
responds to, so ONNX Runtime runs the convolution in integer, with outputs checked against the FP32 reference;
and the saturation intervals each activation type gives."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.builders import constant, conv_hardswish, conv_hardswish_ranges, cpu_optimized_ops
from tests.optimize.conftest import run
from trtpipe.optimize.int8.calibration.saturation import responsive_intervals, saturated_ranges
from trtpipe.optimize.int8.qdq.profiles import profile_for
from trtpipe.optimize.int8.qdq.quantize import quantize
from trtpipe.optimize.int8.steps.preactivations.algorithm import integer_preactivations
from trtpipe.vocab import Target

RNG = np.random.default_rng(5)


def test_the_pre_activation_range_is_narrowed_to_where_hardswish_responds() -> None:
    model = conv_hardswish(RNG)
    ranges = conv_hardswish_ranges(model, RNG)
    assert ranges["pre"][0] < -10  # what min/max saw
    narrowed = saturated_ranges(model, ranges)
    assert narrowed["pre"] == (-3.0, ranges["pre"][1])
    assert narrowed["act"] == ranges["act"]  # a convolution reads it: every value counts


def test_cpu_runs_the_convolution_before_a_hardswish_in_integer_and_stays_close_to_fp32(tmp_path) -> None:  # type: ignore[no-untyped-def]
    model = conv_hardswish(RNG)
    ranges = conv_hardswish_ranges(model, RNG)
    profile = profile_for(Target.CPU)
    assert integer_preactivations(model, profile) == ["hswish"]
    quantized = quantize(model, ranges, profile)
    # conv2 writes the graph's float output, so it runs as a float Conv on dequantized inputs either way.
    assert cpu_optimized_ops(quantized, tmp_path).count("QLinearConv") == 1
    floated = quantize(model, ranges, profile, exclude=["hswish"])
    assert cpu_optimized_ops(floated, tmp_path).count("QLinearConv") == 0  # conv1's float output: a float Conv
    x = RNG.standard_normal((1, 3, 16, 16)).astype(np.float32) * 2
    reference = run(model, x)
    error = np.abs(run(quantized, x) - reference).mean()
    assert error < 0.02 * np.abs(reference).mean(), error
    # The pre-activation's step is (max + 3) / 255, not (max + 40) / 255: what HardSwish reads, in full resolution.
    constants = {t.name: numpy_helper.to_array(t) for t in quantized.graph.initializer}
    q = next(n for n in quantized.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "pre")
    assert float(constants[q.input[1]]) == pytest.approx((ranges["pre"][1] + 3.0) / 255, rel=0.02)


@pytest.mark.parametrize("target", [Target.TENSORRT, Target.OPENVINO])
def test_other_targets_leave_hardswish_inputs_alone(target: Target) -> None:
    """TensorRT and OpenVINO fuse a HardSwish into the convolution before it and run it with a float output."""
    assert integer_preactivations(conv_hardswish(RNG), profile_for(target)) == []


def test_each_saturating_activation_gives_its_interval() -> None:
    consts = [constant(np.array(0.0), "zero"), constant(np.array(6.0), "six")]
    nodes = [helper.make_node("Relu", ["a"], ["ra"]),
             helper.make_node("HardSigmoid", ["b"], ["hb"], alpha=0.2, beta=0.5),
             helper.make_node("Clip", ["c", "zero", "six"], ["cc"]),
             helper.make_node("HardSwish", ["d"], ["hd"]), helper.make_node("Relu", ["d"], ["rd"]),
             helper.make_node("HardSwish", ["e"], ["he"]), helper.make_node("Add", ["e", "e"], ["ae"])]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4]) for n in "abcde"]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4]) for n in ("ra", "hb", "cc", "hd", "rd",
                                                                                  "he", "ae")]
    model = helper.make_model(helper.make_graph(nodes, "acts", inputs, outputs, consts))
    found = responsive_intervals(model)
    assert found["a"] == (0.0, np.inf) and found["b"] == pytest.approx((-2.5, 2.5)) and found["c"] == (0.0, 6.0)
    assert found["d"] == (-3.0, np.inf)  # a HardSwish and a Relu: the union of what they respond to
    assert "e" not in found  # an Add reads every value


def test_the_int8_pass_measures_both_and_records_its_choice(tmp_path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """Through `trtpipe optimize --target cpu`: INT8 is measured with uint8 and with float pre-activations, the
    manifest holds both figures and the decision, and the decision follows them (no task measure here: the
    outputs' cosine, within 1e-3)."""
    source, out = tmp_path / "hswish.onnx", tmp_path / "int8.onnx"
    onnx.save(conv_hardswish(RNG), source)
    result = run_cli("optimize", source, "-o", out, "--precision", "int8", "--target", "cpu", "--calib", "random",
                     "--calib-samples", "16")
    assert result.exit_code == 0, result.output
    section = json.loads(out.with_suffix(".manifest.json").read_text())["int8"]
    record = section["integer_preactivations"]
    assert record["activations"] == 1 and record["uint8"] in ([], ["hswish"])
    measured = {(entry["uint8_from"], entry["uint8_to"]): entry["cosine"] for entry in record["measured"]}
    assert set(measured) == {(0, 0), (0, 1)}
    kept = bool(record["uint8"])
    assert kept == (measured[(0, 1)] >= measured[(0, 0)] - 1e-3)
    step = next(s for s in section["recipe"]["measured"] if s["step"].startswith("uint8 pre-activations"))
    assert step["kept"] == kept and step["cosine"] == measured[(0, 1) if kept else (0, 0)]
    assert ("float-preactivation" in section["placement"]) == (not kept)


@pytest.mark.parametrize(("count", "costly", "expected"), [
    (94, set(), (0, 94)),  # nothing costs: all of them
    (94, set(range(47, 94)), (0, 47)),  # the second half costs: the run from the first
    (94, {0, 1, 2}, (3, 94)),  # the stem costs (PP-PicoDet): the run to the last
    (94, {0, 93}, (0, 0)),  # both ends cost: no run from either end avoids them, so none (all float)
    (94, {30, 80}, (0, 30)),  # the longer of the two runs (from the first: 30; to the last: 13)
    (3, {1}, (2, 3)),
])
def test_the_longest_run_within_the_tolerance_is_kept(count: int, costly: set[int],
                                                      expected: tuple[int, int]) -> None:
    """Each pre-activation in ``costly`` costs 3 points in uint8, the others nothing: the run chosen avoids them,
    is about as long as the longest such run from either end, and takes a handful of measurements."""
    from trtpipe.comparison import Comparison
    from trtpipe.optimize.int8.steps.preactivations.algorithm import longest_run

    def figure(run: slice) -> Comparison:
        agreement = 0.98 - 0.03 * len(costly & set(range(count)[run]))
        return Comparison(0.0, 0.0, 0.0, 0.99, None, 1.0, 16, agreement=agreement, agreement_name="mAP")

    calls: list[slice] = []
    chosen, _ = longest_run(count, lambda run: calls.append(run) or figure(run), figure(slice(0, count)),
                                figure(slice(0, 0)))
    assert not costly & set(range(count)[chosen])
    length, best = chosen.stop - chosen.start, expected[1] - expected[0]
    assert best - max(1, count // 8) <= length <= best
    assert len(calls) <= 2 * 4


def _costs(names: list[str], costly: set[str]):  # type: ignore[no-untyped-def]
    """A measure where each pre-activation in ``costly`` costs 3 points in uint8 and the others nothing."""
    from trtpipe.comparison import Comparison

    def figure(uint8: list[str]) -> Comparison:
        agreement = 0.98 - 0.03 * len(costly & set(uint8))
        return Comparison(0.0, 0.0, 0.0, 0.99, None, 1.0, 16, agreement=agreement, agreement_name="mAP")
    return figure


def test_pre_activations_without_a_channel_gain_stay_uint8_when_the_gained_ones_carry_the_cost() -> None:
    """PP-PicoDet's pattern: the costly pre-activations are among those a channel gain reads (here the first
    stage's, which a run from either end cannot isolate from the cheap ones around them): every other one stays
    uint8 and the search runs over the gained ones only."""
    from trtpipe.optimize.int8.steps.preactivations.algorithm import choose

    names = [f"hs{i}" for i in range(94)]
    gains = [n for i, n in enumerate(names) if i % 3 == 0]  # every third: pointwise before depthwise
    costly = {"hs0", "hs3", "hs6"}
    figure = _costs(names, costly)
    calls: list[list[str]] = []
    chosen, tried = choose(names, gains, lambda uint8: calls.append(uint8) or figure(uint8), figure(names),
                           figure([]))
    assert not costly & set(chosen)
    assert set(names) - set(gains) <= set(chosen)  # all 62 without a gain
    assert len(set(chosen) & set(gains)) >= len(gains) - 3 - max(1, len(gains) // 8)
    assert chosen == [n for n in names if n in set(chosen)]  # graph order
    assert len(calls) <= 1 + 2 * 4 and {m.over for m in tried} == {"all", "gained"}


def test_without_gains_or_when_the_others_cost_too_the_search_is_over_all_of_them() -> None:
    from trtpipe.optimize.int8.steps.preactivations.algorithm import choose

    names = [f"hs{i}" for i in range(40)]
    costly = {"hs1", "hs2"}  # not gained: the others alone cost 6 points, so the run to the last is searched
    figure = _costs(names, costly)
    for gains in ([], ["hs10", "hs20"]):
        chosen, tried = choose(names, gains, figure, figure(names), figure([]))
        assert not costly & set(chosen) and chosen == names[len(names) - len(chosen):]  # the run to the last
        assert len(chosen) >= 40 - 3 - 5
        assert sum(m.over == "gained" for m in tried) == (1 if gains else 0)  # the others alone, measured once


def test_gained_finds_the_activations_a_channel_gain_reads() -> None:
    from trtpipe.optimize.graph.gains import GAIN_SUFFIX
    from trtpipe.optimize.int8.steps.preactivations.algorithm import gained

    consts = [constant(np.ones((1, 4, 1, 1)), "g")]
    nodes = [helper.make_node("HardSwish", ["a"], ["ha"], name="hs_a"),
             helper.make_node("HardSwish", ["b"], ["hb"], name="hs_b"),
             helper.make_node("Mul", ["ha", "g"], ["ga"], name=f"ha{GAIN_SUFFIX}"),
             helper.make_node("Mul", ["hb", "g"], ["gb"], name="some_other_mul")]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4, 2, 2]) for n in "ab"]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4, 2, 2]) for n in ("ga", "gb")]
    model = helper.make_model(helper.make_graph(nodes, "gains", inputs, outputs, consts))
    assert gained(model, ["hs_a", "hs_b"]) == ["hs_a"]
    assert gained(model, ["hs_b"]) == []


def test_the_float_preactivations_stay_in_the_manifests_placement_record(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """With no tolerance at all the pass keeps the pre-activation float; the manifest's placement record names it
    beside the rules' own entries (which are written from the final model at the end of the pass)."""
    from trtpipe.optimize.int8.steps.preactivations import algorithm as preactivations
    from trtpipe.optimize.options import OptimizeOptions
    from trtpipe.optimize.stage import optimize
    from trtpipe.vocab import Precision, Target

    monkeypatch.setattr(preactivations, "TOLERANCE_PP", -1.0)
    monkeypatch.setattr(preactivations, "COSINE_TOLERANCE", -1.0)
    source, out = tmp_path / "hswish.onnx", tmp_path / "int8.onnx"
    onnx.save(conv_hardswish(RNG), source)
    optimize(source, out, OptimizeOptions(precision=Precision.INT8, target=Target.CPU, calib="random",
                                          calib_samples=16))
    section = json.loads(out.with_suffix(".manifest.json").read_text())["int8"]
    assert section["integer_preactivations"]["uint8"] == []
    assert section["placement"]["float-preactivation"]["nodes"] == ["hswish"]
