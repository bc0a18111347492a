"""Which variant the report must single out: the chosen one, the reference, and each variant outside the selection's
limits (accuracy, latency, memory), so no chart or table draws a variant that fails the budget like the one chosen.

The verdicts are select's (``trtpipe.pipeline.select.outside_limits``), handed in the run's summary; a report made
from bench results alone (``trtpipe report``) has no budget, and marks only the reference.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Standing(StrEnum):
    """A variant's place in the selection, as every chart and table draws it."""

    CHOSEN = "chosen"
    WITHIN = "within the limits"
    UNDECIDED = "undecided"  # no limit broken, but one could not be judged (too noisy, too few samples)
    OUTSIDE = "outside the budget"
    REFERENCE = "reference"


# How each standing looks: a text marker (never colour alone), a bar hatch, a colour (None: the chart's own).
MARKER = {Standing.CHOSEN: "★", Standing.OUTSIDE: "✗", Standing.REFERENCE: "◆", Standing.WITHIN: "",
          Standing.UNDECIDED: "?"}
HATCH = {Standing.OUTSIDE: "////"}
OUTSIDE_COLOR = "#b0b0b0"
CHOSEN_COLOR = "#2e7d32"
REFERENCE_COLOR = "#555555"


@dataclass(frozen=True)
class Marks:
    chosen: str | None = None
    outside: Mapping[str, str] = field(default_factory=dict)  # variant -> the limits it breaks
    references: frozenset[str] = frozenset()
    undecided: Mapping[str, str] = field(default_factory=dict)  # variant -> the limits that could not be judged

    def standing(self, variant: str) -> Standing:
        if variant in self.references:
            return Standing.REFERENCE
        if variant in self.outside:
            return Standing.OUTSIDE
        if variant == self.chosen:
            return Standing.CHOSEN
        return Standing.UNDECIDED if variant in self.undecided else Standing.WITHIN

    def label(self, variant: str) -> str:
        """The variant's name with its marker in front ("★ openvino-int8", "✗ onnxruntime-int8")."""
        marker = MARKER[self.standing(variant)]
        return f"{marker} {variant}" if marker else variant

    def note(self, variant: str) -> str:
        """Why the variant is marked, in a few words, for a table cell ("" where it is not)."""
        standing = self.standing(variant)
        if standing is Standing.OUTSIDE:
            return f"{MARKER[standing]} outside the budget: {self.outside[variant]}"
        if standing is Standing.UNDECIDED:
            return f"{MARKER[standing]} undecided: {self.undecided[variant]}"
        if standing in (Standing.CHOSEN, Standing.REFERENCE):
            return f"{MARKER[standing]} {standing.value}"
        return ""

    def flag(self, line: str) -> str:
        """``line`` (a sentence naming variants, such as the standing against PyTorch) with a warning after it for
        each variant outside the budget that it names, so no sentence presents one as a result to take."""
        named = [v for v in self.outside if v in line]
        return line + "".join(f" [{MARKER[Standing.OUTSIDE]} {v} is outside the budget: {self.outside[v]}]"
                              for v in named)

    def key_lines(self) -> list[str]:
        """What the markers mean, for the legend under the table (only the markers this report uses)."""
        used = {self.standing(v) for v in (*self.references, *self.outside, *self.undecided,
                                           *([self.chosen] if self.chosen else []))}
        meanings = {Standing.CHOSEN: "the variant select chose to deploy",
                    Standing.UNDECIDED: "undecided: no limit broken, but one could not be judged (too noisy or too "
                                        "few samples); never chosen as if within the budget",
                    Standing.OUTSIDE: "outside the budget (accuracy, latency or memory limit it breaks in the row): "
                                      "hatched grey in every chart, never a candidate",
                    Standing.REFERENCE: "the reference every speedup and agreement is measured against"}
        return [f"{MARKER[s]} {meanings[s]}" for s in (Standing.CHOSEN, Standing.UNDECIDED, Standing.OUTSIDE,
                                                       Standing.REFERENCE) if s in used]


# A simulation's timing fields: its latency is another runtime's arithmetic run here, not a deployable figure.
LATENCY_FIELDS = ("p50_ms", "p90_ms", "p99_ms", "mean_ms", "min_ms", "max_ms", "std_ms", "throughput",
                  "speedup_vs_torch_fp32", "tail_ms")
ACCURACY_ONLY = "accuracy only: a simulation of another runtime's arithmetic, its latency is not that runtime's"


def accuracy_only(row: dict[str, Any]) -> bool:
    """Whether the report draws ``row`` for its accuracy alone (a simulation: ``-trtsim`` rows)."""
    return bool(row.get("simulated"))


def as_drawn(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows as the report's tables show them: a simulation's latency, throughput and speedup left blank, so no
    table offers it as a speed to deploy."""
    return [{**row, **dict.fromkeys(LATENCY_FIELDS)} if accuracy_only(row) else row for row in rows]


def choice_status(choice: dict[str, Any]) -> str:
    """"chosen", "undecided" or "none", from a run summary's choice (one written before the status was recorded:
    chosen where it names an artifact)."""
    return str(choice.get("status") or ("chosen" if choice.get("artifact") else "none"))


def marks_of(report: dict[str, Any], summary: dict[str, Any] | None = None) -> Marks:
    """The marks of a bench report and the pipeline run's summary (its ``choice`` and ``outside``)."""
    summary = summary or {}
    choice = summary.get("choice") or {}
    chosen = choice.get("variant") if choice.get("artifact") else None  # "none": nothing met the budget
    return Marks(chosen=chosen, outside=dict(summary.get("outside") or {}),
                 references=frozenset(r["variant"] for r in report["results"] if r.get("reference")),
                 undecided=dict(summary.get("undecided") or {}))
