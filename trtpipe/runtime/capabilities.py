"""What a backend can do, as small capabilities it declares: the registry answers "who can X" from them.

A backend's ``ENTRY`` (runtime/entry.py) holds what every backend has (its class, settings type, the artifact kinds
it opens, its library) and, in ``can``, each capability it offers, keyed by the capability's type below, with what
implements it: a module (or a module's object) of its own folder named by an import string, imported only when a
question needs it, or the implementation itself where it is plain data. Nothing else in the package asks a backend
for anything by its name: optimize, bench and serve ask the registry for "a session on the reference runtime", "the
peer quantizers", "who tunes this execution", and the registry finds whoever declared it.

The behavioural capabilities are protocols (a folder's module implements one by defining its functions, checked in
tests/runtime/test_backend_folders.py); the plain-data ones are frozen dataclasses. Standard library and the
vocabulary only: declaring or listing capabilities imports no engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from trtpipe.vocab import BackendKind, OnnxExecution, Precision, Target

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np
    import onnx

    from trtpipe.artifact.description import ArtifactDescription
    from trtpipe.inputs import Batch


# -- running ONNX files ------------------------------------------------------------------------------------------

@runtime_checkable
class RunsOnnx(Protocol):
    """Runs ONNX files, in the ways bench names (its executions: a provider set, a plugin), and says which INT8
    flavours it does not run (their Q/DQ are made for another runtime's arithmetic)."""

    executions: tuple[OnnxExecution, ...]
    gpu_executions: tuple[OnnxExecution, ...]  # those of its executions that run the file on a GPU
    foreign_int8_targets: tuple[Target, ...]

    def execution_settings(self, execution: OnnxExecution, trt_profile: tuple[str, str, str] | None,
                           workspace: int | None) -> dict[str, Any]:
        """The RunOptions keywords that run an ONNX file as ``execution`` ({} where it needs none)."""
        ...

    def check_execution(self, execution: OnnxExecution) -> None:
        """BadInput in one line where what ``execution`` needs is not installed here."""
        ...

    def execution_for(self, names: Sequence[str]) -> OnnxExecution | None:
        """The execution that the run setting ``providers`` (by name) makes on this backend, or None where it
        makes none of this backend's."""
        ...


@runtime_checkable
class GraphSessions(Protocol):
    """Sessions over an ONNX graph on the CPU for the stages that read or time a graph rather than serve it (the
    reference runtime's: calibration, AdaRound, the written file's checks, ``trtpipe debug``)."""

    def probe(self, model_or_path: onnx.ModelProto | Path | str, exposing: tuple[str, ...], silent: bool,
              round_fp16: bool) -> Any:
        """A session running the graph exactly as written, whose outputs are the graph's plus ``exposing``."""
        ...

    def timing_session(self, model: onnx.ModelProto | Path, threads: int) -> Any:
        """A session running ``model`` as a user's default session does (every graph optimisation), for timing
        against another in turn: its threads stop spinning when a run returns."""
        ...

    def weighted_kernels(self, model: onnx.ModelProto | Path) -> tuple[dict[str, int], dict[str, int]]:
        """The convolutions and matmuls of the graph this runtime runs for ``model`` after its optimiser, by kernel:
        (integer ones, float ones)."""
        ...


@runtime_checkable
class ChecksLoads(Protocol):
    """Opens a written ONNX file the way a user's default session would, to say whether it loads."""

    def meant_for(self, precision: Precision, target: Target) -> bool:
        """Whether a file of ``precision`` (an INT8 file's flavour ``target``) is meant to run on this runtime."""
        ...

    def loads(self, path: Path) -> str | None:
        """None where the default session opens ``path``, else the first line of its error."""
        ...


@runtime_checkable
class QuantizationTools(Protocol):
    """The graph tools a runtime ships that write Q/DQ and FP16 into an ONNX graph for it (ONNX Runtime's
    quantization and float16 tools): optimize builds its INT8 and FP16 files with them."""

    def ranges(self, model: onnx.ModelProto, batches: list[Batch], method: str, *,
               symmetric: bool) -> dict[str, tuple[float, float]]:
        """Per-tensor (low, high) of every float activation on ``batches`` by the calibrator ``method`` names
        (minmax, entropy, percentile)."""
        ...

    def qdq_quantize(self, model: onnx.ModelProto, ranges: Mapping[str, tuple[float, float]], *,
                     reduce_range: bool, signed_activations: bool, only: Sequence[str], exclude: Sequence[str],
                     op_types: Sequence[str], extra_options: Mapping[str, Any]) -> onnx.ModelProto:
        """``model`` with Q/DQ written for ``op_types`` from the given ranges (per-channel int8 weights)."""
        ...

    def quantizable_op_types(self) -> list[str]:
        """Every operator type the quantizer can write Q/DQ for."""
        ...

    def scale_zero_point(self, low: np.ndarray, high: np.ndarray, qmin: np.ndarray,
                         qmax: np.ndarray) -> tuple[Any, Any]:
        """(zero point, scale) of the quantizer's own rounding for the range ``low``..``high``."""
        ...

    def float16_block_list(self) -> list[str]:
        """The op types its FP16 converter keeps in FP32 by default."""
        ...

    def to_float16(self, model: onnx.ModelProto, *, keep_io_types: bool, op_block_list: Sequence[str],
                   node_block_list: Sequence[str]) -> onnx.ModelProto:
        """``model`` converted to FP16 but the ops and nodes blocked (it may edit its argument)."""
        ...

    def quiet(self) -> AbstractContextManager[None]:
        """A context in which the tools log no advice."""
        ...


# -- bench, tuning and diagnosis -----------------------------------------------------------------------------------

@runtime_checkable
class Tunes(Protocol):
    """Probes its own run settings on an artifact and records the fastest beside it (bench --tune)."""

    def candidates(self, execution: OnnxExecution) -> list[Any]:
        """The settings it would try on ``execution`` (empty: nothing to tune there)."""
        ...

    def tune_artifact(self, artifact: Any, execution: OnnxExecution, feeds: Batch, **keywords: Any) -> Any:
        """The TunedRun it recorded for ``artifact`` (keywords: base settings, rounds, seconds, timing, device)."""
        ...


@runtime_checkable
class QuantizesAsPeer(Protocol):
    """A peer quantizer whose files this backend runs (bench --peers), from the packages in ``tools``."""

    tools: tuple[str, ...]

    def quantize(self, fp32: Path, calibration: Batch, folder: Path) -> tuple[str, str, Path] | None:
        """(the row's label, the tool that made it, the quantized file), or None where its library is absent."""
        ...


@runtime_checkable
class ReportsInstallation(Protocol):
    """Says what of its installation matters beside its version: bench's environment, ``trtpipe doctor``'s line."""

    def environment(self) -> dict[str, Any]:
        ...

    def doctor_row(self) -> dict[str, Any]:
        """(item, ok, value, fix) as ``trtpipe doctor`` shows it."""
        ...


@runtime_checkable
class WordsErrors(Protocol):
    """Reads its runtime's error messages."""

    def refuses_data(self, error: BaseException) -> bool:
        """Whether ``error`` says a request's data was refused (a server's 400), not the model failing (500)."""
        ...

    def failed_node(self, line: str) -> tuple[str, str]:
        """An error's first line -> (the node that failed, in words, or ""; the line without its preambles)."""
        ...


@runtime_checkable
class OpensUnrecorded(Protocol):
    """Opens a file of its kind that has no trtpipe record, only on the user's trust (its rows say
    ``unrecorded_label`` in place of a precision)."""

    unrecorded_label: str

    def describe_unrecorded(self, path: Path, *, trusted: bool) -> ArtifactDescription:
        """The file described from its record, or where it has none only when ``trusted``, else BadInput."""
        ...


@dataclass(frozen=True)
class ProfilesLayers:
    """Times every layer of what it runs with its runtime's profiler (bench --profile-layers)."""


@dataclass(frozen=True)
class TakesBenchFlags:
    """Bench's run flags it takes, by their BenchOptions names, set on its rows only (another backend's setting of
    the same name is not the flag's)."""

    names: tuple[str, ...]


# -- live modules and GPUs ---------------------------------------------------------------------------------------

@runtime_checkable
class RunsModules(Protocol):
    """Runs a live training module as it is (PyTorch eager): the reference row every artifact is measured against
    where the model came as a module."""

    def output_names(self, result: object) -> list[str]:
        """A name for each tensor a module returned, in the order this backend flattens them."""
        ...


@runtime_checkable
class DescribesGpuRuns(Protocol):
    """Says, in words, how its rows run on a GPU (bench's environment table)."""

    gpu_settings: tuple[str, ...]


@runtime_checkable
class ReadsGpu(Protocol):
    """Reads the current GPU's compute capability ("9.0") as its library sees it, recorded in what it builds."""

    def compute_capability(self) -> str:
        ...


# -- building and serving ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class OwnStage:
    """The stage package that exists to make this backend's artifacts (TensorRT's builder in engine/, AOTInductor's
    in compile/), which may use its folder directly, and the backends its folder is built on."""

    package: str
    builds_on: tuple[BackendKind, ...] = ()


@dataclass(frozen=True)
class TritonFacts:
    """How Triton runs what this backend runs: a platform of Triton's own (``onnxruntime_onnx``), or a Triton
    backend named after ours with its config parameters; "" for neither (Triton's Python backend runs it)."""

    platform: str = ""
    instance_kind: str = "KIND_CPU"
    backend: str = ""  # a Triton backend of this name reads the artifact by its file name (OpenVINO's)
    # The config parameters that backend takes: (a BF16 file, threads per instance) -> {name: value}
    parameters: Callable[[bool, int | None], dict[str, str]] | None = None
    # Accelerator options for Triton's native platform from an artifact's tuned record: ((key, value), ...)
    accelerator_options: Callable[[ArtifactDescription], tuple[tuple[str, str], ...]] | None = None

