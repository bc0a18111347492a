"""The run settings ONNX Runtime receives: the only ones its backend is given (RunOptions at the edge holds every
backend's flags; ``RunOptions.only`` takes this backend's out of it)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from trtpipe.runtime.onnxruntime.providers import GPU_PROVIDERS, Provider, provider_names


class GraphOptimization(StrEnum):
    """ONNX Runtime's graph optimisation level. ``disable`` keeps Q/DQ as float ops: TensorRT's arithmetic."""

    DISABLE = "disable"
    BASIC = "basic"
    EXTENDED = "extended"
    ALL = "all"


class CudnnSearch(StrEnum):
    """ONNX Runtime CUDA's ``cudnn_conv_algo_search``: try every convolution algorithm once per shape
    (exhaustive), take cuDNN's heuristic pick, or its default algorithm."""

    EXHAUSTIVE = "exhaustive"
    HEURISTIC = "heuristic"
    DEFAULT = "default"

    @property
    def onnxruntime_name(self) -> str:
        return self.value.upper()


@dataclass(frozen=True)
class OnnxRuntimeSettings:
    """How ONNX Runtime runs an artifact; each default is the runtime's own (the same as RunOptions')."""

    threads: int | None = None  # intra-op threads
    spinning: bool = True  # idle pool threads spin (lowest latency) or sleep (a server's CPU)
    release_memory: bool = False  # hand back after each run what the memory pool grew to (a server)
    optimization: GraphOptimization = GraphOptimization.ALL  # graph optimisation level
    providers: tuple[Provider, ...] = ()  # execution providers (empty: the CPU)
    cuda_graph: bool = False  # CUDA provider: capture each input shape's launch once and replay it
    io_binding: bool | None = None  # fixed buffers; None: on where a GPU provider runs, off on the CPU
    prefer_nhwc: bool = False  # CUDA provider: NHWC convolution kernels
    cudnn_search: CudnnSearch | None = None  # CUDA provider: cudnn_conv_algo_search (None: the provider's own)
    round_fp16: bool = False  # CPU: every FP16 tensor rounded where it is written, as a GPU computes it

    @property
    def provider_names(self) -> list[str]:
        return provider_names(self.providers)

    @property
    def on_gpu(self) -> bool:
        return bool(set(self.provider_names) & GPU_PROVIDERS)
