"""Factories for the model-zoo sweep (scripts/zoo.py), named as ``scripts/zoo_models.py:<source>__<name>``: ``timm__``
builds a timm model, ``tv__`` a torchvision one, each with seeded random weights (nothing is downloaded), in eval
mode. timm is a dev extra (``pip install 'trtpipe[zoo]'``), never a runtime dependency."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SEED = 0


def _timm(name: str) -> Any:
    import timm
    import torch

    torch.manual_seed(SEED)
    return timm.create_model(name, pretrained=False).eval()


def _torchvision(name: str) -> Any:
    import torch
    from torchvision.models import get_model

    torch.manual_seed(SEED)
    options: dict[str, Any] = {"weights": None}
    if name.startswith(("deeplabv3", "lraspp", "fcn")):
        options |= {"weights_backbone": None, "aux_loss": False}
    return get_model(name, **options).eval()


SOURCES: dict[str, Callable[[str], Any]] = {"timm": _timm, "tv": _torchvision}


def __getattr__(attribute: str) -> Callable[[], Any]:
    """``timm__resnet18`` -> a factory that builds timm's resnet18 (module attributes, PEP 562)."""
    source, _, name = attribute.partition("__")
    if source not in SOURCES or not name:
        raise AttributeError(attribute)
    return lambda: SOURCES[source](name)
