"""The greedy search that keeps ranked units in FP32 until the drop is within budget (step 3 of the accuracy
budget, :mod:`sensitivity`).

It knows nothing of ONNX: it takes units in rank order and a ``judge`` that makes and measures a mix, so its
stepping, bisection, evaluation cap and last resort are tested on their own with a judge that costs nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypedDict

from trtpipe import console
from trtpipe.comparison import Comparison


class FallbackAttempt(TypedDict):
    """One evaluation of a mix (the manifest's ``int8.fallback_attempts`` entries, as JSON writes them)."""

    nodes: list[str]  # the nodes this attempt added to the ones already kept in FP32
    units: int  # how many units those nodes make
    fp32_layers: int  # nodes in FP32 before it, or with it once kept
    kept: bool
    accuracy: float | None
    drop_pp: float | None
    drop_removed_pp: float  # what it removed of the drop before it



def default_fp32_limit(quantizable: int) -> int:
    """Past half of its nodes in FP32 a model is no longer an INT8 model: FP16 serves better then."""
    return max(1, quantizable // 2)


def default_max_attempts(units: int) -> int:
    """The evaluation cap: doubling steps, the bisection of the last and the last resort take about three per
    doubling of the unit count, so a model ten times larger costs a few evaluations more, not ten times as many."""
    return 3 * max(1, math.ceil(math.log2(units + 1))) + 2


TIE_ERROR_GAIN = 0.01  # on an unchanged accuracy, a node must cut the mean logit error by 1 % to earn its place


def _better(candidate: Comparison, current: Comparison) -> bool:
    """Strictly better on the budget's figure; on a tie, a clearly smaller output error (a node that changes
    nothing would spend the FP32 allowance for nothing)."""
    new, old = candidate.drop_pp, current.drop_pp
    assert new is not None and old is not None
    if abs(new - old) > 1e-9:
        return new < old
    return candidate.mean_abs_err < (1 - TIE_ERROR_GAIN) * current.mean_abs_err


Judge = Callable[[list[str]], tuple[Any, Comparison]]


def _next_step(size: int, gained: float, gap: float) -> int:
    """The next step's unit count after ``size`` units gained ``gained`` pp with ``gap`` pp still to go: about
    half of what that rate says is needed, at least one and at most twice ``size``."""
    if gained <= 0:
        return size  # a tie won on output error alone: the figure shows no rate to go by
    return min(2 * size, max(1, math.ceil(size * gap / gained / 2)))


@dataclass
class GreedyResult:
    excluded: list[str]
    model: Any  # what ``judge`` made for ``excluded``; None while nothing joined
    comparison: Comparison
    attempts: list[FallbackAttempt]


class _Trial(NamedTuple):
    """One judged mix: the nodes it keeps in FP32, what ``judge`` made of it, its figure and its attempt record."""

    nodes: list[str]
    model: Any
    comparison: Comparison
    record: FallbackAttempt


@dataclass
class _GreedySearch:
    """What the steps of :func:`add_until_within_budget` share: the mix taken so far (``excluded``, the ``model``
    judged for it and its figure ``best``), every attempt made, and the limits each step keeps to."""

    judge: Judge
    budget_pp: float
    limit: int
    max_attempts: int
    on_attempt: Callable[[], None] | None
    best: Comparison
    excluded: list[str] = field(default_factory=list)
    model: Any = None
    attempts: list[FallbackAttempt] = field(default_factory=list)

    def within(self, result: Comparison) -> bool:
        """Whether ``result``'s drop meets the budget."""
        return (result.drop_pp or 0.0) <= self.budget_pp

    def nodes_of(self, chunk: Sequence[tuple[str, ...]]) -> list[str]:
        """The nodes in FP32 once ``chunk`` joins the mix taken: the taken ones first, each node once."""
        return list(dict.fromkeys([*self.excluded, *(n for unit in chunk for n in unit)]))

    def attempt(self, chunk: Sequence[tuple[str, ...]]) -> _Trial:
        """Judge the mix taken plus ``chunk`` and record the attempt (not kept: :meth:`accept` takes it)."""
        trial = self.nodes_of(chunk)
        candidate, result = self.judge(trial)
        record: FallbackAttempt = {
            "nodes": trial[len(self.excluded):], "units": len(chunk), "fp32_layers": len(self.excluded),
            "kept": False, "accuracy": result.accuracy, "drop_pp": result.drop_pp,
            "drop_removed_pp": round((self.best.drop_pp or 0.0) - (result.drop_pp or 0.0), 9)}
        self.attempts.append(record)
        if self.on_attempt is not None:
            self.on_attempt()
        return _Trial(trial, candidate, result, record)

    def accept(self, trial: _Trial) -> None:
        """Take ``trial``'s mix as the new one to build on, mark its attempt kept, and say so."""
        added = trial.nodes[len(self.excluded):]
        trial.record["kept"], trial.record["fp32_layers"] = True, len(trial.nodes)
        self.excluded, self.model, self.best = trial.nodes, trial.model, trial.comparison
        console.note(f"{len(self.excluded)} layer(s) in FP32 (+{', '.join(added)}): {trial.comparison.line()}")

    def fitting(self, waiting: Sequence[tuple[str, ...]], most: int | None = None) -> list[tuple[str, ...]]:
        """The next units of ``waiting`` (at most ``most``) that add nodes and still fit under the limit."""
        chunk: list[tuple[str, ...]] = []
        for unit in waiting:
            if most is not None and len(chunk) == most:
                break
            grown = self.nodes_of([*chunk, unit])
            if len(grown) > len(self.nodes_of(chunk)) and len(grown) <= self.limit:
                chunk.append(unit)
        return chunk

    def bisect(self, chunk: list[tuple[str, ...]], reached: _Trial) -> None:
        """``chunk`` on top of the mix taken meets the budget: take its shortest prefix that still does."""
        low, high, chosen = 0, len(chunk), reached
        while high - low > 1 and len(self.attempts) < self.max_attempts:
            middle = (low + high) // 2
            shorter = self.attempt(chunk[:middle])
            if self.within(shorter.comparison):
                high, chosen = middle, shorter
            else:
                low = middle
        self.accept(chosen)

    def in_rank_order(self, units: Sequence[tuple[str, ...]]) -> None:
        """Steps in rank order, each taken only if it improves the figure. The step grows while progress is slow
        (at most doubling: to about half the units the last step's rate says are still needed) and stays at one
        unit while single units close the gap fast. A step that does not help is halved and tried again; a single
        unit that does not help is passed over, and tried once more after the rest (others may have joined since).
        Enough attempts are held back for :meth:`last_resort`."""
        reserve = 1 + math.ceil(math.log2(len(units) + 1))
        waiting, step = list(units), 1
        passed: list[tuple[str, ...]] = []
        retried = False
        while len(self.attempts) < self.max_attempts - reserve and not self.within(self.best):
            if not waiting:
                if retried or not passed:
                    break
                waiting, passed, step, retried = passed, [], 1, True
            chunk = self.fitting(waiting, step)
            if not chunk:
                if retried or not passed:
                    break
                waiting = []
                continue
            before = self.best.drop_pp or 0.0
            tried = self.attempt(chunk)
            result = tried.comparison
            if self.within(result):
                self.bisect(chunk, tried)
                break
            if _better(result, self.best):
                self.accept(tried)
                step = _next_step(len(chunk), before - (result.drop_pp or 0.0),
                                  (result.drop_pp or 0.0) - self.budget_pp)
            elif step > 1:
                step = max(1, len(chunk) // 2)
                continue
            else:
                passed.extend(chunk)
            waiting = [unit for unit in waiting if unit not in chunk]

    def last_resort(self, units: Sequence[tuple[str, ...]]) -> None:
        """Every unit not in yet (passed over ones too) that fits, in order, bisected back if it meets the budget:
        units whose effect is below the measure's resolution on their own may add up."""
        if self.within(self.best) or len(self.attempts) >= self.max_attempts:
            return
        chunk = self.fitting(units)
        if not chunk:
            return
        tried = self.attempt(chunk)
        if self.within(tried.comparison):
            self.bisect(chunk, tried)
        elif _better(tried.comparison, self.best):
            self.accept(tried)


def add_until_within_budget(units: Sequence[tuple[str, ...]], judge: Judge, start: Comparison, budget_pp: float, *,
                            limit: int, max_attempts: int,
                            on_attempt: Callable[[], None] | None = None) -> GreedyResult:
    """Few of ``units`` (in the order given) in FP32, enough to bring the drop within ``budget_pp``, found as
    :mod:`sensitivity`'s docstring says; ``judge`` makes and measures the mix with the given nodes in FP32,
    ``start`` is the figure with none. At most ``max_attempts`` calls of ``judge`` and ``limit`` nodes. A mix is
    taken only if it improves on the last one taken (:func:`_better`), so the figure never gets worse as nodes are
    added; each attempt is recorded (nodes added, kept or not, figure, drop removed)."""
    search = _GreedySearch(judge, budget_pp, limit, max_attempts, on_attempt, best=start)
    search.in_rank_order(units)
    search.last_resort(units)
    return GreedyResult(search.excluded, search.model, search.best, search.attempts)
