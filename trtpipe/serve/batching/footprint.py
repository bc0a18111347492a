"""How much memory a model instance takes, and how much there is for more: what ``--instances`` is checked against.

An instance is measured where it lives: device memory on a GPU (cudaMemGetInfo through torch, so ONNX Runtime's
and TensorRT's own allocations count, not only PyTorch's), host memory on the CPU (the peak resident memory it adds
to this process, Linux's VmHWM reset through /proc/self/clear_refs before it loads). What is free is the device's
free memory, or the host's available memory (MemAvailable, within a cgroup's limit where one is set). Where a
figure cannot be read it is None, never a guess: the check is then skipped with one line.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import math
from dataclasses import dataclass
from pathlib import Path

from trtpipe.errors import BadInput
from trtpipe.hardware import PROC_MEMINFO, proc_kib
from trtpipe.vocab import Device

MIB = float(1 << 20)
CLEAR_REFS = Path("/proc/self/clear_refs")
CGROUP = Path("/sys/fs/cgroup")  # cgroup v2: memory.max and memory.current of the container


def _cgroup_room() -> float | None:
    """Bytes a cgroup v2 memory limit leaves this container; None without a limit."""
    try:
        limit = (CGROUP / "memory.max").read_text().strip()
        used = int((CGROUP / "memory.current").read_text().strip())
    except (OSError, ValueError):
        return None
    return None if limit == "max" else max(int(limit) - used, 0)


def free_mib(device: Device) -> float | None:
    """Memory free for another instance on ``device``, in MiB; None where it cannot be read."""
    if device is Device.CUDA:
        import torch

        if not torch.cuda.is_available():
            return None
        free, _ = torch.cuda.mem_get_info()
        return free / MIB
    available = proc_kib("MemAvailable", PROC_MEMINFO)
    if available is None:
        return None
    room = _cgroup_room()
    return min(available * 1024, room if room is not None else math.inf) / MIB


def _release_freed_memory() -> None:
    """Hand memory freed earlier back to the system, so that a new instance is not measured as reusing it."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: freed memory may be reused uncounted
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class UsageMeter:
    """``with UsageMeter(device) as meter: load and warm up`` → ``meter.read()``: the MiB that took on ``device``.

    Host: the peak resident memory added to this process (the resident size when the peak cannot be reset).
    Device: the device memory in use beyond what was in use at the start.
    """

    def __init__(self, device: Device) -> None:
        self.device = device
        self._start: float | None = None
        self._peak = False

    def __enter__(self) -> UsageMeter:
        _release_freed_memory()
        if self.device is Device.CUDA:
            import torch

            if torch.cuda.is_available():
                torch.cuda.synchronize()
                self._start = torch.cuda.mem_get_info()[0] / MIB  # free at the start
            return self
        resident = proc_kib("VmRSS")
        self._start = resident / 1024 if resident is not None else None
        with contextlib.suppress(OSError):
            CLEAR_REFS.write_text("5")  # resets VmHWM to the current resident size (Linux 4.0+)
            self._peak = True
        return self

    def read(self) -> float | None:
        """The MiB taken since the start; None where it cannot be read."""
        if self._start is None:
            return None
        if self.device is Device.CUDA:
            import torch

            torch.cuda.synchronize()
            return max(self._start - torch.cuda.mem_get_info()[0] / MIB, 0.0)
        now = proc_kib("VmHWM" if self._peak else "VmRSS")
        return None if now is None else max(now / 1024 - self._start, 0.0)

    def __exit__(self, *exc: object) -> None:
        return None


def memory_word(device: Device) -> str:
    return "device" if device is Device.CUDA else "host"


def mib(value: float) -> str:
    """A MiB figure as a line shows it: whole MiB, with a decimal below 10."""
    return f"{value:.1f}".removesuffix(".0") if value < 10 else f"{value:,.0f}"


class InstancesDoNotFit(BadInput):
    """``--instances`` asks for more copies of a model than the memory holds: the server does not start."""


@dataclass
class MemoryBudget:
    """What the server's instances may still take: ``--memory-budget-mb`` less what earlier models took (None:
    no budget, what is free decides)."""

    limit_mib: float | None = None
    spent_mib: float = 0.0

    def check(self, label: str, count: int, size_mib: float, free: float | None, device: Device) -> None:
        """Raise InstancesDoNotFit, naming how many fit, when ``count`` instances of ``size_mib`` each do not fit.

        ``free`` is what was free before the measured instance loaded, with every earlier instance of the model
        already loaded but one (whose share ``size_mib`` is added back): the memory all ``count`` of them share.
        """
        word = memory_word(device)
        room, where, short = math.inf, "", f"free {word} memory"
        if free is not None:
            room, where = free + size_mib, f"the {mib(free + size_mib)} MiB of {word} memory free"
        if self.limit_mib is not None and self.limit_mib - self.spent_mib < room:
            room = max(self.limit_mib - self.spent_mib, 0.0)
            spent = f", {mib(self.spent_mib)} MiB of it taken by other models" if self.spent_mib else ""
            where, short = f"the --memory-budget-mb {mib(self.limit_mib)} MiB{spent}", "raise --memory-budget-mb"
        if math.isinf(room) or size_mib <= 0:  # nothing to check against (the caller says so)
            return
        fits = int(room // size_mib)
        if count > fits:
            fix = f"use --instances {fits}" if fits >= 1 else short
            raise InstancesDoNotFit(
                f"{label}: --instances {count} needs ~{mib(count * size_mib)} MiB of {word} memory "
                f"({mib(size_mib)} MiB each, measured after loading and a warm-up run); {fits} fit in {where}: {fix}.")
        self.spent_mib += count * size_mib
