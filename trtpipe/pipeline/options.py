"""What the pipeline adds to the stages' options: how the chosen variant is selected, and where it writes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trtpipe.options import Options, option


@dataclass
class SelectOptions(Options):
    latency_budget_ms: float | None = option(None, "Largest tail latency the chosen variant may have: judged on the "
                                             "median over bench's rounds of each round's p99 (a burst cannot swing "
                                             "it) with its 95 % interval: met when the interval is within, too noisy "
                                             "to decide when it straddles the budget.", type=float, minimum=0,
                                             metavar="MS")
    max_accuracy_drop: float | None = option(None, "Points of the task's figure the chosen variant may lose against "
                                             "PyTorch FP32: accuracy with labelled data, else its agreement (top-1, "
                                             "pixel, mAP@0.5 vs FP32...); met when the drop's 95 % upper bound is "
                                             "within, too few samples to decide when its interval straddles it; "
                                             "refused where nothing measures it.", type=float, minimum=0,
                                             metavar="PP")
    batch: int | None = option(None, "Batch size the choice is made at (default: the smallest benched).", type=int,
                               minimum=1, flag="--select-batch")
    memory_budget_mb: float | None = option(None, "Largest memory the chosen variant may need at its batch, in MB: "
                                            "host memory on the CPU, device memory on a GPU (as bench measured "
                                            "it).", type=float, minimum=0, metavar="MB", flag="--memory-budget")


@dataclass
class OutputOptions(Options):
    """Where a run writes: each path relative to the current folder, or to ``trtpipe run --out``."""

    repository: Path = option(Path("models"), "Model repository to write (Triton layout).", type=Path)
    reports: Path = option(Path("reports"), "Folder for the reports (one subfolder per model).", type=Path)
    triton: Path | None = option(None, "Also export a Triton model repository here.", type=Path)
