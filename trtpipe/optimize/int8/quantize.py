"""Write Q/DQ nodes with ONNX Runtime's QDQ quantiser, from ranges computed (or cached) beforehand.

Ranges are computed once; the quantiser then runs as often as the accuracy budget needs (with some nodes
excluded), which is why this calls ONNX Runtime's QDQQuantizer with explicit ranges rather than
quantize_static, which would recalibrate on every call.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx

from trtpipe.optimize.int8.calibrate import Ranges, quiet_onnxruntime_quantization
from trtpipe.optimize.int8.profiles import QuantProfile


def quantize(
    model: onnx.ModelProto,
    ranges: Ranges,
    profile: QuantProfile,
    *,
    exclude: Sequence[str] = (),
    only: Sequence[str] = (),
) -> onnx.ModelProto:
    """Return ``model`` with Q/DQ nodes for ``profile``; ``exclude`` stays FP32, ``only`` limits what is quantised."""
    from onnxruntime.quantization import QuantType
    from onnxruntime.quantization.calibrate import CalibrationMethod, TensorData, TensorsData
    from onnxruntime.quantization.qdq_quantizer import QDQQuantizer
    from onnxruntime.quantization.quant_utils import load_model_with_shape_infer

    tensors = TensorsData(CalibrationMethod.MinMax, {
        name: TensorData(lowest=np.float32(low), highest=np.float32(high)) for name, (low, high) in ranges.items()
    })
    op_types = quantized_op_types(profile)
    with tempfile.TemporaryDirectory(prefix="trtpipe-quant-") as tmp, quiet_onnxruntime_quantization():
        path = Path(tmp) / "model.onnx"
        onnx.save(model, str(path))
        quantizer = QDQQuantizer(
            load_model_with_shape_infer(path),
            True,  # per-channel weights
            profile.reduce_range,
            QuantType.QInt8,
            QuantType.QInt8 if profile.signed_activations else QuantType.QUInt8,
            tensors,
            list(only),
            list(exclude),
            op_types,
            dict(profile.extra_options),
        )
        quantizer.quantize_model()
        return quantizer.model.model


def quantized_op_types(profile: QuantProfile) -> list[str]:
    """The operator types Q/DQ is written for: the profile's, or all that ONNX Runtime can quantise."""
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    return list(profile.op_types or sorted(set(QDQRegistry) | set(QLinearOpsRegistry)))


def quantizable_nodes(model: onnx.ModelProto, profile: QuantProfile) -> list[str]:
    """Nodes the quantiser touches: the candidates for keeping in FP32. Residual Adds and pools count as much
    as convolutions: a per-tensor scale on an Add output can destroy accuracy on its own."""
    op_types = set(quantized_op_types(profile))
    return [node.name for node in model.graph.node if node.op_type in op_types]
