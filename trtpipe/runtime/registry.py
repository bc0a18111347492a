"""Which backend runs what and can do what: one line per backend folder, each folder's ``ENTRY`` (runtime/entry.py)
naming its class by an import string and its capabilities (runtime/capabilities.py), so listing or choosing one
never imports torch, onnxruntime or tensorrt; a backend's module is imported only when it is opened or asked.

Below the table, the questions the rest of the package asks about backends, each answered from the entries' core
facts or by whoever declares the capability that answers it (``who_can``, ``ability``): which row is the eager
reference, where a backend runs, the reference runtime's sessions, quantization tools and load checks, its
execution settings, how a runtime words a refused request, the peer quantizers, bench's flags, a file trusted
without its record, and opening an artifact (``open_artifact``: from its path, its description or an ``Artifact``,
with the settings it needs).

**How to add a backend**: its folder ``runtime/<engine>/`` (backend, settings type, ``ENTRY`` with what it ``can``)
and one line in ``BACKENDS`` (plus its ``BackendKind``, and an ``ArtifactKind`` if it brings a file kind); nothing
outside the folder names its modules or branches on its kind but the stage its entry declares
(``tests/runtime/test_backend_folders.py``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from trtpipe.errors import BadInput
from trtpipe.runtime import aoti, onnxruntime, openvino, tensorrt, torch
from trtpipe.runtime.base import Backend
from trtpipe.runtime.capabilities import (
    ChecksLoads,
    DescribesGpuRuns,
    GraphSessions,
    OpensUnrecorded,
    OwnStage,
    ProfilesLayers,
    QuantizationTools,
    QuantizesAsPeer,
    ReadsGpu,
    ReportsInstallation,
    RunsModules,
    RunsOnnx,
    TakesBenchFlags,
    TritonFacts,
    Tunes,
    WordsErrors,
)
from trtpipe.runtime.entry import BackendEntry
from trtpipe.runtime.options import RunOptions
from trtpipe.vocab import ArtifactKind, BackendKind, Device, OnnxExecution, Precision, Target

if TYPE_CHECKING:
    import onnx

    from trtpipe.artifact.artifact import Artifact
    from trtpipe.artifact.description import ArtifactDescription
    from trtpipe.inputs import Batch

C = TypeVar("C")

# The backends, one line each: what each folder's ENTRY declares.
BACKENDS: dict[BackendKind, BackendEntry] = {
    BackendKind.TORCH: torch.ENTRY,
    BackendKind.ONNXRUNTIME: onnxruntime.ENTRY,
    BackendKind.OPENVINO: openvino.ENTRY,
    BackendKind.TENSORRT: tensorrt.ENTRY,
    BackendKind.AOTI: aoti.ENTRY,
}


class ArtifactBackend(Protocol):
    """What every artifact backend's class is: called with the artifact (a path or its description) and the run
    settings, it opens the artifact. (TorchBackend, which wraps a live module, is not one.)"""

    def __call__(self, artifact: Path | ArtifactDescription, options: RunOptions | None = None, /) -> Backend: ...


def entry(kind: BackendKind) -> BackendEntry:
    """What ``kind``'s folder declares about it."""
    return BACKENDS[kind]


def who_can(capability: type) -> tuple[BackendKind, ...]:
    """The backends that declare ``capability``, in registry order (nothing imported)."""
    return tuple(kind for kind, e in BACKENDS.items() if e.offers(capability))


def abilities(capability: type[C]) -> Iterator[tuple[BackendKind, C]]:
    """Each backend that declares ``capability`` with what implements it, in registry order (imported as reached)."""
    for kind in who_can(capability):
        yield kind, BACKENDS[kind].ability(capability)


def ability(kind: BackendKind, capability: type[C]) -> C:
    """What implements ``capability`` for ``kind`` (TypeError where it declares none)."""
    return BACKENDS[kind].ability(capability)


def backend_class(kind: BackendKind) -> ArtifactBackend:
    opener: ArtifactBackend = BACKENDS[kind].opener()
    return opener


def triton_facts(kind: BackendKind) -> TritonFacts:
    """How Triton runs what ``kind`` runs (a backend without Triton facts: Triton's Python backend runs it)."""
    facts = BACKENDS[kind].ability_if(TritonFacts)
    return facts if facts is not None else TritonFacts()


