"""Selection: the fastest (runtime, artifact) pair within every budget, and the batch advice within them."""

from __future__ import annotations

from dataclasses import replace

from trtpipe.bench.rows import BenchRow
from trtpipe.bench.timing import LatencyStats
from trtpipe.intervals import Interval, wilson
from trtpipe.pipeline.select import accuracy_drop_pp, batch_advice, choose, drop_bounds_pp, drop_words, outside_limits
from trtpipe.vocab import BackendKind, Device, Precision


def _row(variant: str, backend: str, batch: int, p50: float, memory: float, *, device: str = "cpu") -> BenchRow:
    latency = LatencyStats(iters=10, p50_ms=p50, p90_ms=p50, p99_ms=p50 * 1.2, mean_ms=p50, std_ms=0.0, min_ms=p50,
                           max_ms=p50, throughput=batch * 1000 / p50)
    return BenchRow(variant=variant, backend=BackendKind(backend), precision=Precision.INT8, device=Device(device),
                    batch=batch, latency=latency, artifact=f"models/{variant}/1/model.onnx", top1_agreement=0.99,
                    host_memory_mb=memory if device == "cpu" else 50.0,
                    device_memory_mb=memory if device == "cuda" else None)


ROWS = [
    _row("reference", "torch", 1, 60.0, 600.0),
    _row("int8 on onnxruntime", "onnxruntime", 1, 14.0, 200.0),
    _row("int8 on openvino", "openvino", 1, 12.0, 400.0),
    _row("int8 on openvino", "openvino", 8, 80.0, 900.0),
    _row("int8 on openvino", "openvino", 32, 300.0, 2500.0),
]
ROWS[0].precision = "fp32"
ROWS[0].artifact = None


def test_the_fastest_pair_wins_and_its_runtime_is_named() -> None:
    choice = choose(ROWS, batch=1, latency_budget_ms=None, max_accuracy_drop=None)
    assert choice is not None and (choice.variant, choice.runtime) == ("int8 on openvino", "openvino")


def test_a_memory_budget_rejects_the_pair_that_needs_more_and_says_so() -> None:
    choice = choose(ROWS, batch=1, latency_budget_ms=None, max_accuracy_drop=None, memory_budget_mb=300)
    assert choice is not None and (choice.variant, choice.runtime) == ("int8 on onnxruntime", "onnxruntime")
    assert "200 MB within 300" in choice.reason
    none = choose(ROWS, batch=1, latency_budget_ms=None, max_accuracy_drop=None, memory_budget_mb=100)
    assert none is not None and none.artifact is None and "needs 400 MB > 100" in none.reason


def test_batch_advice_respects_the_memory_budget_as_well_as_the_latency_budget() -> None:
    assert batch_advice(ROWS, "int8 on openvino", None)["batch"] == 32  # type: ignore[index]
    assert batch_advice(ROWS, "int8 on openvino", None, memory_budget_mb=1000)["batch"] == 8  # type: ignore[index]
    advice = batch_advice(ROWS, "int8 on openvino", 50.0, memory_budget_mb=1000)
    assert advice is not None and advice["batch"] == 1 and advice["memory_mb"] == 400.0
    advice = batch_advice(ROWS, "int8 on openvino", None, memory_budget_mb=10)
    assert advice is not None and advice["batch"] is None and "memory within 10" in advice["reason"]


def test_a_gpu_row_is_judged_by_its_device_memory() -> None:
    rows = [_row("engine", "tensorrt", 1, 1.0, 3000.0, device="cuda"), _row("onnx", "onnxruntime", 1, 2.0, 100.0)]
    choice = choose(rows, batch=1, latency_budget_ms=None, max_accuracy_drop=None, memory_budget_mb=2000)
    assert choice is not None and choice.variant == "onnx"


def test_batch_advice_says_how_many_instances_fit_and_how_to_check_they_pay() -> None:
    rows = [_row("fp16 on cuda", "onnxruntime", 1, 1.0, 700.0, device="cuda"),
            _row("fp16 on cuda", "onnxruntime", 8, 2.0, 900.0, device="cuda")]
    advice = batch_advice(rows, "fp16 on cuda", None, memory_budget_mb=4000)
    assert advice is not None and advice["batch"] == 8 and advice["instances_fit"] == 4
    assert "4 instances at that batch fit in the 4000 MB device budget (900 MB each)" in advice["reason"]
    assert "--instances 4" in advice["reason"] and "loadtest --concurrency 1,8,32" in advice["reason"]
    assert batch_advice(rows, "fp16 on cuda", None)["instances_fit"] is None  # type: ignore[index]


# --- limits judged on intervals (issue 47): noise neither passes nor fails a variant -------------------------------

