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
from trtpipe.bench.identity import check_weights
from trtpipe.bench.isolated import VariantSpec, host_memory_alone
from trtpipe.bench.memory import MemoryProbe
from trtpipe.bench.options import BenchOptions
from trtpipe.bench.reference import REFERENCE, OnnxReference
from trtpipe.bench.rows import BENCH_SCHEMA, BenchRow
from trtpipe.bench.standing import peer_standing, pytorch_standing
from trtpipe.bench.timing import LatencyStats, measure
from trtpipe.comparison import compare
from trtpipe.errors import BadInput
from trtpipe.hardware import cpu_class, has_bf16, usable_cores
from trtpipe.inputs import Batch, InputSpec, fed_as, random_batch, resize
from trtpipe.models.loader import LoadedModel
from trtpipe.options import to_plain
from trtpipe.runtime.artifacts import ArtifactDescription, artifact_name, check_cpu, describe_artifact
from trtpipe.runtime.base import Backend
from trtpipe.runtime.options import RunOptions
from trtpipe.runtime.registry import open_artifact
from trtpipe.runtime.torch.backend import TorchBackend
from trtpipe.vocab import (
    ArtifactKind,
    BackendKind,
    Baseline,
    Device,
    OnnxExecution,
    Precision,
    Target,
    Task,
    __version__,
)

RANDOM_AGREEMENT_SAMPLES = 32
PROFILE_RUNS = 200  # --profile-layers: at most this many profiled runs per variant and batch
RANDOM_WEIGHTS = "random weights: accuracy not measured"
AGREEMENT_CHUNK = 64  # capped by each backend's max batch (a TensorRT profile's maximum)
MIN_ITERS = 5


@dataclass
class _Samples:
    """Inputs shared by every variant: one timing batch per size, one agreement set."""

    timing: dict[int, Batch]  # a batch: one array, or {input name: array} for a model of several inputs
    agreement: Batch
    labels: np.ndarray | None
    description: str
    # Why the task's agreement would mean nothing on these samples (random weights on random inputs), or None.
    unmeasured: str | None = None


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


def run_benchmark(loaded: LoadedModel | OnnxReference, artifacts: list[Path],
                  options: BenchOptions | None = None) -> dict[str, Any]:
    """Benchmark ``loaded`` in PyTorch FP32 eager and each artifact; returns the JSON-ready report, whose
    ``warnings`` repeat what the run warned about (rows skipped on this machine, and why)."""
    with console.recording_warnings() as warnings:
        report = _run_benchmark(loaded, artifacts, options or BenchOptions())
    return report | {"warnings": list(dict.fromkeys(warnings))}


@dataclass(frozen=True)
class _Run:
    """One row set: an artifact as it is run, the execution that runs it, and the rows' name."""

    description: ArtifactDescription
    execution: OnnxExecution
    label: str


def _run_benchmark(loaded: LoadedModel | OnnxReference, artifacts: list[Path],
                   options: BenchOptions) -> dict[str, Any]:
    threads = options.threads or usable_cores()
    paths = [Path(a) for a in artifacts] + ([Path(options.load_engine)] if options.load_engine else [])
    descriptions = [_describe(path, options) for path in paths]  # engines are checked against their sidecar
    check_weights(loaded, descriptions)  # an artifact of another model than the reference's is refused
    runs = _plan_runs(descriptions, _executions(options, descriptions))
    if options.profile_layers and not any(d.kind is ArtifactKind.TENSORRT_ENGINE for d in descriptions):
        console.warn("--profile-layers times the layers of TensorRT engines, and no engine is among the artifacts.")
    samples = _samples(loaded, options.batches)
    # With more than one round every variant stays open until its last round; with one it is closed at once.
    with console.progress() as bar, contextlib.ExitStack() as kept:
        bench = _Bench(loaded, options, threads, samples, _Schedule(options), bar, kept)
        bench.reference()
        for baseline in options.baselines if options.baselines is not None else Baseline.defaults(options.device):
            bench.baseline(baseline)
        for run in runs:
            bench.artifact(run)
        if options.peers:
            bench.peers(descriptions)
        bench.later_rounds()
    rows = bench.settled_rows()
    _speedups(rows)
    return {
        "schema": BENCH_SCHEMA,
        "trtpipe_version": __version__,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "environment": environment.collect(threads),
        "model": loaded.describe(),
        "reference": REFERENCE if loaded.module is None else "PyTorch FP32 eager",
        "settings": to_plain(options) | {"threads": threads},
        "task": bench.task,
        "agreement_inputs": _agreement_inputs(samples, rows, bench.task),
        "results": [r.to_dict() for r in rows],
        "standing": peer_standing([r.to_dict() for r in rows]),
        "standing_pytorch": pytorch_standing([r.to_dict() for r in rows]),
    } | ({"layer_timing": bench.layer_timing} if options.profile_layers else {})


