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
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from trtpipe.errors import BadInput
from trtpipe.inputs import Batch, InputSpec, check_declared, guess_layout, random_batch
from trtpipe.models.data_spec import DataKind
from trtpipe.models.registry import factory_spec
from trtpipe.models.sources import Found, find_module
from trtpipe.models.user_code import load_postprocess
from trtpipe.shapes import FIRST, declared_for, format_shape, parse_input_dtypes, parse_input_ranges, parse_input_shapes
from trtpipe.vocab import Task

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
                what = f"input shape {_shape_meaning(spec.shape, arrays[0].shape)}" + (
                    f" ({spec.dtype})" if spec.dtype != "float32" else "")
                fix = "Pass the shape it expects with --input-shape."
            else:
                what = "inputs " + ", ".join(f"{s.name} {format_shape(a.shape)} {s.dtype}"
                                             for s, a in zip(self.inputs, arrays, strict=True))
                fix = "Pass the shapes and dtypes it expects with --input-shape and --input-dtype."
            raise BadInput(f"Model '{self.name}' fails on {what}: {first_line}. {fix}") from None


def _shape_meaning(declared: Sequence[int | str | None], ran: Sequence[int]) -> str:
    """A declared input shape as given, what it means (the first axis is the batch) and the shape actually run where
    that differs: convert checks a dynamic batch axis at batch 2, so 1x1x32 runs as 2x1x32."""
    shape = format_shape(tuple(declared))
    meaning = f"{shape} (batch {declared[0]}, each sample {format_shape(tuple(declared[1:])) or 'a scalar'}"
    if tuple(ran) != tuple(declared):
        meaning += f"; run at batch {ran[0]} as {format_shape(tuple(ran))} to check the dynamic batch axis"
    return meaning + ")"


Shapes = Mapping[str, Sequence[int]] | Sequence[int] | str | None
Dtypes = Mapping[str, str] | str | None
Ranges = Mapping[str, Sequence[float]] | Sequence[float] | str | None


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
    found = find_module(spec, arch, trust_checkpoint)
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
    found: Found,
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
