"""What an artifact file is, read from the manifest or sidecar trtpipe wrote beside it.

One place decides how an artifact must run to be faithful: an INT8 ONNX made for TensorRT runs on ONNX Runtime
CPU with graph optimisation off, so its Q/DQ execute as float ops (TensorRT's arithmetic; x86 integer kernels
would saturate). Bench, serve and the embedding API all open artifacts through this.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TRT_SIMULATION_NOTE = ("TensorRT-target INT8 simulated with float Q/DQ on the CPU: accuracy is TensorRT's, "
                       "latency is not")


def artifact_name(path: Path) -> str:
    """A model's name from its path: ``models/<name>/<version>/model.onnx`` -> name, else the file's stem."""
    path = Path(path)
    return path.parent.parent.name if path.parent.name.isdigit() else path.stem


@dataclass(frozen=True)
class ArtifactProfile:
    precision: str
    target: str | None
    options: dict[str, Any] = field(default_factory=dict)  # backend options needed to run it faithfully
    note: str | None = None


def artifact_profile(path: Path) -> ArtifactProfile:
    from trtpipe.runtime import backend_kind_for

    path = Path(path)
    if backend_kind_for(path) == "tensorrt":
        from trtpipe.build.sidecar import read_sidecar

        return ArtifactProfile(read_sidecar(path).precision, None)
    from trtpipe.convert import manifest_path
    from trtpipe.onnx_info import detect_precision, load_onnx

    manifest: dict[str, Any] = {}
    if manifest_path(path).is_file():
        try:
            manifest = json.loads(manifest_path(path).read_text()).get("artifact", {})
        except (OSError, ValueError):
            manifest = {}
    precision = manifest.get("precision") or detect_precision(load_onnx(path, load_weights=False))
    target = manifest.get("target")
    if precision == "int8" and target == "tensorrt":
        return ArtifactProfile(precision, target, {"optimization": "disable"}, TRT_SIMULATION_NOTE)
    return ArtifactProfile(precision, target)