def _describe(path: Path, options: BenchOptions) -> ArtifactDescription:
    """An artifact's description; an engine without a matching trtpipe sidecar only with --trust-engine (refused in
    one line before TensorRT reads it), described by what the engine will say once loaded. ``--load-engine`` names an
    engine whatever its suffix (trtexec's are often .trt)."""
    engine = ArtifactKind.for_path(path.name) is ArtifactKind.TENSORRT_ENGINE or path == options.load_engine
    if not engine:
        description = describe_artifact(path)
        if not all(execution.on_gpu for execution in options.backend):  # it runs on this CPU: is it safe here?
            check_cpu(description, cpu_class(), allow=options.allow_cpu_mismatch)
        return description
    if not path.is_file():
        raise BadInput(f"Engine {path} does not exist.")
    from trtpipe.runtime.tensorrt.backend import describe_engine

    return describe_engine(path, trusted=options.trust_engine)


def _agreement_inputs(samples: _Samples, rows: list[BenchRow], task: Task | None) -> str:
    """What agreement was measured on and by which measure: the sentence every report's heading prints."""
    if samples.unmeasured:
        return f"{samples.description}; {samples.unmeasured}"
    name = next((r.agreement_name for r in rows if r.agreement_name), None)
    measure = f"; task {task}: Agreement is {name}" if name else f"; task {task}: no task figure" if task else ""
    return samples.description + measure


def _executions(options: BenchOptions, descriptions: list[ArtifactDescription]) -> list[OnnxExecution]:
    """How ONNX files are run, as asked: OpenVINO dropped with one line where it is not installed and something
    else is asked too; a GPU provider that is not installed refused before anything runs."""
    executions = list(options.backend)
    if OnnxExecution.OPENVINO in executions and len(executions) > 1 and not _installed(BackendKind.OPENVINO.library):
        console.warn("OpenVINO rows skipped: OpenVINO is not installed (pip install 'trtpipe[openvino]').")
        executions.remove(OnnxExecution.OPENVINO)
    if any(d.kind is ArtifactKind.ONNX for d in descriptions):
        from trtpipe.runtime.onnxruntime.providers import check_providers, provider_list

        for execution in executions:
            if execution.on_gpu:
                check_providers(provider_list(execution))
    return executions


def _plan_runs(descriptions: list[ArtifactDescription], executions: list[OnnxExecution]) -> list[_Run]:
    """Every row set, in order, each with a name no other has."""
    pairs = [pair for description in descriptions for pair in _runs(description, executions)]
    labels = _dedupe([_label(description, execution) for description, execution in pairs])
    return [_Run(description, execution, label) for (description, execution), label in zip(pairs, labels,
                                                                                            strict=True)]


def _speedups(rows: list[BenchRow]) -> None:
    """Like with like: a row without host-device copies is compared with PyTorch's row without them, and only on
    the reference's device (a CPU row against a GPU reference is no speedup); a simulation's latency is not the
    target's, so it gets none."""
    baseline = {(r.batch, r.includes_transfers, r.device): r.p50_ms for r in rows if r.is_reference}
    for row in rows:
        base = baseline.get((row.batch, row.includes_transfers, row.device))
        if base and row.p50_ms > 0 and not row.simulated:
            row.speedup_vs_torch_fp32 = base / row.p50_ms


