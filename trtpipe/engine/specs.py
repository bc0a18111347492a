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
    a dynamic batch axis not mentioned gets min/opt/max batch 1/8/32; other dynamic axes must be given."""
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
            low = min_shapes.get(info.name) or _default(info, DEFAULT_BATCHES[0])
            opt = opt_shapes.get(info.name) or _default(info, DEFAULT_BATCHES[1])
            high = max_shapes.get(info.name) or _default(info, DEFAULT_BATCHES[2])
        for label, dims in (("min", low), ("opt", opt), ("max", high)):
            _check_fits(info, dims, label)
        if not all(a <= b <= c for a, b, c in zip(low, opt, high, strict=True)):
            raise BadInput(f"Input '{info.name}': need min <= opt <= max in every dimension, got min "
                           f"{format_shape(low)}, opt {format_shape(opt)}, max {format_shape(high)}.")
        profile.append(ProfileShapes(info.name, low, opt, high))
    return profile


def _default(info: InputInfo, batch: int) -> tuple[int, ...]:
    free = [i for i, d in enumerate(info.dims) if d is None]
    if any(i != 0 for i in free):
        raise BadInput(f"Input '{info.name}' ({format_shape(info.dims)}) has dynamic dimensions besides the "
                       f"batch: give them with --shapes or --min-shapes/--opt-shapes/--max-shapes.")
    return tuple(batch if d is None else d for d in info.dims)


def _check_fits(info: InputInfo, dims: tuple[int, ...], label: str) -> None:
    if len(dims) != len(info.dims) or any(d is not None and d != g for d, g in zip(info.dims, dims, strict=True)):
        raise BadInput(f"{label} shape {format_shape(dims)} does not fit input '{info.name}' "
                       f"({format_shape(info.dims)}; '?' is free).")