def _judged(variant: str, p50: float, *, tail: tuple[float, float, float] | None = None,
            agreement: tuple[int, int] | None = None, simulated: bool = False) -> BenchRow:
    """A row with the robust figures bench writes: ``tail`` (tail_ms, its interval's low and high over 10 rounds)
    and ``agreement`` (agreeing samples of all, with its Wilson interval)."""
    row = _row(variant, "onnxruntime", 1, p50, 100.0)
    row.latency = replace(row.latency, p99_ms=50.0)  # one burst in one round: far over any budget here
    row.simulated = simulated
    if tail is not None:
        row.tail_ms, row.tail_interval = tail[0], Interval(tail[1], tail[2], 10, "bootstrap")
    if agreement is not None:
        row.agreement = row.top1_agreement = agreement[0] / agreement[1]
        row.agreement_interval = wilson(*agreement)
    return row


def test_the_latency_budget_is_judged_on_the_tail_interval_not_on_a_burst() -> None:
    """Met when the tail's interval is within the budget (a burst's p99 of 50 ms does not count), broken when its
    low end is over it; the line names the statistic."""
    rows = [ROWS[0], _judged("steady", 1.0, tail=(1.5, 1.4, 1.7)), _judged("slow", 0.5, tail=(3.0, 2.6, 3.5))]
    choice = choose(rows, batch=1, latency_budget_ms=2.0, max_accuracy_drop=None)
    assert choice is not None and choice.status == "chosen" and choice.variant == "steady"
    assert "p99 tail 1.50 ms (95 % CI 1.40-1.70 ms over 10 rounds) within 2.0 ms" in choice.reason
    assert "not the faster" not in choice.reason  # slow certainly breaks the budget: no doubt to report
    assert outside_limits(rows, batch=1, latency_budget_ms=2.0, max_accuracy_drop=None) == {
        "slow": "p99 tail 3.00 ms (95 % CI 2.60-3.50 ms over 10 rounds) > 2.0 ms"}


def test_a_tail_interval_that_straddles_the_budget_is_too_noisy_to_decide() -> None:
    rows = [ROWS[0], _judged("noisy", 1.0, tail=(1.9, 1.2, 4.0))]
    choice = choose(rows, batch=1, latency_budget_ms=2.0, max_accuracy_drop=None)
    assert choice is not None and choice.status == "undecided" and choice.artifact is None
    assert choice.undecided == ("latency",) and "straddles 2.0 ms: too noisy to decide" in choice.reason
    assert outside_limits(rows, batch=1, latency_budget_ms=2.0, max_accuracy_drop=None) == {}  # not marked broken
    # Beside a slower variant that meets it, the slower one is chosen, and the faster one's doubt is said.
    rows.append(_judged("steady", 1.5, tail=(1.6, 1.5, 1.7)))
    choice = choose(rows, batch=1, latency_budget_ms=2.0, max_accuracy_drop=None)
    assert choice is not None and choice.variant == "steady" and choice.undecided == ("latency",)
    assert "not the faster noisy: p99 tail 1.90 ms" in choice.reason


def test_a_bench_json_without_intervals_is_judged_on_its_p99_and_says_so() -> None:
    choice = choose([ROWS[0], _judged("old", 1.0)], batch=1, latency_budget_ms=2.0, max_accuracy_drop=None)
    assert choice is not None and choice.status == "none"
    assert "old p99 50.00 ms > 2.0 ms (the p99 of every run, no tail interval: one burst can" in choice.reason


def test_the_accuracy_limit_is_decided_on_the_point_drop_and_claimed_by_its_interval() -> None:
    """Decide by expected value, claim by interval (as optimize's budget and step rule). 847 of 847 agreeing: within
    0.5 pp even at the interval's upper bound (0.45 pp); 32 of 32: no drop on the best estimate, so within and the
    fastest is chosen, but its interval reaches 10.7 pp: said undecided (amber), with about how many samples would
    decide; 30 of 32: 6.25 pp on the best estimate, over the limit."""
    within, broken, few = (_judged(name, p50, agreement=counts) for name, p50, counts in
                           (("within", 3.0, (847, 847)), ("broken", 1.0, (30, 32)), ("few", 2.0, (32, 32))))
    choice = choose([ROWS[0], within, broken, few], batch=1, latency_budget_ms=None, max_accuracy_drop=0.5)
    assert choice is not None and choice.variant == "few" and choice.status == "chosen"
    assert choice.undecided == ("accuracy",)  # chosen on the best estimate, said in amber
    assert "UNDECIDED: loses nothing (drop 95 % CI +0.00 to +10.72 pp on 32 samples): within 0.5 pp on the best " \
           "estimate, undecided: the interval straddles 0.5 pp, too few samples to be sure (about 765 would decide)" \
           in choice.reason
    sure = choose([ROWS[0], within, broken], batch=1, latency_budget_ms=None, max_accuracy_drop=0.5)
    assert sure is not None and sure.variant == "within" and sure.undecided == ()
    assert "loses nothing (drop 95 % CI +0.00 to +0.45 pp on 847 samples), at most 0.45 pp: within 0.5 pp" \
        in sure.reason
    assert choose([ROWS[0], broken], batch=1, latency_budget_ms=None, max_accuracy_drop=0.5).status == "none"  # type: ignore[union-attr]
    # over on the best estimate, though the interval reaches below the limit: not chosen, and the doubt is said
    one_lost = _judged("one-lost", 1.0, agreement=(31, 32))
    choice = choose([ROWS[0], one_lost, within], batch=1, latency_budget_ms=None, max_accuracy_drop=1.0)
    assert choice is not None and choice.variant == "within"
    assert outside_limits([ROWS[0], one_lost], batch=1, latency_budget_ms=None, max_accuracy_drop=1.0) == {
        "one-lost": "loses 3.12 pp (drop 95 % CI +0.55 to +15.74 pp on 32 samples): > 1.0 pp on the best estimate, "
                    "undecided: the interval straddles 1.0 pp, too few samples to be sure (about 442 would decide)"}


