"""Figures over timed rounds: medians with their intervals, speedups paired round by round, and the unstable flag."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trtpipe.bench.rounds import turn_order
from trtpipe.bench.rows import BenchRow
from trtpipe.bench.stability import (
    ADVICE,
    REACH,
    Ratio,
    load_reason,
    median_over_rounds,
    row_instability,
    row_verdict,
    verdict_reasons,
    verdict_word,
)
from trtpipe.bench.standing import describe_pytorch, pytorch_standing
from trtpipe.bench.timing import LatencyStats
from trtpipe.intervals import Interval


def test_a_burst_on_a_minority_of_rounds_moves_neither_the_median_nor_the_flag() -> None:
    """Three stalled rounds of twenty (a neighbour's burst) leave the median where the quiet rounds put it, its
    interval narrow and the row steady; rounds split between two speeds are flagged, with what to do."""
    quiet = [1.0 + 0.01 * (i % 5) for i in range(20)]
    hit = [*quiet[:17], 40.0, 55.0, 80.0]
    p50, interval = median_over_rounds(hit) or (0.0, None)
    assert p50 == pytest.approx(np.median([*quiet[:17], 1.04, 1.04, 1.04]), rel=0.02) and interval is not None
    assert interval.units == 20 and interval.high < 1.1 and row_instability(p50, interval) is None
    split = quiet[:10] + [9.0 + 0.1 * i for i in range(10)]
    p50, interval = median_over_rounds(split) or (0.0, None)
    reason = row_instability(p50, interval)
    assert reason is not None and reason.endswith(ADVICE) and f"above {100 * REACH:.0f} %" in reason
    assert median_over_rounds([1.0, 2.0]) is None and row_instability(1.0, None) is None  # two rounds: no interval


def test_a_speedup_pairs_the_rounds_so_a_burst_on_both_rows_cancels() -> None:
    """Rows slowed alike in the same rounds keep their ratio: the paired median and a narrow interval; with fewer
    than three rounds the speedup is the ratio of the p50s, without an interval."""
    slowdown = [1.0, 1.0, 6.0, 1.0, 3.0, 1.0, 1.0, 9.0, 1.0, 1.0]
    reference = [10.0 * s for s in slowdown]
    ours = [2.0 * s for s in slowdown]
    ratio = Ratio(reference, ours, float(np.median(reference)), float(np.median(ours)))
    assert ratio.value == pytest.approx(5.0) and ratio.interval is not None
    assert ratio.interval.low == pytest.approx(5.0) and ratio.interval.high == pytest.approx(5.0)
    assert ratio.unstable is None and ratio.ratios is not None and len(ratio.ratios) == 10
    # The burst on one row only, half the rounds: the figure is flagged, never stated with confidence.
    alone = Ratio([10.0 * s for s in slowdown[:5]] + [10.0] * 5, [2.0] * 10, 10.0, 2.0)
    assert alone.interval is not None and alone.unstable is not None and alone.unstable.startswith("unstable:")
    few = Ratio([10.0, 12.0], [2.0, 2.0], 11.0, 2.0)
    assert few.value == pytest.approx(5.5) and few.interval is None and few.ratios is None
    assert Ratio([10.0, 12.0, 11.0], [2.0, 2.0], 11.0, 2.0).interval is None  # not the same rounds: not paired


def test_the_headline_and_the_table_give_the_same_speedup() -> None:
    """The speedup column and the headline against PyTorch are one statistic: the same figure, the same interval."""
    from trtpipe.bench.runner import _speedups

    def row(variant: str, rounds: list[float], **extra: object) -> BenchRow:
        p50 = float(np.median(rounds))
        latency = LatencyStats(iters=len(rounds), p50_ms=p50, p90_ms=p50, p99_ms=p50, mean_ms=p50, std_ms=0.0,
                               min_ms=min(rounds), max_ms=max(rounds), throughput=1000 / p50)
        return BenchRow(variant=variant, backend=extra.pop("backend", "onnxruntime"), precision="fp32", device="cpu",
                        batch=1, latency=latency, round_p50_ms=rounds, **extra)  # type: ignore[arg-type]

    # PyTorch stalls in two rounds of five that ONNX Runtime does not share: the pooled p50 ratio and the paired
    # median differ, and both the table and the headline print the paired one.
    torch = row("pytorch-fp32", [0.9, 0.9, 400.0, 0.95, 300.0], backend="torch", reference=True)
    ours = row("onnxruntime-fp32 (m)", [0.13, 0.14, 0.13, 0.13, 0.23], artifact="m.onnx")
    rows = [torch, ours]
    _speedups(rows)
    [entry] = pytorch_standing([r.to_dict() for r in rows])
    assert entry["ratio"] == ours.speedup_vs_torch_fp32 and ours.speedup_interval is not None
    assert Interval.from_dict(entry["interval"]) == ours.speedup_interval
    assert torch.speedup_vs_torch_fp32 == 1.0 and torch.speedup_interval is None
    line = describe_pytorch(entry)
    assert f"runs at {ours.speedup_vs_torch_fp32:.2f}x (median of 5 paired rounds, 95 % interval" in line
    assert "unstable: its 5 paired rounds disagree" in line and ADVICE in line


def _rounds_row(variant: str, rounds: list[float], **extra: object) -> BenchRow:
    p50 = float(np.median(rounds))
    latency = LatencyStats(iters=len(rounds), p50_ms=p50, p90_ms=p50, p99_ms=p50, mean_ms=p50, std_ms=0.0,
                           min_ms=min(rounds), max_ms=max(rounds), throughput=1000 / p50)
    return BenchRow(variant=variant, backend=extra.pop("backend", "onnxruntime"), precision="fp32", device="cpu",
                    batch=1, latency=latency, round_p50_ms=rounds, **extra)  # type: ignore[arg-type]


def test_a_rows_verdict_counts_its_speedups_interval_and_the_other_load() -> None:
    """One verdict per row: a steady p50 with a speedup whose interval reaches far (209.6x, 12.1-1574x) is unstable,
    and so is every row of a run beside other processes' work, however narrow its intervals; the headline carries
    the same reasons, the machine-wide one once."""
    narrow = Interval(low=0.99, high=1.01, units=20, method="bootstrap")
    assert row_verdict(1.0, narrow, 8.87, Interval(low=8.60, high=9.19, units=20, method="bootstrap"), 0.02) is None
    wide = row_verdict(1.0, narrow, 209.6, Interval(low=12.1, high=1574.0, units=20, method="bootstrap"), None)
    assert wide is not None and "its speedup's 95 % interval, 12.1-1574x over 20 paired rounds" in wide
    assert wide.endswith(ADVICE)
    busy = row_verdict(1.0, narrow, 8.87, Interval(low=8.60, high=9.19, units=20, method="bootstrap"), 0.85)
    assert busy is not None and "other processes used 85 %" in busy and verdict_reasons(busy) == [load_reason(0.85)]
    assert verdict_word(busy) == "unstable" and verdict_word(None) == "steady"

    torch = _rounds_row("pytorch-fp32", [1.0 + 0.001 * i for i in range(10)], backend="torch", reference=True)
    ours = _rounds_row("onnxruntime-int8-cpu", [0.1 + 0.0001 * i for i in range(10)], artifact="m.onnx")
    for row in (torch, ours):
        row.unstable = row_verdict(row.p50_ms, None, None, None, 0.85)
    [entry] = pytorch_standing([r.to_dict() for r in (torch, ours)])
    assert entry["unstable"] is not None and entry["unstable"].count("other processes used 85 %") == 1


def test_rows_keep_their_round_figures_in_json_and_old_results_still_load() -> None:
    latency = LatencyStats(iters=3, p50_ms=1.0, p90_ms=1.1, p99_ms=1.2, mean_ms=1.0, std_ms=0.1, min_ms=0.9,
                           max_ms=1.3, throughput=1000.0)
    interval = Interval(low=0.95, high=1.05, units=3, method="bootstrap")
    row = BenchRow(variant="v", backend="onnxruntime", precision="fp32", device="cpu", batch=1,  # type: ignore[arg-type]
                   latency=latency, round_p50_ms=[1.0, 0.95, 1.05], round_p99_ms=[1.2, 1.1, 1.3],
                   p50_interval=interval, tail_ms=1.2, tail_interval=interval, speedup_interval=interval,
                   unstable="its rounds disagree")
    data = json.loads(json.dumps(row.to_dict()))
    assert data["p50_interval"] == interval.to_dict() and data["tail_ms"] == 1.2
    back = BenchRow.from_dict(data)
    assert back.p50_interval == interval and back.speedup_interval == interval and back.unstable == row.unstable
    old = {k: v for k, v in data.items() if k not in {"round_p99_ms", "p50_interval", "tail_ms", "tail_interval",
                                                       "speedup_interval", "unstable"}}
    loaded = BenchRow.from_dict(old)
    assert loaded.p50_interval is None and loaded.tail_ms is None and loaded.unstable is None


def test_the_rounds_rotate_the_order_of_the_rows() -> None:
    """No row is always first or always after the same one."""
    orders = [turn_order(["a", "b", "c"], i) for i in range(6)]  # type: ignore[list-item]
    assert {order[0] for order in orders} == {"a", "b", "c"}
    assert {tuple(order) for order in orders} == {("a", "b", "c"), ("c", "b", "a"), ("b", "c", "a"),
                                                  ("a", "c", "b"), ("c", "a", "b"), ("b", "a", "c")}
    assert [tuple(turn_order(["a", "b"], i)) for i in range(4)] == [  # type: ignore[list-item]
        ("a", "b"), ("b", "a"), ("b", "a"), ("a", "b")]


def test_the_p50_of_many_rounds_is_the_median_of_their_p50s() -> None:
    """Twenty rounds: a round of a hundred fast runs counts as one round, not as a hundred runs."""
    rounds = [np.full(100, 1.0)] * 9 + [np.full(2, 50.0)] * 11
    stats = LatencyStats.from_rounds(rounds, batch=4)
    assert stats.p50_ms == 50.0 and stats.throughput == pytest.approx(4 * 1000 / 50.0)
    assert stats.iters == 922 and stats.min_ms == 1.0
    assert LatencyStats.from_rounds(rounds[:1] + rounds[-1:], batch=1).p50_ms == 1.0  # two rounds: pooled


def test_a_round_starts_only_once_the_threads_of_the_variant_before_it_are_idle() -> None:
    """A runtime's pool threads spin on after a call returns; a round timed then shares the cores with them (an
    INT8 file right after its FP32 file took 20-25 ms where it takes 7-8 ms alone). settle() waits while a thread of
    this process is busy, and only that long."""
    import threading
    import time

    from trtpipe.bench.timing import settle

    done = threading.Event()

    def spin() -> None:  # a pool thread spinning on after its work, here for about 0.15 s
        end = time.perf_counter() + 0.15
        while time.perf_counter() < end:
            pass
        done.set()

    thread = threading.Thread(target=spin)
    thread.start()
    settle(max_s=5.0)
    assert done.is_set()  # it returned only once the spinning thread had stopped
    thread.join()
    assert settle(max_s=5.0) < 5.0  # nothing spins: it returns without waiting out its limit
