"""What the pipeline adds to the stages' options: how the chosen variant is selected, and where it writes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trtpipe.options import Options, option


@dataclass
class SelectOptions(Options):
    latency_budget_ms: float | None = option(None, "Largest p99 latency the chosen variant may have.", type=float,
                                             minimum=0, metavar="MS")
    max_accuracy_drop: float | None = option(None, "Points of the task's figure the chosen variant may lose against "
                                             "PyTorch FP32: accuracy with labelled data, else its agreement (top-1, "
                                             "pixel, mAP@0.5 vs FP32...); refused where nothing measures it.",
                                             type=float, minimum=0, metavar="PP")
    batch: int | None = option(None, "Batch size the choice is made at (default: the smallest benched).", type=int,
                               minimum=1, flag="--select-batch")
    memory_budget_mb: float | None = option(None, "Largest memory the chosen variant may need at its batch, in MB: "
                                            "host memory on the CPU, device memory on a GPU (as bench measured "
                                            "it).", type=float, minimum=0, metavar="MB", flag="--memory-budget")


@dataclass
class OutputOptions(Options):
    repository: Path = option(Path("models"), "Model repository to write (Triton layout).", type=Path)
    reports: Path = option(Path("reports"), "Folder for the reports (one subfolder per model).", type=Path)
    triton: Path | None = option(None, "Also export a Triton model repository here.", type=Path)
