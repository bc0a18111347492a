"""Facts about this machine's CPU that change what is fast or correct."""

from __future__ import annotations

import os
import platform
from functools import lru_cache
from pathlib import Path

from trtpipe.vocab import CpuClass

_INTERESTING_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile")
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@lru_cache(maxsize=1)
def _cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return info


def cpu_model() -> str:
    return _cpuinfo().get("model name") or platform.processor() or platform.machine()


def cpu_flags() -> list[str]:
    present = set(_cpuinfo().get("flags", "").split())
    return [f for f in _INTERESTING_FLAGS if f in present]


def has_vnni() -> bool:
    """VNNI (AVX-512 VNNI, AVX-VNNI or AMX) gives x86 int8 dot products without 16-bit saturation."""
    return bool(set(_cpuinfo().get("flags", "").split()) & set(VNNI_FLAGS))


def has_bf16() -> bool:
    """BF16 dot products in hardware (AVX512-BF16 or AMX): without them BF16 is emulated, slower than FP32."""
    return bool(set(_cpuinfo().get("flags", "").split()) & set(BF16_FLAGS))


def cpu_class(flags: set[str] | None = None) -> CpuClass:
    """The class of this CPU (or of a CPU with ``flags``, /proc/cpuinfo's names): the highest whose int8
    instructions it has."""
    present = set(_cpuinfo().get("flags", "").split()) if flags is None else set(flags)
    if "amx_int8" in present:
        return CpuClass.AMX
    if "avx512_vnni" in present:
        return CpuClass.AVX512_VNNI
    if "avx_vnni" in present:
        return CpuClass.AVX_VNNI
    if "avx2" in present:
        return CpuClass.AVX2
    return CpuClass.PORTABLE


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


PROC_STATUS = Path("/proc/self/status")
PROC_MEMINFO = Path("/proc/meminfo")


def proc_kib(field: str, path: Path = PROC_STATUS) -> int | None:
    """A ``Field:   1234 kB`` line's value in KiB from a /proc file (this process's status by default, or
    /proc/meminfo); None where it cannot be read (not Linux, or the field is absent)."""
    try:
        for line in path.read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None
