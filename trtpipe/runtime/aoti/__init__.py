"""AOTInductor packages (.pt2): torch.export graphs compiled ahead of time by Inductor, run without the model's
Python code; loaded only when their manifest vouches for them (package.py), replayed from CUDA graphs on a GPU
(graphs.py)."""

from trtpipe.runtime.aoti.settings import AotiSettings
from trtpipe.runtime.entry import BackendEntry, TritonFacts
from trtpipe.vocab import ArtifactKind, BackendKind

# Triton has no AOTInductor platform (""): its export runs the package through the Python backend.
ENTRY = BackendEntry(
    BackendKind.AOTI, "trtpipe.runtime.aoti.backend:AotiBackend", AotiSettings, runs=(ArtifactKind.AOTI,),
    library=str(BackendKind.TORCH), triton=TritonFacts("", "KIND_CPU"),
    stage="compile", builds_on=(BackendKind.TORCH,),
    capability="trtpipe.runtime.aoti.package:compute_capability", title="AOTInductor", portability=2)

__all__ = ["ENTRY", "AotiSettings"]
