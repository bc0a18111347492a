"""ONNX Runtime's quantization and float16 tools, as optimize builds its INT8 and FP16 files with them (capability
``QuantizationTools``): its calibrators (minmax, entropy, percentile) fed our batches and streamed, its QDQ quantizer
given ranges computed beforehand (so it does not recalibrate on every call the accuracy budget makes), the op types
it can quantize, its scale and zero-point rounding, and its FP16 converter. What optimize does with them (placement,
the integer rewrites, which nodes stay float) is optimize's; this module only speaks the tools' API. Light at
import: ONNX Runtime is imported when a function is called."""

from __future__ import annotations

import contextlib
import io
import logging
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtpipe import console
from trtpipe.inputs import Batch, concat, count, named, take
from trtpipe.onnx_info import graph_inputs

if TYPE_CHECKING:
    import numpy as np
    import onnx

STREAM_BATCHES = 1  # batches whose activations ONNX Runtime's calibrators hold at once


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """ORT's quantisation tools log advice ('consider pre-processing') at WARNING on the root logger."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


class _Reader:
    """ONNX Runtime's CalibrationDataReader protocol over our batches (one dict per batch, holding every input),
    advancing a progress bar."""

    def __init__(self, input_names: list[str], batches: list[Batch], advance: Callable[[], object]) -> None:
        self._items = iter(batches)
        self._input_names = input_names
        self._advance = advance

    def get_next(self) -> dict[str, np.ndarray] | None:
        batch = next(self._items, None)
        if batch is None:
            return None
        self._advance()
        return named(batch, self._input_names)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return iter(self.get_next, None)


def ranges(model: onnx.ModelProto, batches: list[Batch], method: str, *,
           symmetric: bool) -> dict[str, tuple[float, float]]:
    """Per-tensor (low, high) of every float activation of ``model`` on ``batches`` by ONNX Runtime's calibrator
    ``method`` (minmax, entropy, percentile at 99.999)."""
    import numpy as np
    import onnx
    from onnxruntime.quantization.calibrate import CalibrationMethod, create_calibrator

    ort_method = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
                  "percentile": CalibrationMethod.Percentile}[str(method)]
    extra: dict[str, bool | float] = {"symmetric": symmetric}
    if ort_method is CalibrationMethod.Percentile:
        extra["percentile"] = 99.999
    with tempfile.TemporaryDirectory(prefix="trtpipe-calib-") as tmp, quiet(), \
            contextlib.redirect_stdout(io.StringIO()):  # ORT's histogram calibrators print their progress
        model_path = Path(tmp) / "model.onnx"
        onnx.save(model, str(model_path))
        calibrator = create_calibrator(model_path, None, augmented_model_path=str(Path(tmp) / "augmented.onnx"),
                                       calibrate_method=ort_method, extra_options=extra)
        input_names = [i.name for i in graph_inputs(model)]
        # ORT's histogram collectors stack per-batch outputs, so every batch must have the same size.
        samples = concat(batches)
        total = count(samples)
        size = max(d for d in range(1, min(count(batches[0]), total) + 1) if total % d == 0)
        batches = [take(samples, i, i + size) for i in range(0, total, size)]
        with console.progress() as bar:
            task = bar.add_task(f"Calibrating ({method})", total=len(batches))
            # A few batches at a time: ONNX Runtime's calibrators hold every activation of what they are given, so
            # the statistics are folded in per chunk (min/max merged, histograms accumulated) and the
            # activations dropped, keeping memory flat however much data there is.
            for start in range(0, len(batches), STREAM_BATCHES):
                calibrator.collect_data(_Reader(input_names, batches[start : start + STREAM_BATCHES],
                                                lambda: bar.advance(task)))
                calibrator.clear_collected_data()
            with console.step(f"Computing {method} ranges..."):
                tensors = calibrator.compute_data()
        del calibrator
    return {name: (float(np.min(data.range_value[0])), float(np.max(data.range_value[1])))
            for name, data in tensors.items()}


def qdq_quantize(model: onnx.ModelProto, ranges: Mapping[str, tuple[float, float]], *, reduce_range: bool,
                 signed_activations: bool, only: Sequence[str], exclude: Sequence[str], op_types: Sequence[str],
                 extra_options: Mapping[str, Any]) -> onnx.ModelProto:
    """What ONNX Runtime's QDQQuantizer writes for ``model`` with the given ranges (as MinMax calibration data, so
    it does not recalibrate): per-channel int8 weights, uint8 or int8 activations, ``only`` limiting and
    ``exclude`` keeping float what it touches."""
    import numpy as np
    import onnx
    from onnxruntime.quantization import QuantType
    from onnxruntime.quantization.calibrate import CalibrationMethod, TensorData, TensorsData
    from onnxruntime.quantization.qdq_quantizer import QDQQuantizer
    from onnxruntime.quantization.quant_utils import load_model_with_shape_infer

    tensors = TensorsData(CalibrationMethod.MinMax, {
        name: TensorData(lowest=np.float32(low), highest=np.float32(high)) for name, (low, high) in ranges.items()
    })
    with tempfile.TemporaryDirectory(prefix="trtpipe-quant-") as tmp, quiet():
        path = Path(tmp) / "model.onnx"
        onnx.save(model, str(path))
        quantizer = QDQQuantizer(
            load_model_with_shape_infer(path),
            True,  # per-channel weights
            reduce_range,
            QuantType.QInt8,
            QuantType.QInt8 if signed_activations else QuantType.QUInt8,
            tensors,
            list(only),
            list(exclude),
            list(op_types),
            dict(extra_options),
        )
        quantizer.quantize_model()
        quantized: onnx.ModelProto = quantizer.model.model
    return quantized


def quantizable_op_types() -> list[str]:
    """Every op type ONNX Runtime's quantizer writes Q/DQ (or a QLinear op) for, sorted."""
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    return sorted(set(QDQRegistry) | set(QLinearOpsRegistry))


def scale_zero_point(low: np.ndarray, high: np.ndarray, qmin: np.ndarray, qmax: np.ndarray) -> tuple[Any, Any]:
    """(zero point, scale) as ONNX Runtime's quantizer rounds them for ``low``..``high`` on ``qmin``..``qmax``."""
    from onnxruntime.quantization.quant_utils import compute_scale_zp

    zero, scale = compute_scale_zp(low, high, qmin, qmax)
    return zero, scale


def float16_block_list() -> list[str]:
    """The op types ONNX Runtime's FP16 converter keeps in FP32 by default."""
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST

    return list(DEFAULT_OP_BLOCK_LIST)


def to_float16(model: onnx.ModelProto, *, keep_io_types: bool, op_block_list: Sequence[str],
               node_block_list: Sequence[str]) -> onnx.ModelProto:
    """``model`` through ONNX Runtime's FP16 converter (shape inference on; it edits its argument)."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    converted: onnx.ModelProto = convert_float_to_float16(
        model, keep_io_types=keep_io_types, op_block_list=list(op_block_list),
        node_block_list=list(node_block_list), disable_shape_infer=False)
    return converted
