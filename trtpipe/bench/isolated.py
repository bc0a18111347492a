"""A variant's host memory measured alone, in a fresh process (the CPU rows of artifacts and peers).

Variants opened in one process share what their runtime keeps once it has run anything: oneDNN's JIT-compiled kernels
and primitive cache, OpenVINO's CPU plugin pools and scratchpads, thread pools. Measured in turn inside the bench's own
process, the first variant of a runtime paid for all of it and the ones after it looked cheaper, so the order of the
rows, not the variant, made the difference (measured: docs/results/cpu.md, the memory paragraph of 'trtpipe against what
users would pick instead'). Here each row's figure is taken in a fresh Python process that imports the runtime, then
opens the variant and runs each batch, smallest first: what a process serving that variant adds beyond the runtime's
import, whatever ran before it. The child runs between timed variants, never during one.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trtpipe import console
from trtpipe.bench.memory import MemoryProbe
from trtpipe.inputs import InputSpec, fed_as, random_batch
from trtpipe.vocab import BackendKind

RUNS_PER_BATCH = 2  # the first run of a shape allocates its buffers; the second shows they are kept, not grown
TIMEOUT_S = 600.0


@dataclass(frozen=True)
class VariantSpec:
    """How to open a variant in another process, and what to feed it: :meth:`to_dict` is plain JSON, and
    :meth:`from_dict` makes the spec again on the other side."""

    backend: BackendKind
    path: str
    inputs: tuple[InputSpec, ...]  # every input the variant takes: random samples are drawn from each
    batches: tuple[int, ...]
    settings: dict[str, Any] = field(default_factory=dict)  # RunOptions.to_plain(): what the row was opened with

    def to_dict(self) -> dict[str, Any]:
        return {"backend": str(self.backend), "path": self.path, "inputs": [s.to_dict() for s in self.inputs],
                "batches": list(self.batches), "settings": self.settings}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VariantSpec:
        return cls(BackendKind(data["backend"]), str(data["path"]),
                   tuple(InputSpec.from_dict(item) for item in data["inputs"]), tuple(data["batches"]),
                   dict(data.get("settings") or {}))


def host_memory_alone(spec: VariantSpec, label: str) -> dict[int, float | None]:
    """Peak resident memory (MB) the variant adds to a fresh process, after loading and running each batch of
    ``spec.batches``. A batch whose figure could not be taken is None, and one line says why."""
    # The child imports this very trtpipe, installed or not (a checkout run in place).
    root = str(Path(__file__).resolve().parents[2])
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run([sys.executable, "-m", __name__], input=json.dumps(spec.to_dict()), env=env,
                              capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        result = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {}
    except subprocess.TimeoutExpired:
        result = {"error": f"it took over {TIMEOUT_S:.0f} s"}
    except ValueError:
        result = {}
    if "host_mb" not in result:
        why = result.get("error") or _last_line(done.stderr) or f"the process exited with {done.returncode}"
        console.warn(f"{label}: host memory not measured ({why}).")
        return dict.fromkeys(spec.batches)
    return {int(batch): value for batch, value in result["host_mb"].items()}


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def measure(spec: VariantSpec) -> dict[int, float | None]:
    """In this process: import the runtime, then open and run the variant under a memory probe."""
    from trtpipe.runtime.options import RunOptions
    from trtpipe.runtime.registry import backend_class, entry

    backend_type = backend_class(spec.backend)
    importlib.import_module(entry(spec.backend).library)  # the runtime's import is not the variant's
    rng = np.random.default_rng(0)
    figures: dict[int, float | None] = {}
    with MemoryProbe() as probe, backend_type(Path(spec.path), RunOptions(**spec.settings)) as backend:
        fixed = backend.static_batch
        for batch in sorted(b for b in spec.batches if fixed is None or b == fixed):
            call = backend.bind(fed_as(random_batch(spec.inputs, batch, rng),
                                       [(t.name, t.dtype) for t in backend.inputs]))
            for _ in range(RUNS_PER_BATCH):
                call()
            probe.read()
            figures[batch] = probe.host_mb
    return figures


def main() -> None:
    """The child's entry point: a VariantSpec as JSON on stdin, ``{"host_mb": {batch: MB}}`` on stdout."""
    try:
        spec = VariantSpec.from_dict(json.loads(sys.stdin.read()))
        print(json.dumps({"host_mb": measure(spec)}))
    except Exception as error:  # reported by the parent as one line; the bench goes on without the figure
        print(json.dumps({"error": f"{type(error).__name__}: {error}".splitlines()[0]}))


if __name__ == "__main__":
    main()
