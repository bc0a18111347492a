"""The one vocabulary every layer speaks: precisions, targets, calibration methods, artifact and backend
kinds, the dtype table and the shared defaults.

Standard library only, so the CLI, the options and the pipeline file can name every choice without loading
torch, onnx or onnxruntime. No other module spells these names as string literals: a new precision, backend or
artifact kind is one entry here (plus the code that implements it), and every surface picks it up.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TypeVar

__version__ = "0.1.0"


class Precision(StrEnum):
    """The arithmetic an artifact (or a PyTorch baseline row) computes in."""

    FP32 = "fp32"
    TF32 = "tf32"  # PyTorch CUDA baseline only: FP32 storage, TF32 matmuls and convolutions
    FP16 = "fp16"
    BF16 = "bf16"  # CPUs with AVX512-BF16 or AMX: OpenVINO's BF16 kernels; PyTorch's autocast baseline
    INT8 = "int8"

    @property
    def needs_calibration(self) -> bool:
        """Whether producing it needs data: FP16 to find overflowing nodes, INT8 for activation ranges."""
        return _PRECISIONS[self].needs_calibration

    @property
    def engine_layer_precisions(self) -> frozenset[str]:
        """The precisions a compute layer of a TensorRT engine built for this precision may run in."""
        return _PRECISIONS[self].engine_layer_precisions

    @property
    def optimizable(self) -> bool:
        """Whether `trtpipe optimize` can produce it from an FP32 ONNX."""
        return _PRECISIONS[self].optimizable

    @classmethod
    def optimize_choices(cls) -> tuple[str, ...]:
        return tuple(p.value for p in cls if p.optimizable)

    @property
    def pinned_runtime(self) -> BackendKind | None:
        """The one runtime an ONNX file of this precision must run on, else None: a BF16 file keeps FP32
        activations behind Casts, and only OpenVINO's BF16 kernels compute it as BF16."""
        return BackendKind.pinned_for(self)


@dataclass(frozen=True)
class _PrecisionFacts:
    needs_calibration: bool
    engine_layer_precisions: frozenset[str]
    optimizable: bool


# Layer precisions as read from TensorRT's engine inspector (see LAYER_FORMAT_WORDS).
_ANY_LAYER = frozenset({"fp32", "tf32", "fp16", "bf16", "int8", "fp8", "int4"})
_PRECISIONS = {
    Precision.FP32: _PrecisionFacts(False, _ANY_LAYER, True),
    Precision.TF32: _PrecisionFacts(False, _ANY_LAYER, False),
    Precision.FP16: _PrecisionFacts(True, frozenset({"fp16", "bf16", "int8", "fp8"}), True),
    Precision.BF16: _PrecisionFacts(False, frozenset({"bf16", "fp16", "int8", "fp8"}), True),
    Precision.INT8: _PrecisionFacts(True, frozenset({"int8", "fp8", "int4"}), True),
}

# Words in TensorRT's layer "Format/Datatype" text, in the order they are tried, and the precision each means.
LAYER_FORMAT_WORDS: tuple[tuple[str, str], ...] = (
    ("int8", "int8"), ("fp8", "fp8"), ("int4", "int4"), ("bf16", "bf16"), ("fp16", "fp16"), ("half", "fp16"),
    ("fp32", "fp32"), ("float", "fp32"),
)
UNKNOWN = "unknown"


_Open = TypeVar("_Open", bound=StrEnum)
_TASKS = Path(__file__).parent / "tasks"  # one module per task measure
_RUNTIME = Path(__file__).parent / "runtime"  # one folder per backend


def _declares_a_measure(module: Path) -> bool:
    """Whether ``module`` is a task measure: it declares what it measures (its ``EXPECTED`` line); the folder's
    helpers (``base``, ``boxes``, ``registry``) declare none."""
    return module.is_file() and any(line.startswith("EXPECTED") for line in module.read_text().splitlines())


def _member_of_folder(cls: type[_Open], value: object, module: Path) -> _Open | None:
    """The member of an open vocabulary (a backend kind, a task) that ``value`` names where its module ``module``
    exists: the same object every time; None (Enum's own refusal) for anything else."""
    if not (isinstance(value, str) and value.isidentifier() and value.islower() and module.is_file()):
        return None
    member = str.__new__(cls, value)
    member._name_, member._value_ = value.upper(), value
    found: _Open = cls._value2member_map_.setdefault(value, member)  # type: ignore[assignment]
    return found


class Target(StrEnum):
    """Who runs an INT8 artifact: its Q/DQ flavour follows from that."""

    TENSORRT = "tensorrt"  # S8S8 symmetric; accuracy measured with Q/DQ as float ops
    CPU = "cpu"  # U8S8, as ONNX Runtime's x86 integer kernels need (OpenVINO runs it too)
    OPENVINO = "openvino"  # U8S8 where a convolution reads, zero points 0 elsewhere: OpenVINO's int8 kernels


