"""The layer-by-layer report: each compared tensor's distance from the reference, and where the error jumps.

A tensor's **error jumps** where its relative error ``||a - b|| / ||b||`` (a: the model's values, b: the FP32
reference's, over every sample) is above ``jump_threshold`` (default 0.1) **and** above ``jump_factor`` (default
4) times the worst relative error of the compared tensors it is computed from (its inputs' error; 0 for a tensor
computed from graph inputs and weights only). Errors that only grow the way rounding noise accumulates never jump;
a layer that adds much more error than it was handed does, and the first such tensor in topological order is
where to look first (its producer, its Q/DQ scale, its kept-in-FP32 status). Polygraphy's ``--mark all`` runs
print every output's figures and leave that reading to the user; this does it for them.

A tensor that a graph pass deliberately rescaled per channel (``equalize``'s cross-layer scales and
``scale_depthwise``'s gains, folded into the op that makes the tensor and undone by the next layer's weights)
differs from the reference by a gain per channel while carrying the same information. Its error is then
measured after the best gain per channel (least squares; every channel's gain must be positive), and the row says
so; an error that a gain cannot explain (a channel set to zero, noise) is not hidden by this.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from rich.console import JustifyMethod

from trtpipe import console
from trtpipe.debug.match import Relation, Skipped

RESCALED_RATIO = 0.25  # a per-channel gain must explain at least 3/4 of the error to call a tensor rescaled
_RESCALED_MIN_ERROR = 1e-3  # below this there is nothing to explain


class ErrorStats:
    """Running sums over the samples, so no sample's tensor is kept: the model's values ``a`` against the
    reference's ``b``, in float64, overall and per channel (axis 1)."""

    def __init__(self) -> None:
        self.sum_diff2 = self.sum_ref2 = self.sum_out2 = self.dot = self.max_abs = 0.0
        self.nonfinite = 0
        self.channel_dot: np.ndarray | None = None
        self.channel_out2: np.ndarray | None = None
        self.channel_ref2: np.ndarray | None = None
        self.shape: tuple[int, ...] | None = None
        self.mismatch: tuple[tuple[int, ...], tuple[int, ...]] | None = None  # (model's, reference's) shapes

    def update(self, reference: np.ndarray, output: np.ndarray) -> None:
        if output.shape != reference.shape:
            self.mismatch = (tuple(output.shape), tuple(reference.shape))
            return
        self.shape = tuple(output.shape)
        if output.size == 0:
            return
        # float32 products, float64 sums: one pass per figure and no float64 copy of a large tensor.
        ref = np.asarray(reference, dtype=np.float32)
        out = np.asarray(output, dtype=np.float32)
        if not (np.isfinite(out).all() and np.isfinite(ref).all()):
            finite = np.isfinite(out) & np.isfinite(ref)
            self.nonfinite += int(np.count_nonzero(~np.isfinite(out) & np.isfinite(ref)))
            ref, out = np.where(finite, ref, np.float32(0)), np.where(finite, out, np.float32(0))
        channels = ref.shape[1] if ref.ndim >= 2 else 1
        layout = (ref.shape[0], channels, -1) if ref.ndim >= 2 else (1, 1, -1)
        ref, out = ref.reshape(layout), out.reshape(layout)
        diff = out - ref
        self.sum_diff2 += float(np.square(diff).sum(dtype=np.float64))
        self.max_abs = max(self.max_abs, float(np.abs(diff).max()))
        sums = [(a * b).sum(axis=(0, 2), dtype=np.float64) for a, b in ((out, ref), (out, out), (ref, ref))]
        self.dot += float(sums[0].sum())
        self.sum_out2 += float(sums[1].sum())
        self.sum_ref2 += float(sums[2].sum())
        if channels < 2:
            return
        if self.channel_dot is None or self.channel_out2 is None or self.channel_ref2 is None:
            self.channel_dot, self.channel_out2, self.channel_ref2 = sums
        else:
            self.channel_dot = self.channel_dot + sums[0]
            self.channel_out2 = self.channel_out2 + sums[1]
            self.channel_ref2 = self.channel_ref2 + sums[2]

    @property
    def relative_error(self) -> float:
        if self.nonfinite:
            return math.inf
        if self.sum_ref2 == 0.0:
            return 0.0 if self.sum_diff2 == 0.0 else math.inf
        return math.sqrt(self.sum_diff2 / self.sum_ref2)

    @property
    def cosine(self) -> float:
        if self.sum_ref2 == 0.0 and self.sum_out2 == 0.0:
            return 1.0
        if self.sum_ref2 == 0.0 or self.sum_out2 == 0.0:
            return 0.0
        return self.dot / math.sqrt(self.sum_ref2 * self.sum_out2)

    def gain_fit(self) -> tuple[float, float] | None:
        """(relative error after the best positive gain per channel, max/min gain), or None where no such fit
        explains the error: a single channel, a gain <= 0, or an error the gains hardly reduce."""
        if self.channel_dot is None or self.nonfinite or self.sum_ref2 == 0.0:
            return None
        dot, out2, ref2 = self.channel_dot, self.channel_out2, self.channel_ref2
        assert out2 is not None and ref2 is not None
        live = ref2 > 0
        if not live.any() or (dot[live] <= 0).any() or (out2[live] <= 0).any():
            return None
        # The reference from the model's values: b ≈ a / g per channel; residual ||b||² (1 - cos²) per channel.
        residual = np.where(live, ref2 - np.divide(dot * dot, out2, out=np.zeros_like(dot), where=out2 > 0), 0.0)
        fitted = math.sqrt(max(float(residual.sum()), 0.0) / self.sum_ref2)
        plain = self.relative_error
        if plain < _RESCALED_MIN_ERROR or fitted > RESCALED_RATIO * plain:
            return None
        gains = out2[live] / dot[live]  # a ≈ g b: g = <a,a>/<a,b> (from a's side, as the residual is)
        return fitted, float(gains.max() / gains.min())


