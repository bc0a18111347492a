"""OpenVINO execution of ONNX artifacts (optional extra: pip install 'trtpipe[openvino]')."""
