"""The timing loop and the statistics reported from it.

Warm-up calls are run and thrown away (first calls pay for allocation, kernel selection and caches); then
each call is timed on its own with a monotonic clock, so percentiles describe single requests, not averages.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import numpy as np

from trtpipe.bench.stability import MIN_ROUNDS


@dataclass(frozen=True)
class LatencyStats:
    iters: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    throughput: float  # items per second at the median latency

    @classmethod
    def from_samples(cls, samples_ms: np.ndarray, batch: int) -> LatencyStats:
        p50, p90, p99 = np.percentile(samples_ms, [50, 90, 99])
        return cls(
            iters=len(samples_ms), p50_ms=float(p50), p90_ms=float(p90), p99_ms=float(p99),
            mean_ms=float(samples_ms.mean()), std_ms=float(samples_ms.std()),
            min_ms=float(samples_ms.min()), max_ms=float(samples_ms.max()),
            throughput=float(batch * 1000.0 / p50) if p50 > 0 else float("inf"),
        )

    @classmethod
    def from_rounds(cls, rounds: list[np.ndarray], batch: int) -> LatencyStats:
        """The statistics of every round's samples pooled, except the p50 (and the throughput at it): with
        enough rounds (stability.MIN_ROUNDS), the median of the rounds' p50s, the figure that speedups pair round by
        round and that a burst hitting a minority of rounds cannot swing."""
        pooled = cls.from_samples(np.concatenate(rounds), batch)
        if len(rounds) < MIN_ROUNDS:
            return pooled
        p50 = float(np.median([np.median(r) for r in rounds]))
        return replace(pooled, p50_ms=p50, throughput=float(batch * 1000.0 / p50) if p50 > 0 else float("inf"))

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


SETTLE_STEP_S = 0.01
SETTLE_MAX_S = 0.3
SETTLE_BUSY = 0.1  # this process is idle where its threads used under a tenth of a core over a step


def settle(*, step_s: float = SETTLE_STEP_S, max_s: float = SETTLE_MAX_S) -> float:
    """Wait, up to ``max_s``, until no thread of this process is busy; the seconds waited.

    A runtime's pool threads spin on after a call returns, waiting for more work (ONNX Runtime's for 50-90 ms on a
    2-core Xeon, 2026-12-01): a variant timed right after another then shares the cores with the other's spinning
    threads. ResNet-18's INT8 file run right after its FP32 file took 20-25 ms where it takes 7-8 ms after itself or
    after a 100 ms pause. Rounds taken in turn across variants (rounds.py) start only once those threads sleep, so a
    round times its own variant, not the one before it. Read from the process's CPU time (all threads), so it holds
    for any runtime's pool, and returns after one step where nothing spins."""
    started = time.perf_counter()
    while time.perf_counter() - started < max_s:
        cpu, wall = time.process_time(), time.perf_counter()
        time.sleep(step_s)
        if time.process_time() - cpu < SETTLE_BUSY * (time.perf_counter() - wall):
            break
    return time.perf_counter() - started


def measure(
    call: Callable[[], object],
    *,
    warmup: int,
    iters: int | None,
    duration_s: float | None,
    min_iters: int = 5,
    max_iters: int = 100_000,
    on_iteration: Callable[[], None] | None = None,
) -> np.ndarray:
    """Time ``call``: exactly ``iters`` times, or for ``duration_s`` seconds (at least ``min_iters``)."""
    if iters is None and duration_s is None:
        raise ValueError("give iters or duration_s")
    for _ in range(warmup):
        call()
    samples: list[float] = []
    deadline = time.perf_counter() + (duration_s or 0.0)
    while True:
        start = time.perf_counter_ns()
        call()
        samples.append((time.perf_counter_ns() - start) / 1e6)
        if on_iteration:
            on_iteration()
        done = len(samples)
        if iters is not None:
            if done >= iters:
                break
        elif (done >= min_iters and time.perf_counter() >= deadline) or done >= max_iters:
            break
    return np.asarray(samples)
