"""The INT8 recipes ``--quality`` chooses between: which accuracy steps run, and how much data each needs.

Every recipe places Q/DQ with the same rules (placement.py) and lifts depthwise inputs to one range per tensor
(``scale_depthwise``: one pass of per-channel statistics, and the largest single gain measured on real detectors:
docs/results/int8-design.md, 'Depthwise scaling'). The others add, in order of cost:

- ``equalize``: cross-layer equalization through ReLU/ReLU6 pairs (one more statistics pass);
- bias correction: each layer's output mean shift removed, on 64 calibration samples (one pass per layer);
- AdaRound: each weight's rounding learned so the layer's output matches FP32, on 64 samples (minutes).

The default is the heaviest recipe that stays within about five minutes for EfficientNet-Lite0 on 2 cores:
``balanced``. ``best`` as a whole (calibration, equalization, AdaRound, bias correction and a figure after each
on 500 eval crops) took longer than that, so it is asked for by name (measured: docs/results/int8-peers.md).
The figure measured after each step is recorded in the manifest (``int8.recipe``).
"""

from __future__ import annotations

from dataclasses import dataclass

from trtpipe.errors import BadInput
from trtpipe.vocab import Quality


@dataclass(frozen=True)
class Recipe:
    quality: Quality
    passes: tuple[str, ...]  # graph passes run after the user's (--passes), before INT8 is written
    steps: tuple[str, ...]  # INT8 steps (int8/steps/) asked for; they run in the order the steps' table gives
    min_samples: int  # calibration samples below which the learned steps fit the data rather than the model


RECIPES = {
    Quality.FAST: Recipe(Quality.FAST, ("scale_depthwise",), (), min_samples=1),
    Quality.BALANCED: Recipe(Quality.BALANCED, ("equalize", "scale_depthwise"), ("bias_correction",),
                             min_samples=8),
    Quality.BEST: Recipe(Quality.BEST, ("equalize", "scale_depthwise"), ("bias_correction", "adaround"),
                         min_samples=16),
}
DEFAULT_QUALITY = Quality.BALANCED


def recipe_for(quality: Quality | None, samples: int, *, random: bool = False) -> tuple[Recipe, str | None]:
    """The recipe to run for ``quality`` (None: the default) with ``samples`` calibration samples, and a note when
    the default stepped down because the data is too few for it (or random: ``--calib random`` measures speed,
    and learning from noise would only cost minutes). Asking for a recipe by name with too few samples is
    refused, naming how many it needs."""
    if quality is None and random:
        return RECIPES[Quality.FAST], None
    if quality is not None:
        recipe = RECIPES[quality]
        if samples < recipe.min_samples:
            raise BadInput(f"--quality {quality} learns from the calibration data and needs at least "
                           f"{recipe.min_samples} samples; {samples} were given: give more with --calib (or "
                           f"--calib-samples), or ask for a lighter --quality.")
        return recipe, None
    for candidate in dict.fromkeys((DEFAULT_QUALITY, Quality.BALANCED, Quality.FAST)):
        recipe = RECIPES[candidate]
        if samples >= recipe.min_samples:
            note = None if candidate is DEFAULT_QUALITY else (
                f"INT8 recipe '{candidate}' instead of the default '{DEFAULT_QUALITY}': {samples} calibration "
                f"samples are too few for it (it needs {RECIPES[DEFAULT_QUALITY].min_samples})")
            return recipe, note
    return RECIPES[Quality.FAST], None
