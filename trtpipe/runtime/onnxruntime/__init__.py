"""ONNX Runtime: ONNX artifacts on the CPU provider by default, any installed provider on request."""
