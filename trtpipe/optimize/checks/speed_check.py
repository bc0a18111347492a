"""A short paired timing of a written file against the FP32 file on ONNX Runtime: is the INT8 file any faster?

Not a benchmark (``trtpipe bench`` is): a check that a ``cpu`` INT8 file, which exists only to be faster, is not
slower than the FP32 file it came from on the runtime it is made for. The two sessions alternate within each round
(the order flips every round), so a neighbour's load falls on both; each round's ratio is the median of a few runs
of each, and the figure is the median ratio with its bootstrap interval over rounds (intervals.py). Half the rounds
run in a second pair of sessions of the same files, so the interval holds what differs between sessions too.

Every session's pool threads stop spinning as its run returns (ONNX Runtime's ``session.force_spinning_stop``):
by default they spin on for a while, and sessions timed in turn on a few cores then steal them from each other. On
2 quiet cores (Xeon, 2026-12-01), the FP32 file of timm's ResNet-18 and its INT8 file, timed in turn, read 1.76x
(95 % 1.64-1.87x) with spinning threads, where each file alone in its process read 2.73x; with the threads stopped
they read 2.67x (2.66-2.70x): the figure a lone session sees, with an interval ten times narrower (MobileNetV2:
1.29x, 1.02-1.86x, spinning; 1.63x, 1.59-1.66x, stopped; 1.67x alone). docs/results/model-zoo.md has the table.

A sub-millisecond model is timed for at least ROUND_MS per model and round (hundreds of runs), not a fixed count:
a few runs of 0.2 ms measure the thread pool waking more than the model. Where the rounds disagree (the interval
wider than AGREED, high over low) more rounds are run, up to MAX_ROUNDS within BUDGET_S; and the line says when the
interval holds 1x (the rounds cannot tell the files apart) or stayed wide (a quiet machine, ``trtpipe bench``,
measures it better), rather than print a figure it cannot stand behind.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx

from trtpipe.intervals import Interval, bootstrap_values
from trtpipe.runtime.registry import reference_sessions

ROUNDS = 7
RUNS = 3  # at least, per model and round: the round's time is their median
ROUND_MS = 50.0  # and at least this long, so the other session's thread pool winding down weighs little
MAX_RUNS = 5000  # per model and round, for the smallest models
WARMUP = 2
AGREED = 1.15  # rounds agree when the interval's high is within 15 % of its low
MORE_ROUNDS = 4  # added at a time while they do not
MAX_ROUNDS = 23
BUDGET_S = 15.0  # the most the added rounds may take


@dataclass(frozen=True)
class SpeedCheck:
    """The candidate's speed as a multiple of the reference's (above 1: faster), over paired rounds."""

    speedup: float
    interval: Interval
    threads: int
    batch: int
    candidate_ms: float
    reference_ms: float
    runs: int = RUNS  # the fewest timed runs of a model in one round

    @property
    def slower(self) -> bool:
        """Slower than the reference beyond the noise: the whole interval below 1."""
        return self.interval.high < 1.0

    @property
    def separated(self) -> bool:
        """Whether the rounds tell the files apart: the interval does not hold 1x."""
        return not self.interval.contains(1.0)

    @property
    def agreed(self) -> bool:
        """Whether the rounds agree: the interval's high within AGREED of its low."""
        return self.interval.low > 0 and self.interval.high / self.interval.low <= AGREED

    @property
    def undecided(self) -> bool:
        """The interval holds 1.0x: these rounds cannot tell it from no faster, or slower (the figure is flagged)."""
        return self.interval.low <= 1.0 <= self.interval.high

    def line(self, candidate: str, reference: str) -> str:
        """The figure with its interval, as bench prints a speedup; flagged where the interval holds 1.0x, and said
        where the rounds disagree."""
        text = (f"{candidate} runs {self.speedup:.2f}x the speed of {reference} on ONNX Runtime here "
                f"(median of {self.interval.units} paired rounds of {self.runs}+ runs, 95 % {self.interval.low:.2f}-"
                f"{self.interval.high:.2f}x; {self.candidate_ms:.3g} vs {self.reference_ms:.3g} ms, batch "
                f"{self.batch}, {self.threads} thread{'s' if self.threads != 1 else ''})")
        if self.undecided:
            text += (f"; unstable: its interval includes 1.0x, so it may be no faster than {reference} or slower: "
                     "`trtpipe bench` both files to measure it")
        elif not self.agreed:
            spread = self.interval.high / self.interval.low
            text += (f"; the rounds disagree (the interval spans {spread:.2f}x) on this busy machine: trtpipe bench "
                     "on a quiet one measures it better")
        return text

    def to_dict(self) -> dict[str, object]:
        return {"speedup": self.speedup, "interval": self.interval.to_dict(), "threads": self.threads,
                "batch": self.batch, "candidate_ms": self.candidate_ms, "reference_ms": self.reference_ms,
                "runs_per_round": self.runs, "slower": self.slower, "separated": self.separated,
                "agreed": self.agreed, "undecided": self.undecided}


