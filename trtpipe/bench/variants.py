"""Every variant of one bench run opened as it is measured: the reference, the PyTorch baselines, each artifact's
row sets and the peers, each under a memory probe (a CPU artifact's host figure taken first in a fresh process,
isolated.py), with the run settings it is timed with.
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import replace
from pathlib import Path

from trtpipe import console
from trtpipe.artifact.description import ArtifactDescription
from trtpipe.bench.isolated import VariantSpec, host_memory_alone
from trtpipe.bench.measure import Measure
from trtpipe.bench.memory import MemoryProbe, module_mb
from trtpipe.bench.options import BenchOptions
from trtpipe.bench.plan import Run, baseline_setup, trt_profile
from trtpipe.bench.reference import REFERENCE, OnnxReference
from trtpipe.bench.rows import BenchRow
from trtpipe.errors import BadInput
from trtpipe.models.loader import LoadedModel
from trtpipe.runtime.base import Backend
from trtpipe.runtime.options import RunOptions
from trtpipe.runtime.registry import (
    backend_of,
    bench_settings,
    execution_settings,
    on_gpu,
    open_artifact,
    open_module,
    open_trusted,
    reference_execution,
    settings_for,
    tune,
    tunes,
)
from trtpipe.vocab import ArtifactKind, BackendKind, Baseline, Device, OnnxExecution, Precision


class Variants:
    """Opens each variant, measures it (:class:`Measure`) and keeps its rows; with several rounds every variant stays
    open until its last round (``kept``), with one it is closed once measured."""

    def __init__(self, loaded: LoadedModel | OnnxReference, options: BenchOptions, threads: int, measure: Measure,
                 kept: contextlib.ExitStack) -> None:
        self.loaded, self.options, self.threads, self.measure = loaded, options, threads, measure
        self.keep = kept if measure.schedule.count > 1 else None
        self.rows: list[BenchRow] = []
        # PyTorch's weights are in memory before its probe starts: they are added to its host figure on the CPU.
        self.torch_weights_mb = (module_mb(loaded.module)
                                 if options.device is Device.CPU and loaded.module is not None else 0.0)

    def _hold(self, backend: Backend, own: contextlib.ExitStack) -> Backend:
        """Keep ``backend`` open until the last round (several rounds), else until ``own`` closes."""
        return (self.keep or own).enter_context(backend)

    def _hold_folder(self, folder: tempfile.TemporaryDirectory[str], own: contextlib.ExitStack) -> str:
        return (self.keep or own).enter_context(folder)

    def reference(self) -> None:
        """PyTorch FP32 eager, the reference every other row is compared with (and TF32 beside it on a GPU); for an
        ONNX model, that file on ONNX Runtime CPU."""
        if self.loaded.module is None:
            self._onnx_reference()
            return
        device = self.options.device
        with MemoryProbe(device) as memory:
            reference = open_module(self.loaded.module, self.loaded.inputs, device=device, threads=self.threads)
            set_tf32(device, enabled=False)  # the baseline is true FP32
        rows, self.measure.agreement.reference_outputs = self.measure.variant(
            reference, "pytorch-fp32", memory, extra_host_mb=self.torch_weights_mb)
        for row in rows:
            row.reference = True
        self.rows += rows
        if device is Device.CUDA:
            self._tf32(reference, memory)

    def _tf32(self, reference: Backend, memory: MemoryProbe) -> None:
        """PyTorch eager with TF32 matmuls and convolutions, on the reference's module (a GPU only)."""
        def tf32_mode(enabled: bool) -> None:
            set_tf32(self.options.device, enabled=enabled)

        tf32_mode(True)
        tf32 = self.measure.variant(reference, "pytorch-tf32", memory, extra_host_mb=self.torch_weights_mb,
                                    mode=tf32_mode)[0]
        tf32_mode(False)
        for row in tf32:
            row.precision, row.note = Precision.TF32, "PyTorch eager with TF32 matmuls and convolutions"
        self.rows += tf32

    def _onnx_reference(self) -> None:
        """The FP32 ONNX file as the reference, where the run is: on ONNX Runtime CUDA with ``--device cuda`` (a GPU
        row compared with a CPU one would be no speedup), else on ONNX Runtime CPU."""
        if not isinstance(self.loaded, OnnxReference):
            raise TypeError("an ONNX reference row needs the FP32 ONNX file (an OnnxReference)")
        path = Path(self.loaded.path)
        settings = RunOptions(threads=self.threads)
        execution = reference_execution(self.options.device)
        alone = None
        if on_gpu(execution):
            settings = execution_settings(execution, settings)
        else:
            alone = self._host_memory_alone(backend_of(execution), path, settings, "reference")
        with MemoryProbe(self.options.device) as memory, contextlib.ExitStack() as own:
            backend = self._hold(open_artifact(path, settings, runtime=backend_of(execution)), own)
            rows, self.measure.agreement.reference_outputs = self.measure.variant(
                backend, f"{execution}-fp32 ({self.loaded.name}, reference)", memory, host_alone=alone)
        for row in rows:
            row.reference, row.note = True, f"the reference: {REFERENCE}"
        self.rows += rows

    def baseline(self, baseline: Baseline) -> None:
        """A PyTorch row users would deploy instead (:func:`plan.baseline_setup` says which and how); a row this
        machine cannot run is skipped with one line saying why."""
        if self.loaded.module is None:
            console.warn(f"pytorch-{baseline} skipped: the model was given as an ONNX file, with no PyTorch module.")
            return
        device = self.options.device
        setup = baseline_setup(baseline, device)
        if isinstance(setup, str):
            console.warn(setup)
            return
        label, keywords = setup
        with MemoryProbe(device) as memory, contextlib.ExitStack() as own:
            backend = self._hold(open_module(self.loaded.module, self.loaded.inputs, device=device,
                                             threads=self.threads, **keywords), own)
            rows = self.measure.variant(backend, label, memory, extra_host_mb=self.torch_weights_mb)[0]
        for row in rows:
            row.baseline = baseline
        self.rows += rows

    def artifact(self, run: Run) -> None:
        """The rows of one artifact as ``run`` runs it; a CPU row's host memory is measured alone, first."""
        if run.description.note:
            console.note(f"{run.label}: {run.description.note}")
        description, runtime, settings = self._settings(run)
        alone = None  # a GPU row: its device figure is the one that matters, taken below with the host one
        if not on_gpu(run.execution) and description.kind is ArtifactKind.ONNX:
            alone = self._host_memory_alone(runtime, Path(str(description.path)), settings, run.label)
        with MemoryProbe(self.options.device) as memory, contextlib.ExitStack() as own:
            backend = self._hold(open_backend(description, settings, runtime), own)
            self.rows += self.measure.variant(backend, run.label, memory, description=description,
                                              host_alone=alone)[0]

    def _settings(self, run: Run) -> tuple[ArtifactDescription, BackendKind, RunOptions]:
        """The artifact as it is opened (with the settings a probe chose for a GPU provider), the runtime that runs
        it, and the settings it is timed with."""
        description, execution = run.description, run.execution
        asked = RunOptions(threads=self.threads)
        runtime = description.backend
        asked = bench_settings(runtime, asked, self.options)  # --cuda-graph, --spin-wait: TensorRT's own
        if description.kind is ArtifactKind.ONNX and not description.pinned_runtime:
            runtime = backend_of(execution)
            if on_gpu(execution):
                profile = trt_profile(description, self.loaded.inputs, self.options)
                asked = execution_settings(execution, asked, trt_profile=profile, workspace=self.options.workspace)
                description = self._tuned(description, execution, asked)
        return description, runtime, settings_for(description, runtime, asked)

    def _tuned(self, description: ArtifactDescription, execution: OnnxExecution,
               asked: RunOptions) -> ArtifactDescription:
        """``description`` with the settings a probe chose for ``execution``: recorded beside the artifact already,
        else probed now on the largest batch the run times (``--tune``: its backend's tuner, through the registry)."""
        from trtpipe.bench.environment import device_name
        from trtpipe.bench.timing import measure

        if description.tuned.get(execution) is not None or not self.options.tune or description.path is None \
                or not tunes(execution):
            return description
        first = description.inputs[0].shape[0] if description.inputs and description.inputs[0].shape else None
        batch = first if isinstance(first, int) else max(self.options.batches)  # a static batch: its own size
        if batch not in self.measure.samples.timing:
            return description
        try:
            run = tune(description, execution, self.measure.samples.timing[batch], base=asked, timer=measure,
                       device=device_name)
        except BadInput as error:  # no candidate ran as the plain run does: bench goes on with the defaults
            console.warn(f"{error.message} It is measured with {execution}'s default settings.")
            return description
        return replace(description, tuned={**description.tuned, execution: run.settings})

    def peers(self, descriptions: list[ArtifactDescription]) -> None:
        """Rows of the quantizers users would pick instead, made from the first FP32 ONNX artifact."""
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
                    rows = self.measure.variant(backend, peer.label, memory, host_alone=alone)[0]
                for row in rows:
                    row.peer = peer.tool
                self.rows += rows

    def _host_memory_alone(self, kind: BackendKind, path: Path, settings: RunOptions,
                           label: str) -> dict[int, float | None]:
        """A CPU row's host memory, measured in a fresh process (isolated.py says why)."""
        spec = VariantSpec(kind, str(path), tuple(self.loaded.inputs), tuple(self.options.batches),
                           settings.to_plain())
        return host_memory_alone(spec, label)


def open_backend(description: ArtifactDescription, settings: RunOptions, runtime: BackendKind) -> Backend:
    """The backend of one row set; an engine without a sidecar reaches here only on --trust-engine (plan.describe)."""
    if description.kind is ArtifactKind.TENSORRT_ENGINE and description.engine is None:
        return open_trusted(description, settings)
    return open_artifact(description, settings, runtime=runtime)


def set_tf32(device: Device, *, enabled: bool) -> None:
    """PyTorch's TF32 matmuls and convolutions on or off (a GPU only)."""
    if device is Device.CUDA:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled
