"""The run settings the PyTorch backend honours (it wraps a live module, whose other choices are its keywords)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TorchSettings:
    """How PyTorch runs a module; the default is the same as RunOptions'."""

    threads: int | None = None  # torch's CPU threads (process-wide)
