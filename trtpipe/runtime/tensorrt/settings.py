"""The run settings a TensorRT engine receives: the only ones its backend is given."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TensorRTSettings:
    """How a TensorRT engine is run; each default is the same as RunOptions'."""

    # accepted from callers that set it for every row (bench); the engine runs on the GPU, so no CPU thread pool
    # is sized by it
    threads: int | None = None
    cuda_graph: bool = False  # capture each input shape's launch once and replay it
    spin_wait: bool = False  # wait for a run by polling its CUDA event (trtexec's --useSpinWait)
