"""AOTInductor packages (.pt2): torch.export graphs compiled ahead of time by Inductor, run without the model's
Python code; loaded only when their manifest vouches for them (package.py), replayed from CUDA graphs on a GPU
(graphs.py)."""

from trtpipe.runtime.aoti.settings import AotiSettings
from trtpipe.runtime.capabilities import OwnStage, ReadsGpu, TritonFacts
from trtpipe.runtime.entry import BackendEntry
from trtpipe.vocab import ArtifactKind, BackendKind

ENTRY = BackendEntry(
    BackendKind.AOTI, "trtpipe.runtime.aoti.backend:AotiBackend", AotiSettings, runs=(ArtifactKind.AOTI,),
    library=str(BackendKind.TORCH), title="AOTInductor", portability=2,
    can={TritonFacts: TritonFacts("", "KIND_CPU"),
         OwnStage: OwnStage("compile", builds_on=(BackendKind.TORCH,)),
         ReadsGpu: "trtpipe.runtime.aoti.package"})

__all__ = ["ENTRY", "AotiSettings"]
