"""Parsing of the shape, batch-list, size and shape-spec values that options of every stage take.

Each parser raises ValueError with a message fit for the user; the CLI turns it into a usage error and the
pipeline file into one line naming the key and its line.
"""

from __future__ import annotations

import re


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


def format_shape(dims: tuple[int | str | None, ...] | list[int | str | None]) -> str:
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
