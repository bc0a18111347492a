"""What Triton's OpenVINO backend is told: its parameters go to OpenVINO's CPU plugin, which computes in BF16 by
default on CPUs that can, so the precision is always named."""

from __future__ import annotations

from trtpipe.vocab import Precision


def parameters(bf16: bool, threads: int | None) -> dict[str, str]:
    """The config parameters for a model (a BF16 file or not, ``threads`` per instance)."""
    chosen = {"INFERENCE_PRECISION_HINT": str(Precision.BF16) if bf16 else "f32"}
    if threads:
        chosen["INFERENCE_NUM_THREADS"] = str(threads)
    return chosen
