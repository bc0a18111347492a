"""``bench --peers``: the INT8 quantizers users would pick instead of trtpipe, as rows of the same run.

Each peer quantizes the same FP32 ONNX on the same calibration samples (the model's own, disjoint from the
agreement samples) with its authors' defaults, and runs where its users run it:

- ONNX Runtime's ``quantize_static`` (QDQ, U8S8, per-channel, MinMax), on ONNX Runtime;
- NNCF's post-training quantization of the OpenVINO model (``nncf.quantize``, default preset), on OpenVINO,
  when both are installed (``pip install 'trtpipe[peers]'``); otherwise one line says so and the rest runs.

Peer rows carry ``peer`` (which tool) and no artifact, so the selection never picks one: they are there so every
report says where trtpipe stands against the alternatives, measured, not claimed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trtpipe import console
from trtpipe.inputs import Batch, count, named, take
from trtpipe.runtime.base import Backend
from trtpipe.runtime.options import RunOptions
from trtpipe.runtime.registry import backend_class
from trtpipe.vocab import BackendKind

CALIBRATION_BATCH = 16
INSTALL = "pip install 'trtpipe[peers]'"


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


class _Reader:
    """ONNX Runtime's CalibrationDataReader over the calibration samples (every input of each batch)."""

    def __init__(self, names: list[str], samples: Batch) -> None:
        self._batches = iter([named(take(samples, i, i + CALIBRATION_BATCH), names)
                              for i in range(0, count(samples), CALIBRATION_BATCH)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._batches, None)


def onnxruntime_quantize_static(fp32: Path, calibration: Batch, folder: Path) -> Peer:
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    output = folder / "onnxruntime_u8s8.onnx"
    from trtpipe.onnx_info import graph_inputs

    names = [i.name for i in graph_inputs(onnx.load(str(fp32), load_external_data=False))]
    logging.disable(logging.WARNING)  # its advice to pre-process, logged on the root logger, is not the user's
    try:
        quantize_static(str(fp32), str(output), _Reader(names, calibration), quant_format=QuantFormat.QDQ,
                        per_channel=True, calibrate_method=CalibrationMethod.MinMax,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    finally:
        logging.disable(logging.NOTSET)
    return Peer("peer: onnxruntime-int8 (quantize_static U8S8)", "onnxruntime.quantization", BackendKind.ONNXRUNTIME,
                output)


def openvino_nncf(fp32: Path, calibration: Batch, folder: Path) -> Peer | None:
    try:
        import nncf
        import openvino as ov
    except ImportError:
        console.warn(f"Peer OpenVINO + NNCF skipped: NNCF or OpenVINO is not installed ({INSTALL}).")
        return None
    output = folder / "openvino_nncf_int8.xml"
    model = ov.Core().read_model(str(fp32))
    names = [port.get_any_name() for port in model.inputs]
    samples = count(calibration)
    dataset = nncf.Dataset([take(calibration, i, i + 1) for i in range(samples)], lambda x: named(x, names))
    ov.save_model(nncf.quantize(model, dataset, subset_size=samples), str(output))
    return Peer("peer: openvino-int8 (NNCF PTQ)", f"nncf {nncf.__version__}", BackendKind.OPENVINO, output)


def make_peers(fp32: Path, calibration: Batch, folder: Path) -> list[Peer]:
    """Every installed peer, quantized from ``fp32`` into ``folder``."""
    console.note(f"Peers: quantizing {fp32.name} on {count(calibration)} calibration samples")
    peers = [onnxruntime_quantize_static(fp32, calibration, folder), openvino_nncf(fp32, calibration, folder)]
    return [p for p in peers if p is not None]
