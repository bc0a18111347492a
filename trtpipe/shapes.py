"""Parsing of the shape and batch-list options shared by every stage."""

from __future__ import annotations


def parse_shape(text: str) -> tuple[int, ...]:
    """Parse ``1x3x224x224`` (``,`` also accepted) into a tuple of positive ints.

    Raises ValueError with a message fit for the user when the text is not such a shape.
    """
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


def format_shape(dims: tuple[int | str | None, ...] | list[int | str | None]) -> str:
    return "x".join("?" if d is None else str(d) for d in dims)
