"""PyTorch eager: the FP32 baseline every artifact is verified and measured against (a live module; it opens no
artifact file)."""

from trtpipe.runtime.entry import BackendEntry
from trtpipe.runtime.torch.settings import TorchSettings
from trtpipe.vocab import BackendKind

ENTRY = BackendEntry(BackendKind.TORCH, "trtpipe.runtime.torch.backend:TorchBackend", TorchSettings,
                     library=str(BackendKind.TORCH), eager=True,
                     gpu_settings="trtpipe.runtime.torch.backend:CUDA_SETTINGS",
                     output_names="trtpipe.runtime.torch.backend:output_names", title="PyTorch", portability=3)

__all__ = ["ENTRY", "TorchSettings"]
