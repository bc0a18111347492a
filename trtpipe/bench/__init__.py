"""Stage 4, bench: latency and agreement of every artifact against PyTorch FP32 eager, in one run."""

from trtpipe._lazy import lazy_exports
from trtpipe.bench.options import BenchOptions

__all__ = ["BenchOptions", "run_benchmark"]
__getattr__, __dir__ = lazy_exports(__name__, {"run_benchmark": "trtpipe.bench.runner:run_benchmark"})
