"""``bench --peers``: the INT8 quantizers users would pick instead of trtpipe, as rows of the same run.

Each peer quantizes the same FP32 ONNX on the same calibration samples (the model's own, disjoint from the
agreement samples) with its authors' defaults, and runs where its users run it. Each is declared by the backend
folder its file runs on (its ENTRY's ``peer``), and the registry lists them in its order:

- ONNX Runtime's ``quantize_static`` (QDQ, U8S8, per-channel, MinMax), on ONNX Runtime
  (runtime/onnxruntime/peer.py);
- NNCF's post-training quantization of the OpenVINO model (``nncf.quantize``, default preset), on OpenVINO,
  when both are installed (``pip install 'trtpipe[peers]'``); otherwise one line says so and the rest runs
  (runtime/openvino/peer.py).

Peer rows carry ``peer`` (which tool) and no artifact, so the selection never picks one: they are there so every
report says where trtpipe stands against the alternatives, measured, not claimed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trtpipe import console
from trtpipe.inputs import Batch, count
from trtpipe.runtime.base import Backend
from trtpipe.runtime.options import RunOptions
from trtpipe.runtime.registry import backend_class, peer_quantizers
from trtpipe.vocab import BackendKind


@dataclass(frozen=True)
class Peer:
    """A peer's quantized file and the runtime its users run it on (a path and a kind: bench can open it again
    in another process to measure its memory alone)."""

    label: str
    tool: str
    backend: BackendKind
    path: Path

    def open(self, threads: int | None) -> Backend:
        return backend_class(self.backend)(self.path, RunOptions(threads=threads))


def make_peers(fp32: Path, calibration: Batch, folder: Path) -> list[Peer]:
    """Every installed peer, quantized from ``fp32`` into ``folder``, in the registry's order."""
    console.note(f"Peers: quantizing {fp32.name} on {count(calibration)} calibration samples")
    made = [(kind, quantize(fp32, calibration, folder)) for kind, quantize in peer_quantizers()]
    return [Peer(label, tool, kind, path) for kind, result in made if result is not None
            for label, tool, path in [result]]
