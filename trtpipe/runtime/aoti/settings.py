"""The run settings an AOTInductor package receives: the only ones its backend is given."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AotiSettings:
    """How an AOTInductor package is run; the default is the same as RunOptions'."""

    threads: int | None = None  # torch's CPU threads (process-wide)