def is_eager(backend: object) -> bool:
    """Whether a row's backend (a BackendKind, or its name in a report's JSON; anything else: no) runs the live
    training module as it is: the PyTorch FP32 reference, as opposed to an FP32 ONNX file as the reference."""
    # A BackendKind is a str, equal to its name: the JSON's name finds the same entry, anything else none.
    return isinstance(backend, str) and any(kind == backend for kind in who_can(RunsModules))


def optional_packages() -> tuple[str, ...]:
    """The optional backends' libraries, each followed by the peer tools that quantize for it, in registry order:
    the packages whose versions decide some bench rows where they are installed."""
    return tuple(name for e in BACKENDS.values() if e.optional for name in (e.library, *_peer_tools(e)))


def _peer_tools(backend: BackendEntry) -> tuple[str, ...]:
    """The packages of the peer quantizer whose files ``backend`` runs (none without one)."""
    peer = backend.ability_if(QuantizesAsPeer)
    return peer.tools if peer is not None else ()


def peer_quantizers() -> Iterator[tuple[BackendKind, Callable[[Path, Batch, Path], tuple[str, str, Path] | None]]]:
    """The peer quantizers (bench --peers), each with the backend that runs its file, in registry order: each is
    called with an FP32 ONNX, calibration samples and a folder, and returns (the row's label, the tool that made it,
    the quantized file), or None where its library is absent (imports each backend folder's peer module)."""
    for kind, peer in abilities(QuantizesAsPeer):
        yield kind, peer.quantize


def gpu_run_settings() -> tuple[str, ...]:
    """How the backends that declare it run their rows on a GPU, in words (imports those backends' modules)."""
    return tuple(words for _, runs in abilities(DescribesGpuRuns) for words in runs.gpu_settings)


def compute_capability(kind: BackendKind) -> str:
    """The current GPU's compute capability ("9.0") as ``kind``'s library reads it (imports that library)."""
    return str(ability(kind, ReadsGpu).compute_capability())


def backend_of(execution: OnnxExecution) -> BackendKind:
    """The backend that runs ONNX files as ``execution`` (the one whose entry lists it); BadInput naming the ways
    there are where none does (a backend folder that runs no ONNX file)."""
    found = next((kind for kind, runner in abilities(RunsOnnx) if execution in runner.executions), None)
    if found is None:
        every = ", ".join(e for _, runner in abilities(RunsOnnx) for e in runner.executions)
        raise BadInput(f"No backend runs ONNX files as {execution}: choose from {every}.")
    return found


def onnx_executions() -> tuple[OnnxExecution, ...]:
    """Every way the registered backends run an ONNX file, in registry order (bench --backend's choices)."""
    return tuple(execution for _, runner in abilities(RunsOnnx) for execution in runner.executions)


def on_gpu(execution: OnnxExecution) -> bool:
    """Whether running an ONNX file as ``execution`` runs it on a GPU (its backend's ONNX runner says)."""
    return execution in ability(backend_of(execution), RunsOnnx).gpu_executions


def execution_of(options: RunOptions) -> OnnxExecution:
    """The way of running an ONNX file that the run setting ``providers`` makes (the first provider decides, as
    ONNX Runtime places each node on the first that has its kernel): the first backend whose ONNX runner recognises
    them says which; the default where none does."""
    names = options.provider_names
    found = (runner.execution_for(names) for _, runner in abilities(RunsOnnx))
    return next((execution for execution in found if execution is not None), OnnxExecution.default())


def runs_on_gpu(options: RunOptions) -> bool:
    """Whether ``options``' providers run an ONNX file on a GPU."""
    return on_gpu(execution_of(options))


def executions_of(kind: BackendKind) -> tuple[OnnxExecution, ...]:
    """The ways ``kind`` runs an ONNX file (none for a backend that runs no ONNX)."""
    runner = BACKENDS[kind].ability_if(RunsOnnx)
    return runner.executions if runner is not None else ()


def runtimes(kind: ArtifactKind) -> tuple[BackendKind, ...]:
    """Every backend that runs artifacts of ``kind`` (the ones whose entries list it), in registry order."""
    return tuple(e.kind for e in BACKENDS.values() if kind in e.runs)


