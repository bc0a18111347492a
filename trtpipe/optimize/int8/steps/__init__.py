"""The INT8 steps, one folder each (the step's ``step.py`` beside its algorithm), in the order they run: this table
is the one place that names them. A recipe
(``int8/recipes.py``) is a tuple of their names; each step says itself whether it runs (``wanted``), and the INT8
pass (``passes/int8.py``) hands each the candidate the one before it kept. Adding a step is its own folder here and
one line below, placed where it must run: the steps that improve INT8 without FP32 layers before the budget, which
keeps as few nodes FP32 as they allow, and FP16 in the float layers last, on the budget's result."""

from __future__ import annotations

from trtpipe.optimize.int8.step import Int8Step
from trtpipe.optimize.int8.steps.adaround.step import Adaround
from trtpipe.optimize.int8.steps.bias_correction.step import BiasCorrection
from trtpipe.optimize.int8.steps.budget.step import Budget
from trtpipe.optimize.int8.steps.high_precision.step import HighPrecision
from trtpipe.optimize.int8.steps.preactivations.step import IntegerPreactivations
from trtpipe.optimize.int8.steps.speed.step import SpeedPlacementStep

STEPS: tuple[Int8Step, ...] = (
    IntegerPreactivations(),
    Adaround(),
    BiasCorrection(),
    Budget(),
    SpeedPlacementStep(),
    HighPrecision(),
)