@dataclass
class LayerRow:
    index: int
    tensor: str  # in the model
    reference: str  # in the reference
    relation: Relation
    op: str
    node: str
    shape: tuple[int, ...]
    cosine: float
    relative_error: float  # ||a - b|| / ||b|| over every sample
    max_abs_error: float
    error: float  # what the jump rule reads: the relative error, or after the per-channel gains when rescaled
    gain_spread: float | None = None  # max/min per-channel gain of a rescaled tensor; None when not rescaled
    inputs: tuple[str, ...] = ()  # the compared tensors it is computed from
    input_error: float = 0.0  # the worst of their errors
    jump: bool = False

    @property
    def growth(self) -> float:
        """How many times its inputs' error this tensor's is (inf from error-free inputs)."""
        if self.input_error > 0:
            return self.error / self.input_error
        return math.inf if self.error > 0 else 1.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["relation"] = str(self.relation)
        data["shape"] = list(self.shape)
        data["inputs"] = list(self.inputs)
        return {key: _finite(value) for key, value in data.items()}


def _finite(value: Any) -> Any:
    """Strict JSON has no Infinity or NaN: those become None (the row's ``nonfinite`` note says why)."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def mark_jumps(rows: list[LayerRow], threshold: float, factor: float) -> None:
    """Fill each row's input error from the rows it is computed from, then flag the rows whose error jumps."""
    errors = {row.tensor: row.error for row in rows}
    for row in rows:
        row.input_error = max((errors[name] for name in row.inputs if name in errors), default=0.0)
        # Handed an infinite or NaN error, a tensor cannot add to it: only where the inputs were finite.
        row.jump = (math.isfinite(row.input_error) and _exceeds(row.error, threshold)
                    and _exceeds(row.error, factor * row.input_error))


def _exceeds(error: float, limit: float) -> bool:
    """NaN counts as exceeding everything (the model made no number where the reference did)."""
    return math.isnan(error) or error > limit


