"""How PyTorch's rows run on a GPU, in words (capability ``DescribesGpuRuns``: bench's environment table states
them). Light at import: no torch."""


# What every PyTorch row on a GPU runs with.
CUDA_SETTINGS: tuple[str, ...] = (
    "PyTorch: cudnn.benchmark on (per-shape algorithm search, like ONNX Runtime's exhaustive search and TensorRT's "
    "autotuning)",
    "PyTorch without copies: inputs cast and made channels_last before the timed calls (a hand-captured graph times "
    "its replay alone)",
    "with copies: PyTorch, AOTInductor and TensorRT from pinned host memory; ONNX Runtime from pageable memory (its "
    "Python API has no pinned host buffers)")
gpu_settings = CUDA_SETTINGS
