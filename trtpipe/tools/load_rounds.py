"""How far a load test's figures can be trusted: each level's requests split into rounds by when they finished, the
throughput and the p99 of each round, and their medians with 95 % bootstrap intervals over the rounds, flagged as
bench flags a row (trtpipe/bench/stability.py): unstable when an interval reaches more than stability.REACH from its
figure, or when other processes (not this client, not the server) took more than other_load.BUSY_SHARE of the CPU.

A level of 10 s is 5 rounds of 2 s: a burst of other work that lands on one round moves neither median, and the
interval says how far the rounds let them move.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trtpipe.bench.stability import ADVICE, MIN_ROUNDS, REACH, is_unstable, load_reason, reach
from trtpipe.intervals import Interval, bootstrap_values

ROUNDS = 5


def round_figures(finished: list[tuple[float, float]], elapsed: float, rounds: int = ROUNDS) -> dict[str, Any]:
    """From each request's (seconds after the level began when it finished, latency in ms): each round's throughput
    and p99, their medians (``round_throughput``, ``tail_ms``) and 95 % intervals; {} with too few rounds filled."""
    if elapsed <= 0 or not finished:
        return {}
    window = elapsed / rounds
    counts: list[int] = [0] * rounds
    latencies: list[list[float]] = [[] for _ in range(rounds)]
    for done, latency in finished:
        index = min(int(done / window), rounds - 1)
        counts[index] += 1
        latencies[index].append(latency)
    filled = [i for i in range(rounds) if counts[i]]
    if len(filled) < MIN_ROUNDS:
        return {}
    throughputs = np.asarray([counts[i] / window for i in range(rounds)])
    tails = np.asarray([np.percentile(latencies[i], 99) for i in filled])
    throughput_interval, tail_interval = bootstrap_values(throughputs), bootstrap_values(tails)
    return {"rounds": rounds, "round_throughput": float(np.median(throughputs)),
            "throughput_interval": throughput_interval.to_dict(), "tail_ms": float(np.median(tails)),
            "tail_interval": tail_interval.to_dict()}


def verdict(figures: dict[str, Any], other_share: float | None) -> str | None:
    """The level's one flag, as bench's row verdict: None when steady, else every reason and what to do."""
    reasons = []
    for key, interval_key, what, unit in (("round_throughput", "throughput_interval", "throughput", "req/s"),
                                          ("tail_ms", "tail_interval", "p99", "ms")):
        if figures.get(interval_key):
            interval = Interval.from_dict(figures[interval_key])
            if is_unstable(figures[key], interval):
                reasons.append(f"its {interval.units} rounds' {what} disagree: the 95 % interval {interval.low:.3g}-"
                               f"{interval.high:.3g} {unit} reaches {100 * reach(figures[key], interval):.0f} % from "
                               f"{figures[key]:.3g} {unit} (above {100 * REACH:.0f} %)")
    if (load := load_reason(other_share)) is not None:
        reasons.append(load)
    return "; ".join([*reasons, ADVICE.replace("a longer --duration, --threads below the core count",
                                               "a longer --duration")]) if reasons else None


def figure(value: float, interval: dict[str, Any] | None, digits: str = ".1f") -> str:
    """``988.3 (940.1-1010)``: a figure with its interval, as the table prints it."""
    if not interval:
        return format(value, digits)
    return f"{value:{digits}} ({interval['low']:{digits}}-{interval['high']:{digits}})"
