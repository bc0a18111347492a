"""Measure PyTorch FP32 eager and every artifact, in one process, on the same inputs.

PyTorch FP32 eager is measured first and is itself a result row; each artifact's speedup is the ratio of
p50 latencies at the same batch size. Agreement with PyTorch is measured on one fixed set of samples per
model (the held-out split for a model with a bundled data set, else seeded random inputs), and accuracy is
reported wherever labels exist.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from trtpipe import console
from trtpipe.bench import environment
from trtpipe.bench.isolated import VariantSpec, host_memory_alone
from trtpipe.bench.memory import MemoryProbe
from trtpipe.bench.options import BenchOptions
from trtpipe.bench.rows import BENCH_SCHEMA, BenchRow
from trtpipe.bench.standing import peer_standing
from trtpipe.bench.timing import LatencyStats, measure
from trtpipe.comparison import compare
from trtpipe.errors import BadInput
from trtpipe.hardware import has_bf16, usable_cores
from trtpipe.models.loader import LoadedModel
from trtpipe.options import to_plain
from trtpipe.runtime.artifacts import ArtifactProfile, artifact_name, artifact_profile
from trtpipe.runtime.base import Backend
from trtpipe.runtime.registry import open_artifact
from trtpipe.runtime.torch.backend import TorchBackend
from trtpipe.vocab import ArtifactKind, BackendKind, Baseline, Device, OnnxExecution, Precision, Target, __version__

RANDOM_AGREEMENT_SAMPLES = 32
AGREEMENT_CHUNK = 64  # capped by each backend's max batch (a TensorRT profile's maximum)
MIN_ITERS = 5


@dataclass
class _Samples:
    """Inputs shared by every variant: one timing batch per size, one agreement set."""

    timing: dict[int, np.ndarray]
    agreement: np.ndarray
    labels: np.ndarray | None
    description: str


@dataclass
class _Timed:
    """One row's timing: the call it times, and its samples, one array per round."""

    row: BenchRow
    call: Callable[[], object]
    rounds: list[np.ndarray] = field(default_factory=list)
    mode: Callable[[bool], None] | None = None  # switches a process-wide setting (TF32) on for its runs, off after