def _samples(loaded: LoadedModel | OnnxReference, batches: tuple[int, ...]) -> _Samples:
    data = loaded.evaluation_data()
    if data is not None:
        timing = {b: resize(data.images, b) for b in batches}
        return _Samples(timing, data.images, data.labels, data.description)
    rng = np.random.default_rng(0)
    timing = {b: random_batch(loaded.inputs, b, rng) for b in batches}
    agreement = random_batch(loaded.inputs, RANDOM_AGREEMENT_SAMPLES, rng)
    # A registry network without data of its own has seeded random weights: its "classes" on noise are no answer
    # an optimization could keep or lose, so only the output errors are reported.
    unmeasured = RANDOM_WEIGHTS if loaded.source_kind == "registry" else None
    plain = len(loaded.inputs) == 1 and loaded.inputs[0].dtype == "float32" and loaded.inputs[0].value_range is None
    drawn = "" if plain else f": {'; '.join(s.describe_random() for s in loaded.inputs)}"
    return _Samples(timing, agreement, None, f"{RANDOM_AGREEMENT_SAMPLES} seeded random inputs (no labels{drawn})",
                    unmeasured)


class _Bench:
    """What one benchmark run shares across its variants: the model, options, samples and round schedule, the
    progress bar, the variants kept open for later rounds, the timed entries and the rows made so far."""

    def __init__(self, loaded: LoadedModel | OnnxReference, options: BenchOptions, threads: int, samples: _Samples,
                 schedule: _Schedule, bar: Any, kept: contextlib.ExitStack) -> None:
        self.loaded, self.options, self.threads = loaded, options, threads
        self.samples, self.schedule, self.bar = samples, schedule, bar
        self.keep = kept if schedule.count > 1 else None  # one round: each variant is closed once timed
        self.timed: list[_Timed] = []
        self.rows: list[BenchRow] = []
        self.layer_timing: list[dict[str, Any]] = []  # --profile-layers: one entry per TensorRT variant and batch
        self.reference_outputs: list[np.ndarray] | None = None
        self.task: Task | None = loaded.task
        # PyTorch's weights are in memory before its probe starts: they are added to its host figure on the CPU.
        self.torch_weights_mb = (_module_bytes(loaded.module) / 1e6
                                 if options.device is Device.CPU and loaded.module is not None else 0.0)

    def _hold(self, backend: Backend, own: contextlib.ExitStack) -> Backend:
        """Keep ``backend`` open until the last round (several rounds), else until the caller's block ends."""
        return (self.keep or own).enter_context(backend)

    def reference(self) -> None:
        """PyTorch FP32 eager, the reference every other row is compared with (and TF32 beside it on a GPU); for an
        ONNX model, that file on ONNX Runtime CPU."""
        if self.loaded.module is None:
            self._onnx_reference()
            return
        device = self.options.device
        with MemoryProbe(device) as memory:
            reference = TorchBackend(self.loaded.module, self.loaded.inputs, device=device,
                                     threads=self.threads)
            _set_tf32(device, enabled=False)  # the baseline is true FP32
        rows, self.reference_outputs = self._variant(reference, "pytorch-fp32", memory,
                                                     extra_host_mb=self.torch_weights_mb)
        for row in rows:
            row.reference = True
        self.rows += rows
        if device is Device.CUDA:
            def tf32_mode(enabled: bool) -> None:
                _set_tf32(device, enabled=enabled)

            tf32_mode(True)
            tf32 = self._variant(reference, "pytorch-tf32", memory, extra_host_mb=self.torch_weights_mb,
                                 mode=tf32_mode)[0]
            tf32_mode(False)
            for row in tf32:
                row.precision, row.note = Precision.TF32, "PyTorch eager with TF32 matmuls and convolutions"
            self.rows += tf32

    def _onnx_reference(self) -> None:
        """The FP32 ONNX file as the reference, where the run is: on ONNX Runtime CUDA with ``--device cuda`` (a GPU
        row compared with a CPU one would be no speedup), else on ONNX Runtime CPU."""
        path = Path(self.loaded.path)
        settings = RunOptions(threads=self.threads)
        execution = OnnxExecution.CUDA if self.options.device is Device.CUDA else OnnxExecution.CPU
        alone = None
        if execution.on_gpu:
            from trtpipe.runtime.onnxruntime.providers import provider_list

            settings = replace(settings, providers=tuple(provider_list(execution)))
        else:
            alone = self._host_memory_alone(BackendKind.ONNXRUNTIME, path, settings, "reference")
        with MemoryProbe(self.options.device) as memory, contextlib.ExitStack() as own:
            backend = self._hold(open_artifact(path, settings, runtime=BackendKind.ONNXRUNTIME), own)
            rows, self.reference_outputs = self._variant(backend, f"{execution}-fp32 ({self.loaded.name}, reference)",
                                                         memory, host_alone=alone)
        for row in rows:
            row.reference, row.note = True, f"the reference: {REFERENCE}"
        self.rows += rows

    def baseline(self, baseline: Baseline) -> None:
        """A PyTorch row users would deploy instead (:func:`_baseline_setup` says which and how); a row this machine
        cannot run is skipped with one line saying why."""
        if self.loaded.module is None:
            console.warn(f"pytorch-{baseline} skipped: the model was given as an ONNX file, with no PyTorch module.")
            return
        device = self.options.device
        setup = _baseline_setup(baseline, device)
        if isinstance(setup, str):
            console.warn(setup)
            return
        label, keywords = setup
        with MemoryProbe(device) as memory, contextlib.ExitStack() as own:
            backend = self._hold(TorchBackend(self.loaded.module, self.loaded.inputs, device=device,
                                              threads=self.threads, **keywords), own)
            rows = self._variant(backend, label, memory, extra_host_mb=self.torch_weights_mb)[0]
        for row in rows:
            row.baseline = baseline
        self.rows += rows

    def artifact(self, run: _Run) -> None:
        """The rows of one artifact as ``run`` runs it; a CPU row's host memory is measured alone, first."""
        description, execution = run.description, run.execution
        if description.note:
            console.note(f"{run.label}: {description.note}")
        asked = RunOptions(threads=self.threads)
        runtime = description.backend
        if runtime is BackendKind.TENSORRT:
            asked = replace(asked, cuda_graph=self.options.cuda_graph, spin_wait=self.options.spin_wait)
        if description.kind is ArtifactKind.ONNX and not description.pinned_runtime:
            runtime = execution.backend
            if execution.on_gpu:
                from trtpipe.runtime.onnxruntime.providers import provider_list

                trt_profile = _trt_profile(description, self.loaded.inputs, self.options)
                asked = replace(asked, providers=tuple(provider_list(execution, trt_profile=trt_profile,
                                                                     trt_workspace=self.options.workspace)))
                description = self._tuned(description, execution, asked)
        settings = description.settings_for(runtime, asked)
        alone = None  # a GPU row: its device figure is the one that matters, taken below with the host one
        if not execution.on_gpu and description.kind is ArtifactKind.ONNX:
            alone = self._host_memory_alone(runtime, Path(str(description.path)), settings, run.label)
        with MemoryProbe(self.options.device) as memory, contextlib.ExitStack() as own:
            backend = self._hold(_open(description, settings, runtime), own)
            self.rows += self._variant(backend, run.label, memory, description=description, host_alone=alone)[0]

    def _tuned(self, description: ArtifactDescription, execution: OnnxExecution,
               asked: RunOptions) -> ArtifactDescription:
        """``description`` with the settings a probe chose for ``execution``: recorded beside the artifact already,
        else probed now on the largest batch the run times (``--tune``; bench/tune.py)."""
        from trtpipe.bench.tune import candidates, tune_artifact

        if description.tuned.get(execution) is not None or not self.options.tune or description.path is None \
                or not candidates(execution):
            return description
        first = description.inputs[0].shape[0] if description.inputs and description.inputs[0].shape else None
        batch = first if isinstance(first, int) else max(self.options.batches)  # a static batch: its own size
        if batch not in self.samples.timing:
            return description
        run = tune_artifact(description, execution, self.samples.timing[batch], base=asked)
        return replace(description, tuned={**description.tuned, execution: run.settings})

    def peers(self, descriptions: list[ArtifactDescription]) -> None:
        """Rows of the quantizers users would pick instead, made from the first FP32 ONNX artifact."""
        import tempfile

        from trtpipe.bench.peers import make_peers

        fp32 = next((d.path for d in descriptions
                     if d.kind is ArtifactKind.ONNX and d.precision is Precision.FP32), None)
        if fp32 is None:
            console.warn("Peers skipped: they quantize an FP32 ONNX, and none is among the artifacts.")
            return
        with contextlib.ExitStack() as own:
            folder = self._hold_folder(tempfile.TemporaryDirectory(prefix="trtpipe-peers-"), own)
            for peer in make_peers(fp32, self.loaded.calibration_data(), Path(folder)):
                alone = self._host_memory_alone(peer.backend, peer.path, RunOptions(threads=self.threads),
                                                peer.label)
                with MemoryProbe(self.options.device) as memory, contextlib.ExitStack() as own_peer:
                    backend = self._hold(peer.open(self.threads), own_peer)
                    rows = self._variant(backend, peer.label, memory, host_alone=alone)[0]
                for row in rows:
                    row.peer = peer.tool
                self.rows += rows

    def _hold_folder(self, folder: Any, own: contextlib.ExitStack) -> str:
        return (self.keep or own).enter_context(folder)

    def _host_memory_alone(self, kind: BackendKind, path: Path, settings: RunOptions,
                           label: str) -> dict[int, float | None]:
        """A CPU row's host memory, measured in a fresh process (isolated.py says why)."""
        spec = VariantSpec(kind, str(path), tuple(self.loaded.inputs), tuple(self.options.batches),
                           settings.to_plain())
        return host_memory_alone(spec, label)

    def _variant(self, backend: Backend, label: str, memory: MemoryProbe, *,
                 description: ArtifactDescription | None = None, extra_host_mb: float = 0.0,
                 mode: Callable[[bool], None] | None = None,
                 host_alone: dict[int, float | None] | None = None) -> tuple[list[BenchRow], list[np.ndarray]]:
        """Rows of one variant, smallest batch first, timed for the first round (their entries are kept for the
        later ones), and its outputs on the agreement samples (compared with the reference's; the reference
        itself has none yet). Memory is read after each batch, before the agreement run: a row's figure is what
        loading and running up to that batch needed (the advice's memory budget uses it). ``host_alone``: the
        host figures measured in a fresh process (isolated.py), used instead of this process's."""
        batches = self._batches(backend, label)
        rows = []
        for batch in batches:
            entries = [self._first_round(_Timed(row, call, mode=mode))
                       for row, call in self._calls(backend, label, description, batch)]
            memory.read()
            for entry in entries:
                self._report_first_round(entry)
                entry.row.host_memory_mb = host_alone.get(batch) if host_alone is not None else (
                    None if memory.host_mb is None else memory.host_mb + extra_host_mb)
                entry.row.device_memory_mb = memory.device_mb
                _settle(entry)
                rows.append(entry.row)
            self.timed += entries
            self._engine_facts(backend, label, batch, entries)
        if not batches:
            return [], []
        return rows, self._agreement(backend, rows)

    def _engine_facts(self, backend: Backend, label: str, batch: int, entries: list[_Timed]) -> None:
        """A TensorRT variant's rows say whether their runs replayed a CUDA graph; with --profile-layers, the
        batch's layer times, taken after its timed runs (and after its memory was read) on a context of their own."""
        from trtpipe.runtime.tensorrt.backend import TensorRTBackend

        if backend.kind is BackendKind.ONNXRUNTIME and backend.device is Device.CUDA:
            for entry in entries:
                entry.row.cuda_graph = bool(getattr(backend, "replays_graph", False))
        if not isinstance(backend, TensorRTBackend):
            return
        feeds = backend.feeds(_fed(backend, self.samples.timing[batch]))
        replayed = backend.replays_graph(feeds)
        for entry in entries:
            entry.row.cuda_graph = replayed
        if self.options.profile_layers:  # as many runs as the row's timed ones (--iters, else the first round's)
            timed = self.options.iters or len(entries[0].rounds[0]) * self.schedule.count
            runs = max(1, min(PROFILE_RUNS, timed))
            if not any(e["variant"] == label for e in self.layer_timing):
                console.note(f"{label}: layer timing in {runs} separate runs per batch, on an execution context "
                             "of their own and without a CUDA graph (TensorRT's profiler adds events and a "
                             "synchronisation per layer); the timed rows are not profiled.")
            self.layer_timing.append({"variant": label, "batch": batch, **backend.profile_layers(feeds, runs)})

    def _batches(self, backend: Backend, label: str) -> list[int]:
        """The batch sizes asked for that the backend takes (a static batch: that size only, or none)."""
        asked = self.options.batches
        fixed, largest = backend.static_batch, backend.max_batch
        batches = sorted(b for b in asked if (fixed is None or b == fixed) and (largest is None or b <= largest))
        above = sorted(b for b in asked if fixed is None and largest is not None and b > largest)
        if above and batches:
            console.note(f"{label} takes batches up to {largest}: batch {', '.join(map(str, above))} is not measured.")
        if not batches and above:
            console.warn(f"{label} takes batches up to {largest}, below every batch size asked for "
                         f"({', '.join(map(str, asked))}); it is skipped.")
        elif not batches:
            console.warn(f"{label} has a static batch of {fixed}, which is not among the batch sizes asked for "
                         f"({', '.join(map(str, asked))}); it is skipped.")
        elif fixed is not None and len(asked) > 1:
            console.note(f"{label} has a static batch of {fixed}: it is measured at that size only.")
        return batches

    def _calls(self, backend: Backend, label: str, description: ArtifactDescription | None,
               batch: int) -> list[tuple[BenchRow, Callable[[], object]]]:
        """The timed calls of one batch, each with its empty row: the plain call, and on a GPU the call on inputs
        already in device memory (the latency without host-device copies)."""
        timing = _fed(backend, self.samples.timing[batch])
        calls: list[tuple[str, Callable[[], object], bool]] = [(label, backend.bind(timing), True)]
        resident = backend.device_resident_call(backend.feeds(timing))
        if resident is not None:
            calls.append((f"{label} [no transfers]", resident, False))
        return [(BenchRow(variant=variant, backend=backend.kind, precision=backend.precision, device=backend.device,
                          batch=batch, iters=0, p50_ms=0.0, p90_ms=0.0, p99_ms=0.0, mean_ms=0.0, std_ms=0.0,
                          min_ms=0.0, max_ms=0.0, throughput=0.0, **_artifact_fields(description),
                          includes_transfers=transfers), call)
                for variant, call, transfers in calls]

    def _first_round(self, entry: _Timed) -> _Timed:
        _time_round(entry, self.schedule, 0, self.bar)
        return entry

    def _report_first_round(self, entry: _Timed) -> None:
        stats = LatencyStats.from_samples(entry.rounds[0], entry.row.batch)
        rounds = self.schedule.count
        console.note(f"{entry.row.variant} batch {entry.row.batch:>3}: p50 {stats.p50_ms:8.2f} ms  p99 "
                     f"{stats.p99_ms:8.2f} ms  {stats.throughput:9.1f} items/s  ({stats.iters} runs"
                     f"{', round 1 of ' + str(rounds) if rounds > 1 else ''})")

    def _agreement(self, backend: Backend, rows: list[BenchRow]) -> list[np.ndarray]:
        """The variant's outputs on the agreement samples, and its rows' fidelity to the reference's: every output
        compared (the worst named), and the task's figure (the reference's own run fixes the task)."""
        outputs = backend.run_chunked(_fed(backend, self.samples.agreement), AGREEMENT_CHUNK)
        reference = outputs if self.reference_outputs is None else self.reference_outputs
        if len(reference) != len(outputs):
            raise BadInput(f"{rows[0].variant} has {len(outputs)} outputs and the reference {len(reference)}: the "
                           "artifact is not of this model (convert it again).")
        usable = len(outputs[0])
        comparison = compare([r[:usable] for r in reference], outputs, self.samples.labels, task=self.task,
                             names=[t.name for t in backend.outputs], decoder=self.loaded.decoder)
        self.task = comparison.task
        measured = self.samples.unmeasured is None
        for row in rows:
            row.max_abs_err, row.max_rel_err, row.cosine = (comparison.max_abs_err, comparison.max_rel_err,
                                                            comparison.cosine)
            row.worst_output, row.task = comparison.worst_output, comparison.task
            row.agreement_samples = comparison.samples
            if measured:
                row.top1_agreement, row.agreement, row.agreement_name = (
                    comparison.top1_agreement, comparison.agreement, comparison.agreement_name)
                row.top1_accuracy, row.reference_accuracy = comparison.accuracy, comparison.reference_accuracy
            row.note = "; ".join(filter(None, [row.note, None if measured else self.samples.unmeasured,
                                               comparison.note]))  or None
        return outputs

    def later_rounds(self) -> None:
        """Rounds 2..N: per batch, every row in turn, the order reversed every other round (no row always follows
        the same one)."""
        for round_index in range(1, self.schedule.count):
            for batch in sorted({entry.row.batch for entry in self.timed}):
                entries = [entry for entry in self.timed if entry.row.batch == batch]
                for entry in entries if round_index % 2 == 0 else reversed(entries):
                    _time_round(entry, self.schedule, round_index, self.bar)

    def settled_rows(self) -> list[BenchRow]:
        """Every row, with the statistics of all its rounds."""
        for entry in self.timed:
            _settle(entry)
        return self.rows


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


