"""Task measures: how an optimized model's outputs are judged against FP32's, one module per task."""

from trtpipe.tasks.base import Fidelity
from trtpipe.tasks.registry import MEASURES, Inference, check_fits, infer_task

__all__ = ["MEASURES", "Fidelity", "Inference", "check_fits", "infer_task"]