class _Schedule:
    """How the timed runs of each row are split into rounds taken in turn across every variant: a slow spell of
    a shared machine (another tenant, a frequency drop) then lands on all variants alike instead of on the one
    being timed, and each row's per-round p50s show the spread. The total per row is what was asked for
    (``--duration`` seconds or ``--iters`` runs); the first round also pays the warm-up."""

    def __init__(self, options: BenchOptions) -> None:
        self.options = options
        self.count = min(options.rounds, options.iters) if options.iters else options.rounds
        self.min_iters = max(2, -(-MIN_ITERS // self.count))

    def iters(self, round_index: int) -> int | None:
        total = self.options.iters
        if total is None:
            return None
        return total // self.count + (1 if round_index < total % self.count else 0)

    def duration(self) -> float | None:
        return None if self.options.iters else self.options.duration / self.count

    def warmup(self, round_index: int) -> int:
        # Later rounds discard one run: the caches another variant just used are this one's again.
        return self.options.warmup if round_index == 0 else min(1, self.options.warmup)


def run_benchmark(loaded: LoadedModel, artifacts: list[Path], options: BenchOptions | None = None) -> dict[str, Any]:
    """Benchmark ``loaded`` in PyTorch FP32 eager and each artifact; returns the JSON-ready report, whose
    ``warnings`` repeat what the run warned about (rows skipped on this machine, and why)."""
    with console.recording_warnings() as warnings:
        report = _run_benchmark(loaded, artifacts, options or BenchOptions())
    return report | {"warnings": list(dict.fromkeys(warnings))}


def _run_benchmark(loaded: LoadedModel, artifacts: list[Path], options: BenchOptions) -> dict[str, Any]:
    threads = options.threads or usable_cores()
    artifacts = [Path(a) for a in artifacts]
    for path in artifacts:
        if not path.is_file():
            raise BadInput(f"Artifact {path} does not exist.")
    profiles = [artifact_profile(p) for p in artifacts]  # engines are checked against their sidecar here
    executions = [OnnxExecution(e) for e in options.backend]
    if OnnxExecution.OPENVINO in executions and len(executions) > 1 and not _installed(str(BackendKind.OPENVINO)):
        console.warn("OpenVINO rows skipped: OpenVINO is not installed (pip install 'trtpipe[openvino]').")
        executions.remove(OnnxExecution.OPENVINO)
    if any(p.kind is ArtifactKind.ONNX for p in profiles):
        from trtpipe.runtime.onnxruntime.providers import check_providers, provider_list

        for execution in executions:
            if execution.on_gpu:
                check_providers(provider_list(execution))
    runs = [run for path, profile in zip(artifacts, profiles, strict=True)
            for run in _runs(path, profile, executions)]
    samples = _samples(loaded, options.batches)
    rows: list[BenchRow] = []
    # PyTorch's weights are in memory before its probe starts: they are added to its host figure on the CPU.
    weights_mb = _module_bytes(loaded.module) / 1e6 if options.device == Device.CPU else 0.0
    with MemoryProbe(options.device) as reference_memory:
        reference = TorchBackend(loaded.module, loaded.sample_shape, device=options.device, threads=threads)
        _set_tf32(options.device, enabled=False)  # the baseline is true FP32
    labels = _dedupe([_label(path, profile, execution) for path, profile, execution in runs])
    schedule = _Schedule(options)
    timed: list[_Timed] = []
    # With more than one round every variant stays open until its last round; with one it is closed at once.
    with console.progress() as bar, contextlib.ExitStack() as kept:
        keep = kept if schedule.count > 1 else None
        reference_rows, reference_outputs = _bench_variant(reference, "pytorch-fp32", None, None, samples, None,
                                                           schedule, bar, reference_memory, timed, weights_mb)
        rows += reference_rows
        if options.device == Device.CUDA:
            def tf32_mode(enabled: bool) -> None:
                _set_tf32(options.device, enabled=enabled)

            tf32_mode(True)
            tf32, _ = _bench_variant(reference, "pytorch-tf32", None, None, samples, reference_outputs, schedule, bar,
                                     reference_memory, timed, weights_mb, mode=tf32_mode)
            tf32_mode(False)
            for row in tf32:
                row.precision, row.note = Precision.TF32, "PyTorch eager with TF32 matmuls and convolutions"
            rows += tf32
        for baseline in options.baselines:
            rows += _bench_baseline(loaded, Baseline(baseline), samples, reference_outputs, schedule, bar, threads,
                                    weights_mb, timed, keep)
        for (path, profile, execution), label in zip(runs, labels, strict=True):
            if profile.note:
                console.note(f"{label}: {profile.note}")
            backend_options = dict(profile.options)
            if profile.kind is ArtifactKind.ONNX and execution.on_gpu:
                from trtpipe.runtime.onnxruntime.providers import provider_list

                backend_options["providers"] = provider_list(execution, trt_profile=_trt_profile(loaded, options))
            elif execution is OnnxExecution.OPENVINO and profile.kind is ArtifactKind.ONNX:
                backend_options["runtime"] = str(BackendKind.OPENVINO)
            alone = None  # a GPU row: its device figure is the one that matters, taken below with the host one
            if not execution.on_gpu and profile.kind is ArtifactKind.ONNX:
                alone = _host_memory_alone(BackendKind(backend_options.get("runtime", profile.kind.backend)), path,
                                           backend_options, loaded, options, threads, label)
            with MemoryProbe(options.device) as memory, contextlib.ExitStack() as own:
                backend = (keep or own).enter_context(open_artifact(path, threads=threads, **backend_options))
                rows += _bench_variant(backend, label, path, profile, samples, reference_outputs, schedule, bar,
                                       memory, timed, host_alone=alone)[0]
        if options.peers:
            rows += _bench_peers(loaded, artifacts, profiles, samples, reference_outputs, schedule, bar, threads,
                                 timed, keep)
        _later_rounds(timed, schedule, bar)
    for entry in timed:
        _settle(entry)
    # Like with like: a row without host-device copies is compared with PyTorch's row without them.
    baseline = {(r.batch, r.includes_transfers): r.p50_ms for r in rows if r.is_reference}
    for row in rows:
        base = baseline.get((row.batch, row.includes_transfers))
        if base and row.p50_ms > 0 and not row.simulated:  # a simulation's latency is not the target's
            row.speedup_vs_torch_fp32 = base / row.p50_ms
    return {
        "schema": BENCH_SCHEMA,
        "trtpipe_version": __version__,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "environment": environment.collect(threads),
        "model": loaded.describe(),
        "settings": to_plain(options) | {"threads": threads},
        "agreement_inputs": samples.description,
        "results": [r.to_dict() for r in rows],
        "standing": peer_standing([r.to_dict() for r in rows]),
    }


def _samples(loaded: LoadedModel, batches: tuple[int, ...]) -> _Samples:
    data = loaded.evaluation_data()
    if data is not None:
        timing = {b: np.resize(data.images, (b, *data.images.shape[1:])) for b in batches}
        return _Samples(timing, data.images, data.labels, data.description)
    rng = np.random.default_rng(0)
    timing = {b: rng.standard_normal((b, *loaded.sample_shape), dtype=np.float32) for b in batches}
    agreement = rng.standard_normal((RANDOM_AGREEMENT_SAMPLES, *loaded.sample_shape), dtype=np.float32)
    return _Samples(timing, agreement, None, f"{RANDOM_AGREEMENT_SAMPLES} seeded random inputs (no labels)")


def _bench_variant(
    backend: Backend, label: str, artifact: Path | None, profile: ArtifactProfile | None, samples: _Samples,
    reference_outputs: np.ndarray | None, schedule: _Schedule, bar: Any, memory: MemoryProbe, timed: list[_Timed],
    extra_host_mb: float = 0.0, mode: Callable[[bool], None] | None = None,
    host_alone: dict[int, float | None] | None = None,
) -> tuple[list[BenchRow], np.ndarray]:
    """Rows of one variant, smallest batch first, timed for the first round (their entries are added to
    ``timed`` for the later ones), and its outputs on the agreement samples (compared with ``reference_outputs``;
    the reference passes None). Memory is read after each batch, before the agreement run: a row's figure is what
    loading and running up to that batch needed (the advice's memory budget uses it). ``host_alone``: the host
    figures measured in a fresh process (isolated.py), used instead of this process's."""
    options = schedule.options
    fixed_batch = backend.static_batch
    batches = sorted(b for b in options.batches if fixed_batch is None or b == fixed_batch)
    if not batches:
        console.warn(f"{label} has a static batch of {fixed_batch}, which is not among the batch sizes asked "
                     f"for ({', '.join(map(str, options.batches))}); it is skipped.")
        return [], np.empty(0)
    if fixed_batch is not None and len(options.batches) > 1:
        console.note(f"{label} has a static batch of {fixed_batch}: it is measured at that size only.")

    rows = []
    for batch in batches:
        feeds = backend.feeds(samples.timing[batch])
        calls: list[tuple[str, Callable[[], object], bool]] = [
            (label, lambda feeds=feeds: backend._run(feeds), True)]
        resident = getattr(backend, "device_resident_call", None)
        call = resident(feeds) if resident is not None else None
        if call is not None:  # on a GPU: also the latency without host-device copies
            calls.append((f"{label} [no transfers]", call, False))
        entries = []
        for variant, run, transfers in calls:
            row = BenchRow(variant=variant, backend=str(backend.kind), precision=str(backend.precision),
                           device=str(backend.device), batch=batch, iters=0, p50_ms=0.0, p90_ms=0.0, p99_ms=0.0,
                           mean_ms=0.0, std_ms=0.0, min_ms=0.0, max_ms=0.0, throughput=0.0,
                           **_artifact_fields(artifact, profile), includes_transfers=transfers)
            entry = _Timed(row, run, mode=mode)
            _time_round(entry, schedule, 0, bar)
            entries.append(entry)
        memory.read()
        for entry in entries:
            stats = LatencyStats.from_samples(entry.rounds[0], batch)
            console.note(f"{entry.row.variant} batch {batch:>3}: p50 {stats.p50_ms:8.2f} ms  p99 {stats.p99_ms:8.2f} "
                         f"ms  {stats.throughput:9.1f} items/s  ({stats.iters} runs"
                         f"{', round 1 of ' + str(schedule.count) if schedule.count > 1 else ''})")
            if host_alone is not None:
                entry.row.host_memory_mb = host_alone.get(batch)
            else:
                entry.row.host_memory_mb = None if memory.host_mb is None else memory.host_mb + extra_host_mb
            entry.row.device_memory_mb = memory.device_mb
            _settle(entry)
            rows.append(entry.row)
        timed += entries
    outputs = backend.run_chunked(samples.agreement, AGREEMENT_CHUNK)
    reference = outputs if reference_outputs is None else reference_outputs
    comparison = compare(reference[: len(outputs)], outputs, samples.labels)
    for row in rows:
        row.max_abs_err, row.max_rel_err, row.cosine = comparison.max_abs_err, comparison.max_rel_err, comparison.cosine
        row.top1_agreement, row.top1_accuracy = comparison.top1_agreement, comparison.accuracy
        row.reference_accuracy, row.agreement_samples = comparison.reference_accuracy, comparison.samples
    return rows, outputs


def _time_round(entry: _Timed, schedule: _Schedule, round_index: int, bar: Any) -> None:
    """Time one round of ``entry`` (its share of the runs asked for) and keep the samples."""
    round_name = f" (round {round_index + 1}/{schedule.count})" if schedule.count > 1 else ""
    iters = schedule.iters(round_index)
    task = bar.add_task(f"{entry.row.variant} batch {entry.row.batch}{round_name}", total=iters)
    switch = entry.mode if round_index > 0 else None  # the first round runs inside its caller's setting
    if switch:
        switch(True)
    try:
        entry.rounds.append(measure(entry.call, warmup=schedule.warmup(round_index), iters=iters,
                                    duration_s=schedule.duration(), min_iters=schedule.min_iters,
                                    on_iteration=lambda: bar.advance(task)))
    finally:
        if switch:
            switch(False)
        bar.remove_task(task)


def _later_rounds(timed: list[_Timed], schedule: _Schedule, bar: Any) -> None:
    """Rounds 2..N: per batch, every row in turn, the order reversed every other round (no row always follows
    the same one)."""
    for round_index in range(1, schedule.count):
        for batch in sorted({entry.row.batch for entry in timed}):
            entries = [entry for entry in timed if entry.row.batch == batch]
            for entry in entries if round_index % 2 == 0 else reversed(entries):
                _time_round(entry, schedule, round_index, bar)


def _settle(entry: _Timed) -> None:
    """Write the statistics of every round so far into the row, and each round's p50 when there are several."""
    stats = LatencyStats.from_samples(np.concatenate(entry.rounds), entry.row.batch)
    for name, value in stats.to_dict().items():
        setattr(entry.row, name, value)
    entry.row.round_p50_ms = [float(np.median(r)) for r in entry.rounds] if len(entry.rounds) > 1 else None


def _artifact_fields(artifact: Path | None, profile: ArtifactProfile | None) -> dict[str, Any]:
    return {
        "artifact": str(artifact) if artifact else None,
        "target": str(profile.target) if profile and profile.target else None,
        "simulated": bool(profile and profile.simulated), "note": profile.note if profile else None,
        "model_size_mb": profile.size_bytes / 1e6 if profile else None,
        "build_seconds": profile.build_seconds if profile else None,
    }


def _bench_baseline(loaded: LoadedModel, baseline: Baseline, samples: _Samples, reference_outputs: np.ndarray,
                    schedule: _Schedule, bar: Any, threads: int, weights_mb: float, timed: list[_Timed],
                    keep: contextlib.ExitStack | None) -> list[BenchRow]:
    """A PyTorch row users would deploy instead: torch.compile FP32, or eager under BF16/FP16 autocast."""
    device = schedule.options.device
    cuda = device == Device.CUDA
    autocast = None
    if baseline is Baseline.AUTOCAST:
        autocast = Precision.FP16 if cuda else Precision.BF16
        if not cuda and not has_bf16():
            console.warn("pytorch-bf16-autocast skipped: this CPU has neither AVX512-BF16 nor AMX (BF16 would be "
                         "emulated, slower than FP32).")
            return []
    label = f"pytorch-{autocast}-autocast" if autocast else "pytorch-fp32-compile"
    with MemoryProbe(device) as memory, contextlib.ExitStack() as own:
        backend = (keep or own).enter_context(
            TorchBackend(loaded.module, loaded.sample_shape, device=device, threads=threads,
                         compile=baseline is Baseline.COMPILE, autocast=autocast))
        rows = _bench_variant(backend, label, None, None, samples, reference_outputs, schedule, bar, memory, timed,
                              weights_mb)[0]
    for row in rows:
        row.baseline = str(baseline)
    return rows


def _bench_peers(loaded: LoadedModel, artifacts: list[Path], profiles: list[ArtifactProfile], samples: _Samples,
                 reference_outputs: np.ndarray, schedule: _Schedule, bar: Any, threads: int, timed: list[_Timed],
                 keep: contextlib.ExitStack | None) -> list[BenchRow]:
    """Rows of the quantizers users would pick instead, made from the first FP32 ONNX artifact."""
    import tempfile

    from trtpipe.bench.peers import make_peers

    fp32 = next((path for path, profile in zip(artifacts, profiles, strict=True)
                 if profile.kind is ArtifactKind.ONNX and profile.precision is Precision.FP32), None)
    if fp32 is None:
        console.warn("Peers skipped: they quantize an FP32 ONNX, and none is among the artifacts.")
        return []
    rows: list[BenchRow] = []
    with contextlib.ExitStack() as own:
        folder = (keep or own).enter_context(tempfile.TemporaryDirectory(prefix="trtpipe-peers-"))
        for peer in make_peers(fp32, loaded.calibration_data(), Path(folder)):
            alone = _host_memory_alone(peer.backend, peer.path, {}, loaded, schedule.options, threads, peer.label)
            with MemoryProbe(schedule.options.device) as memory, contextlib.ExitStack() as own_peer:
                backend = (keep or own_peer).enter_context(peer.open(threads))
                peer_rows = _bench_variant(backend, peer.label, None, None, samples, reference_outputs, schedule,
                                           bar, memory, timed, host_alone=alone)[0]
            for row in peer_rows:
                row.peer = peer.tool
            rows += peer_rows
    return rows


def _host_memory_alone(kind: BackendKind, path: Path, backend_options: dict[str, Any], loaded: LoadedModel,
                       options: BenchOptions, threads: int, label: str) -> dict[int, float | None]:
    """A CPU row's host memory, measured in a fresh process (isolated.py says why)."""
    plain = {key: value for key, value in backend_options.items() if key != "runtime"}
    spec = VariantSpec(str(kind), str(path), tuple(loaded.sample_shape), tuple(options.batches), threads, plain)
    return host_memory_alone(spec, label)


def _installed(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # in sys.modules as None: an import of it fails
        return False


def _module_bytes(module: Any) -> int:
    """Bytes of a PyTorch module's parameters and buffers."""
    tensors = [*module.parameters(), *module.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)


def _trt_profile(loaded: LoadedModel, options: BenchOptions) -> tuple[str, str, str]:
    """The TensorRT provider's profile: batch 1 to the largest batch bench runs (the sweep or agreement chunks)."""
    largest = max(*options.batches, AGREEMENT_CHUNK)
    dims = "x".join(map(str, loaded.sample_shape))
    return f"input:1x{dims}", f"input:{max(options.batches)}x{dims}", f"input:{largest}x{dims}"


def _set_tf32(device: str, *, enabled: bool) -> None:
    if device == Device.CUDA:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled


def _runs(path: Path, profile: ArtifactProfile,
          executions: list[OnnxExecution]) -> list[tuple[Path, ArtifactProfile, OnnxExecution]]:
    """(artifact, how it is run, execution) for each row set an artifact gets: an engine and a file pinned to one
    runtime (BF16 on OpenVINO) once; an ONNX file once per execution asked for, except a TensorRT-target INT8 on
    OpenVINO (its Q/DQ are made for TensorRT: OpenVINO's integer kernels would not run TensorRT's arithmetic)."""
    if profile.kind is not ArtifactKind.ONNX or profile.pinned_runtime:
        pinned = OnnxExecution.OPENVINO if profile.backend is BackendKind.OPENVINO else executions[0]
        return [(path, profile, pinned)]
    runs = []
    for execution in executions:
        if execution is OnnxExecution.CPU:
            runs.append((path, profile, execution))
        elif execution is OnnxExecution.OPENVINO and profile.precision is Precision.INT8 \
                and profile.target is Target.TENSORRT:
            console.note(f"{artifact_name(path)}: a TensorRT-target INT8 file is not run on OpenVINO.")
        else:  # a GPU provider or OpenVINO runs the Q/DQ itself: nothing is simulated
            runs.append((path, replace(profile, options={}, simulated=False, note=None), execution))
    return runs


def _label(path: Path, profile: ArtifactProfile, execution: OnnxExecution) -> str:
    """A variant's name: how it runs, its precision (and INT8 target), and which model file it is."""
    runs = str(profile.backend) if profile.kind is not ArtifactKind.ONNX else str(execution)
    flavour = str(profile.precision)
    if profile.simulated:
        flavour += "-trtsim"  # TensorRT's arithmetic, simulated here
    elif profile.target and profile.precision is Precision.INT8:
        flavour += f"-{profile.target}"
    return f"{runs}-{flavour} ({artifact_name(path)})"


def _dedupe(labels: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
    return out