def _settle(entry: _Timed) -> None:
    """Write the statistics of every round so far into the row, and each round's p50 when there are several."""
    stats = LatencyStats.from_samples(np.concatenate(entry.rounds), entry.row.batch)
    for name, value in stats.to_dict().items():
        setattr(entry.row, name, value)
    entry.row.round_p50_ms = [float(np.median(r)) for r in entry.rounds] if len(entry.rounds) > 1 else None


def _artifact_fields(description: ArtifactDescription | None) -> dict[str, Any]:
    if description is None:
        return {"artifact": None, "target": None, "simulated": False, "note": None, "model_size_mb": None,
                "build_seconds": None}
    return {
        "artifact": str(description.path), "target": description.target, "simulated": description.simulated,
        "note": description.note, "model_size_mb": description.size_bytes / 1e6,
        "build_seconds": description.build_seconds,
    }


def _baseline_setup(baseline: Baseline, device: Device) -> tuple[str, dict[str, Any]] | str:
    """A PyTorch baseline's row name and TorchBackend keywords on ``device``, or why it is skipped here.

    On a GPU the half-precision rows are FP16 channels_last, as a PyTorch user tunes a CNN for Tensor Cores; on a
    CPU they are BF16 where it has BF16 kernels (AVX512-BF16 or AMX), else skipped (emulated BF16 is slower)."""
    cuda = device is Device.CUDA
    half = Precision.FP16 if cuda else Precision.BF16
    if baseline is Baseline.COMPILE:
        return "pytorch-fp32-compile", {"compile": True}
    if baseline is Baseline.GRAPH_HALF and not cuda:
        return "pytorch-graph-half skipped: a CUDA graph needs --device cuda."
    # reduce-overhead is torch.compile's CUDA-graph mode; on a CPU it has no graphs to use.
    setups: dict[Baseline, tuple[str, dict[str, Any]]] = {
        Baseline.AUTOCAST: (f"pytorch-{half}-autocast", {"autocast": half}),
        Baseline.GRAPH_HALF: (f"pytorch-{half}-cl-cudagraph", {"half": half, "channels_last": True,
                                                               "cuda_graph": True}),
        Baseline.MAX_AUTOTUNE: (f"pytorch-{half}{'-cl' if cuda else ''}-compile-max-autotune",
                                {"half": half, "channels_last": cuda, "compile_mode": "max-autotune"}),
        Baseline.COMPILE_HALF: ((f"pytorch-{half}-cl-compile-reduce-overhead", {
            "half": half, "channels_last": True, "compile_mode": "reduce-overhead"}) if cuda else
            (f"pytorch-{half}-compile", {"half": half, "compile": True})),
    }
    name, keywords = setups[baseline]
    if not cuda and not has_bf16():
        return (f"{name} skipped: this CPU has neither AVX512-BF16 nor AMX (BF16 would be emulated, slower than "
                "FP32).")
    return name, keywords


