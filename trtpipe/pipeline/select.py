"""Choosing the artifact to deploy, and the batch size to run it at, from one bench run's rows.

Each limit is judged on a figure with its 95 % interval, so that noise can neither pass nor fail a variant:

- latency: the row's tail (``tail_ms``: the median over bench's rounds of each round's p99), which a burst in a
  minority of rounds cannot swing, with its interval over the rounds. The budget is met when the interval's high
  end is within it, broken when its low end is above it, and otherwise the machine was too noisy to decide;
- accuracy: the drop against the reference, **decided on its best estimate and claimed by its interval** over the
  samples (from the row's accuracy or agreement interval), as optimize's budget and step rule decide: met when the
  point drop is within the limit, broken when it exceeds it; where the interval straddles the limit the choice still
  follows the point but says "undecided" (amber), with about how many samples would make it sure. Waiting for
  significance on 24-32 samples would refuse nearly every variant that is in fact within a budget;
- memory: the one figure bench measured.

A bench JSON from before these intervals existed is judged on its point figures (p99, the drop), and the line says
so. A variant no limit rejects but one that could not be decided is never chosen as if it met the budget.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from trtpipe.artifact.records.sections import DataRecord
from trtpipe.bench.rows import BenchRow
from trtpipe.errors import BadInput
from trtpipe.intervals import Interval, trials_to_resolve, would_decide
from trtpipe.pipeline.ranking import rank, under_load
from trtpipe.runtime.registry import is_eager
from trtpipe.vocab import BackendKind, Device


class Verdict(StrEnum):
    MET = "met"
    BROKEN = "broken"
    UNDECIDED = "undecided"


class Limit(StrEnum):
    LATENCY = "latency"
    ACCURACY = "accuracy"
    MEMORY = "memory"


@dataclass(frozen=True)
class Judgement:
    """One limit judged on one row: the verdict and the figure it was judged on, in a few words."""

    limit: Limit
    verdict: Verdict
    text: str
    sure: bool = True  # the interval is on the verdict's side (accuracy, decided on the point: it may straddle)


@dataclass(frozen=True)
class Choice:
    variant: str
    artifact: str | None
    reason: str
    p99_ms: float | None = None
    throughput: float | None = None
    runtime: BackendKind | None = None  # what ran the chosen artifact (onnxruntime, openvino, tensorrt)
    undecided: tuple[str, ...] = ()  # the limits (Limit values) some candidate could not be judged on
    over: tuple[str, ...] = ()  # nothing chosen: the limit (Limit value) every candidate certainly breaks
    # The measurement it rests on was flagged unstable (under load, or a wide interval): why, and the rerun hint.
    # A chosen variant with it is shown in amber, never green (ranking.py).
    flagged: str | None = None

    @property
    def status(self) -> str:
        """"chosen", "undecided" (nothing chosen because noise or too few samples left a candidate undecided) or
        "none" (every candidate breaks a limit). A chosen variant may still carry ``undecided`` limits (its own
        accuracy judged on the best estimate where the interval straddles the limit): said in amber."""
        if self.artifact:
            return "chosen"
        return "undecided" if self.undecided else "none"


def drop_words(drop_pp: float) -> str:
    """An accuracy drop as words that read right both ways: "loses 0.50 pp", "gains 0.24 pp", "loses nothing"."""
    if abs(drop_pp) < 0.005:
        return "loses nothing"
    return f"loses {drop_pp:.2f} pp" if drop_pp > 0 else f"gains {-drop_pp:.2f} pp"


def accuracy_drop_pp(row: BenchRow) -> float | None:
    """Points of the task's accuracy lost against the FP32 reference on the same samples (labels), or without labels
    how much of FP32's answer was lost (100 x (1 - agreement): top-1, pixel agreement, mAP@0.5 vs FP32...); None
    where nothing measured it (a generic task, random weights)."""
    if row.top1_accuracy is not None and row.reference_accuracy is not None:
        return round(100.0 * (row.reference_accuracy - row.top1_accuracy), 9)  # 5.0, not 5.000000000000004
    agreement = row.agreement if row.agreement is not None else row.top1_agreement
    if agreement is not None:
        return round(100.0 * (1.0 - agreement), 9)
    return None


def drop_bounds_pp(row: BenchRow) -> tuple[float, float, int] | None:
    """The 95 % interval of :func:`accuracy_drop_pp` (low, high, samples); None where the row has no interval.

    With labels, the drop is the reference's accuracy on the same samples less the row's, so its bounds come from
    the row's accuracy interval; and since a variant can lose no more than the answers it changes, the drop is also
    at most its disagreement with the reference (1 - agreement), so where the agreement interval is there too, the
    upper bound is the lower of the two (each a 97.5 % one-sided bound, so together still a 95 % one). Without
    labels the drop is the disagreement, bounded by the agreement interval."""
    agreement, accuracy = row.agreement_interval, row.accuracy_interval
    if row.top1_accuracy is not None and row.reference_accuracy is not None:
        if accuracy is None:
            return None
        low = 100.0 * (row.reference_accuracy - accuracy.high)
        high = 100.0 * (row.reference_accuracy - accuracy.low)
        if agreement is not None:
            high = min(high, 100.0 * (1.0 - agreement.low))
            low = max(low, -100.0 * (1.0 - agreement.low))
        return round(low, 9), round(high, 9), accuracy.units
    if agreement is None or accuracy_drop_pp(row) is None:
        return None
    return round(100.0 * (1.0 - agreement.high), 9), round(100.0 * (1.0 - agreement.low), 9), agreement.units


def latency_figure(row: BenchRow) -> tuple[float, Interval | None, str]:
    """The figure the latency budget is judged on, its interval and its name: the row's tail (the median over rounds
    of each round's p99) where bench measured it, else its p99 over every run (a bench JSON from before rounds had
    a tail), which one burst can swing."""
    if row.tail_ms is not None:
        return row.tail_ms, row.tail_interval, "p99 tail"
    return row.p99_ms, None, "p99"


def judge_latency(row: BenchRow, budget_ms: float) -> Judgement:
    value, interval, name = latency_figure(row)
    if interval is None:
        why = ("no interval: one round" if name == "p99 tail" else
               "the p99 of every run, no tail interval: one burst can swing it")
        verdict = Verdict.MET if value <= budget_ms else Verdict.BROKEN
        return Judgement(Limit.LATENCY, verdict, f"{name} {value:.2f} ms {'within' if verdict is Verdict.MET else '>'}"
                                                 f" {budget_ms} ms ({why})")
    figure = (f"{name} {value:.2f} ms (95 % CI {interval.low:.2f}-{interval.high:.2f} ms over {interval.units} "
              "rounds)")
    if interval.high <= budget_ms:
        return Judgement(Limit.LATENCY, Verdict.MET, f"{figure} within {budget_ms} ms")
    if interval.low > budget_ms:
        return Judgement(Limit.LATENCY, Verdict.BROKEN, f"{figure} > {budget_ms} ms")
    return Judgement(Limit.LATENCY, Verdict.UNDECIDED, f"{figure} straddles {budget_ms} ms: too noisy to decide"
                     + (f" ({row.unstable})" if row.unstable else ""))


def samples_to_decide(row: BenchRow, max_drop_pp: float) -> int | None:
    """About how many samples would let the drop's interval fall on one side of ``max_drop_pp``; None where no
    number would (the figure sits on the limit)."""
    drop = accuracy_drop_pp(row)
    if drop is None or abs(max_drop_pp - drop) < 1e-9:
        return None
    labelled = row.top1_accuracy is not None and row.reference_accuracy is not None
    observed = row.top1_accuracy if labelled else (row.agreement if row.agreement is not None else row.top1_agreement)
    return trials_to_resolve(abs(max_drop_pp - drop) / 100.0, observed=observed if observed is not None else 1.0)


def judge_accuracy(row: BenchRow, max_drop_pp: float) -> Judgement | None:
    """The accuracy limit judged on the drop's interval; None where nothing measured the row's accuracy."""
    drop = accuracy_drop_pp(row)
    if drop is None:
        return None
    bounds = drop_bounds_pp(row)
    if bounds is None:
        verdict = Verdict.MET if drop <= max_drop_pp else Verdict.BROKEN
        relation = "within" if verdict is Verdict.MET else ">"
        return Judgement(Limit.ACCURACY, verdict, f"{drop_words(drop)} {relation} {max_drop_pp} pp (point figure: "
                                                  "no interval)")
    low, high, samples = bounds
    figure = f"{drop_words(drop)} (drop 95 % CI {low:+.2f} to {high:+.2f} pp on {samples} samples)"
    if high <= max_drop_pp:
        return Judgement(Limit.ACCURACY, Verdict.MET, f"{figure}, at most {high:.2f} pp: within {max_drop_pp} pp")
    if low > max_drop_pp:
        return Judgement(Limit.ACCURACY, Verdict.BROKEN, f"{figure}, at least {low:.2f} pp > {max_drop_pp} pp")
    needed = samples_to_decide(row, max_drop_pp)
    more = would_decide(needed) if needed else "its figure sits on the limit, so no number of them would"
    met = drop <= max_drop_pp + 1e-9
    side = f"within {max_drop_pp} pp" if met else f"> {max_drop_pp} pp"
    return Judgement(Limit.ACCURACY, Verdict.MET if met else Verdict.BROKEN,
                     f"{figure}: {side} on the best estimate, undecided: the interval straddles {max_drop_pp} pp, too "
                     f"few samples to be sure ({more})", sure=False)


def judge(row: BenchRow, *, latency_budget_ms: float | None, max_accuracy_drop: float | None,
          memory_budget_mb: float | None) -> list[Judgement]:
    """Each limit judged on ``row``, latency first."""
    judged = []
    if latency_budget_ms is not None:
        judged.append(judge_latency(row, latency_budget_ms))
    if max_accuracy_drop is not None and (accuracy := judge_accuracy(row, max_accuracy_drop)) is not None:
        judged.append(accuracy)
    needed = memory_mb(row)
    if memory_budget_mb is not None and needed is not None:
        over = needed > memory_budget_mb
        judged.append(Judgement(Limit.MEMORY, Verdict.BROKEN if over else Verdict.MET,
                                f"needs {needed:.0f} MB {'>' if over else 'within'} {memory_budget_mb} MB"))
    return judged


def fit_to_caveat(data: DataRecord | None, judged: frozenset[str] | None = None) -> str | None:
    """Why a variant's accuracy figure is on data it was fit to, from its optimize manifest's ``data`` record; None
    where it is not. ``judged``: the fingerprints of the samples bench judged it on (trtpipe.optimize.data's
    sample_fingerprints), checked against the calibration samples' the manifest records. Without them, what optimize
    itself could judge it on is all there is to go by (``judged_on.optimistic``: too few samples to hold any out)."""
    if data is None:
        return None
    calibration = data.calibration_fingerprints
    if judged and calibration:
        shared = len(judged & calibration)
        if shared == len(judged):
            return f"judged only on samples it was calibrated on ({shared}), so its figure is optimistic"
        if shared:
            return f"{shared} of the {len(judged)} samples it was judged on were calibration samples"
        return None
    if data.judged_on is not None and data.judged_on.optimistic:
        return (f"optimize judged it only on its {data.judged_on.samples} calibration samples (too few to hold any "
                "out), so its figure there was optimistic")
    return None


def memory_mb(row: BenchRow) -> float | None:
    """What a row needed where it ran: device memory for a GPU row, host memory otherwise."""
    return row.device_memory_mb if row.device is Device.CUDA else row.host_memory_mb


def _over_memory(row: BenchRow, budget: float | None) -> bool:
    needed = memory_mb(row)
    return budget is not None and needed is not None and needed > budget


def deployable(row: BenchRow) -> bool:
    """A row select may choose, and whose latency means something: an artifact timed as it would be deployed (not
    the reference, not a simulation of another runtime's arithmetic, not a device-resident timing)."""
    return bool(not row.is_reference and row.artifact and row.includes_transfers and not row.simulated)


def limits_broken(row: BenchRow, *, latency_budget_ms: float | None, max_accuracy_drop: float | None,
                  memory_budget_mb: float | None) -> list[str]:
    """Each limit ``row`` certainly breaks (its interval wholly beyond it), in a few words ("loses 95.60 pp > 5.0
    pp"), latency first; empty where it breaks none (it may still be undecided)."""
    return [j.text for j in judge(row, latency_budget_ms=latency_budget_ms, max_accuracy_drop=max_accuracy_drop,
                                  memory_budget_mb=memory_budget_mb) if j.verdict is Verdict.BROKEN]


def outside_limits(rows: list[BenchRow], *, batch: int, latency_budget_ms: float | None,
                   max_accuracy_drop: float | None, memory_budget_mb: float | None = None) -> dict[str, str]:
    """Variant -> the limits it breaks, for the report to mark it in every chart and table. Each variant is judged
    on its row at ``batch`` (else its smallest batch's): its accuracy drop always (a simulation's too: its figure is
    the arithmetic of the runtime it simulates), its latency and memory where select could choose it there. The
    reference is never outside."""
    outside = {}
    for row in sorted(rows, key=lambda r: (r.batch != batch, r.batch)):
        if row.is_reference or row.variant in outside:
            continue
        timed = row.batch == batch and deployable(row)
        outside[row.variant] = "; ".join(limits_broken(
            row, latency_budget_ms=latency_budget_ms if timed else None, max_accuracy_drop=max_accuracy_drop,
            memory_budget_mb=memory_budget_mb if timed else None))
    return {variant: broken for variant, broken in outside.items() if broken}


def undecided_limits(rows: list[BenchRow], *, batch: int, latency_budget_ms: float | None,
                     max_accuracy_drop: float | None, memory_budget_mb: float | None = None) -> dict[str, str]:
    """Variant -> the limits it could not be judged on, for each deployable variant at ``batch`` that breaks none
    (the report marks it undecided, never "within the budget")."""
    undecided = {}
    for row in rows:
        if row.batch != batch or not deployable(row):
            continue
        judged = judge(row, latency_budget_ms=latency_budget_ms, max_accuracy_drop=max_accuracy_drop,
                       memory_budget_mb=memory_budget_mb)
        open_ = [j.text for j in judged if j.verdict is Verdict.UNDECIDED or not j.sure]
        if open_ and not any(j.verdict is Verdict.BROKEN for j in judged):
            undecided[row.variant] = "; ".join(open_)
    return undecided


def choose(rows: list[BenchRow], *, batch: int, latency_budget_ms: float | None,
           max_accuracy_drop: float | None, memory_budget_mb: float | None = None,
           fit_to: Mapping[str, str] | None = None) -> Choice | None:
    """The fastest deployable (runtime, artifact) pair at ``batch`` that meets every limit (judged on intervals:
    see the module's docstring); the same file on ONNX Runtime and on OpenVINO are two candidates. Simulated rows
    (another runtime's arithmetic, measured here) and device-resident timings are not deployable latencies, so they
    are never chosen. Where nothing meets the limits but some candidate could not be decided, the choice is
    "undecided", naming them and the limits they could not be judged on. ``fit_to``: variant -> why its figure is
    on data it was fit to (:func:`fit_to_caveat`); under an accuracy limit such a variant is chosen only where no
    other fits, and the reason says so either way."""
    fit_to = fit_to or {}
    candidates = [r for r in rows if r.batch == batch and deployable(r)]
    if not candidates:
        return None
    if max_accuracy_drop is not None and all(accuracy_drop_pp(r) is None for r in candidates):
        why = next((r.note for r in candidates if r.note), None) or "no row has a task figure"
        raise BadInput(f"max_accuracy_drop cannot be judged: nothing measured the variants' accuracy ({why}). Name "
                       "the model's task (--task classify|detect|segment|dense|embed|sequence) and give it real data, "
                       "or drop the limit.")
    rejected, undecided, fitting = [], [], []
    over_latency: list[BenchRow] = []  # candidates whose only broken limit is latency
    for row in candidates:
        if row.slower_than:  # the FP32 file of its runtime is faster and keeps FP32's answers
            rejected.append(f"{row.variant} runs slower than {row.slower_than} on the same runtime")
            continue
        judged = judge(row, latency_budget_ms=latency_budget_ms, max_accuracy_drop=max_accuracy_drop,
                       memory_budget_mb=memory_budget_mb)
        if broken := [j for j in judged if j.verdict is Verdict.BROKEN]:
            rejected.append(f"{row.variant} {broken[0].text}")
            if all(j.limit is Limit.LATENCY for j in broken):
                over_latency.append(row)
        elif open_ := [j for j in judged if j.verdict is Verdict.UNDECIDED]:
            undecided.append((row, open_))
        else:
            fitting.append((row, judged))
    limits = tuple(dict.fromkeys(str(j.limit) for _, open_ in undecided for j in open_))
    if not fitting:
        if undecided:
            return Choice("none", None, "could not decide: " + "; ".join(
                f"{row.variant} {', '.join(j.text for j in open_)}" for row, open_ in undecided)
                + ("; " + "; ".join(rejected) if rejected else ""), undecided=limits)
        lead = ""
        if over_latency and len(over_latency) == len(candidates):  # latency alone rules every variant out: say so
            best = min(over_latency, key=lambda r: latency_figure(r)[0])
            value, _, name = latency_figure(best)
            lead = (f"every variant's latency is over the {latency_budget_ms} ms budget, the lowest {name} "
                    f"{value:.2f} ms ({best.variant}): this CPU, with what else runs on it, does not hold that "
                    "budget; ")
        loaded = under_load(candidates)
        return Choice("none", None, f"no variant meets the budget: {lead}" + "; ".join(rejected)
                      + (f"; {loaded}" if loaded else ""), over=(str(Limit.LATENCY),) if lead else (), flagged=loaded)
    trusted = [item for item in fitting if item[0].variant not in fit_to]
    pool = trusted if max_accuracy_drop is not None and trusted else fitting
    ranked = rank([r for r, _ in pool], batch=batch, reference=_reference_name(rows))  # speed: ranking.py
    row, judged = next(item for item in pool if item[0] is ranked.row)
    figures = [j.text for j in judged]
    drop = accuracy_drop_pp(row)
    if max_accuracy_drop is None and drop is not None:
        bounds = drop_bounds_pp(row)  # its interval, as the accuracy limit would quote it: never a bare figure
        figures.append(drop_words(drop) + " against the reference" + (
            f" (drop 95 % CI {bounds[0]:+.2f} to {bounds[1]:+.2f} pp on {bounds[2]} samples)" if bounds else ""))
    faster_open = [(other, open_) for other, open_ in undecided if other.p50_ms < row.p50_ms]
    reason = (f"{ranked.words}; among {len(fitting)} of {len(candidates)} variants meeting the limits"
              + (f"; {', '.join(figures)}" if figures else "")
              + (f"; CAUTION: {fit_to[row.variant]}" if row.variant in fit_to else "")
              + "".join(f"; not the faster {other.variant}: {fit_to[other.variant]}" for other, _ in fitting
                        if other.variant in fit_to and other not in [p for p, _ in pool]
                        and other.p50_ms < row.p50_ms)
              + "".join(f"; not the faster {other.variant}: {', '.join(j.text for j in open_)}"
                        for other, open_ in faster_open)
              + (f"; {ranked.flagged}" if ranked.flagged else ""))
    unsure = [j for j in judged if not j.sure]
    if unsure:
        reason += "; UNDECIDED: " + ", ".join(j.text for j in unsure)
    return Choice(row.variant, row.artifact, reason, row.p99_ms, row.throughput, row.backend,
                  undecided=tuple(dict.fromkeys([str(j.limit) for j in unsure]
                                                + [str(j.limit) for _, open_ in faster_open for j in open_])),
                  flagged=ranked.flagged)


def _reference_name(rows: list[BenchRow]) -> str:
    """What the speedups are against, in the choice line: PyTorch FP32, or the FP32 ONNX given as the model."""
    return "PyTorch FP32" if any(r.is_reference and is_eager(r.backend) for r in rows) else "the FP32 ONNX"


def batch_advice(rows: list[BenchRow], variant: str, latency_budget_ms: float | None,
                 memory_budget_mb: float | None = None) -> dict[str, Any] | None:
    """The largest benched batch whose latency (judged as select judges it) and memory fit the budgets, with its
    throughput."""
    own = sorted((r for r in rows if r.variant == variant), key=lambda r: r.batch)
    if not own:
        return None
    fitting = [r for r in own if (latency_budget_ms is None
                                  or judge_latency(r, latency_budget_ms).verdict is Verdict.MET)
               and not _over_memory(r, memory_budget_mb)]
    if not fitting:
        limits = " and ".join(f for f in (f"latency within {latency_budget_ms} ms" if latency_budget_ms is not None
                                          else "", f"memory within {memory_budget_mb} MB"
                                          if memory_budget_mb is not None else "") if f)
        return {"batch": None, "reason": f"no benched batch of {variant} has {limits}"}
    best = fitting[-1]
    needed = memory_mb(best)
    instances = instance_advice(best, memory_budget_mb)
    value, _, name = latency_figure(best)
    return {"batch": best.batch, "p99_ms": best.p99_ms, "throughput": best.throughput, "memory_mb": needed,
            "instances_fit": instances[0] if instances else None,
            "reason": f"largest benched batch of {variant} with {name} {value:.2f} ms"
                      + (f" within {latency_budget_ms} ms" if latency_budget_ms is not None else "")
                      + (f" and {needed:.0f} MB within {memory_budget_mb} MB"
                         if memory_budget_mb is not None and needed is not None else "")
                      + f": {best.throughput:.0f} items/s"
                      + (f"; {instances[1]}" if instances else "")}


def instance_advice(row: BenchRow, memory_budget_mb: float | None) -> tuple[int, str] | None:
    """How many instances of ``row``'s variant at its batch fit in the memory budget, and what to do with that: on a
    GPU, copies of a model run concurrently on their own streams, which pays where one copy leaves the GPU idle
    between launches (small batches); bench times one call at a time, so only a load test at the client counts
    that will come tells whether they raise throughput. None without a budget or a memory figure."""
    needed = memory_mb(row)
    if memory_budget_mb is None or not needed:
        return None
    fit = max(int(memory_budget_mb // needed), 0)
    where = "device" if row.device is Device.CUDA else "host"
    return fit, (f"{fit} instance{'s' if fit != 1 else ''} at that batch fit in the {memory_budget_mb:.0f} MB "
                 f"{where} budget ({needed:.0f} MB each): compare `trtpipe serve --instances 1` with "
                 f"`--instances {max(min(fit, 4), 1)}` under `trtpipe loadtest --concurrency 1,8,32`")
