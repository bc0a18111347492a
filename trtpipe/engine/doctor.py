"""``trtpipe doctor``: what this machine can run, what is missing, and the exact line that installs it."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

from rich.markup import escape
from rich.table import Table

from trtpipe import console
from trtpipe.errors import MissingDependency
from trtpipe.runtime.tensorrt.loader import INSTALL_TENSORRT, import_tensorrt_runtime
from trtpipe.runtime.tensorrt.versions import BUILD_FEATURES, FIRST_VERSION, missing_features


def _driver_version() -> str | None:
    if not shutil.which("nvidia-smi"):
        return None
    try:
        result = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=10, check=True)
        return result.stdout.strip().splitlines()[0] if result.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def _tensorrt() -> tuple[str | None, str]:
    try:
        trt, lean = import_tensorrt_runtime("doctor")
    except MissingDependency:
        return None, "not installed"
    if lean:
        return trt.__version__, "lean runtime only: runs version-compatible engines, cannot build"
    lacking = missing_features(BUILD_FEATURES, trt.__version__)
    if lacking:  # the version table's rule, said here before a build is tried
        needed = ".".join(map(str, FIRST_VERSION[lacking[0]].version))
        return trt.__version__, f"too old to build ({lacking[0].value} need TensorRT {needed}); runs engines"
    return trt.__version__, "full (builder and runtime)"


def diagnose() -> list[dict[str, Any]]:
    import torch

    from trtpipe.runtime.registry import doctor_rows

    gpu = torch.cuda.is_available()
    rows: list[dict[str, Any]] = []
    if gpu:
        major, minor = torch.cuda.get_device_capability(0)
        rows.append({"item": "GPU", "ok": True, "value": f"{torch.cuda.get_device_name(0)} (compute capability "
                     f"{major}.{minor})"})
    else:
        rows.append({"item": "GPU", "ok": False, "value": "none visible to torch",
                     "fix": "an NVIDIA GPU with its driver; CPU work (convert, optimize, bench, serve) runs anyway"})
    driver = _driver_version()
    rows.append({"item": "NVIDIA driver", "ok": driver is not None, "value": driver or "not found (no nvidia-smi)"})
    rows.append({"item": "torch CUDA", "ok": gpu, "value": f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
                 f"{'available' if gpu else 'not available'}"})
    version, kind = _tensorrt()
    rows.append({"item": "TensorRT", "ok": version is not None and kind.startswith("full"),
                 "value": f"{version} ({kind})" if version else kind, "fix": INSTALL_TENSORRT})
    return rows + doctor_rows()


def print_diagnosis() -> list[dict[str, Any]]:
    rows = diagnose()
    table = Table(title="trtpipe doctor", title_justify="left")
    for header in ("", "Component", "Found", "To get it"):
        table.add_column(header)
    for row in rows:
        table.add_row("[green]✓[/green]" if row["ok"] else "[yellow]✗[/yellow]", row["item"], escape(row["value"]),
                      "" if row["ok"] else escape(row.get("fix", "")))
    console.out.print(table)
    ready = all(r["ok"] for r in rows)
    console.out.print("Everything for TensorRT builds is here." if ready else
                      "Without the ✗ items, trtpipe runs on ONNX Runtime's CPU provider; 'trtpipe build' needs a "
                      "GPU and the full TensorRT.", soft_wrap=True)
    return rows
