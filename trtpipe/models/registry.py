"""Architectures known by name.

torchvision classifiers are built with seeded random weights (nothing is downloaded), so the same name gives
the same weights in every process: ``trtpipe convert resnet50`` and a later ``trtpipe bench resnet50 ...``
compare like with like. The bundled ``digits_resnet`` is the one trained model; its weights ship with trtpipe.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

RANDOM_WEIGHTS_SEED = 0


@dataclass(frozen=True)
class Architecture:
    name: str
    input_shape: tuple[int, ...]
    description: str
    trained: bool = False
    dataset: str | None = None

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
    return _torchvision(name)


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
