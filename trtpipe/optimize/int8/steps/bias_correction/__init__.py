"""Bias correction: the step (``step.py``, what the INT8 pass runs and records) beside its algorithm, one folder, as
NNCF keeps an algorithm."""
