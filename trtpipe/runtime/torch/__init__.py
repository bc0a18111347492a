"""PyTorch eager: the FP32 baseline every artifact is verified and measured against (a live module; it opens no
artifact file)."""

from trtpipe.runtime.capabilities import DescribesGpuRuns, RunsModules
from trtpipe.runtime.entry import BackendEntry
from trtpipe.runtime.torch.settings import TorchSettings
from trtpipe.vocab import BackendKind

ENTRY = BackendEntry(BackendKind.TORCH, "trtpipe.runtime.torch.backend:TorchBackend", TorchSettings,
                     library=str(BackendKind.TORCH), title="PyTorch", portability=3,
                     can={RunsModules: "trtpipe.runtime.torch.backend",
                          DescribesGpuRuns: "trtpipe.runtime.torch.gpu_runs"})

__all__ = ["ENTRY", "TorchSettings"]
