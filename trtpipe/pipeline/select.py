"""Choosing the artifact to deploy, and the batch size to run it at, from one bench run's rows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trtpipe.bench.rows import BenchRow
from trtpipe.errors import BadInput
from trtpipe.manifest_records import DataRecord
from trtpipe.vocab import BackendKind, Device


@dataclass(frozen=True)
class Choice:
    variant: str
    artifact: str | None
    reason: str
    p99_ms: float | None = None
    throughput: float | None = None
    runtime: BackendKind | None = None  # what ran the chosen artifact (onnxruntime, openvino, tensorrt)


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


def _deployable(row: BenchRow) -> bool:
    """A row select may choose: an artifact timed as it would be deployed (not the reference, not a simulation of
    another runtime's arithmetic, not a device-resident timing)."""
    return bool(not row.is_reference and row.artifact and row.includes_transfers and not row.simulated)


def limits_broken(row: BenchRow, *, latency_budget_ms: float | None, max_accuracy_drop: float | None,
                  memory_budget_mb: float | None) -> list[str]:
    """Each limit ``row`` breaks, in a few words ("loses 95.60 pp > 5.0 pp"), latency first; empty where it meets
    them all."""
    drop = accuracy_drop_pp(row)
    broken = []
    if latency_budget_ms is not None and row.p99_ms > latency_budget_ms:
        broken.append(f"p99 {row.p99_ms:.2f} ms > {latency_budget_ms} ms")
    if max_accuracy_drop is not None and drop is not None and drop > max_accuracy_drop:
        broken.append(f"loses {drop:.2f} pp > {max_accuracy_drop} pp")
    if _over_memory(row, memory_budget_mb):
        broken.append(f"needs {memory_mb(row):.0f} MB > {memory_budget_mb} MB")
    return broken


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
        timed = row.batch == batch and _deployable(row)
        outside[row.variant] = "; ".join(limits_broken(
            row, latency_budget_ms=latency_budget_ms if timed else None, max_accuracy_drop=max_accuracy_drop,
            memory_budget_mb=memory_budget_mb if timed else None))
    return {variant: broken for variant, broken in outside.items() if broken}


def choose(rows: list[BenchRow], *, batch: int, latency_budget_ms: float | None,
           max_accuracy_drop: float | None, memory_budget_mb: float | None = None,
           fit_to: Mapping[str, str] | None = None) -> Choice | None:
    """The fastest deployable (runtime, artifact) pair at ``batch`` whose p99 fits the budget and whose accuracy
    drop fits the limit (the same file on ONNX Runtime and on OpenVINO are two candidates). Simulated rows
    (another runtime's arithmetic, measured here) and device-resident timings are not
    deployable latencies, so they are never chosen. ``fit_to``: variant -> why its figure is on data it was fit to
    (:func:`fit_to_caveat`); under an accuracy limit such a variant is chosen only where no other fits, and the
    reason says so either way."""
    fit_to = fit_to or {}
    candidates = [r for r in rows if r.batch == batch and _deployable(r)]
    if not candidates:
        return None
    if max_accuracy_drop is not None and all(accuracy_drop_pp(r) is None for r in candidates):
        why = next((r.note for r in candidates if r.note), None) or "no row has a task figure"
        raise BadInput(f"max_accuracy_drop cannot be judged: nothing measured the variants' accuracy ({why}). Name "
                       "the model's task (--task classify|detect|segment|dense|embed) and give it real data, or "
                       "drop the limit.")
    rejected = []
    fitting = []
    for row in candidates:
        if broken := limits_broken(row, latency_budget_ms=latency_budget_ms, max_accuracy_drop=max_accuracy_drop,
                                   memory_budget_mb=memory_budget_mb):
            rejected.append(f"{row.variant} {broken[0]}")
        else:
            fitting.append((row, accuracy_drop_pp(row)))
    if not fitting:
        return Choice("none", None, "no variant meets the budget: " + "; ".join(rejected))
    trusted = [item for item in fitting if item[0].variant not in fit_to]
    pool = trusted if max_accuracy_drop is not None and trusted else fitting
    row, drop = min(pool, key=lambda item: item[0].p50_ms)
    limits = []
    if latency_budget_ms is not None:
        limits.append(f"p99 {row.p99_ms:.2f} ms within {latency_budget_ms} ms")
    if drop is not None:
        limits.append(f"accuracy drop {drop:+.2f} pp" + (f" within {max_accuracy_drop} pp"
                                                          if max_accuracy_drop is not None else ""))
    if memory_budget_mb is not None and memory_mb(row) is not None:
        limits.append(f"{memory_mb(row):.0f} MB within {memory_budget_mb} MB")
    reference = "PyTorch FP32" if any(r.is_reference and r.backend is BackendKind.TORCH for r in rows) \
        else "the FP32 ONNX"
    reason = (f"fastest at batch {batch} (p50 {row.p50_ms:.2f} ms, {row.speedup_vs_torch_fp32 or 0:.2f}x "
              f"{reference}) among {len(fitting)} of {len(candidates)} variants meeting the limits"
              + (f"; {', '.join(limits)}" if limits else "")
              + (f"; CAUTION: {fit_to[row.variant]}" if row.variant in fit_to else "")
              + "".join(f"; not the faster {other.variant}: {fit_to[other.variant]}" for other, _ in fitting
                        if other.variant in fit_to and (other, _) not in pool and other.p50_ms < row.p50_ms))
    return Choice(row.variant, row.artifact, reason, row.p99_ms, row.throughput, row.backend)


def batch_advice(rows: list[BenchRow], variant: str, latency_budget_ms: float | None,
                 memory_budget_mb: float | None = None) -> dict[str, Any] | None:
    """The largest benched batch whose p99 and memory fit the budgets, with its throughput."""
    own = sorted((r for r in rows if r.variant == variant), key=lambda r: r.batch)
    if not own:
        return None
    fitting = [r for r in own if (latency_budget_ms is None or r.p99_ms <= latency_budget_ms)
               and not _over_memory(r, memory_budget_mb)]
    if not fitting:
        limits = " and ".join(f for f in (f"p99 within {latency_budget_ms} ms" if latency_budget_ms is not None
                                          else "", f"memory within {memory_budget_mb} MB"
                                          if memory_budget_mb is not None else "") if f)
        return {"batch": None, "reason": f"no benched batch of {variant} has {limits}"}
    best = fitting[-1]
    needed = memory_mb(best)
    instances = instance_advice(best, memory_budget_mb)
    return {"batch": best.batch, "p99_ms": best.p99_ms, "throughput": best.throughput, "memory_mb": needed,
            "instances_fit": instances[0] if instances else None,
            "reason": f"largest benched batch of {variant} with p99 {best.p99_ms:.2f} ms"
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
