"""What an artifact is, read once from the record trtpipe wrote beside it (an ONNX file's manifest, an engine's
sidecar, a package's manifest: trtpipe.artifact.records) or from its graph: the one typed description that engine
build, every backend, bench and serve use (precision, INT8 target, task, IO, how it must run). The room decides
this by the artifact's kind; no backend is asked, so every backend can be opened from a description.

One place decides how an artifact must run to be faithful: an INT8 ONNX made for TensorRT runs on ONNX Runtime
CPU with graph optimisation off, so its Q/DQ execute as float ops (TensorRT's arithmetic; x86 integer kernels
would saturate), and with every FP16 tensor rounded to FP16 where it is written, as a GPU computes it (the CPU
provider alone would run the FP16 regions in FP32: onnxruntime/fp16_rounding.py). That run is a *simulation*: its
accuracy is TensorRT's, its latency is not. A BF16 ONNX keeps
FP32 activations in the graph (BF16 weights behind Casts): OpenVINO runs it in BF16 kernels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtpipe import console
from trtpipe.artifact.records.engine import EngineSidecar, check_engine_file, read_sidecar
from trtpipe.artifact.records.manifest import read_manifest
from trtpipe.artifact.records.package import AotiPackage, read_package
from trtpipe.artifact.records.sections import CpuRecord
from trtpipe.artifact.records.tuned import read_tuned
from trtpipe.artifact.tensors import TensorInfo
from trtpipe.errors import BadInput
from trtpipe.vocab import ArtifactKind, BackendKind, OnnxExecution, Precision, Target, Task, dtype

if TYPE_CHECKING:
    import onnx

    from trtpipe.onnx_info import GraphFacts
    from trtpipe.vocab import CpuClass

# Run settings by name (the fields of trtpipe.runtime.options.RunOptions): what an artifact needs to be run
# faithfully, and what a probe chose for it; the runtime turns them into a backend's settings when it opens it.
Settings = Mapping[str, Any]

TRT_SIMULATION_NOTE = ("TensorRT-target INT8 simulated on the CPU (Q/DQ as float ops, FP16 rounded per op as on a "
                       "GPU): accuracy is the graph's arithmetic, latency is not TensorRT's")
TRT_SIMULATION: Settings = {"optimization": "disable", "round_fp16": True}
_BF16_RUN: Settings = {"inference_precision": Precision.BF16}


def artifact_name(path: Path) -> str:
    """A model's name from its path: ``models/<name>/<version>/model.onnx`` -> name, else the file's stem."""
    path = Path(path)
    return path.parent.parent.name if path.parent.name.isdigit() else path.stem


@dataclass(frozen=True)
class ArtifactDescription:
    """An artifact as trtpipe knows it: what it computes, and how it must be run to compute that."""

    path: Path | None  # None: a model held in memory (optimize's candidates)
    kind: ArtifactKind
    precision: Precision
    target: Target | None = None  # INT8 only: the Q/DQ flavour
    task: Task | None = None  # what its outputs mean, where its manifest records it
    inputs: tuple[TensorInfo, ...] = ()
    outputs: tuple[TensorInfo, ...] = ()
    runtime: BackendKind | None = None  # the one runtime it must run on (a BF16 file: OpenVINO), else None
    run: Settings = field(default_factory=dict)  # settings its default runtime needs to be faithful
    simulated: bool = False  # runs here only to measure another runtime's arithmetic (its latency means nothing)
    note: str | None = None
    size_bytes: int = 0
    build_seconds: float | None = None  # how long the stage that made it took
    fp32_nodes: tuple[str, ...] = ()  # nodes kept in FP32 on purpose
    engine: EngineSidecar | None = None  # a TensorRT engine's sidecar (what it was built for)
    # ONNX Runtime settings a probe chose for each way of running it (model.tuned.json; tuned.py)
    tuned: Mapping[OnnxExecution, Settings] = field(default_factory=dict)
    package: AotiPackage | None = None  # an AOTInductor package: what its manifest says it was compiled for
    cpu: CpuRecord | None = None  # cpu/openvino INT8: the CPU class it was made and measured for (check_cpu)

    @property
    def backend(self) -> BackendKind:
        """The runtime it runs on unless asked otherwise."""
        return self.runtime or self.kind.backend

    @property
    def pinned_runtime(self) -> bool:
        """Whether the artifact must run on one runtime (a BF16 file: OpenVINO's BF16 kernels)."""
        return self.runtime is not None

    def natively(self) -> ArtifactDescription:
        """The same artifact run by something that executes its Q/DQ itself (a GPU provider, OpenVINO): nothing
        is simulated and no setting is imposed."""
        return dataclasses.replace(self, run={}, simulated=False, note=None)


def artifact_kind(path: Path) -> ArtifactKind:
    """The kind of an artifact file, judged by its suffix."""
    kind = ArtifactKind.for_path(Path(path).name)
    if kind is None:
        raise BadInput(f"Cannot run {path}: trtpipe runs {', '.join(ArtifactKind.all_suffixes())} artifacts; give "
                       "the PyTorch model as MODEL instead.")
    return kind


def describe_artifact(path: Path) -> ArtifactDescription:
    """The description of the artifact file at ``path``: from its sidecar (an engine, checked against the file),
    its manifest (an ONNX trtpipe wrote), or its graph alone (an ONNX from elsewhere).

    A manifest that describes another file (another run's, or a run killed between its two renames) is not
    trusted: a warning says so and the artifact is described from its graph, as one from elsewhere would be.
    A damaged manifest raises BadInput naming the file and the field."""
    path = Path(path)
    kind = artifact_kind(path)
    if not path.is_file():
        raise BadInput(f"Artifact {path} does not exist.")
    own = _FROM_RECORD.get(kind)  # an engine from its sidecar, a package from its manifest
    if own is not None:
        return own(path)
    from trtpipe.onnx_info import graph_facts, load_onnx

    graph = graph_facts(load_onnx(path, load_weights=False))  # trtpipe's external-data path checks come first
    manifest = read_manifest(path, on_mismatch=console.warn, on_other_layout=console.warn)
    tuned = {execution: run.settings
             for execution, run in read_tuned(path, manifest.sha256 if manifest is not None else None).items()}
    if manifest is None:  # an ONNX from elsewhere: what its graph tells
        return _faithful(_from_graph(graph, path, path.stat().st_size, tuned))
    return _faithful(ArtifactDescription(
        path, kind, manifest.precision, manifest.target, manifest.task, *_graph_io(graph),
        size_bytes=path.stat().st_size, build_seconds=manifest.seconds, fp32_nodes=tuple(manifest.fp32_nodes),
        tuned=tuned, cpu=manifest.cpu))


def check_cpu(description: ArtifactDescription, here: CpuClass, *, allow: bool = False) -> str | None:
    """Compare the CPU class ``here`` (the CPU it is about to run on) with the class a cpu/openvino INT8 artifact
    was made and measured for; returns the warning given, if any.

    Refused in one line (BadInput) where the artifact is recorded unsafe on ``here`` (8-bit weights without VNNI),
    unless ``allow``; a warning where ``here`` ranks below every class its accuracy was measured on, or where its
    manifest predates the record (measured on an unknown CPU). Anything else (float, TensorRT-target INT8, an ONNX
    from elsewhere) has no CPU class to check."""
    if description.precision is not Precision.INT8 or description.target in (None, Target.TENSORRT):
        return None
    name = str(description.path) if description.path is not None else "the model"
    record = description.cpu
    if record is None:
        message = (f"{name}'s manifest records no CPU class (written before trtpipe recorded one): its INT8 accuracy "
                   f"was measured on an unknown CPU and may not hold on this one ({here}); re-run optimize to record "
                   "it.")
    elif here in record.unsafe_on:
        saturates = record.made_for.vnni and not here.vnni
        why = ("without VNNI its int8 dot products saturate at 16 bits, which can wreck its accuracy" if saturates
               else "it was found unsafe there")
        what = f"{name} was made for CPU class {record.made_for} and is unsafe on this CPU ({here}): {why}"
        if not allow:
            raise BadInput(f"{what}. Rebuild it for this CPU (trtpipe optimize --cpu-class {here}), or run it anyway "
                           "with --allow-cpu-mismatch (trtpipe.load(..., allow_cpu_mismatch=True)).")
        message = f"{what}; running it anyway, as asked (allow-cpu-mismatch)."
    elif record.measured_on and here not in record.measured and here.rank < record.measured_on[0].rank:
        measured = record.measured_on[0]
        risk = ("its int8 dot products saturate at 16 bits here (no VNNI)" if record.made_for.vnni and not here.vnni
                else "other int8 kernels run here than where it was measured")
        message = (f"{name}'s INT8 accuracy was measured on CPU class {measured} ({record.figure(measured)}) and "
                   f"this CPU is {here}, a weaker class: {risk}, so it may be less accurate than measured. "
                   f"Re-run optimize with --cpu-class {here} on a CPU of this class to make and measure it for it.")
    else:
        return None
    console.warn(message)
    return message


def describe_model(model: onnx.ModelProto, path: Path | None = None) -> ArtifactDescription:
    """The description of an ONNX graph without a manifest (held in memory, or from elsewhere): its precision
    read from its operators and weights."""
    from trtpipe.onnx_info import graph_facts

    size = path.stat().st_size if path is not None else model.ByteSize()
    return _faithful(_from_graph(graph_facts(model), path, size))


def _from_graph(graph: GraphFacts, path: Path | None, size: int,
                tuned: Mapping[OnnxExecution, Settings] | None = None) -> ArtifactDescription:
    """An ONNX graph's description from what its graph alone tells (no manifest)."""
    return ArtifactDescription(path, ArtifactKind.ONNX, graph.precision, None, None, *_graph_io(graph),
                               size_bytes=size, tuned=tuned or {})


def _faithful(description: ArtifactDescription) -> ArtifactDescription:
    """The run settings an ONNX description's precision and target call for."""
    pinned = description.precision.pinned_runtime
    if pinned is not None:
        return dataclasses.replace(description, runtime=pinned, run=_BF16_RUN)
    if description.precision is Precision.INT8 and description.target is Target.TENSORRT:
        return dataclasses.replace(description, run=TRT_SIMULATION, simulated=True, note=TRT_SIMULATION_NOTE)
    return description


def _graph_io(graph: GraphFacts) -> tuple[tuple[TensorInfo, ...], tuple[TensorInfo, ...]]:
    return tuple(TensorInfo(*t) for t in graph.inputs), tuple(TensorInfo(*t) for t in graph.outputs)


def _engine(path: Path) -> ArtifactDescription:
    """A TensorRT engine's description, from its sidecar checked against the file; BadInput where the sidecar is
    missing or describes another file."""
    sidecar = read_sidecar(path)
    check_engine_file(path, sidecar)
    return ArtifactDescription(
        path, ArtifactKind.TENSORRT_ENGINE, sidecar.precision, None, None, _sidecar_io(sidecar.inputs),
        _sidecar_io(sidecar.outputs), size_bytes=path.stat().st_size, build_seconds=sidecar.build_seconds,
        engine=sidecar)


def _sidecar_io(tensors: list[dict[str, Any]]) -> tuple[TensorInfo, ...]:
    """A sidecar records TensorRT's type names (FLOAT, HALF, INT8...); the vocabulary's table knows them."""

    def info(tensor: dict[str, Any]) -> TensorInfo:
        entry = dtype(tensorrt=str(tensor.get("dtype", "")))
        shape = tuple(None if not isinstance(d, int) or d < 0 else d for d in tensor.get("shape", []))
        return TensorInfo(str(tensor.get("name", "")), entry.numpy if entry else str(tensor.get("dtype")), shape)

    return tuple(info(t) for t in tensors)


def _package(path: Path) -> ArtifactDescription:
    """An AOTInductor package's description, from the manifest it must have: refused in one line without one
    that describes exactly the package's bytes (it is native code)."""
    manifest, package = read_package(path)
    return ArtifactDescription(path, ArtifactKind.AOTI, manifest.precision, None, manifest.task, package.record.inputs,
                               package.record.outputs, size_bytes=manifest.size_bytes, build_seconds=manifest.seconds,
                               package=package)


# The kinds described from a record of their own rather than a graph: an engine's sidecar, a package's manifest.
_FROM_RECORD: dict[ArtifactKind, Callable[[Path], ArtifactDescription]] = {
    ArtifactKind.TENSORRT_ENGINE: _engine,
    ArtifactKind.AOTI: _package,
}
