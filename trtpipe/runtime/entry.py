"""What a backend folder declares about itself, so nothing outside it needs to know: its settings type, the
artifact kinds it runs, the Python package it needs, the ONNX executions bench names it by and its Triton facts.
Each ``runtime/<engine>/__init__.py`` exports one ``ENTRY``; ``registry.py`` lists them, one line each. Standard
library and the vocabulary only: listing backends never imports an engine. (What an artifact is comes from the
record of its kind, in the artifact room: trtpipe.artifact.description.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trtpipe.vocab import ArtifactKind, BackendKind, Device, OnnxExecution, Target

if TYPE_CHECKING:
    from pathlib import Path

    import onnx

    from trtpipe.artifact.description import ArtifactDescription
    from trtpipe.inputs import Batch


def settings_names(settings: type) -> frozenset[str]:
    """The run settings a backend's settings type holds (the fields of its dataclass)."""
    return frozenset(f.name for f in dataclasses.fields(settings))


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


@dataclass(frozen=True)
class BackendEntry:
    """One backend as the registry lists it; its class is imported only when an artifact is opened on it."""

    kind: BackendKind
    implementation: str  # "module:Class", imported when an artifact is opened on it
    settings: type  # the dataclass of run settings it receives (each field also a RunOptions field at the edge)
    runs: tuple[ArtifactKind, ...] = ()  # the artifact kinds it opens (an engine, a package; ONNX on two backends)
    library: str = ""  # the Python package it runs on
    executions: tuple[OnnxExecution, ...] = ()  # how bench names its ways of running an ONNX file
    triton: TritonFacts | None = None
    # The live training module run as it is (PyTorch eager): the reference row every artifact is measured against
    # where the model came as a module, not an artifact file.
    eager: bool = False
    optional: bool = False  # an optional extra: its library's version is recorded where it is installed
    peer_tools: tuple[str, ...] = ()  # packages of the peer quantizers whose files it runs (bench --peers)
    # "module:function" of the peer quantizer whose file it runs (bench --peers): (an FP32 ONNX, calibration samples,
    # a folder) -> (the row's label, the tool that made it, the quantized file), or None where its library is absent
    peer: str = ""
    gpu_settings: str = ""  # "module:NAME" of the words saying how its rows run on a GPU (bench's environment)
    # The stage package that exists to make this backend's artifacts ("engine": TensorRT's builder, "compile":
    # AOTInductor's), which may use the folder directly: it is this backend's own stage, not a branch on it.
    stage: str = ""
    builds_on: tuple[BackendKind, ...] = ()  # backends its folder is built on (AOTInductor's packages run on torch)
    # The device what it runs runs on where the artifact's record names none (TensorRT's engines: the GPU); None
    # where its settings choose the device (ONNX Runtime: an execution's providers, ``executions``' GPU ones).
    runs_on: Device | None = Device.CPU
    # "module:function" reading the current GPU's compute capability ("9.0") as its library sees it, recorded in the
    # artifacts it builds for a GPU (AOTInductor's packages, through torch)
    capability: str = ""
    # "module:function" naming each tensor a live module returns, in the order the backend flattens them (the eager
    # backend's): an exported graph names its outputs by it, as the model does
    output_names: str = ""
    # Hooks of the backend that runs ONNX files (each None elsewhere):
    # (an execution, a TensorRT provider profile, a workspace in bytes) -> the RunOptions keywords that run it
    execution_settings: Callable[[OnnxExecution, tuple[str, str, str] | None, int | None], dict[str, Any]] | None \
        = None
    check_execution: Callable[[OnnxExecution], None] | None = None  # BadInput where it cannot run here
    # (a model or its path, tensors to expose as outputs, silent, FP16 rounded as a GPU writes it) -> a session that
    # runs the graph as written on the CPU, to read tensors inside it (calibration, AdaRound, ``trtpipe debug``)
    probe: Callable[[onnx.ModelProto | Path | str, tuple[str, ...], bool, bool], Any] | None = None
    # How it words its errors (each None where its errors need no reading): whether an error of its runtime says the
    # request's data was refused, not the model failing by itself (a server's 400, not 500); and an error's first
    # line -> (the node that failed, in words, or ""; the rest of the line without the runtime's preambles)
    refuses_data: Callable[[BaseException], bool] | None = None
    failed_node: Callable[[str], tuple[str, str]] | None = None
    # Bench's run flags it takes: BenchOptions fields named as its own settings (TensorRT's cuda_graph, spin_wait),
    # set on its rows only (another backend's setting of the same name is not the flag's: ONNX Runtime's cuda_graph
    # is its tuning's choice)
    bench_flags: tuple[str, ...] = ()
    # "module:function" (path, *, trusted) -> the description of a file of its kind before it is opened: from its
    # record, or where it has none (or one that does not match the file) only when the user vouches for the file
    # (``--trust-engine``; else BadInput in one line naming the flag); such a file is opened with ``trusted=True``
    describe_unrecorded: str = ""
    unrecorded_label: str = ""  # what its rows say in place of a precision for a file opened on trust
    title: str = ""  # its name in prose ("ONNX Runtime"); its kind where empty
    # How portable what it runs is (lower: more): a tie between rows goes to the more portable runtime
    portability: int = 0
    # "module:function" of its settings probe (bench --tune): (an artifact's description, an execution, feeds, *,
    # base settings, rounds, seconds, a timing function, a device namer) -> the TunedRun it recorded; and
    # "module:function" (an execution) -> the settings it would try (empty: nothing to tune on that execution)
    tuner: str = ""
    tuning_candidates: str = ""
    # INT8 targets whose files it does not run (their Q/DQ are made for another runtime's arithmetic)
    foreign_int8_targets: tuple[Target, ...] = ()
    # "module:function" () -> what bench records of its installation beside its version (ONNX Runtime's providers)
    environment: str = ""
    doctor: str = ""  # "module:function" () -> its line in ``trtpipe doctor`` (item, ok, value, fix)

    @property
    def name(self) -> str:
        """Its name in prose."""
        return self.title or str(self.kind)

    def imported(self, field: str) -> Any:
        """What one of its "module:NAME" fields names, imported now (TypeError where it declares none)."""
        target = getattr(self, field)
        if not target:
            raise TypeError(f"{self.kind} declares no {field}")
        return _imported(target)

    def describer(self) -> Callable[..., ArtifactDescription]:
        """The function describing a file of its kind, trusted or not (``describe_unrecorded``, imported now)."""
        if not self.describe_unrecorded:
            raise TypeError(f"{self.kind} declares no way to describe a file without its record")
        describe: Callable[..., ArtifactDescription] = _imported(self.describe_unrecorded)
        return describe

    def opener(self) -> Any:
        """The backend class, imported now."""
        return _imported(self.implementation)

    def gpu_capability(self) -> str:
        """The current GPU's compute capability (``capability``, imported and called now)."""
        if not self.capability:
            raise TypeError(f"{self.kind} declares no way to read a GPU's compute capability")
        return str(_imported(self.capability)())

    def output_namer(self) -> Callable[[object], list[str]]:
        """The function naming a module's outputs (``output_names``, imported now)."""
        if not self.output_names:
            raise TypeError(f"{self.kind} declares no names for a module's outputs")
        namer: Callable[[object], list[str]] = _imported(self.output_names)
        return namer

    def gpu_words(self) -> tuple[str, ...]:
        """How its rows run on a GPU, in words (``gpu_settings``, imported now); () where it declares none."""
        return tuple(_imported(self.gpu_settings)) if self.gpu_settings else ()

    def peer_quantizer(self) -> Callable[[Path, Batch, Path], tuple[str, str, Path] | None]:
        """Its peer quantizer (``peer``, imported now)."""
        if not self.peer:
            raise TypeError(f"{self.kind} declares no peer quantizer")
        quantize: Callable[[Path, Batch, Path], tuple[str, str, Path] | None] = _imported(self.peer)
        return quantize


def _imported(target: str) -> Any:
    import importlib

    module_name, name = target.split(":")
    return getattr(importlib.import_module(module_name), name)