class Task(StrEnum):
    """What a model's outputs mean, and so which measure judges an optimized artifact against FP32."""

    CLASSIFY = "classify"  # logits: top-1/top-5 agreement
    DETECT = "detect"  # boxes and scores: detections against FP32's own
    SEGMENT = "segment"  # per-pixel class scores: pixel agreement, mIoU against FP32's argmax
    DENSE = "dense"  # per-pixel maps (text probability, depth): F1 at a threshold, mean error
    EMBED = "embed"  # embeddings: cosine
    SEQUENCE = "sequence"  # per-timestep class scores of a CTC recognizer: lines read exactly, characters
    RESTORE = "restore"  # image-to-image (restoration, super-resolution): PSNR and SSIM against FP32's images
    HEATMAP = "heatmap"  # heatmaps of keypoints or centres: peak recall and location error against FP32's peaks
    GENERIC = "generic"  # anything else: per-output cosine, relative error, SNR

    @classmethod
    def _missing_(cls, value: object) -> Task | None:
        """A task measure added without a member here is a task all the same (a measure is its module and its
        registry line): ``Task("<task>")`` names it where ``trtpipe/tasks/<task>.py`` exists and declares what it
        measures (an ``EXPECTED`` line; the folder's helpers, ``base`` and ``boxes``, declare none)."""
        if not (isinstance(value, str) and value.isidentifier() and _declares_a_measure(_TASKS / f"{value}.py")):
            return None
        return _member_of_folder(cls, value, _TASKS / f"{value}.py")

    @classmethod
    def every(cls) -> tuple[Task, ...]:
        """Every task a measure judges, as ``--task`` and the pipeline file offer them: the members above, then each
        measure module added to trtpipe/tasks/ (read from the folder, importing nothing: help must not load numpy;
        tests/tasks/test_measure_registry.py holds the folder and the measures' table to the same list)."""
        declared = {str(member) for member in cls}
        added = sorted(path.stem for path in _TASKS.glob("*.py") if path.stem not in declared
                       and _declares_a_measure(path))
        return (*cls, *(cls(name) for name in added))






class CalibMethod(StrEnum):
    MINMAX = "minmax"
    ENTROPY = "entropy"
    PERCENTILE = "percentile"
    MSE = "mse"


class Quality(StrEnum):
    """How much work INT8 does to keep accuracy; trtpipe/optimize/int8/recipes.py says which steps each runs."""

    FAST = "fast"
    BALANCED = "balanced"
    BEST = "best"


class Device(StrEnum):
    CPU = "cpu"
    CUDA = "cuda"


class Baseline(StrEnum):
    """PyTorch rows bench adds beside FP32 eager (the reference): what users would deploy instead of trtpipe."""

    COMPILE = "compile"  # torch.compile (Inductor), FP32
    AUTOCAST = "autocast"  # eager under autocast: BF16 on a CPU with AVX512-BF16/AMX, FP16 on a GPU
    # GPU: torch.compile(mode="reduce-overhead") on an FP16 channels_last copy (Inductor's CUDA graphs); on a CPU,
    # where reduce-overhead has no graphs to use, torch.compile on the BF16 copy where the CPU has BF16 kernels.
    COMPILE_HALF = "compile-half"
    GRAPH_HALF = "graph-half"  # GPU: eager FP16 channels_last replayed from a CUDA graph captured by hand
    MAX_AUTOTUNE = "max-autotune"  # torch.compile(mode="max-autotune") FP16 channels_last: minutes per shape

    @classmethod
    def defaults(cls, device: Device) -> tuple[Baseline, ...]:
        """What bench adds when no baseline is named: on a GPU, the rows a PyTorch user gets in one line
        (max-autotune only when asked: it can take many minutes per shape)."""
        return (cls.COMPILE_HALF, cls.GRAPH_HALF) if device is Device.CUDA else ()


class CpuClass(StrEnum):
    """A class of x86 CPUs that INT8 arithmetic behaves alike on: what an INT8 artifact is made and measured for.

    Without VNNI (portable, avx2), x86's u8 x s8 dot product (vpmaddubsw) adds pairs of products into 16 bits and
    saturates there; with it (avx-vnni, avx512-vnni, amx), products accumulate in 32 bits."""

    PORTABLE = "portable"  # any x86-64 CPU: what runs everywhere (no assumption beyond SSE4.1)
    AVX2 = "avx2"
    AVX_VNNI = "avx-vnni"
    AVX512_VNNI = "avx512-vnni"
    AMX = "amx"

    @property
    def vnni(self) -> bool:
        """Whether int8 dot products accumulate without 16-bit saturation."""
        return self in (CpuClass.AVX_VNNI, CpuClass.AVX512_VNNI, CpuClass.AMX)

    @property
    def rank(self) -> int:
        """Weakest first: an artifact made for one class runs on a CPU of that class or a higher one."""
        return tuple(CpuClass).index(self)




