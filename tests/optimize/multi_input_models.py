"""Moved to ``tests.builders`` (the models tests share); kept so imports of the old place keep working."""

from tests.builders import MULTI_INPUT_OPSET as OPSET
from tests.builders import nhwc_uint8_onnx, two_input_data, two_input_onnx

__all__ = ["OPSET", "nhwc_uint8_onnx", "two_input_data", "two_input_onnx"]
