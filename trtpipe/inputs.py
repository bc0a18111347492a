"""A model's inputs as users declare them and as data carries them.

A model may take several inputs, each with its own name, dtype, shape, layout and value range (a detector taking
``image`` and ``scale``; a model taking NHWC uint8 pixels and normalising inside). :class:`InputSpec` is one of
them; a *batch* is what one run feeds: a bare array for a single-input model, else a mapping from input name to
array, every array with the same number of samples. The helpers here slice, join and draw batches of either form,
so single-input code keeps passing plain arrays and multi-input models flow through the same calls.

Users declare inputs on the command line as ``[NAME:]VALUE`` lists: ``--input-shape 1x3x224x224`` (the only or
first input) or ``--input-shape image:1x3x640x640,scale:1x2``; ``--input-dtype uint8``; ``--input-range 0..255``
or ``image:0..255,scale:0.5..2``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from trtpipe.errors import BadInput
from trtpipe.shapes import FIRST, declared_for, format_shape

Batch = np.ndarray | Mapping[str, np.ndarray]


class Layout(StrEnum):
    NCHW = "nchw"  # channels first: PyTorch's convention
    NHWC = "nhwc"  # channels last: TensorFlow exports, and models that take decoded image pixels as they are


@dataclass(frozen=True)
class InputSpec:
    """One model input: its name, dtype, shape (batch first; None marks a dynamic dimension), layout and the range
    its values live in (None: a float input with no declared range, drawn from N(0, 1))."""

    name: str
    shape: tuple[int | None, ...]
    dtype: str = "float32"
    value_range: tuple[float, float] | None = None
    layout: Layout | None = None  # None: not an image (or not known); see :func:`guess_layout`

    @property
    def sample_shape(self) -> tuple[int | None, ...]:
        return self.shape[1:]

    @property
    def fixed_shape(self) -> tuple[int, ...] | None:
        """The shape when every dimension is fixed, else None."""
        fixed = tuple(d for d in self.shape if d is not None)
        return fixed if len(fixed) == len(self.shape) else None

    @property
    def is_integer(self) -> bool:
        return np.issubdtype(np.dtype(self.dtype), np.integer) or self.dtype == "bool"

    @property
    def effective_range(self) -> tuple[float, float] | None:
        """The declared range, else the whole range of an 8-bit integer dtype (pixels), else None."""
        if self.value_range is not None:
            return self.value_range
        if np.dtype(self.dtype).kind in "iu" and np.dtype(self.dtype).itemsize == 1:  # uint8, int8
            info = np.iinfo(np.dtype(self.dtype))
            return float(info.min), float(info.max)
        if self.dtype == "bool":
            return 0.0, 1.0
        return None

    def check_range(self) -> None:
        """BadInput when the declared range does not fit an integer input: beyond what its dtype holds (uint8
        0..300 would wrap 300 to 44) or not whole numbers (0.2..0.8 would draw only zeros)."""
        if self.value_range is None or not self.is_integer or self.dtype == "bool":
            return
        info = np.iinfo(np.dtype(self.dtype))
        low, high = self.value_range
        if low < info.min or high > info.max:
            raise BadInput(f"--input-range {low:g}..{high:g} does not fit input '{self.name}', whose dtype "
                           f"{self.dtype} holds {info.min}..{info.max}.")
        if not (float(low).is_integer() and float(high).is_integer()):
            raise BadInput(f"--input-range {low:g}..{high:g} does not fit input '{self.name}': a {self.dtype} input "
                           "takes whole numbers (e.g. 0..255).")

    def random(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """``count`` seeded samples: uniform over the input's range (integers inclusive of both ends), standard
        normal for a float input with no range. Every dimension but the batch must be fixed."""
        sample = tuple(d for d in self.sample_shape if d is not None)
        if len(sample) != len(self.sample_shape):
            raise BadInput(f"Input '{self.name}' has dynamic dimensions ({format_shape(self.shape)}): give its size "
                           f"with --input-shape {self.name}:{format_shape((1, *self.sample_shape)).replace('?', 'N')}"
                           " or data of that size.")
        shape = (count, *sample)
        bounds = self.effective_range
        if self.is_integer:
            if bounds is None:
                bounds = (0.0, 1.0) if self.dtype == "bool" else (0.0, 10.0)
            return rng.integers(int(bounds[0]), int(bounds[1]), size=shape, endpoint=True).astype(self.dtype)
        if bounds is None:
            return rng.standard_normal(shape, dtype=np.float32).astype(self.dtype)
        return rng.uniform(bounds[0], bounds[1], size=shape).astype(self.dtype)

    def describe_random(self) -> str:
        """What :meth:`random` draws, in words (a report says how its inputs were made)."""
        bounds = self.effective_range
        if self.is_integer:
            low, high = bounds or ((0, 1) if self.dtype == "bool" else (0, 10))
            return f"{self.name}: uniform {self.dtype} integers in [{low:g}, {high:g}]"
        if bounds is None:
            return f"{self.name}: standard normal {self.dtype}"
        return f"{self.name}: uniform {self.dtype} in [{bounds[0]:g}, {bounds[1]:g}]"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
                "range": list(self.value_range) if self.value_range else None,
                "layout": str(self.layout) if self.layout else None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InputSpec:
        """The spec :meth:`to_dict` wrote (a manifest's ``input_specs``: JSON, so its values are untyped)."""
        bounds = data.get("range")
        layout = data.get("layout")
        return cls(str(data["name"]), tuple(None if d is None else int(d) for d in data["shape"]),
                   str(data.get("dtype") or "float32"),
                   (float(bounds[0]), float(bounds[1])) if bounds else None,
                   Layout(str(layout)) if layout else None)


def guess_layout(shape: Sequence[int | str | None]) -> Layout | None:
    """A 4-D image input's layout where its shape says it: channels (1, 3 or 4) in one place and not the other."""
    if len(shape) != 4:
        return None
    channels = (1, 3, 4)
    first, last = shape[1] in channels, shape[3] in channels
    if first and not last:
        return Layout.NCHW
    if last and not first:
        return Layout.NHWC
    return None


# -- batches: a bare array (one input) or {input name: array} ------------------------------------------------------

def count(batch: Batch) -> int:
    """How many samples ``batch`` holds; BadInput when its arrays disagree."""
    if isinstance(batch, np.ndarray):
        return len(batch)
    sizes = {name: len(array) for name, array in batch.items()}
    if len(set(sizes.values())) > 1:
        raise BadInput(f"The inputs hold different numbers of samples ({sizes}): give each input the same count.")
    return next(iter(sizes.values()), 0)


def take(batch: Batch, start: int, stop: int | None = None) -> Batch:
    """Samples ``start:stop`` of every input."""
    if isinstance(batch, np.ndarray):
        return batch[start:stop]
    return {name: array[start:stop] for name, array in batch.items()}


def fed_as(batch: Batch, dtypes: Sequence[tuple[str, str]]) -> Batch:
    """``batch`` with each floating-point array cast to the floating-point type its input takes (``dtypes``: each
    input's name and numpy dtype, in order), as a caller of an FP16-input artifact feeds it; every other array as it
    is (a wrong integer type is still the model's to refuse)."""
    def cast(array: np.ndarray, wanted: str) -> np.ndarray:
        target = np.dtype(wanted) if wanted in np.sctypeDict else None
        if target is None or target == array.dtype or target.kind != "f" or array.dtype.kind != "f":
            return array
        return array.astype(target)

    if isinstance(batch, np.ndarray):
        return cast(batch, dtypes[0][1]) if dtypes else batch
    wanted = dict(dtypes)
    return {name: cast(array, wanted[name]) if name in wanted else array for name, array in batch.items()}


def concat(parts: Sequence[Batch]) -> Batch:
    """Batches joined along the sample axis (all of the same form)."""
    arrays = [part for part in parts if isinstance(part, np.ndarray)]
    if len(arrays) == len(parts):
        return np.concatenate(arrays)
    mappings = [part for part in parts if not isinstance(part, np.ndarray)]
    if len(mappings) != len(parts):
        raise ValueError("concat: batches of mixed forms (bare arrays and mappings)")
    return {name: np.concatenate([part[name] for part in mappings]) for name in mappings[0]}


def resize(batch: Batch, size: int) -> Batch:
    """Exactly ``size`` samples, repeating the batch's own samples as often as needed (timing batches of real
    data at any batch size)."""
    return apply(batch, lambda array: np.resize(array, (size, *array.shape[1:])))


def apply(batch: Batch, function: Callable[[np.ndarray], np.ndarray]) -> Batch:
    """``function`` on every input's array."""
    if isinstance(batch, np.ndarray):
        return function(batch)
    return {name: function(array) for name, array in batch.items()}


def first(batch: Batch) -> np.ndarray:
    """The only (or first) input's array."""
    return batch if isinstance(batch, np.ndarray) else next(iter(batch.values()))


def named(batch: Batch, names: Sequence[str]) -> dict[str, np.ndarray]:
    """``batch`` keyed by input name (a bare array goes to the first name)."""
    if isinstance(batch, np.ndarray):
        return {names[0]: batch}
    return dict(batch)


def random_batch(specs: Sequence[InputSpec], size: int, rng: np.random.Generator) -> Batch:
    """Seeded random samples for every input (see :meth:`InputSpec.random`); a bare array for one input."""
    if len(specs) == 1:
        return specs[0].random(size, rng)
    return {spec.name: spec.random(size, rng) for spec in specs}


def nbytes(batch: Batch) -> int:
    return sum(array.nbytes for array in (batch.values() if isinstance(batch, Mapping) else [batch]))


# -- declarations: [NAME:]VALUE,... (their grammar is in trtpipe.shapes, which options modules import) ---------

def check_declared(values: Mapping[str, object] | None, names: Sequence[str], option: str) -> None:
    """BadInput naming any input ``values`` declares that the model does not have."""
    unknown = sorted(set(values or ()) - set(names) - {FIRST})
    if unknown:
        raise BadInput(f"{option} names {', '.join(repr(n) for n in unknown)}, which the model does not take "
                       f"(its inputs: {', '.join(names)}).")


def resolve(
    graph: Sequence[tuple[str, tuple[int | str | None, ...], str]],
    *,
    shapes: Mapping[str, tuple[int, ...]] | None = None,
    dtypes: Mapping[str, str] | None = None,
    ranges: Mapping[str, tuple[float, float]] | None = None,
) -> tuple[InputSpec, ...]:
    """The specs of a model's inputs, given as (name, shape, dtype) from its graph or signature, with what the user
    declared laid over them: a declared shape must keep every fixed dimension (it fills dynamic ones); a declared
    dtype must be the graph's where the graph fixes one."""
    names = [name for name, _, _ in graph]
    check_declared(shapes, names, "--input-shape")
    check_declared(dtypes, names, "--input-dtype")
    check_declared(ranges, names, "--input-range")
    specs = []
    for index, (name, shape, dtype) in enumerate(graph):
        dims: tuple[int | None, ...] = tuple(d if isinstance(d, int) and d > 0 else None for d in shape)
        declared = declared_for(shapes, name, index)
        if declared is not None:
            if len(declared) != len(dims) or any(d is not None and d != w for d, w in zip(dims, declared,
                                                                                            strict=False)):
                raise BadInput(f"--input-shape {format_shape(declared)} does not fit input '{name}' "
                               f"({format_shape(dims)}; '?' is free).")
            dims = tuple(declared)
        wanted = declared_for(dtypes, name, index)
        if wanted is not None and wanted != dtype:
            raise BadInput(f"--input-dtype {wanted} does not fit input '{name}', which the model declares {dtype}.")
        spec = InputSpec(name, dims, dtype, declared_for(ranges, name, index), guess_layout(dims))
        spec.check_range()
        specs.append(spec)
    return tuple(specs)
