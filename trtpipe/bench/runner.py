"""Measure PyTorch FP32 eager and every artifact, in one process, on the same inputs.

PyTorch FP32 eager is measured first and is itself a result row; each artifact's speedup is the ratio of
p50 latencies at the same batch size. Agreement with PyTorch is measured on one fixed set of samples per
model (the held-out split for a model with a bundled data set, else seeded random inputs), and accuracy is
reported wherever labels exist.

This module runs the steps in order and writes the report; each step is a module of its own: plan.py (what is
measured), variants.py (opening each variant), measure.py (its rows), rounds.py and timing.py (timing), memory.py
and isolated.py (memory), agreement.py (fidelity to the reference), layers.py (what an engine says of its runs).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from pathlib import Path
from typing import Any

from trtpipe import console
from trtpipe.bench import environment
from trtpipe.bench.agreement import Agreement
from trtpipe.bench.float_regions import float_region_lines
from trtpipe.bench.identity import check_weights
from trtpipe.bench.layers import EngineFacts
from trtpipe.bench.measure import Measure
from trtpipe.bench.options import BenchOptions
from trtpipe.bench.other_load import OtherLoad
from trtpipe.bench.plan import describe, executions, plan_runs
from trtpipe.bench.reference import REFERENCE, OnnxReference
from trtpipe.bench.rounds import Schedule
from trtpipe.bench.rows import BENCH_SCHEMA, BenchRow
from trtpipe.bench.samples import draw_samples
from trtpipe.bench.stability import Ratio, format_interval, format_ratio, load_reason, row_verdict
from trtpipe.bench.standing import peer_standing, pytorch_standing
from trtpipe.bench.variants import Variants
from trtpipe.hardware import usable_cores
from trtpipe.models.loader import LoadedModel
from trtpipe.options import to_plain
from trtpipe.runtime.registry import backend_name, layer_profilers
from trtpipe.vocab import Baseline, Precision, __version__


def run_benchmark(loaded: LoadedModel | OnnxReference, artifacts: list[Path],
                  options: BenchOptions | None = None, *, keep_runs: bool = False) -> dict[str, Any]:
    """Benchmark ``loaded`` in PyTorch FP32 eager and each artifact; returns the JSON-ready report, whose
    ``warnings`` repeat what the run warned about (rows skipped on this machine, and why). ``keep_runs``: the report
    also holds every timed run's latency under ``runs`` (for ``bench --csv``; too long for the JSON)."""
    with console.recording_warnings() as warnings:
        report = _run_benchmark(loaded, artifacts, options or BenchOptions(), keep_runs)
    return report | {"warnings": list(dict.fromkeys(warnings))}


def _run_benchmark(loaded: LoadedModel | OnnxReference, artifacts: list[Path],
                   options: BenchOptions, keep_runs: bool) -> dict[str, Any]:
    threads = options.threads or usable_cores()
    paths = [Path(a) for a in artifacts] + ([Path(options.load_engine)] if options.load_engine else [])
    descriptions = [describe(path, options) for path in paths]  # engines are checked against their sidecar
    check_weights(loaded, descriptions)  # an artifact of another model than the reference's is refused
    runs = plan_runs(descriptions, executions(options, descriptions))
    if options.profile_layers and not any(d.backend in layer_profilers() for d in descriptions):
        profiled = " or ".join(backend_name(kind) for kind in layer_profilers())
        console.warn(f"--profile-layers times the layers of what {profiled} runs, and no such artifact is here.")
    samples = draw_samples(loaded, options.batches)
    agreement, facts = Agreement(samples, loaded.task, loaded.decoder), EngineFacts(options.profile_layers)
    # With more than one round every variant stays open until its last round; with one it is closed at once.
    other_load = OtherLoad()
    other_load.start()
    with console.progress() as bar, contextlib.ExitStack() as kept:
        measure = Measure(options.batches, options.iters, samples, Schedule(options), bar, agreement, facts)
        variants = Variants(loaded, options, threads, measure, kept)
        variants.reference()
        for baseline in options.baselines if options.baselines is not None else Baseline.defaults(options.device):
            variants.baseline(baseline)
        for run in runs:
            variants.artifact(run)
        if options.peers:
            variants.peers(descriptions)
        measure.later_rounds()
    if (load := load_reason(other_load.stop())) is not None:
        console.warn(f"O{load[1:]}: every row of this run is flagged unstable; rerun on a quieter machine to confirm.",
                     record=False)  # the reports say it with the unstable rows, not among what they left out
    measure.settle()
    rows = variants.rows
    _speedups(rows)
    verdicts(rows, other_load.share)
    _slower_than_float(rows)
    results = [r.to_dict() for r in rows]
    return {
        "schema": BENCH_SCHEMA,
        "trtpipe_version": __version__,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "environment": environment.collect(threads),
        "model": loaded.describe(),
        "reference": REFERENCE if loaded.module is None else "PyTorch FP32 eager",
        "settings": to_plain(options) | {"threads": threads},
        "task": agreement.task,
        "agreement_inputs": agreement.inputs_sentence(rows),
        "results": results,
        "standing": peer_standing(results),
        "standing_pytorch": pytorch_standing(results),
        "other_load": other_load.share,
        "left_float": float_region_lines(paths),
    } | ({"layer_timing": facts.layer_timing} if options.profile_layers else {}) | (
        {"runs": measure.runs()} if keep_runs else {})