def _session(model: onnx.ModelProto | Path | object, threads: int) -> object:
    if hasattr(model, "run"):
        return model  # a session made by session() already: timed again without building it anew
    # every graph optimisation, ``threads`` threads, the pool threads stopped as each run returns (see the module)
    made: object = reference_sessions().timing_session(model, threads)  # type: ignore[arg-type]
    return made


def session(model: onnx.ModelProto | Path, threads: int) -> object:
    """The ONNX Runtime session :func:`paired_speedup` times ``model`` in; hand it back in place of the model to time
    the same model against several others without building it again."""
    return _session(model, threads)


def paired_speedup(candidate: onnx.ModelProto | Path | object, reference: onnx.ModelProto | Path | object,
                   feed: dict[str, np.ndarray],
                   *, threads: int, rounds: int = ROUNDS, runs: int = RUNS, round_ms: float = ROUND_MS,
                   max_rounds: int = MAX_ROUNDS) -> SpeedCheck:
    """How many times faster ``candidate`` runs ``feed`` than ``reference`` on ONNX Runtime's CPU provider with all
    graph optimisations and ``threads`` threads, over ``rounds`` paired rounds of at least ``runs`` runs and
    ``round_ms`` per model, and more rounds (up to ``max_rounds``) while they disagree."""
    return interleaved_speedups([candidate, reference], feed, threads=threads, rounds=rounds, runs=runs,
                                round_ms=round_ms, max_rounds=max_rounds)[0, 1]


class Speedups:
    """Every model's per-round times from one interleaved sequence; ``[a, b]`` is model a's speed as a multiple of
    model b's, from the same rounds, so the ratios of three models agree with each other (a/c = a/b x b/c round by
    round), which three separate paired sequences on a busy machine do not."""

    def __init__(self, times: list[list[float]], counts: list[int], threads: int, batch: int) -> None:
        self.times, self.counts, self.threads, self.batch = times, counts, threads, batch

    def __getitem__(self, pair: tuple[int, int]) -> SpeedCheck:
        mine, theirs = np.asarray(self.times[pair[0]]), np.asarray(self.times[pair[1]])
        ratios = theirs / mine
        return SpeedCheck(float(np.median(ratios)), _with_sessions_spread(ratios, bootstrap_values(ratios)),
                          self.threads, self.batch, float(np.median(mine)), float(np.median(theirs)),
                          min(self.counts))

    @property
    def agreed(self) -> bool:
        """Whether every pair's rounds agree (:attr:`SpeedCheck.agreed`)."""
        count = len(self.times)
        return all(self[a, b].agreed for a in range(count) for b in range(a + 1, count))


