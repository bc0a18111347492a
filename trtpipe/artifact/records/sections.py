"""The typed sections of an artifact's manifest: the records one stage writes and another reads back.

:class:`CpuRecord` is the ``artifact.cpu_class`` object (the CPU class a CPU-target INT8 artifact was made and
measured for); the others are the shared sections of ``details`` (:class:`MadeFrom`, :class:`SourceModel`,
:class:`RecordedOptions`, :class:`VerificationRecord`, :class:`DataRecord` and their parts). Each record's
``to_dict`` writes the JSON earlier manifests carried and its ``from_dict`` reads it back, a section that is absent
or not such a record reading as None. The manifest itself (reading, writing, committing, the schema and its checks)
is trtpipe.artifact.records.manifest, whose typed accessors hand out these records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trtpipe.intervals import Interval
from trtpipe.vocab import CpuClass, Precision


@dataclass(frozen=True)
class CpuRecord:
    """The CPU class a CPU-target INT8 artifact was made for (its weights were chosen for that class's int8
    arithmetic), the classes its accuracy was measured on with the figure each gave, and the classes it is known
    unsafe on. A reader compares the CPU it runs on with these rather than trusting the figure everywhere."""

    made_for: CpuClass
    measured: dict[CpuClass, dict[str, Any]] = field(default_factory=dict)  # class -> the figure measured there
    unsafe_on: tuple[CpuClass, ...] = ()  # classes it must not run on unasked (8-bit weights without VNNI)

    @property
    def measured_on(self) -> tuple[CpuClass, ...]:
        """The classes its accuracy was measured on, weakest first."""
        return tuple(sorted(self.measured, key=lambda c: c.rank))

    def figure(self, cpu_class: CpuClass) -> str:
        """The figure measured on ``cpu_class`` in a few words: the task's agreement with FP32, else the worst
        cosine."""
        figure = self.measured.get(cpu_class) or {}
        if figure.get("agreement") is not None:
            text = f"{figure.get('agreement_name') or 'agreement'} {100 * float(figure['agreement']):.2f} %"
            found = figure.get("agreement_interval")  # absent from manifests written before intervals
            return text if not isinstance(found, dict) else f"{text} (95% CI {Interval.from_dict(found).percent()})"
        if figure.get("cosine") is not None:
            return f"worst cosine {float(figure['cosine']):.5f}"
        return "no figure recorded"

    def requirement(self) -> str:
        """The record in one line, for a reader without trtpipe (a Triton config's comment)."""
        text = f"INT8 made for CPU class {self.made_for} ({'8' if self.made_for.vnni else '7'}-bit weights)"
        if self.measured:
            text += "; accuracy measured on " + ", ".join(f"{c} ({self.figure(c)})" for c in self.measured_on)
        if self.unsafe_on:
            text += f"; unsafe on {', '.join(self.unsafe_on)}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"made_for": str(self.made_for), "measured": {str(c): dict(f) for c, f in self.measured.items()},
                "unsafe_on": [str(c) for c in self.unsafe_on]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CpuRecord:
        return cls(CpuClass(data["made_for"]), {CpuClass(c): dict(f) for c, f in (data.get("measured") or {}).items()},
                   tuple(CpuClass(c) for c in data.get("unsafe_on") or ()))


# -- the shared sections of ``details``: what one stage records and another reads back ----------------------------

@dataclass(frozen=True)
class MadeFrom:
    """``details.input``: the file optimize made the artifact from, as it was given (a path relative to where it
    ran, or absolute), its SHA-256 then, and its precision."""

    path: str
    sha256: str | None = None
    precision: Precision | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256,
                "precision": None if self.precision is None else str(self.precision)}

    @classmethod
    def from_dict(cls, data: object) -> MadeFrom | None:
        """The record, or None where ``data`` names no file (convert's manifest has none)."""
        if not isinstance(data, dict) or not isinstance(data.get("path"), str) or not data["path"]:
            return None
        sha256, precision = data.get("sha256"), data.get("precision")
        return cls(data["path"], sha256 if isinstance(sha256, str) else None,
                   Precision(precision) if precision in tuple(Precision) else None)


