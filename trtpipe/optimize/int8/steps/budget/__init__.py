"""The accuracy budget: layers back to float, most harmful first, until the budget holds: the step (``step.py``, what
the INT8 pass runs and records) beside its algorithm, one folder, as NNCF keeps an algorithm."""
