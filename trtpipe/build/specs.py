"""Build options as trtexec spells them, parsed and checked before TensorRT is touched.

Sizes (``4GiB``, ``512MiB``, ``1e9``), shape specs (``input:1x3x224x224``, several joined by commas) and the
optimisation profiles they imply for an ONNX file's inputs are plain functions, so every rule is tested on
machines without a GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trtpipe.errors import BadInput
from trtpipe.shapes import format_shape, parse_shape

_SIZE = re.compile(r"^\s*(?P<number>\d+(?:\.\d+)?(?:[eE]\d+)?)\s*(?P<unit>[KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 10**3, "KB": 10**3, "KIB": 2**10, "KI": 2**10, "M": 10**6, "MB": 10**6,
          "MIB": 2**20, "MI": 2**20, "G": 10**9, "GB": 10**9, "GIB": 2**30, "GI": 2**30, "T": 10**12,
          "TB": 10**12, "TIB": 2**40, "TI": 2**40}
DEFAULT_BATCHES = (1, 8, 32)  # min / opt / max batch for a dynamic batch axis


def parse_size(text: str) -> int:
    """``4GiB`` -> 4294967296; ``512MB`` -> 512000000; a bare number is bytes."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"'{text}' is not a size: write e.g. 4GiB, 512MiB or a number of bytes")
    value = float(match["number"]) * _UNITS[(match["unit"] or "").upper()]
    if value < 1:
        raise ValueError(f"'{text}' is not a positive size")
    return int(value)


def format_size(size: int) -> str:
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= factor:
            return f"{size / factor:g}{unit}"
    return f"{size}B"


def parse_shape_specs(text: str) -> dict[str, tuple[int, ...]]:
    """``input:1x3x224x224,mask:1x1x224x224`` -> {name: shape}. Tensor names may hold ':' (the last one splits)."""
    specs: dict[str, tuple[int, ...]] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, dims = part.rpartition(":")
        if not sep or not name:
            raise ValueError(f"'{part}' is not a shape spec: write NAME:1x3x224x224")
        specs[name] = parse_shape(dims)
    if not specs:
        raise ValueError("no shape specs given: write NAME:1x3x224x224")
    return specs


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