def _fed(backend: Backend, batch: Batch) -> Batch:
    """The samples as the artifact takes them: float inputs in FP16 for an artifact with FP16 inputs
    (optimize --no-keep-io-fp32), as its caller feeds it."""
    return fed_as(batch, [(t.name, t.dtype) for t in backend.inputs])


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


def _trt_profile(description: ArtifactDescription, inputs: tuple[InputSpec, ...],
                 options: BenchOptions) -> tuple[str, str, str]:
    """The TensorRT provider's profile for every input of the artifact: batch 1 to the largest batch bench runs
    (the sweep or the agreement chunks), each input at its size (the reference's, where the artifact leaves an axis
    dynamic); an input whose batch axis is fixed keeps it."""
    largest = max(*options.batches, AGREEMENT_CHUNK)
    by_name = {spec.name: spec for spec in inputs}
    shapes: list[list[str]] = [[], [], []]
    for index, info in enumerate(description.inputs):
        spec = by_name.get(info.name) or inputs[min(index, len(inputs) - 1)]
        rest = [d if isinstance(d, int) else spec.sample_shape[axis] for axis, d in enumerate(info.shape[1:])]
        fixed = info.shape[0] if info.shape and isinstance(info.shape[0], int) else None
        for profile, batch in zip(shapes, (1, max(options.batches), largest), strict=True):
            profile.append(f"{info.name}:" + "x".join(str(d) for d in (fixed or batch, *rest)))
    low, opt, high = (",".join(profile) for profile in shapes)
    return low, opt, high


