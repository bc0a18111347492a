"""MODEL as a PyTorch file: TorchScript, safetensors or a state_dict checkpoint (with ``--arch``), or a pickled
module (only with ``--trust-checkpoint``). Files are read through :mod:`trtpipe.models.checkpoint`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from trtpipe.errors import BadInput
from trtpipe.files import sha256_file
from trtpipe.models.registry import Architecture, get_architecture, skeleton
from trtpipe.models.sources.base import Found, PytorchSource, declared_shape, name_from
from trtpipe.vocab import Device

if TYPE_CHECKING:
    import torch

STATE_DICT_SUFFIXES = {".pt", ".pth", ".bin", ".ckpt"}
TORCHSCRIPT_SUFFIXES = {".ts", ".torchscript", ".jit"}


def looks_like_path(spec: str) -> bool:
    """A file MODEL: one that exists, or a spec with a folder separator or a model file's suffix."""
    path = Path(spec)
    return path.exists() or "/" in spec or "\\" in spec or path.suffix.lower() in (
        STATE_DICT_SUFFIXES | TORCHSCRIPT_SUFFIXES | {".safetensors", ".onnx"}
    )


def check_file(path: Path) -> None:
    """Refuse a MODEL path that is missing or no file, before anything reads it."""
    if not path.exists():
        raise BadInput(f"Model file {path} does not exist.")
    if not path.is_file():
        raise BadInput(f"Model path {path} is not a file.")


class PytorchFile(PytorchSource):
    kind: ClassVar[str] = "pytorch-file"

    def claims(self, spec: str) -> bool:
        return looks_like_path(spec)

    def find(self, spec: str, arch: str | None, trust: bool) -> Found:
        import torch
        from torch import nn

        from trtpipe.models.checkpoint import find_state_dict, is_torchscript_archive, read_or_refuse, torch_load

        path = Path(spec)
        check_file(path)
        suffix = path.suffix.lower()
        digest = sha256_file(path)
        shape = get_architecture(arch).input_shape if arch else None
        if suffix in TORCHSCRIPT_SUFFIXES or is_torchscript_archive(path):
            module = read_or_refuse(lambda: torch.jit.load(str(path), map_location=str(Device.CPU)), path,
                                    "TorchScript file")
            return Found(module, name_from(path), str(path), "torchscript", shape, digest,
                         no_shape=f"TorchScript file {path} does not record its input shape: pass --input-shape "
                         "(e.g. 1x3x224x224).")
        if suffix == ".safetensors":
            from safetensors import SafetensorError
            from safetensors.torch import load_file

            try:
                state = load_file(str(path))
            except (SafetensorError, OSError, ValueError) as error:
                raise BadInput(f"{path} is not a readable safetensors file ({error}).") from None
            return _from_state_dict(state, path, arch, shape, digest, "safetensors")

        obj = torch_load(path, trust)
        if isinstance(obj, nn.Module):
            return Found(obj, name_from(path), str(path), "pickled", shape or declared_shape(obj), digest,
                         no_shape=f"Pickled module {path} does not record its input shape: pass --input-shape.")
        return _from_state_dict(find_state_dict(obj, path), path, arch, shape, digest, "state_dict")


def _from_state_dict(
    state: Mapping[str, torch.Tensor], path: Path, arch: str | None, shape: tuple[int, ...] | None,
    digest: str, kind: str,
) -> Found:
    if arch is None:
        raise BadInput(f"{path} holds only weights: pass --arch NAME to say which architecture they fit "
                       "(see 'trtpipe models').")
    architecture = get_architecture(arch)
    state = {k.removeprefix("module."): v for k, v in state.items()}  # saved from DataParallel/DDP
    module = architecture.build(num_classes=_num_classes(architecture, state))
    expected = module.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    if missing or unexpected:
        raise BadInput(
            f"{path} does not fit --arch {architecture.name}: {len(missing)} missing keys "
            f"({_few(missing)}), {len(unexpected)} unexpected keys ({_few(unexpected)})."
        )
    wrong = [f"{k} {tuple(state[k].shape)} vs {tuple(v.shape)}" for k, v in expected.items()
             if tuple(state[k].shape) != tuple(v.shape)]
    if wrong:
        raise BadInput(f"{path} does not fit --arch {architecture.name}: shapes differ for {_few(wrong)}.")
    module.load_state_dict(state)
    return Found(module, name_from(path), str(path), kind, shape or architecture.input_shape, digest,
                 architecture.dataset, {"architecture": architecture.name})


def _num_classes(architecture: Architecture, state: Mapping[str, torch.Tensor]) -> int | None:
    """Fine-tuned checkpoints often change only the classifier's width: read it from the last 2-D weight."""
    reference = skeleton(architecture).state_dict()
    last = [k for k, v in reference.items() if k.endswith("weight") and v.dim() == 2]
    if last and last[-1] in state and state[last[-1]].shape[0] != reference[last[-1]].shape[0]:
        return int(state[last[-1]].shape[0])
    return None


def _few(items: list[str], n: int = 4) -> str:
    shown = ", ".join(items[:n])
    return shown + (", ..." if len(items) > n else "") if items else "none"