def backend_name(kind: BackendKind | str) -> str:
    """A backend's name in prose ("ONNX Runtime"); anything that is no backend's kind, as it is."""
    found = next((e for k, e in BACKENDS.items() if k == kind), None)
    return found.name if found is not None else str(kind)


def portability(kind: BackendKind | str) -> int:
    """How portable what ``kind`` runs is (lower: more); after every backend for anything else."""
    found = next((e for k, e in BACKENDS.items() if k == kind), None)
    return found.portability if found is not None else max(e.portability for e in BACKENDS.values()) + 1


def installed(kind: BackendKind) -> bool:
    """Whether ``kind``'s library can be imported here (without importing it)."""
    import importlib.util

    try:
        return importlib.util.find_spec(BACKENDS[kind].library) is not None
    except ValueError:  # in sys.modules as None: an import of it fails
        return False


def install_line(kind: BackendKind) -> str:
    """How an optional backend is installed: ``pip install 'trtpipe[<kind>]'``."""
    return f"pip install 'trtpipe[{kind}]'"


def reference_library() -> str:
    """The library of the backend that runs ONNX files by default (the reference every version line names)."""
    return _onnx_hooks().library


def reference_versions() -> dict[str, str]:
    """{library: version} of the backend that runs ONNX files by default (imports it)."""
    import importlib

    library = reference_library()
    return {library: str(importlib.import_module(library).__version__)}


def environment_facts() -> dict[str, Any]:
    """What the backends that declare it record of their installation beside their versions (imports them)."""
    return {key: value for _, own in abilities(ReportsInstallation) for key, value in own.environment().items()}


def doctor_rows() -> list[dict[str, Any]]:
    """The lines ``trtpipe doctor`` shows for the backends that declare one, in registry order (imports them)."""
    return [own.doctor_row() for _, own in abilities(ReportsInstallation)]


def runs_int8_target(execution: OnnxExecution, target: object) -> bool:
    """Whether ``execution``'s backend runs an INT8 file quantized for ``target`` (not one made for another
    runtime's arithmetic)."""
    return target not in ability(backend_of(execution), RunsOnnx).foreign_int8_targets


def runs_as_written(execution: OnnxExecution) -> bool:
    """Whether ``execution`` runs an ONNX file's graph as written, Q/DQ as float ops on the CPU (the way that
    simulates the target's arithmetic), rather than its own integer or GPU kernels running the Q/DQ themselves."""
    return backend_of(execution) is ArtifactKind.ONNX.backend and not on_gpu(execution)


def tunes(execution: OnnxExecution) -> bool:
    """Whether ``execution``'s backend has a settings probe with something to choose on it (bench --tune)."""
    tuner = BACKENDS[backend_of(execution)].ability_if(Tunes)
    return tuner is not None and bool(tuner.candidates(execution))


def tune(description: ArtifactDescription, execution: OnnxExecution, feeds: Batch, **keywords: Any) -> Any:
    """Probe ``execution``'s settings on ``feeds`` with its backend's tuner, record the fastest beside the artifact
    and return the TunedRun (``keywords``: base settings, rounds, seconds, a timing function, a device namer)."""
    return ability(backend_of(execution), Tunes).tune_artifact(description, execution, feeds, **keywords)


def _onnx_hooks() -> BackendEntry:
    """The entry of the backend that runs ONNX files by default (ArtifactKind.ONNX's own)."""
    return BACKENDS[ArtifactKind.ONNX.backend]


def execution_settings(execution: OnnxExecution, base: RunOptions | None = None, *,
                       trt_profile: tuple[str, str, str] | None = None,
                       workspace: int | None = None) -> RunOptions:
    """``base`` with the settings that run an ONNX file as ``execution`` (ONNX Runtime's providers for it, a
    TensorRT provider with ``trt_profile`` and ``workspace``); as it is for an execution whose backend needs none."""
    base = base or RunOptions()
    settings = ability(backend_of(execution), RunsOnnx).execution_settings(execution, trt_profile, workspace)
    return dataclasses.replace(base, **settings) if settings else base


def check_execution(execution: OnnxExecution) -> None:
    """BadInput in one line where what ``execution`` needs is not installed here (a GPU provider)."""
    ability(backend_of(execution), RunsOnnx).check_execution(execution)


