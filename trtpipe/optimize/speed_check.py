"""A short paired timing of a written file against the FP32 file on ONNX Runtime: is the INT8 file any faster?

Not a benchmark (``trtpipe bench`` is): a check that a ``cpu`` INT8 file, which exists only to be faster, is not
slower than the FP32 file it came from on the runtime it is made for. The two sessions alternate within each round
(the order flips every round), so a neighbour's load falls on both; each round's ratio is the median of a few runs
of each, and the figure is the median ratio with its bootstrap interval over rounds (intervals.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from trtpipe.intervals import Interval, bootstrap_values

ROUNDS = 7
RUNS = 3  # at least, per model and round: the round's time is their median
ROUND_MS = 25.0  # and at least this long, so the other session's thread pool winding down weighs little
WARMUP = 2


@dataclass(frozen=True)
class SpeedCheck:
    """The candidate's speed as a multiple of the reference's (above 1: faster), over paired rounds."""

    speedup: float
    interval: Interval
    threads: int
    batch: int
    candidate_ms: float
    reference_ms: float

    @property
    def slower(self) -> bool:
        """Slower than the reference beyond the noise: the whole interval below 1."""
        return self.interval.high < 1.0

    def line(self, candidate: str, reference: str) -> str:
        return (f"{candidate} runs {self.speedup:.2f}x the speed of {reference} on ONNX Runtime here "
                f"(95 % {self.interval.low:.2f}-{self.interval.high:.2f}x over {self.interval.units} paired rounds; "
                f"{self.candidate_ms:.3g} vs {self.reference_ms:.3g} ms, batch {self.batch}, {self.threads} threads)")

    def to_dict(self) -> dict[str, object]:
        return {"speedup": self.speedup, "interval": self.interval.to_dict(), "threads": self.threads,
                "batch": self.batch, "candidate_ms": self.candidate_ms, "reference_ms": self.reference_ms,
                "slower": self.slower}


def _session(model: onnx.ModelProto | Path | object, threads: int) -> object:
    if hasattr(model, "run"):
        return model  # a session made by session() already: timed again without building it anew
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    source = str(model) if isinstance(model, Path) else model.SerializeToString()  # type: ignore[attr-defined]
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def session(model: onnx.ModelProto | Path, threads: int) -> object:
    """The ONNX Runtime session :func:`paired_speedup` times ``model`` in; hand it back in place of the model to time
    the same model against several others without building it again."""
    return _session(model, threads)


def paired_speedup(candidate: onnx.ModelProto | Path | object, reference: onnx.ModelProto | Path | object,
                   feed: dict[str, np.ndarray],
                   *, threads: int, rounds: int = ROUNDS, runs: int = RUNS) -> SpeedCheck:
    """How many times faster ``candidate`` runs ``feed`` than ``reference`` on ONNX Runtime's CPU provider with all
    graph optimisations and ``threads`` threads, over ``rounds`` paired rounds."""
    sessions = [_session(candidate, threads), _session(reference, threads)]
    for session in sessions:
        for _ in range(WARMUP):
            session.run(None, feed)  # type: ignore[attr-defined]
    times: list[list[float]] = [[], []]
    for index in range(rounds):
        order = (0, 1) if index % 2 == 0 else (1, 0)
        for which in order:
            sessions[which].run(None, feed)  # type: ignore[attr-defined]  # after the other session: not timed
            runs_ms: list[float] = []
            while len(runs_ms) < runs or (sum(runs_ms) < ROUND_MS and len(runs_ms) < 200):
                start = time.perf_counter()
                sessions[which].run(None, feed)  # type: ignore[attr-defined]
                runs_ms.append(1000.0 * (time.perf_counter() - start))
            times[which].append(float(np.median(runs_ms)))
    mine, theirs = np.asarray(times[0]), np.asarray(times[1])
    ratios = theirs / mine
    batch = len(next(iter(feed.values()))) if feed else 1
    return SpeedCheck(float(np.median(ratios)), bootstrap_values(ratios), threads, batch, float(np.median(mine)),
                      float(np.median(theirs)))
