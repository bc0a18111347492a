"""ONNX Runtime's own INT8 quantizer as a peer of trtpipe's (``bench --peers``): ``quantize_static`` with its
authors' defaults (QDQ, U8S8, per-channel, MinMax) over the calibration samples, its file run on ONNX Runtime.

It returns plain values (the row's label, the tool that made the file, the file) so the runtime knows nothing of
bench's records; bench pairs them with this folder's kind.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from trtpipe.inputs import Batch, count, named, take

CALIBRATION_BATCH = 16
LABEL = "peer: onnxruntime-int8 (quantize_static U8S8)"
TOOL = "onnxruntime.quantization"
tools: tuple[str, ...] = ()  # packages beyond its own library (capability QuantizesAsPeer)


class _Reader:
    """ONNX Runtime's CalibrationDataReader over the calibration samples (every input of each batch)."""

    def __init__(self, names: list[str], samples: Batch) -> None:
        self._batches = iter([named(take(samples, i, i + CALIBRATION_BATCH), names)
                              for i in range(0, count(samples), CALIBRATION_BATCH)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._batches, None)


def quantize_static_peer(fp32: Path, calibration: Batch, folder: Path) -> tuple[str, str, Path]:
    """``fp32`` quantized by ``quantize_static`` into ``folder``: (label, tool, the quantized ONNX file)."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    from trtpipe.onnx_info import graph_inputs

    output = folder / "onnxruntime_u8s8.onnx"
    names = [i.name for i in graph_inputs(onnx.load(str(fp32), load_external_data=False))]
    logging.disable(logging.WARNING)  # its advice to pre-process, logged on the root logger, is not the user's
    try:
        quantize_static(str(fp32), str(output), _Reader(names, calibration), quant_format=QuantFormat.QDQ,
                        per_channel=True, calibrate_method=CalibrationMethod.MinMax,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    finally:
        logging.disable(logging.NOTSET)
    return LABEL, TOOL, output


quantize = quantize_static_peer  # capability QuantizesAsPeer
