"""What each optimize pass did, as a typed record: the pass hands it to ``PassContext.record`` and the stage writes
``to_dict()`` into the artifact's manifest as the section ``section`` names (``details.fusion``, ``details.int8``...).

These classes are the manifest's schema for the passes' sections (its version is
``trtpipe.artifact.records.manifest.MANIFEST_SCHEMA``); the JSON keys are the ones earlier manifests carried, so a
reader of the file sees no change. Code that needs what a pass did reads the record
(``PassContext.recorded(Int8Record)``), not the dictionary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from trtpipe.comparison import Comparison
from trtpipe.vocab import Precision


class PassRecord(Protocol):
    """A pass's account of its work: the manifest section it fills and that section's JSON."""

    section: ClassVar[str]

    def to_dict(self) -> dict[str, Any]: ...


def _verified(fields: dict[str, Any], verification: Comparison | None) -> dict[str, Any]:
    """A pass's record with its check against FP32 last (None where the pass changed nothing it could check)."""
    return {**fields, "verification": None if verification is None else verification.to_dict()}


@dataclass(frozen=True)
class FusionRecord:
    """The graph simplification: operator counts and size before and after, and the check against the input."""

    section: ClassVar[str] = "fusion"
    ops_before: dict[str, int]
    ops_after: dict[str, int]
    bytes_before: int
    bytes_after: int
    verification: Comparison

    def to_dict(self) -> dict[str, Any]:
        return {"nodes_before": sum(self.ops_before.values()), "nodes_after": sum(self.ops_after.values()),
                "bytes_before": self.bytes_before, "bytes_after": self.bytes_after, "ops_before": self.ops_before,
                "ops_after": self.ops_after, "verification": self.verification.to_dict()}


@dataclass(frozen=True)
class EqualizeRecord:
    """Cross-layer equalization: the pairs equalized (none: the graph was left as it was)."""

    section: ClassVar[str] = "equalize"
    pairs: int
    probe: str | None = None  # the data the activation ranges were measured on
    ranges_for: str | None = None  # the target whose activation placement the ranges follow
    relu6_pairs: int = 0
    max_scale_spread: float | None = None
    verification: Comparison | None = None
    method: str = "activation ranges (per-channel weights)"

    def to_dict(self) -> dict[str, Any]:
        if not self.pairs:
            return {"pairs": 0}
        return _verified({"pairs": self.pairs, "method": self.method, "probe": self.probe,
                          "ranges_for": self.ranges_for, "relu6_pairs": self.relu6_pairs,
                          "max_scale_spread": self.max_scale_spread}, self.verification)


@dataclass(frozen=True)
class ScaleDepthwiseRecord:
    """Depthwise scaling: the inputs lifted to one range, how (a folded constant or a Mul), and the check."""

    section: ClassVar[str] = "scale_depthwise"
    tensors: int
    folded: int = 0
    muls: int = 0
    carried: int = 0  # gains carried into the convolution before a HardSwish
    spread: dict[str, float] = field(default_factory=dict)  # tensor -> its channels' spread before
    probe: str | None = None
    verification: Comparison | None = None

    def to_dict(self) -> dict[str, Any]:
        if not self.tensors:
            return {"tensors": 0}
        return _verified({"tensors": self.tensors, "folded": self.folded, "muls": self.muls, "carried": self.carried,
                          "spread": self.spread, "probe": self.probe}, self.verification)


@dataclass(frozen=True)
class Fp16Record:
    """The FP16 conversion: the nodes kept in FP32 and why, and the check against FP32."""

    section: ClassVar[str] = str(Precision.FP16)
    keep_io_fp32: bool
    kept_fp32: list[dict[str, Any]]  # {"node", "op", "reason"} per node kept
    calibration: str | None
    max_activation: float
    verification: Comparison

    def to_dict(self) -> dict[str, Any]:
        return {"keep_io_fp32": self.keep_io_fp32, "calibration": self.calibration,
                "max_activation": self.max_activation, "kept_fp32": self.kept_fp32,
                "verification": self.verification.to_dict()}


@dataclass(frozen=True)
class Bf16Record:
    """The BF16 weights and the check against FP32."""

    section: ClassVar[str] = str(Precision.BF16)
    weights: int
    verification: Comparison
    runtime: str = "openvino (BF16 kernels need AVX512-BF16 or AMX)"

    def to_dict(self) -> dict[str, Any]:
        return {"weights": self.weights, "verification": self.verification.to_dict(), "runtime": self.runtime}


@dataclass(frozen=True)
class Int8Calibration:
    method: str
    source: str
    samples: int
    sha256: str
    cache: str
    tensors: int  # tensors with a calibrated range

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "source": self.source, "samples": self.samples, "sha256": self.sha256,
                "cache": self.cache, "tensors": self.tensors}


class StepRecord(Protocol):
    """An INT8 step's account of its work (int8/steps/): the keys it adds to the manifest's ``int8`` section."""

    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class RecipeRecord:
    """The INT8 recipe that ran (--quality, its graph passes and steps) and the figure measured after each step."""

    quality: str | None
    steps: list[str]
    measured: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {"quality": self.quality, "steps": self.steps, "measured": self.measured}


@dataclass(frozen=True)
class Int8Record:
    """INT8 quantization: the profile, the calibration, full INT8's figure, the recipe and its figures, the placement
    (the rules' record and the choices steps made), each step's own typed record (``steps``, in the order they ran;
    a later step's keys replace an earlier one's), the layers the budget kept in FP32, and the final figure."""

    section: ClassVar[str] = str(Precision.INT8)
    profile: dict[str, Any]
    calibration: Int8Calibration
    full_int8: Comparison
    final: Comparison
    recipe: RecipeRecord
    placement: dict[str, Any] = field(default_factory=dict)
    steps: tuple[StepRecord, ...] = ()
    fp32_layers: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        section: dict[str, Any] = {"placement": self.placement, "recipe": self.recipe.to_dict()}
        for step in self.steps:
            section |= step.to_dict()
        return {"profile": self.profile, "calibration": self.calibration.to_dict(),
                "full_int8": self.full_int8.to_dict(), "fp32_layers": self.fp32_layers, **section,
                "final": self.final.to_dict()}