def interleaved_speedups(models: list[onnx.ModelProto | Path | object], feed: dict[str, np.ndarray], *, threads: int,
                         rounds: int = ROUNDS, runs: int = RUNS, round_ms: float = ROUND_MS,
                         max_rounds: int = MAX_ROUNDS) -> Speedups:
    """Time ``models`` in one sequence of rounds: each round runs every model in turn, the order rotated round by
    round (with two models, flipped), at least ``runs`` runs and ``round_ms`` per model, and more rounds (up to
    ``max_rounds``) while any pair's rounds disagree; :class:`Speedups` reads any pair's ratio from them."""
    pairs: list[list[object]] = []

    def sessions_of(index: int) -> list[object]:
        """The sessions of round ``index``: every other two rounds a second set, built from the same files,
        so the interval also holds how much two sessions of one file differ (memory placement, thread pools: a
        few per cent on a sub-millisecond model, which a later measurement in another process meets). A session
        handed in (:func:`session`) is used in both."""
        wanted = (index // 2) % 2
        while len(pairs) <= wanted:
            made = [_session(model, threads) for model in models]
            for session in made:
                for _ in range(WARMUP):
                    session.run(None, feed)  # type: ignore[attr-defined]
            pairs.append(made)
        return pairs[wanted]

    count = len(models)
    times: list[list[float]] = [[] for _ in models]
    counts: list[int] = []

    def timed_round(index: int) -> None:
        order = [(index + k) % count for k in range(count)]
        sessions = sessions_of(index)
        for which in order:
            sessions[which].run(None, feed)  # type: ignore[attr-defined]  # after the other session: not timed
            runs_ms: list[float] = []
            while len(runs_ms) < runs or (sum(runs_ms) < round_ms and len(runs_ms) < MAX_RUNS):
                start = time.perf_counter()
                sessions[which].run(None, feed)  # type: ignore[attr-defined]
                runs_ms.append(1000.0 * (time.perf_counter() - start))
            times[which].append(float(np.median(runs_ms)))
            counts.append(len(runs_ms))

    batch = len(next(iter(feed.values()))) if feed else 1
    for index in range(rounds):
        timed_round(index)
    measured, started = Speedups(times, counts, threads, batch), time.perf_counter()
    while not measured.agreed and len(times[0]) < max_rounds and time.perf_counter() - started < BUDGET_S:
        for index in range(len(times[0]), min(len(times[0]) + MORE_ROUNDS, max_rounds)):
            timed_round(index)
    return measured


def _with_sessions_spread(ratios: np.ndarray, interval: Interval) -> Interval:
    """The rounds' interval widened on each side by how far the two session pairs' medians differ: rounds of one
    pair agree with each other better than a session in another process agrees with them (a sub-millisecond model
    moved 5-8 % between processes on a quiet machine, beyond a bootstrap interval of the rounds), and a later
    measurement is such a session."""
    first = ratios[[i for i in range(len(ratios)) if (i // 2) % 2 == 0]]
    second = ratios[[i for i in range(len(ratios)) if (i // 2) % 2 == 1]]
    if len(first) < 2 or len(second) < 2:
        return interval
    spread = abs(float(np.median(first)) / float(np.median(second)) - 1.0)
    return replace(interval, low=interval.low / (1.0 + spread), high=interval.high * (1.0 + spread))


def paired_speedup_alone(candidate: Path, reference: onnx.ModelProto, feed: dict[str, np.ndarray], *,
                         threads: int) -> SpeedCheck:
    """:func:`paired_speedup` of the file at ``candidate`` against ``reference`` in a fresh Python process that
    imports ONNX Runtime and this module alone: a figure for the user must hold when they measure it later, in a
    process of their own, and optimize's process (its own sessions, threads and heap after minutes of work) timed a
    sub-millisecond model up to 20 % off what a fresh process then measured."""
    import json
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="trtpipe-speed-") as folder:
        reference_path, feed_path = Path(folder) / "reference.onnx", Path(folder) / "feed.npz"
        onnx.save(reference, reference_path)
        np.savez(feed_path, **feed)  # type: ignore[arg-type]
        done = subprocess.run([sys.executable, "-m", __name__, str(candidate), str(reference_path), str(feed_path),
                               str(threads)], capture_output=True, text=True, check=False)
    if done.returncode != 0:  # the timing is a check: where the fresh process fails, time it here
        return paired_speedup(candidate, reference, feed, threads=threads)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return SpeedCheck(found["speedup"], Interval.from_dict(found["interval"]), found["threads"], found["batch"],
                      found["candidate_ms"], found["reference_ms"], found["runs_per_round"])


if __name__ == "__main__":  # paired_speedup_alone's fresh process: candidate reference feed.npz threads
    import json
    import sys

    arguments = sys.argv[1:]
    with np.load(arguments[2]) as arrays:
        given = {name: arrays[name] for name in arrays.files}
    print(json.dumps(paired_speedup(Path(arguments[0]), Path(arguments[1]), given,
                                    threads=int(arguments[3])).to_dict()))