def _set_tf32(device: Device, *, enabled: bool) -> None:
    if device is Device.CUDA:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled


def _runs(description: ArtifactDescription,
          executions: list[OnnxExecution]) -> list[tuple[ArtifactDescription, OnnxExecution]]:
    """(the artifact as it is run, execution) for each row set an artifact gets: an engine and a file pinned to one
    runtime (BF16 on OpenVINO) once; an ONNX file once per execution asked for, except a TensorRT-target INT8 on
    OpenVINO (its Q/DQ are made for TensorRT: OpenVINO's integer kernels would not run TensorRT's arithmetic)."""
    if description.kind is not ArtifactKind.ONNX or description.pinned_runtime:
        pinned = OnnxExecution.OPENVINO if description.backend is BackendKind.OPENVINO else executions[0]
        return [(description, pinned)]
    runs = []
    for execution in executions:
        if execution is OnnxExecution.CPU:
            runs.append((description, execution))
        elif execution is OnnxExecution.OPENVINO and description.precision is Precision.INT8 \
                and description.target is Target.TENSORRT:
            console.note(f"{artifact_name(Path(str(description.path)))}: a TensorRT-target INT8 file is not run on "
                         "OpenVINO.")
        else:  # a GPU provider or OpenVINO runs the Q/DQ itself: nothing is simulated
            runs.append((description.natively(), execution))
    return runs