class BackendKind(StrEnum):
    """An engine kind of the runtime seam; each has its folder under trtpipe/runtime/, which declares everything
    else about it (class, settings, library, Triton facts: runtime/<engine>/__init__.py's ENTRY)."""

    TORCH = "torch"
    ONNXRUNTIME = "onnxruntime"
    OPENVINO = "openvino"  # optional extra [openvino]: ONNX artifacts on Intel's CPU runtime
    TENSORRT = "tensorrt"
    AOTI = "aoti"  # AOTInductor packages (.pt2): torch.export, compiled ahead of time by Inductor, run by torch

    @classmethod
    def _missing_(cls, value: object) -> BackendKind | None:
        """A backend folder added without a member here is a kind all the same (a backend is its folder and its
        registry line): ``BackendKind("<engine>")`` names it where ``trtpipe/runtime/<engine>/__init__.py`` exists,
        the same object every time; any other name is refused as Enum refuses it."""
        return _member_of_folder(cls, value, _RUNTIME / str(value) / "__init__.py")

    # The relations among the vocabulary's words that the artifact room needs below the registry (it describes a
    # file with the backend that runs it): kept here, beside the names, so that no other line of this module names
    # an engine (tests/runtime/test_backend_folders.py). The registry's entries say the same (``runs``): checked there.
    @classmethod
    def for_artifact(cls, kind: ArtifactKind) -> tuple[BackendKind, ...]:
        """The backends that run artifacts of ``kind``, its default first."""
        return {ArtifactKind.ONNX: (cls.ONNXRUNTIME, cls.OPENVINO), ArtifactKind.TENSORRT_ENGINE: (cls.TENSORRT,),
                ArtifactKind.AOTI: (cls.AOTI,)}[kind]

    @classmethod
    def pinned_for(cls, precision: Precision) -> BackendKind | None:
        """The one backend an ONNX file of ``precision`` must run on, else None."""
        return cls.OPENVINO if precision is Precision.BF16 else None



class ArtifactKind(StrEnum):
    """A deployable file: which suffixes it has, what runs it, its name in a model repository, where its metadata is
    (what Triton calls it is its backend's fact: runtime/<engine>/__init__.py)."""

    ONNX = "onnx"
    TENSORRT_ENGINE = "tensorrt_engine"
    AOTI = "aoti"  # an AOTInductor package (native code: loaded only when its manifest vouches for it)

    @property
    def suffixes(self) -> tuple[str, ...]:
        return _ARTIFACTS[self].suffixes

    @property
    def backend(self) -> BackendKind:
        return BackendKind.for_artifact(self)[0]

    @property
    def runtimes(self) -> tuple[BackendKind, ...]:
        """Every backend that can run it; ``backend`` is the default."""
        return BackendKind.for_artifact(self)

    @property
    def repository_file(self) -> str:
        """Its file name inside a model repository version folder (Triton's default)."""
        return _ARTIFACTS[self].repository_file

    @property
    def metadata(self) -> str:
        """Where its metadata lives: "manifest" (NAME.manifest.json) or "sidecar" (FILE.json)."""
        return _ARTIFACTS[self].metadata

    @classmethod
    def for_path(cls, name: str) -> ArtifactKind | None:
        """The kind of a file, by its suffix (case-insensitive); None for anything else."""
        lowered = name.lower()
        return next((kind for kind in cls if any(lowered.endswith(s) for s in kind.suffixes)), None)

    @property
    def runtimes_help(self) -> str:
        """Its runtimes in a help text: "a or b (pip install 'trtpipe[b]')", the optional ones (all but the
        default) with their install line."""
        extras = ", ".join(f"'trtpipe[{kind}]'" for kind in self.runtimes if kind is not self.backend)
        return " or ".join(self.runtimes) + (f" (pip install {extras})" if extras else "")

    @classmethod
    def all_suffixes(cls) -> tuple[str, ...]:
        return tuple(s for kind in cls for s in kind.suffixes)


class TritonBackend(StrEnum):
    """How an exported Triton repository runs a model."""

    NATIVE = "native"  # Triton's own onnxruntime/tensorrt backend (NVIDIA's container)
    PYTHON = "python"  # Triton's Python backend running trtpipe's runtime (any image with trtpipe installed)


@dataclass(frozen=True)
class _ArtifactFacts:
    suffixes: tuple[str, ...]
    repository_file: str
    metadata: str


