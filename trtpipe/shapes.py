"""Parsing of the shape, batch-list, size and shape-spec values that options of every stage take.

Each parser raises ValueError with a message fit for the user; the CLI turns it into a usage error and the
pipeline file into one line naming the key and its line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from trtpipe.vocab import DTYPES

V = TypeVar("V")


def parse_shape(text: str) -> tuple[int, ...]:
    """Parse ``1x3x224x224`` (``,`` also accepted) into a tuple of positive ints."""
    parts = [p.strip() for p in text.lower().replace(",", "x").split("x")]
    if len(parts) < 2 or any(not p.isdigit() for p in parts):
        raise ValueError(f"'{text}' is not a shape: write dimensions joined by 'x', e.g. 1x3x224x224")
    dims = tuple(int(p) for p in parts)
    if any(d <= 0 for d in dims):
        raise ValueError(f"'{text}' has a zero dimension: every dimension must be at least 1")
    return dims


def parse_batch_sizes(text: str) -> tuple[int, ...]:
    """Parse ``1,8,32`` into sorted, unique positive batch sizes."""
    try:
        sizes = {int(p) for p in text.split(",") if p.strip()}
    except ValueError:
        raise ValueError(f"'{text}' is not a list of batch sizes: write e.g. 1,8,32") from None
    if not sizes or min(sizes) <= 0:
        raise ValueError(f"'{text}' is not a list of positive batch sizes: write e.g. 1,8,32")
    return tuple(sorted(sizes))


def parse_floats(text: str) -> tuple[float, ...]:
    """Parse ``0.485,0.456,0.406`` into floats."""
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"'{text}' is not a comma-separated list of numbers") from None


def format_shape(dims: Sequence[int | str | None]) -> str:
    return "x".join("?" if d is None else str(d) for d in dims)


_SIZE = re.compile(r"^\s*(?P<number>\d+(?:\.\d+)?(?:[eE]\d+)?)\s*(?P<unit>[KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 10**3, "KB": 10**3, "KIB": 2**10, "KI": 2**10, "M": 10**6, "MB": 10**6,
          "MIB": 2**20, "MI": 2**20, "G": 10**9, "GB": 10**9, "GIB": 2**30, "GI": 2**30, "T": 10**12,
          "TB": 10**12, "TIB": 2**40, "TI": 2**40}
MAX_SIZE = 2**50  # 1 PiB: no GPU workspace is larger; anything above is a typo


def parse_size(text: str) -> int:
    """``4GiB`` -> 4294967296; ``512MB`` -> 512000000; a bare number is bytes."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"'{text}' is not a size: write e.g. 4GiB, 512MiB or a number of bytes")
    value = float(match["number"]) * _UNITS[(match["unit"] or "").upper()]
    if value < 1:
        raise ValueError(f"'{text}' is not a positive size")
    if value > MAX_SIZE:
        raise ValueError(f"'{text}' is larger than any GPU memory: write e.g. 4GiB")
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


def format_shape_specs(specs: dict[str, tuple[int, ...]]) -> str:
    return ",".join(f"{name}:{format_shape(dims)}" for name, dims in specs.items())


# -- input declarations: [NAME:]VALUE,... as the command line and the pipeline file write them (trtpipe.inputs) ----

FIRST = ""  # the key of a value declared without a name: it belongs to the model's only (or first) input
INPUT_DTYPES = tuple(d.numpy for d in DTYPES if d.tensorrt)  # the input dtypes every runtime has

def parse_declared(text: str, parse_value: Callable[[str], V], what: str, example: str) -> dict[str, V]:
    """``VALUE`` -> {FIRST: value}; ``a:VALUE,b:VALUE`` -> {a: ..., b: ...}. Input names may hold ':' (the last one
    splits). ValueError, fit for the user, on anything else."""
    parts = [p.strip() for p in text.split(",") if p.strip()] if ":" in text else [text.strip()]
    values: dict[str, V] = {}
    for part in parts:
        name, sep, value = part.rpartition(":")
        key = name if sep else FIRST
        if sep and not name:
            raise ValueError(f"'{part}' names no input: write {example}")
        if key in values:
            raise ValueError(f"{what} for input '{key or 'the first'}' is given twice")
        values[key] = parse_value(value)
    if not values:
        raise ValueError(f"no {what} given: write {example}")
    return values


def parse_input_shapes(text: str) -> dict[str, tuple[int, ...]]:
    return parse_declared(text, parse_shape, "a shape", "1x3x224x224 or image:1x3x640x640,scale:1x2")


def parse_input_dtypes(text: str) -> dict[str, str]:
    def dtype(value: str) -> str:
        value = value.strip().lower()
        if value not in INPUT_DTYPES:
            raise ValueError(f"'{value}' is not an input dtype: use one of {', '.join(INPUT_DTYPES)}")
        return value

    return parse_declared(text, dtype, "a dtype", "uint8 or image:uint8,scale:float32")


def parse_input_ranges(text: str) -> dict[str, tuple[float, float]]:
    def value_range(value: str) -> tuple[float, float]:
        low, sep, high = value.partition("..")
        try:
            bounds = float(low), float(high)
        except ValueError:
            raise ValueError(f"'{value}' is not a range: write LOW..HIGH, e.g. 0..255") from None
        if not sep or not bounds[0] < bounds[1] or not all(map(math.isfinite, bounds)):
            raise ValueError(f"'{value}' is not a range: write LOW..HIGH with finite LOW < HIGH, e.g. 0..255")
        return bounds

    return parse_declared(text, value_range, "a range", "0..255 or image:0..255,scale:0.5..2")


def format_declared(values: Mapping[str, V], format_value: Callable[[V], str] = str) -> str:
    return ",".join(f"{name}:{format_value(v)}" if name else format_value(v) for name, v in values.items())


def format_input_shapes(values: Mapping[str, tuple[int, ...]]) -> str:
    return format_declared(values, format_shape)


def format_input_dtypes(values: Mapping[str, str]) -> str:
    return format_declared(values)


def format_input_ranges(values: Mapping[str, tuple[float, float]]) -> str:
    return format_declared(values, lambda v: f"{_number(v[0])}..{_number(v[1])}")


def _number(value: float) -> str:
    """A bound as the user would write it, exact enough to parse back to the same float: 0, 255, 0.5, 1e-07."""
    value = float(value)
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def declared_for(values: Mapping[str, V] | None, name: str, index: int) -> V | None:
    """The value declared for input ``name`` (the ``index``-th), or the unnamed one for the first input."""
    if not values:
        return None
    if name in values:
        return values[name]
    return values.get(FIRST) if index == 0 else None