def _open(description: ArtifactDescription, settings: RunOptions, runtime: BackendKind) -> Backend:
    """The backend of one row set; an engine without a sidecar reaches here only on --trust-engine (_describe)."""
    if description.kind is ArtifactKind.TENSORRT_ENGINE and description.engine is None:
        from trtpipe.runtime.tensorrt.backend import TensorRTBackend

        return TensorRTBackend(description, settings, trusted=True)
    return open_artifact(description, settings, runtime=runtime)


def _label(description: ArtifactDescription, execution: OnnxExecution) -> str:
    """A variant's name: how it runs, its precision (and INT8 target), and which model file it is; an engine
    without a trtpipe sidecar is labelled as loaded on trust (what it computes in is not recorded)."""
    runs = str(description.backend) if description.kind is not ArtifactKind.ONNX else str(execution)
    flavour = str(description.precision)
    if description.kind is ArtifactKind.TENSORRT_ENGINE and description.engine is None:
        from trtpipe.runtime.tensorrt.loader import EngineOrigin

        flavour = str(EngineOrigin.TRUSTED)
    elif description.simulated:
        flavour += "-trtsim"  # TensorRT's arithmetic, simulated here
    elif description.target and description.precision is Precision.INT8:
        flavour += f"-{description.target}"
    return f"{runs}-{flavour} ({artifact_name(Path(str(description.path)))})"


def _dedupe(labels: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
    return out
