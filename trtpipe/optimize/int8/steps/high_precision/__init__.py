"""INT8 with FP16 (or BF16) in the float layers: the step (``step.py``, what the INT8 pass runs and records) beside its
algorithm, one folder, as NNCF keeps an algorithm."""