def _speedups(rows: list[BenchRow]) -> None:
    """Like with like: a row without host-device copies is compared with PyTorch's row without them, and only on
    the reference's device (a CPU row against a GPU reference is no speedup); a simulation's latency is not the
    target's, so it gets none. The speedup is the median of the two rows' p50s paired round by round, with its
    interval (stability.Ratio: the figure the headline against PyTorch prints too); the reference's is 1."""
    baseline = {(r.batch, r.includes_transfers, r.device): r for r in rows if r.is_reference}
    for row in rows:
        base = baseline.get((row.batch, row.includes_transfers, row.device))
        if base is None or base.p50_ms <= 0 or row.p50_ms <= 0 or row.simulated:
            continue
        if row is base:
            row.speedup_vs_torch_fp32 = 1.0
            continue
        ratio = Ratio(base.round_p50_ms, row.round_p50_ms, base.p50_ms, row.p50_ms)
        row.speedup_vs_torch_fp32, row.speedup_interval = ratio.value, ratio.interval


def verdicts(rows: list[BenchRow], other_share: float | None) -> None:
    """Each row's one stability verdict (stability.row_verdict), made here once its speedup is known: every report,
    chart, headline and choice reads it from the row."""
    for row in rows:
        row.unstable = row_verdict(row.p50_ms, row.p50_interval, row.speedup_vs_torch_fp32, row.speedup_interval,
                                   other_share)


def _slower_than_float(rows: list[BenchRow]) -> None:
    """Mark each reduced-precision artifact row that runs slower than the FP32 artifact row of the same runtime,
    batch and device (paired round by round: the whole 95 % interval of the speed ratio below 1): an INT8 file on a
    CPU whose integer kernels ONNX Runtime cannot fuse is such a row, and it is no speed win, whatever its speedup
    over PyTorch. Its note says so, and select never chooses it over the faster FP32 file."""
    float_rows = {(r.backend, r.batch, r.device, r.includes_transfers): r for r in rows
                  if r.artifact and r.precision is Precision.FP32 and not r.simulated and not r.peer
                  and not r.is_reference}
    for row in rows:
        fp32 = float_rows.get((row.backend, row.batch, row.device, row.includes_transfers))
        if fp32 is None or row is fp32 or not row.artifact or row.simulated or row.precision is Precision.FP32 \
                or row.p50_ms <= 0 or fp32.p50_ms <= 0:
            continue
        ratio = Ratio(fp32.round_p50_ms, row.round_p50_ms, fp32.p50_ms, row.p50_ms)
        high = ratio.interval.high if ratio.interval is not None else ratio.value
        if high < 1.0:
            row.slower_than = fp32.variant
            spread = f", 95 % {format_interval(ratio.interval)}" if ratio.interval is not None else ""
            words = (f"slower than {fp32.variant} on the same runtime ({format_ratio(ratio.value)}x its speed"
                     f"{spread}): no speed win")
            row.note = f"{row.note}; {words}" if row.note else words