@dataclass(frozen=True)
class RecordedPreprocessing:
    """How images became the model's inputs, as a manifest records it: convert's ``source.preprocessing`` (what the
    weights were trained with) or optimize's ``options`` (what it was told)."""

    resize: int | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    channel_order: str | None = None

    @classmethod
    def from_dict(cls, data: object) -> RecordedPreprocessing:
        """The fields ``data`` holds with the right type (the others None)."""
        if not isinstance(data, dict):
            return cls()

        def floats(key: str) -> tuple[float, ...] | None:
            value = data.get(key)
            return tuple(float(v) for v in value) if isinstance(value, list) and value else None

        resize, order = data.get("resize"), data.get("channel_order")
        return cls(resize if isinstance(resize, int) and not isinstance(resize, bool) else None, floats("mean"),
                   floats("std"), order if isinstance(order, str) else None)


@dataclass(frozen=True)
class SourceModel:
    """``details.source``: convert's (and compile's) record of the PyTorch model (``LoadedModel.describe()``)."""

    record: dict[str, Any]  # the whole record, as written

    @property
    def weights_sha256(self) -> str | None:
        value = self.record.get("weights_sha256")
        return value if isinstance(value, str) else None

    @property
    def preprocessing(self) -> RecordedPreprocessing:
        """What the weights were trained with (recorded for registry models with pretrained weights)."""
        return RecordedPreprocessing.from_dict(self.record.get("preprocessing"))


@dataclass(frozen=True)
class RecordedOptions:
    """``details.options``: the options optimize ran with, as plain values (``to_plain``), and its target."""

    record: dict[str, Any]

    def text(self, key: str) -> str | None:
        """A text option (``calib``, ``eval``, ``target``, ``cpu_class``...), None where unset or not text."""
        value = self.record.get(key)
        return value if isinstance(value, str) and value else None

    @property
    def preprocessing(self) -> RecordedPreprocessing:
        return RecordedPreprocessing.from_dict(self.record)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class VerificationRecord:
    """``details.verification``: convert's and compile's proof that the artifact computes what PyTorch FP32 does
    (``VerificationReport.record()``, ``Verification.record()``): the verdict, the bounds, the figures over every
    case, and each case as written (its inputs, verdict and comparison figures)."""

    passed: bool
    atol: float
    rtol: float
    min_cosine: float
    max_abs_err: float
    max_rel_err: float
    cosine: float
    top1_agreement: float | None = None
    dataset: str | None = None
    reference_accuracy: float | None = None
    candidate_accuracy: float | None = None
    cases: tuple[dict[str, Any], ...] = ()
    eval_samples: int | None = None  # convert's: the held-out samples judged (compile's record has no such field)

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed,
                "tolerance": {"atol": self.atol, "rtol": self.rtol, "min_cosine": self.min_cosine},
                "max_abs_err": self.max_abs_err, "max_rel_err": self.max_rel_err, "cosine": self.cosine,
                "top1_agreement": self.top1_agreement, "dataset": self.dataset,
                **({} if self.eval_samples is None else {"eval_samples": self.eval_samples}),
                "reference_accuracy": self.reference_accuracy, "candidate_accuracy": self.candidate_accuracy,
                "cases": [dict(case) for case in self.cases]}

    @classmethod
    def from_dict(cls, data: object) -> VerificationRecord | None:
        """The record, or None where ``data`` is not one (absent, or a field of the wrong type)."""
        if not isinstance(data, dict) or not isinstance(data.get("passed"), bool):
            return None
        tolerance, cases = data.get("tolerance"), data.get("cases")
        if not isinstance(tolerance, dict) or not isinstance(cases, list) or not all(isinstance(c, dict)
                                                                                     for c in cases):
            return None
        bounds = [_number(tolerance.get(k)) for k in ("atol", "rtol", "min_cosine")]
        figures = [_number(data.get(k)) for k in ("max_abs_err", "max_rel_err", "cosine")]
        atol, rtol, min_cosine = bounds
        max_abs, max_rel, cosine = figures
        if atol is None or rtol is None or min_cosine is None or max_abs is None or max_rel is None or cosine is None:
            return None
        return cls(data["passed"], atol, rtol, min_cosine, max_abs, max_rel, cosine,
                   _number(data.get("top1_agreement")), _text(data.get("dataset")),
                   _number(data.get("reference_accuracy")), _number(data.get("candidate_accuracy")),
                   tuple(dict(c) for c in cases),
                   _count(data.get("eval_samples")))