@dataclass
class DebugReport:
    model: str
    reference: str
    data: str
    samples: int
    jump_threshold: float
    jump_factor: float
    rows: list[LayerRow]
    skipped: list[Skipped] = field(default_factory=list)
    unmatched: int = 0  # the model's float tensors with no counterpart in the reference
    chunks: int = 1  # how many runs of each model it took to keep memory bounded

    @property
    def first_jump(self) -> LayerRow | None:
        return next((row for row in self.rows if row.jump), None)

    @property
    def worst(self) -> LayerRow | None:
        return max(self.rows, key=lambda r: -1.0 if math.isnan(r.error) else r.error, default=None)

    def summary(self) -> str:
        first = self.first_jump
        if first is None:
            worst = self.worst
            tail = f"; the largest relative error is {_number(worst.error)} at {worst.tensor}" if worst else ""
            return (f"No tensor's error jumps (relative error > {self.jump_threshold:g} and > {self.jump_factor:g}x "
                    f"its inputs'){tail}.")
        given = (f"{_number(first.input_error)} from its inputs ({', '.join(first.inputs[:3])}"
                 f"{', ...' if len(first.inputs) > 3 else ''})" if first.inputs else "error-free inputs")
        of = f"; {first.relation} of {first.reference}" if first.relation is not Relation.SAME else ""
        return (f"The error first jumps at {first.tensor} (made by {first.op} node {first.node}{of}): relative "
                f"error {_number(first.error)}, cosine {first.cosine:.6f}, from {given}.")

    def to_dict(self) -> dict[str, Any]:
        first = self.first_jump
        return {"model": self.model, "reference": self.reference, "data": self.data, "samples": self.samples,
                "runtime": "ONNX Runtime CPU, graph optimizations off (every tensor as the graph computes it)",
                "jump_rule": {"threshold": self.jump_threshold, "factor": self.jump_factor,
                              "rule": "relative error > threshold and > factor x the worst relative error of the "
                                      "compared tensors it is computed from"},
                "first_jump": first.tensor if first else None, "summary": self.summary(),
                "rows": [row.to_dict() for row in self.rows],
                "skipped": [s.to_dict() for s in self.skipped], "unmatched": self.unmatched, "chunks": self.chunks}


def _number(value: float) -> str:
    return "nan" if math.isnan(value) else "inf" if math.isinf(value) else f"{value:.3g}"


def print_report(report: DebugReport) -> None:
    """The table on stdout (every compared tensor, in topological order; the first jump in bold red, later jumps
    in red), then the verdict and what was left out on stderr."""
    table = Table(title=escape(f"{report.model} vs {report.reference} (ONNX Runtime CPU), {report.samples} samples "
                               f"of {report.data}: {len(report.rows)} tensors in topological order"),
                  title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("#", "right"), ("tensor", "left"), ("op", "left"), ("cosine", "right"), ("rel. error", "right"),
        ("max abs error", "right"), ("inputs' rel. error", "right"), ("", "left"))
    for header, justify in columns:
        # Tensor names are what the user searches the graph for: folded onto a second line, never cut.
        table.add_column(header, justify=justify, overflow="fold")
    first = report.first_jump
    for row in report.rows:
        notes = []
        if row is first:
            notes.append("<- FIRST JUMP")
        elif row.jump:
            notes.append("jump")
        if row.gain_spread is not None:
            notes.append(f"rescaled per channel (gains x{row.gain_spread:.3g}): {_number(row.error)} after them")
        style = "bold red" if row is first else "red" if row.jump else None
        table.add_row(str(row.index), escape(row.tensor), row.op, f"{row.cosine:.6f}", _number(row.relative_error),
                      _number(row.max_abs_error), _number(row.input_error) if row.inputs else "-",
                      escape("; ".join(notes)), style=style)
    console.out.print(table)
    (console.warn if first else console.success)(report.summary())
    if report.skipped:
        shown = "; ".join(f"{s.tensor}: {s.reason}" for s in report.skipped[:3])
        more = "; ..." if len(report.skipped) > 3 else ""
        console.note(f"{len(report.skipped)} tensor(s) not compared ({shown}{more})")
    if report.unmatched:
        console.note(f"{report.unmatched} float tensor(s) of {report.model} have no counterpart in the reference "
                     "(casts, Q/DQ of weights and new tensors a pass added)")
