"""Stage 4, bench: latency and agreement of every artifact against PyTorch FP32 eager, in one run."""

from trtpipe.bench.runner import BenchSettings, run_benchmark

__all__ = ["BenchSettings", "run_benchmark"]