@dataclass(frozen=True)
class DataDescription:
    """A data set as optimize records it (``details.data.calibration`` and ``.eval``): where it came from, how many
    samples, their SHA-256, whether it carried labels, and (calibration) each sample's fingerprint."""

    source: str
    samples: int
    sha256: str | None = None
    labelled: bool = False
    fingerprints: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "samples": self.samples, "sha256": self.sha256, "labelled": self.labelled,
                **({} if self.fingerprints is None else {"fingerprints": list(self.fingerprints)})}

    @classmethod
    def from_dict(cls, data: object) -> DataDescription | None:
        """The record, or None where ``data`` is not one."""
        if not isinstance(data, dict) or _text(data.get("source")) is None or _count(data.get("samples")) is None:
            return None
        prints = data.get("fingerprints")
        fingerprints = tuple(prints) if isinstance(prints, list) and all(isinstance(f, str) for f in prints) else None
        return cls(data["source"], data["samples"], _text(data.get("sha256")), data.get("labelled") is True,
                   fingerprints)


@dataclass(frozen=True)
class JudgedOn:
    """``details.data.judged_on``: the data optimize judged the artifact's accuracy on (``data``: ``eval``,
    ``held-out`` or ``calibration``), and whether that figure is optimistic (judged on what it was fit to)."""

    data: str
    source: str
    samples: int
    sha256: str | None = None
    optimistic: bool = False
    labelled: bool | None = None  # --eval's record says whether it carried labels
    why: str | None = None  # optimistic: why nothing could be held out
    drawn: str | None = None  # held out: how the samples were drawn
    indices: tuple[int, ...] | None = None  # held out of a fixed set: which samples
    calibration_samples: int | None = None  # held out: what was left to calibrate on
    calibration_sha256: str | None = None
    folds: int | None = None  # cross-fitted, where a time budget let fewer folds judge: how many were drawn
    folds_used: int | None = None  # and how many judged

    def to_dict(self) -> dict[str, Any]:
        optional = {"why": self.why, "drawn": self.drawn,
                    "indices": None if self.indices is None else list(self.indices),
                    "calibration_samples": self.calibration_samples, "calibration_sha256": self.calibration_sha256,
                    "folds": self.folds, "folds_used": self.folds_used}
        return {"data": self.data, "source": self.source, "samples": self.samples, "sha256": self.sha256,
                **({} if self.labelled is None else {"labelled": self.labelled}), "optimistic": self.optimistic,
                **{k: v for k, v in optional.items() if v is not None}}

    @classmethod
    def from_dict(cls, data: object) -> JudgedOn | None:
        """The record, or None where ``data`` is not one."""
        if (not isinstance(data, dict) or _text(data.get("data")) is None or _text(data.get("source")) is None
                or _count(data.get("samples")) is None):
            return None
        labelled, indices = data.get("labelled"), data.get("indices")
        return cls(data["data"], data["source"], data["samples"], _text(data.get("sha256")),
                   data.get("optimistic") is True, labelled if isinstance(labelled, bool) else None,
                   _text(data.get("why")), _text(data.get("drawn")),
                   tuple(indices) if isinstance(indices, list) and all(_count(i) is not None for i in indices)
                   else None, _count(data.get("calibration_samples")), _text(data.get("calibration_sha256")),
                   _count(data.get("folds")), _count(data.get("folds_used")))


@dataclass(frozen=True)
class DataRecord:
    """``details.data``: optimize's record of the data it calibrated on, the --eval data, and what judged it. A
    part that is absent or not such a record reads as None (the artifact is then taken as not fit to its data)."""

    calibration: DataDescription | None = None
    eval: DataDescription | None = None
    judged_on: JudgedOn | None = None

    @property
    def calibration_fingerprints(self) -> frozenset[str]:
        """The fingerprints of the samples calibration was fit to (empty where none were recorded)."""
        return frozenset(self.calibration.fingerprints or ()) if self.calibration is not None else frozenset()

    def to_dict(self) -> dict[str, Any]:
        return {"calibration": None if self.calibration is None else self.calibration.to_dict(),
                "eval": None if self.eval is None else self.eval.to_dict(),
                "judged_on": None if self.judged_on is None else self.judged_on.to_dict()}

    @classmethod
    def from_dict(cls, data: object) -> DataRecord | None:
        """The record, or None where ``data`` is not an object (a manifest without the section)."""
        if not isinstance(data, dict):
            return None
        return cls(DataDescription.from_dict(data.get("calibration")), DataDescription.from_dict(data.get("eval")),
                   JudgedOn.from_dict(data.get("judged_on")))
