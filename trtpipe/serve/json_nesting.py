"""How a JSON request's ``data`` array nests, and the rule it must follow (flat, or nested exactly as its input's
shape, as KServe v2 allows): from a list orjson built (:func:`nesting_of`) or from the array's text, a block of
brackets at a time (:class:`BracketNesting`, which json_body.py's scan feeds). Split from json_body.py along this
seam: reading a body there, judging its nesting here.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from trtpipe.serve.protocol import ProtocolError
from trtpipe.shapes import format_shape


@dataclass(frozen=True)
class TooDeep:
    """A data array whose brackets nest deeper than any input of the model has dimensions: its nesting was not
    followed past ``at``, the byte of the first bracket beyond ``limit`` levels (following it cost time in
    proportion to its depth at every bracket: docs/results/serving.md, 'Deep nesting')."""

    at: int
    limit: int


Nesting = list[int] | str | TooDeep  # the length at each depth, why the arrays are not rectangular, or too deep


EMPTY_ARRAY = "holds an empty array"


def check_nesting(name: str, nesting: Nesting, shape: list[int]) -> None:
    """ProtocolError(400) unless a JSON ``data`` array is flat or nested exactly as the declared shape, as KServe
    v2 allows. Counting the values alone would take [[1000 values], [24 values]] (ragged), [[1024], [1024]] or
    twenty thousand one-element levels for a 1x1x32x32 input; row-major order is then a guess at what the client
    meant. Nesting deeper than the shape has dimensions is named as such (a scan stops following it at the first
    bracket beyond the model's deepest input: :class:`TooDeep`)."""
    if nesting == EMPTY_ARRAY:
        raise ProtocolError(400, f"Input '{name}' data {EMPTY_ARRAY}.")
    fix = f"give it flat, or nested as its shape {format_shape(shape)}"
    if isinstance(nesting, TooDeep):
        raise ProtocolError(400, f"Input '{name}' data nests deeper than {nesting.limit} levels (at byte "
                                 f"{nesting.at}), deeper than its shape {format_shape(shape)}: {fix}.")
    if isinstance(nesting, str):
        raise ProtocolError(400, f"Input '{name}' data is ragged ({nesting}): {fix}.")
    if nesting != shape and nesting != [math.prod(shape)]:
        deeper = f", {len(nesting)} levels deep" if len(nesting) > len(shape) else ""
        raise ProtocolError(400, f"Input '{name}' data is nested as {format_shape(nesting)}{deeper}, which is not "
                                 f"its shape {format_shape(shape)}: {fix}.")


def nesting_of(value: list[Any]) -> Nesting:
    """The length at each depth of a nested list that orjson built, or why it is not rectangular (see
    :class:`BracketNesting`, which reads the same from an array's text)."""
    dims: list[int] = []
    level: list[list[Any]] = [value]
    while True:
        lengths = sorted({len(items) for items in level})
        if len(lengths) > 1:
            return f"arrays at depth {len(dims) + 1} hold {lengths[0]} and {lengths[-1]} elements"
        dims.append(lengths[0])
        nested = {isinstance(item, list) for items in level for item in items}
        if nested != {True}:
            return dims if len(nested) < 2 else f"values beside arrays at depth {len(dims)}"
        level = [item for items in level for item in items]


FEW_BRACKETS = 256  # in a block of a data array: the values between them are counted slice by slice


class BracketNesting:
    """How a scanned data array nests, followed from its brackets a block at a time (vectorised: a block's
    brackets cost no Python work each): the length at each depth, or why the arrays are not rectangular. Values
    belong only to the innermost arrays, all at one depth and of one length; an array at any other depth holds
    arrays only, as many as every other array at its depth."""

    def __init__(self) -> None:
        self.lengths: dict[int, int] = {}  # depth -> the length of every array there, once one has closed
        self.innermost: int | None = None  # the depth of the arrays that hold the values
        self.ragged: str | None = None
        self.after_open = False  # whether the last bracket seen opened an array
        self.values = 0  # values since the last bracket
        self.children: dict[int, int] = {}  # depth -> arrays closed inside the open array at that depth

    def feed(self, opens: np.ndarray, depths: np.ndarray, positions: np.ndarray, starts: np.ndarray) -> None:
        """One block: for each bracket in it, whether it opens an array, the depth after it and its position;
        ``starts`` marks the first byte of each value."""
        if self.ragged is not None:
            return
        if not positions.size:
            self.values += int(np.count_nonzero(starts))
            return
        bounds = np.concatenate(([0], positions, [len(starts)]))
        if positions.size <= FEW_BRACKETS:  # counted slice by slice: no temporary array
            segments = np.array([np.count_nonzero(starts[a:b]) for a, b in itertools.pairwise(bounds)], np.int64)
        else:  # from where the values start (np.add.reduceat would cast the whole block to int64 first)
            segments = np.diff(np.searchsorted(np.flatnonzero(starts), bounds))
        values = segments[:-1]  # before each bracket, since the one before it
        values[0] += self.values
        self.values = int(segments[-1])
        closes = ~opens
        after_open = np.concatenate(([self.after_open], opens[:-1]))
        self.after_open = bool(opens[-1])
        closed = depths + 1  # the depth of the array a closing bracket closes
        innermost = closes & after_open
        if np.any((values > 0) & ~innermost):
            self.ragged = "values beside arrays"
            return
        if innermost.any():
            at, counts = closed[innermost], values[innermost]
            if self.innermost is None:
                self.innermost = int(at[0])
            if np.any(at != self.innermost):
                self.ragged = f"values at depths {self.innermost} and {int(at[at != self.innermost][0])}"
                return
            if not self._same(self.innermost, counts, "values"):
                return
        outer = closes & ~after_open
        for depth in {int(d) for d in np.unique(closed[closes]) - 1} | {int(d) for d in np.unique(closed[outer])}:
            if depth < 1:
                continue
            children = np.flatnonzero(closes & (closed == depth + 1))
            ends = np.flatnonzero(outer & (closed == depth))
            if not ends.size:
                self.children[depth] = self.children.get(depth, 0) + children.size
                continue
            before = np.searchsorted(children, ends)
            counts = np.diff(before, prepend=0)
            counts[0] += self.children.get(depth, 0)
            self.children[depth] = int(children.size - before[-1])
            if not self._same(depth, counts, "arrays"):
                return

    def _same(self, depth: int, counts: np.ndarray, what: str) -> bool:
        """Whether every array closed at ``depth`` holds as many ``what`` as the first one there did."""
        if not counts.all():
            self.ragged = EMPTY_ARRAY
            return False
        length = self.lengths.setdefault(depth, int(counts[0]))
        odd = counts[counts != length]
        if odd.size:
            self.ragged = f"arrays at depth {depth} hold {length} and {int(odd[0])} {what}"
        return not odd.size

    def result(self) -> Nesting:
        if self.ragged is not None:
            return self.ragged
        return [self.lengths[depth] for depth in range(1, (self.innermost or 1) + 1)]
