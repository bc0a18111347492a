"""The optimisation profile an engine is built with, planned from the ONNX inputs and the shape options
before TensorRT is touched, so every rule is tested on machines without a GPU."""

from __future__ import annotations

from dataclasses import dataclass

from trtpipe.errors import BadInput
from trtpipe.shapes import format_shape
from trtpipe.vocab import DEFAULT_BATCHES


@dataclass(frozen=True)
class InputInfo:
    """An ONNX graph input: None marks a dynamic dimension."""

    name: str
    dims: tuple[int | None, ...]


@dataclass(frozen=True)
class ProfileShapes:
    name: str
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]

    def to_dict(self) -> dict[str, object]:
        return {"input": self.name, "min": list(self.min), "opt": list(self.opt), "max": list(self.max)}


def plan_profile(
    inputs: list[InputInfo],
    *,
    shapes: dict[str, tuple[int, ...]] | None = None,
    min_shapes: dict[str, tuple[int, ...]] | None = None,
    opt_shapes: dict[str, tuple[int, ...]] | None = None,
    max_shapes: dict[str, tuple[int, ...]] | None = None,
) -> list[ProfileShapes]:
    """The optimisation profile for ``inputs``: --shapes fixes min=opt=max; --min/--opt/--max-shapes set each;
    a dynamic batch axis not mentioned gets min/opt/max batch 1/8/32; every other dynamic axis gets all three from
    whichever of them are given (see :func:`_fill`), and is refused when none is."""
    shapes, min_shapes, opt_shapes, max_shapes = shapes or {}, min_shapes or {}, opt_shapes or {}, max_shapes or {}
    known = {i.name for i in inputs}
    for given in (shapes, min_shapes, opt_shapes, max_shapes):
        unknown = sorted(set(given) - known)
        if unknown:
            raise BadInput(f"Shape given for {', '.join(unknown)}, which the ONNX does not have: its inputs are "
                           f"{', '.join(sorted(known))}.")
    profile = []
    for info in inputs:
        if info.name in shapes:
            low = opt = high = shapes[info.name]
        else:
            given = {"min": min_shapes.get(info.name), "opt": opt_shapes.get(info.name),
                     "max": max_shapes.get(info.name)}
            for label, dims in given.items():
                if dims is not None:
                    _check_fits(info, dims, label)
            low, opt, high = (_fill(info, given, label, batch) for label, batch in zip(("min", "opt", "max"),
                                                                                       DEFAULT_BATCHES, strict=True))
        for label, dims in (("min", low), ("opt", opt), ("max", high)):
            _check_fits(info, dims, label)
        if not all(a <= b <= c for a, b, c in zip(low, opt, high, strict=True)):
            raise BadInput(f"Input '{info.name}': need min <= opt <= max in every dimension, got min "
                           f"{format_shape(low)}, opt {format_shape(opt)}, max {format_shape(high)}.")
        profile.append(ProfileShapes(info.name, low, opt, high))
    return profile


def _fill(info: InputInfo, given: dict[str, tuple[int, ...] | None], label: str, batch: int) -> tuple[int, ...]:
    """The ``label`` (min/opt/max) shape of one input: as given, else axis by axis: a fixed axis its size, a dynamic
    batch axis (the first) the default batch, any other dynamic axis from the shapes given for the others (min: the
    smallest, max: the largest, opt: max's, else min's), so ``--opt-shapes input:8x3x640x640`` alone gives every
    dynamic axis its min/opt/max."""
    shape = given[label]
    if shape is not None:
        return shape
    dims = []
    for axis, fixed in enumerate(info.dims):
        if fixed is not None:
            dims.append(fixed)
            continue
        known = {name: value[axis] for name, value in given.items() if value is not None}
        if axis == 0:
            dims.append(batch)
        elif not known:
            raise BadInput(f"Input '{info.name}' ({format_shape(info.dims)}) has dynamic dimensions besides the "
                           f"batch: give them with --shapes or --min-shapes/--opt-shapes/--max-shapes.")
        elif label == "min":
            dims.append(min(known.values()))
        elif label == "max":
            dims.append(max(known.values()))
        else:
            dims.append(known.get("max", known.get("min", 0)))
    return tuple(dims)


def _check_fits(info: InputInfo, dims: tuple[int, ...], label: str) -> None:
    if len(dims) != len(info.dims) or any(d is not None and d != g for d, g in zip(info.dims, dims, strict=True)):
        raise BadInput(f"{label} shape {format_shape(dims)} does not fit input '{info.name}' "
                       f"({format_shape(info.dims)}; '?' is free).")