def test_with_labels_the_drop_is_bounded_by_the_disagreement_too() -> None:
    """A variant that gains accuracy reads as a gain; its drop's upper bound is the lower of the accuracy interval's
    and the disagreement's (it cannot lose more answers than it changes)."""
    row = _judged("int8", 1.0, agreement=(845, 847))
    row.top1_accuracy, row.reference_accuracy = 843 / 847, 841 / 847
    row.accuracy_interval = wilson(843, 847)
    assert drop_words(accuracy_drop_pp(row) or 0.0) == "gains 0.24 pp"
    low, high, samples = drop_bounds_pp(row)  # type: ignore[misc]
    assert samples == 847 and round(high, 2) == 0.50 and round(low, 2) == -0.52  # the accuracy interval's
    same = _judged("int8", 1.0, agreement=(847, 847))  # every answer kept: it cannot have lost any
    same.top1_accuracy = same.reference_accuracy = 841 / 847
    same.accuracy_interval = wilson(841, 847)
    assert round(drop_bounds_pp(same)[1], 2) == 0.45  # type: ignore[index]  # not 0.83 from the accuracy interval
    assert drop_words(0.5) == "loses 0.50 pp" and drop_words(0.0) == "loses nothing"


def test_a_simulation_is_never_a_latency_candidate() -> None:
    rows = [ROWS[0], _judged("int8-trtsim", 0.1, tail=(0.2, 0.1, 0.3), simulated=True),
            _judged("int8", 1.0, tail=(1.0, 0.9, 1.1))]
    choice = choose(rows, batch=1, latency_budget_ms=2.0, max_accuracy_drop=None)
    assert choice is not None and choice.variant == "int8" and "among 1 of 1 variants" in choice.reason


def test_how_to_decide_names_the_command_that_measures_again() -> None:
    from trtpipe.pipeline.config import load_pipeline
    from trtpipe.pipeline.demo import PIPELINES_DIR
    from trtpipe.pipeline.run import how_to_decide

    pipeline = load_pipeline(PIPELINES_DIR / "digits.toml")
    latency = how_to_decide(("latency",), pipeline)
    assert f"`trtpipe run {PIPELINES_DIR / 'digits.toml'} --rebench --set bench.duration=10`" in latency
    assert "quieter machine" in latency and "samples" not in latency
    assert "too few to decide on accuracy" in how_to_decide(("accuracy",), pipeline)


def test_when_latency_alone_rules_every_variant_out_the_line_says_so_first() -> None:
    from trtpipe.pipeline.config import load_pipeline
    from trtpipe.pipeline.demo import PIPELINES_DIR
    from trtpipe.pipeline.run import over_budget

    rows = [ROWS[0], _judged("a", 1.0, tail=(20.0, 17.0, 23.0)), _judged("b", 2.0, tail=(30.0, 28.0, 33.0))]
    choice = choose(rows, batch=1, latency_budget_ms=2.0, max_accuracy_drop=None)
    assert choice is not None and choice.status == "none" and choice.over == ("latency",)
    assert choice.reason.startswith("no variant meets the budget: every variant's latency is over the 2.0 ms budget, "
                                    "the lowest p99 tail 20.00 ms (a): this CPU, with what else runs on it, does not "
                                    "hold that budget; a p99 tail 20.00 ms")
    line = over_budget(load_pipeline(PIPELINES_DIR / "digits.toml"))
    assert "--rebench" in line and "--latency-budget-ms" in line