def gpu_execution(kind: BackendKind) -> OnnxExecution:
    """The way ``kind`` runs an ONNX file on a GPU when asked only for the device (ONNX Runtime: its CUDA provider):
    the first of the executions its entry lists that runs on one; BadInput where it lists none."""
    found = next((execution for execution in executions_of(kind) if on_gpu(execution)), None)
    if found is None:
        raise BadInput(f"{kind} has no way to run on a GPU: run it on the CPU.")
    return found


def reference_execution(device: Device) -> OnnxExecution:
    """How the backend that runs ONNX files by default runs one on ``device``: its GPU way on CUDA, else its first
    CPU way."""
    kind = ArtifactKind.ONNX.backend
    if device is Device.CUDA:
        return gpu_execution(kind)
    return next(execution for execution in executions_of(kind) if not on_gpu(execution))


def probe_session(model_or_path: onnx.ModelProto | Path | str, *, exposing: Iterable[str] = (),
                  silent: bool = False, round_fp16: bool = False) -> Any:
    """A session that runs a graph exactly as written on the CPU, whose outputs are the graph's plus ``exposing``:
    for reading tensors (calibration, AdaRound, bias correction, ``trtpipe debug``), not for serving. ``silent``
    leaves failures to the caller's own line; ``round_fp16`` rounds every FP16 tensor where it is written, as a GPU
    computes it. The runtime's errors propagate as its own types."""
    return reference_sessions().probe(model_or_path, tuple(exposing), silent, round_fp16)


def reference_sessions() -> GraphSessions:
    """The sessions of the backend that runs ONNX files by default over a graph on the CPU: the probe, a timing
    session as a user's default session, the kernels its optimiser picks (optimize's checks, calibration)."""
    return _onnx_hooks().ability(GraphSessions)


def reference_name() -> str:
    """The name in prose of the backend that runs ONNX files by default ("ONNX Runtime")."""
    return _onnx_hooks().name


def quantization_tools() -> QuantizationTools:
    """The Q/DQ and FP16 graph tools of the backend that runs ONNX files by default (its calibrators, quantizer,
    scale rounding and FP16 converter), which optimize builds its files with."""
    return _onnx_hooks().ability(QuantizationTools)


def load_checks(path: Path, precision: Precision, target: Target) -> list[tuple[BackendKind, str | None]]:
    """Each installed runtime a written file is meant for, with its default session's verdict on ``path``: None
    where it loaded, else its error's first line (in registry order: the reference runtime first)."""
    return [(kind, check.loads(path)) for kind in who_can(ChecksLoads)
            if (check := ability(kind, ChecksLoads)).meant_for(precision, target)
            and installed(kind)]


def layer_profilers() -> tuple[BackendKind, ...]:
    """The backends that time every layer of what they run (bench --profile-layers)."""
    return who_can(ProfilesLayers)


def own_stage(kind: BackendKind) -> OwnStage | None:
    """The stage package that makes ``kind``'s artifacts and the backends its folder builds on, where it has one."""
    return BACKENDS[kind].ability_if(OwnStage)


def refused_by_runtime(error: BaseException) -> bool:
    """Whether a backend's runtime says, by ``error``, that it refused a request's data (an index out of its table,
    a shape a kernel cannot take), as opposed to the model failing by itself."""
    return any(words.refuses_data(error) for _, words in abilities(WordsErrors))


def failed_node(line: str) -> tuple[str, str]:
    """A runtime error's first line read by the backends that word theirs: the node that failed, in words ("" where
    none names one), and the rest of the line without their preambles (the line as it is where none applies)."""
    for _, words in abilities(WordsErrors):
        where, rest = words.failed_node(line)
        if where or rest != line:
            return where, rest
    return "", line


def open_module(module: Any, inputs: Any, **keywords: Any) -> Backend:
    """A live training module (with its inputs in ``forward``'s order) opened on the eager backend, the one whose
    entry says it runs the module as it is (PyTorch's), with that backend's own keywords (device, threads, ...)."""
    backend: Backend = _eager().opener()(module, inputs, **keywords)
    return backend


def module_output_names(result: object) -> list[str]:
    """A name for each tensor in what a live module returned (``result``), in the order the eager backend flattens
    them: a dict's keys, a namedtuple's fields, ``output_<i>`` by position, ``output`` for a lone tensor."""
    return ability(_eager().kind, RunsModules).output_names(result)


