"""Which precisions a device can compute an AOTInductor package in: FP16 and BF16 only where it has kernels for
them (elsewhere they would be emulated, slower than FP32, which no one deploys)."""

from __future__ import annotations

from trtpipe.vocab import Device, Precision


def unsupported(precision: Precision, device: Device) -> str | None:
    """Why this machine cannot compile a ``precision`` package for ``device``, in words; None when it can."""
    import torch

    if device is Device.CUDA:
        if not torch.cuda.is_available():
            return f"compiling for {Device.CUDA} needs a CUDA GPU, and torch sees none here"
        if precision is Precision.BF16 and not torch.cuda.is_bf16_supported():
            major, minor = torch.cuda.get_device_capability()
            return (f"this GPU ({torch.cuda.get_device_name()}, compute capability {major}.{minor}) has no BF16 "
                    "kernels (they need 8.0 or later): compile fp16")
        return None
    if precision is Precision.BF16:
        from trtpipe.hardware import has_bf16

        if not has_bf16():
            return "this CPU has neither AVX512-BF16 nor AMX, so BF16 would be emulated (slower than FP32)"
    if precision is Precision.FP16 and not _cpu_fp16():
        from trtpipe.hardware import has_bf16

        instead = f"{Precision.FP32} or {Precision.BF16} (it has BF16 kernels)" if has_bf16() else Precision.FP32
        return (f"this CPU has no FP16 kernels (AVX512-FP16 or AMX-FP16), so FP16 would be emulated (slower than "
                f"FP32): compile {instead} here, or fp16 for {Device.CUDA}")
    return None


def _cpu_fp16() -> bool:
    """Whether oneDNN, which runs a CPU package's convolutions and matmuls, has FP16 kernels on this CPU."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    except (AttributeError, RuntimeError):  # a torch built without oneDNN
        return False

