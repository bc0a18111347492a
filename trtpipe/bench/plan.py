"""What one bench run measures, decided before anything is opened: every artifact described and checked, the
executions each runs on, each row set's name, the PyTorch baselines this machine can run, and the TensorRT
provider's profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtpipe import console
from trtpipe.artifact.description import ArtifactDescription, artifact_name, check_cpu, describe_artifact
from trtpipe.bench.agreement import AGREEMENT_CHUNK
from trtpipe.bench.options import BenchOptions
from trtpipe.errors import BadInput
from trtpipe.hardware import cpu_class, has_bf16
from trtpipe.inputs import InputSpec
from trtpipe.runtime.registry import (
    backend_name,
    backend_of,
    check_execution,
    describe_unrecorded,
    entry,
    executions_of,
    install_line,
    installed,
    on_gpu,
    runs_as_written,
    runs_int8_target,
    unrecorded_label,
)
from trtpipe.vocab import ArtifactKind, Baseline, Device, OnnxExecution, Precision


@dataclass(frozen=True)
class Run:
    """One row set: an artifact as it is run, the execution that runs it, and the rows' name."""

    description: ArtifactDescription
    execution: OnnxExecution
    label: str


def describe(path: Path, options: BenchOptions) -> ArtifactDescription:
    """An artifact's description; an engine without a matching trtpipe sidecar only with --trust-engine (refused in
    one line before TensorRT reads it), described by what the engine will say once loaded. ``--load-engine`` names an
    engine whatever its suffix (trtexec's are often .trt)."""
    engine = ArtifactKind.for_path(path.name) is ArtifactKind.TENSORRT_ENGINE or path == options.load_engine
    if not engine:
        description = describe_artifact(path)
        if not all(on_gpu(execution) for execution in options.backend):  # it runs on this CPU: is it safe here?
            check_cpu(description, cpu_class(), allow=options.allow_cpu_mismatch)
        return description
    if not path.is_file():
        raise BadInput(f"Engine {path} does not exist.")
    return describe_unrecorded(ArtifactKind.TENSORRT_ENGINE, path, trusted=options.trust_engine)


def executions(options: BenchOptions, descriptions: list[ArtifactDescription]) -> list[OnnxExecution]:
    """How ONNX files are run, as asked: an optional backend (OpenVINO) dropped with one line where it is not
    installed and something else is asked too; a GPU provider that is not installed refused before anything runs."""
    asked = list(options.backend)
    for execution in list(asked):
        kind = backend_of(execution)
        if entry(kind).optional and len(asked) > 1 and not installed(kind):
            title = backend_name(kind)
            console.warn(f"{title} rows skipped: {title} is not installed ({install_line(kind)}).")
            asked.remove(execution)
    if any(d.kind is ArtifactKind.ONNX for d in descriptions):
        for execution in asked:
            if on_gpu(execution):
                check_execution(execution)
    return asked


def plan_runs(descriptions: list[ArtifactDescription], asked: list[OnnxExecution]) -> list[Run]:
    """Every row set, in order, each with a name no other has."""
    pairs = [pair for description in descriptions for pair in _runs(description, asked)]
    labels = _dedupe([label(description, execution) for description, execution in pairs])
    return [Run(description, execution, name) for (description, execution), name in zip(pairs, labels, strict=True)]


def _runs(description: ArtifactDescription,
          asked: list[OnnxExecution]) -> list[tuple[ArtifactDescription, OnnxExecution]]:
    """(the artifact as it is run, execution) for each row set an artifact gets: an engine and a file pinned to one
    runtime (BF16 on OpenVINO) once; an ONNX file once per execution asked for, except a TensorRT-target INT8 on
    OpenVINO (its Q/DQ are made for TensorRT: OpenVINO's integer kernels would not run TensorRT's arithmetic)."""
    if description.kind is not ArtifactKind.ONNX or description.pinned_runtime:
        own = executions_of(description.backend)  # a file pinned to another runtime than its kind's (OpenVINO)
        pinned = own[0] if own and description.backend is not description.kind.backend else asked[0]
        return [(description, pinned)]
    runs: list[tuple[ArtifactDescription, OnnxExecution]] = []
    for execution in asked:
        if runs_as_written(execution):
            runs.append((description, execution))
        elif description.precision is Precision.INT8 and not runs_int8_target(execution, description.target):
            target, runtime = backend_name(str(description.target)), backend_name(backend_of(execution))
            console.note(f"{artifact_name(Path(str(description.path)))}: a {target}-target INT8 file is not run on "
                         f"{runtime}.")
        else:  # a GPU provider or OpenVINO runs the Q/DQ itself: nothing is simulated
            runs.append((description.natively(), execution))
    return runs


def label(description: ArtifactDescription, execution: OnnxExecution) -> str:
    """A variant's name: how it runs, its precision (and INT8 target), and which model file it is; an engine
    without a trtpipe sidecar is labelled as loaded on trust (what it computes in is not recorded)."""
    runs = str(description.backend) if description.kind is not ArtifactKind.ONNX else str(execution)
    flavour = str(description.precision)
    if description.kind is ArtifactKind.TENSORRT_ENGINE and description.engine is None:
        flavour = unrecorded_label(description)
    elif description.simulated:
        flavour += "-trtsim"  # TensorRT's arithmetic, simulated here
    elif description.target and description.precision is Precision.INT8:
        flavour += f"-{description.target}"
    return f"{runs}-{flavour} ({artifact_name(Path(str(description.path)))})"


def _dedupe(labels: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for name in labels:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name} #{seen[name]}")
    return out



def baseline_setup(baseline: Baseline, device: Device) -> tuple[str, dict[str, Any]] | str:
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


def trt_profile(description: ArtifactDescription, inputs: tuple[InputSpec, ...],
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