def _eager() -> BackendEntry:
    """The entry of the backend that runs a live training module as it is (PyTorch eager)."""
    return BACKENDS[who_can(RunsModules)[0]]


def open_model(model: onnx.ModelProto, options: RunOptions | None = None) -> Backend:
    """An ONNX model held in memory opened on ONNX's own backend with ``options`` as given (optimize's candidates,
    which run without touching the disk)."""
    backend: Backend = _onnx_hooks().opener()(model, options)
    return backend


def bench_settings(kind: BackendKind, asked: RunOptions, flags: object) -> RunOptions:
    """``asked`` with the bench run flags ``kind`` takes (its ``TakesBenchFlags``) read from ``flags`` (bench's
    options) by name; as it is for a backend that takes none."""
    flags_taken = BACKENDS[kind].ability_if(TakesBenchFlags)
    names = flags_taken.names if flags_taken is not None else ()
    return dataclasses.replace(asked, **{name: getattr(flags, name) for name in names}) if names else asked


def describe_unrecorded(kind: ArtifactKind, path: Path, *, trusted: bool) -> ArtifactDescription:
    """A file of ``kind`` described before it is opened, by the backend that runs it: from its record, or where it
    has none (or one that does not match it) only when ``trusted`` (the user vouched for it), else BadInput in one
    line naming the flag that would; TypeError for a kind whose backend reads only recorded files."""
    if not BACKENDS[kind.backend].offers(OpensUnrecorded):
        raise TypeError(f"{kind.backend} opens only files with their record")
    return ability(kind.backend, OpensUnrecorded).describe_unrecorded(path, trusted=trusted)


def unrecorded_label(description: ArtifactDescription) -> str:
    """What the rows of a file opened on trust say in place of its precision (its backend's ``unrecorded_label``)."""
    return ability(description.backend, OpensUnrecorded).unrecorded_label


def open_trusted(description: ArtifactDescription, options: RunOptions | None = None) -> Backend:
    """A file without a record (described by :func:`describe_unrecorded` on the user's trust) opened by the backend
    that runs it, which reads what the file is from the file itself; ``options`` as given."""
    backend_entry = BACKENDS[description.backend]
    if not backend_entry.offers(OpensUnrecorded):
        raise TypeError(f"{backend_entry.kind} opens only files with their record")
    backend: Backend = backend_entry.opener()(description, options, trusted=True)
    return backend


def open_artifact(artifact: Path | ArtifactDescription | Artifact, options: RunOptions | None = None, *,
                  runtime: BackendKind | None = None) -> Backend:
    """Open an artifact with the backend its description calls for, or with ``runtime`` where that can run it (an
    ONNX file on OpenVINO), with the caller's settings over the ones the artifact needs to run faithfully."""
    from trtpipe.artifact.artifact import Artifact
    from trtpipe.artifact.description import ArtifactDescription, describe_artifact

    if isinstance(artifact, Artifact):
        artifact = artifact.describe()
    description = artifact if isinstance(artifact, ArtifactDescription) else describe_artifact(Path(artifact))
    backend = runtime or description.backend
    if backend not in runtimes(description.kind):
        raise BadInput(f"{description.path} cannot run on {backend}: a {description.kind} artifact runs on "
                       f"{', '.join(map(str, runtimes(description.kind)))}.")
    settings = settings_for(description, backend, options or RunOptions())
    return backend_class(backend)(description, settings.only(BACKENDS[backend].settings, backend))


def settings_for(description: ArtifactDescription, backend: BackendKind, asked: RunOptions) -> RunOptions:
    """What ``backend`` is opened with: the caller's settings over the ones the artifact needs, where it runs on
    its own runtime on the CPU (a GPU provider runs Q/DQ itself; another runtime has other settings), and over the
    settings its probe chose for that way of running it (model.tuned.json), where that way is this backend's."""
    if backend is not description.backend:
        return asked
    execution = execution_of(asked)
    tuned = description.tuned.get(execution) if backend_of(execution) is backend else None
    required = RunOptions() if on_gpu(execution) else RunOptions.from_keywords(description.run)
    return asked.over(RunOptions.from_keywords(tuned).over(required) if tuned is not None else required)
