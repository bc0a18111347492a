"""What an artifact file is, read from the manifest or sidecar trtpipe wrote beside it.

One place decides how an artifact must run to be faithful: an INT8 ONNX made for TensorRT runs on ONNX Runtime
CPU with graph optimisation off, so its Q/DQ execute as float ops (TensorRT's arithmetic; x86 integer kernels
would saturate). That run is a *simulation*: its accuracy is TensorRT's, its latency is not. Bench, serve and
the embedding API all open artifacts through this.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtpipe.manifest import read_manifest
from trtpipe.runtime.registry import artifact_kind
from trtpipe.vocab import ArtifactKind, BackendKind, Precision, Target

TRT_SIMULATION_NOTE = ("TensorRT-target INT8 simulated with float Q/DQ on the CPU: accuracy is TensorRT's, "
                       "latency is not")


# A BF16 ONNX keeps FP32 activations in the graph (BF16 weights behind Casts): OpenVINO runs it in BF16 kernels.
BF16_RUN = {"runtime": str(BackendKind.OPENVINO), "inference_precision": str(Precision.BF16)}


def artifact_name(path: Path) -> str:
    """A model's name from its path: ``models/<name>/<version>/model.onnx`` -> name, else the file's stem."""
    path = Path(path)
    return path.parent.parent.name if path.parent.name.isdigit() else path.stem


@dataclass(frozen=True)
class ArtifactProfile:
    kind: ArtifactKind
    precision: Precision
    target: Target | None
    options: dict[str, Any] = field(default_factory=dict)  # backend options needed to run it faithfully
    simulated: bool = False  # runs here only to measure another runtime's arithmetic (its latency means nothing)
    note: str | None = None
    size_bytes: int = 0
    build_seconds: float | None = None  # how long the stage that made it took
    fp32_nodes: tuple[str, ...] = ()  # nodes kept in FP32 on purpose

    @property
    def backend(self) -> BackendKind:
        return BackendKind(self.options.get("runtime", self.kind.backend))

    @property
    def pinned_runtime(self) -> bool:
        """Whether the artifact must run on one runtime (a BF16 file: OpenVINO's BF16 kernels)."""
        return "runtime" in self.options


def artifact_profile(path: Path) -> ArtifactProfile:
    path = Path(path)
    kind = artifact_kind(path)
    size = path.stat().st_size if path.is_file() else 0
    if kind is ArtifactKind.TENSORRT_ENGINE:
        from trtpipe.runtime.tensorrt.sidecar import read_sidecar

        sidecar = read_sidecar(path)
        return ArtifactProfile(kind, Precision(sidecar.precision), None, size_bytes=size,
                               build_seconds=sidecar.build_seconds)
    manifest = read_manifest(path)
    if manifest is not None:
        precision, target, seconds = manifest.precision, manifest.target, manifest.seconds
        fp32_nodes = tuple(manifest.fp32_nodes)
    else:
        from trtpipe.onnx_info import detect_precision, load_onnx

        precision, target, seconds, fp32_nodes = detect_precision(load_onnx(path, load_weights=False)), None, None, ()
    if precision is Precision.BF16:
        return ArtifactProfile(kind, precision, None, dict(BF16_RUN), size_bytes=size, build_seconds=seconds,
                               fp32_nodes=fp32_nodes)
    if precision is Precision.INT8 and target is Target.TENSORRT:
        return ArtifactProfile(kind, precision, target, {"optimization": "disable"}, True, TRT_SIMULATION_NOTE,
                               size, seconds, fp32_nodes)
    return ArtifactProfile(kind, precision, target, size_bytes=size, build_seconds=seconds, fp32_nodes=fp32_nodes)
