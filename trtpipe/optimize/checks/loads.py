"""Whether a written file loads in the default session of each runtime it is meant for.

trtpipe's own loader may run a file with some graph optimisations off (a TensorRT-flavoured Q/DQ file is measured
that way), but a user's plain ``onnxruntime.InferenceSession(path)`` runs all of them, and ONNX Runtime's optimiser
can fuse a pattern into a kernel whose type check then fails (FP16 scales into QLinearConcat). So after writing,
optimize opens the file the way a user would, in each runtime the registry says it is meant for: ONNX Runtime with
all optimisations on its CPU provider, and OpenVINO (read and compiled for its CPU plugin) where it is installed and
the file is meant for it (runtime/<engine>/loads.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trtpipe.runtime.registry import load_checks
from trtpipe.vocab import Precision, Target


@dataclass(frozen=True)
class LoadCheck:
    """One runtime's default session on the written file: whether it loaded, and its first error line if not."""

    runtime: str
    loaded: bool
    error: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {"runtime": self.runtime, "loaded": self.loaded, **({"error": self.error} if self.error else {})}


def check_loads(path: Path, precision: Precision, target: Target) -> list[LoadCheck]:
    """The default session on ``path`` of each installed runtime a file of ``precision`` (and INT8 ``target``) is
    meant for, as each backend folder declares it (capability ``ChecksLoads``): the reference runtime always."""
    return [LoadCheck(str(kind), error is None, error) for kind, error in load_checks(path, precision, target)]