_ARTIFACTS = {
    ArtifactKind.ONNX: _ArtifactFacts((".onnx",), "model.onnx", "manifest"),
    ArtifactKind.TENSORRT_ENGINE: _ArtifactFacts((".plan", ".engine"), "model.plan", "sidecar"),
    ArtifactKind.AOTI: _ArtifactFacts((".pt2",), "model.pt2", "manifest"),
}


class OnnxExecution(StrEnum):
    """How bench runs ONNX artifacts: ONNX Runtime on the CPU, on CUDA or through its TensorRT provider, or OpenVINO
    (the backend that runs each is the one whose registry entry lists it, runtime.registry.backend_of; the providers
    each takes, and whether it runs on a GPU, are that backend's: runtime/onnxruntime/executions.py)."""

    CPU = "onnxruntime"
    CUDA = "onnxruntime-cuda"
    TENSORRT = "onnxruntime-tensorrt"
    OPENVINO = "openvino"

    @classmethod
    def default(cls) -> OnnxExecution:
        """The way an ONNX file runs where none is asked for: ONNX Runtime's CPU provider."""
        return cls.CPU

    @classmethod
    def _missing_(cls, value: object) -> OnnxExecution | None:
        """A backend folder added without a member here runs ONNX files under its own name (its plain way):
        ``OnnxExecution("<engine>")`` names it where ``trtpipe/runtime/<engine>/__init__.py`` exists; whether that
        backend runs ONNX at all is its entry's (runtime.registry.backend_of says so in one line)."""
        return _member_of_folder(cls, value, _RUNTIME / str(value) / "__init__.py")

    @classmethod
    def every(cls) -> tuple[OnnxExecution, ...]:
        """Every way bench may name: the members above, then each backend folder whose entry declares that it runs
        ONNX files (read from the folder, importing nothing: help must not load a backend)."""
        declared = {str(member) for member in cls}
        added = sorted(path.parent.name for path in _RUNTIME.glob("*/__init__.py")
                       if path.parent.name not in declared and "RunsOnnx" in path.read_text())
        return (*cls, *(cls(name) for name in added))




class ChannelOrder(StrEnum):
    RGB = "rgb"
    BGR = "bgr"


@dataclass(frozen=True)
class DType:
    """One element type, as each system spells it."""

    numpy: str  # numpy dtype name
    onnx: int  # onnx.TensorProto enum value
    onnx_name: str  # ONNX's type name, as in ONNX Runtime's "tensor(float)"
    kserve: str  # Open Inference Protocol / KServe v2 datatype
    triton: str  # Triton config data_type
    tensorrt: str  # TensorRT DataType member name


DTYPES: tuple[DType, ...] = (
    DType("float32", 1, "float", "FP32", "TYPE_FP32", "FLOAT"),
    DType("uint8", 2, "uint8", "UINT8", "TYPE_UINT8", "UINT8"),
    DType("int8", 3, "int8", "INT8", "TYPE_INT8", "INT8"),
    DType("uint16", 4, "uint16", "UINT16", "TYPE_UINT16", ""),
    DType("int16", 5, "int16", "INT16", "TYPE_INT16", ""),
    DType("int32", 6, "int32", "INT32", "TYPE_INT32", "INT32"),
    DType("int64", 7, "int64", "INT64", "TYPE_INT64", "INT64"),
    DType("bool", 9, "bool", "BOOL", "TYPE_BOOL", "BOOL"),
    DType("float16", 10, "float16", "FP16", "TYPE_FP16", "HALF"),
    DType("float64", 11, "double", "FP64", "TYPE_FP64", ""),
    DType("uint32", 12, "uint32", "UINT32", "TYPE_UINT32", ""),
    DType("uint64", 13, "uint64", "UINT64", "TYPE_UINT64", ""),
)


def dtype(*, numpy: str | None = None, onnx: int | None = None, onnx_name: str | None = None,
          kserve: str | None = None, tensorrt: str | None = None) -> DType | None:
    """Look a dtype up by one of its spellings; None when no entry has it."""
    for entry in DTYPES:
        if ((numpy is not None and entry.numpy == numpy) or (onnx is not None and entry.onnx == onnx)
                or (onnx_name is not None and entry.onnx_name == onnx_name)
                or (kserve is not None and entry.kserve == kserve)
                or (tensorrt and entry.tensorrt and entry.tensorrt == tensorrt.upper())):
            return entry
    return None


# Shared defaults: one value each, read by the options of every stage that uses it.
DEFAULT_OPSET = 18
DEFAULT_BATCHES = (1, 8, 32)  # bench sweep, and a TensorRT profile's min/opt/max batch
BENCH_DURATION_S = 5.0
BENCH_WARMUP = 5
SERVE_MAX_BATCH = 32
REPOSITORY_VERSION = "1"  # version folder trtpipe writes in a model repository
