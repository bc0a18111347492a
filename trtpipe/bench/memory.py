"""What a variant costs in memory, measured around its load and its timed runs.

Host: the peak resident memory the variant adds to the process it runs in (Linux: the peak, VmHWM, is reset
through /proc/self/clear_refs before the variant loads, and the resident size before it is subtracted; memory
freed by the previous variant is handed back to the system first, so it is not reused unseen). On the CPU,
artifact and peer rows run this probe in a fresh process of their own (isolated.py says why). Device: on a GPU, the
device memory in use beyond what was in use before the variant loaded (cudaMemGetInfo, so TensorRT's and ONNX
Runtime's own allocations count, not only PyTorch's), and PyTorch's own peak (max_memory_reserved, or the bytes
it allocated where a small model fits in segments reserved before) when larger.
Where a figure cannot be read it is None, never a guess.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
from pathlib import Path
from typing import Any

from trtpipe.hardware import proc_kib
from trtpipe.vocab import Device

MB = 1e6
CLEAR_REFS = Path("/proc/self/clear_refs")


def _release_freed_memory() -> None:
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: freed memory may be reused uncounted
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _reset_peak() -> bool:
    try:
        CLEAR_REFS.write_text("5")  # resets VmHWM to the current resident size (Linux 4.0+)
        return True
    except OSError:
        return False


class MemoryProbe:
    """``with MemoryProbe(device) as probe: load and run`` → ``probe.host_mb``, ``probe.device_mb``."""

    def __init__(self, device: Device = Device.CPU) -> None:
        self.device = device
        self.host_mb: float | None = None
        self.device_mb: float | None = None

    def __enter__(self) -> MemoryProbe:
        _release_freed_memory()
        self._host_start = proc_kib("VmRSS")
        self._host_ok = self._host_start is not None and _reset_peak()
        if self.device is Device.CUDA:
            import torch

            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            free, total = torch.cuda.mem_get_info()
            self._device_used_start = total - free
            self._torch_start = torch.cuda.memory_reserved()
            self._torch_allocated_start = torch.cuda.memory_allocated()
        return self

    def read(self) -> None:
        """Take the figures now (call after the last timed run, before the variant is closed)."""
        peak = proc_kib("VmHWM")
        if self._host_ok and peak is not None and self._host_start is not None:
            self.host_mb = max(peak - self._host_start, 0) * 1024 / MB
        if self.device is Device.CUDA:
            import torch

            torch.cuda.synchronize()
            free, total = torch.cuda.mem_get_info()
            used = (total - free) - self._device_used_start
            torch_peak = torch.cuda.max_memory_reserved() - self._torch_start
            # A small model's tensors can fit in the free part of a segment an earlier variant reserved: neither the
            # device's nor the allocator's reserved figure moves then, but the bytes it allocated do.
            allocated = torch.cuda.max_memory_allocated() - self._torch_allocated_start
            self.device_mb = max(used, torch_peak, allocated, 0) / MB

    def __exit__(self, *exc: object) -> None:
        return None


def module_mb(module: Any) -> float:
    """MB of a PyTorch module's parameters and buffers: in memory before a probe around its backend starts, so a
    CPU row of it adds them to its host figure."""
    tensors = [*module.parameters(), *module.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors) / MB
