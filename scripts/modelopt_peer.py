"""NVIDIA ModelOpt's ONNX PTQ as a peer of `make peers`, run inside ModelOpt's own environment.

nvidia-modelopt[onnx] pins an older onnx than trtpipe's and, on Linux x86-64, onnxruntime-gpu and cupy: `make peers`
builds .venv-modelopt with the CPU onnxruntime it allows elsewhere (its INT8 path needs no cupy) and scripts/peers.py
runs this file there, on the same FP32 ONNX and the same calibration crops (a .npy file) as every other recipe. Usage:

    python modelopt_peer.py SOURCE.onnx OUT.onnx CALIB.npy

``modelopt.onnx.quantization.quantize`` in INT8 mode with max calibration (ORT's MinMax with symmetric activations;
ModelOpt's own default is entropy), calibrated on ONNX Runtime's CPU provider (its default list also asks for CUDA
and TensorRT); everything else is ModelOpt's default, what its users get: Q/DQ on the inputs (never the outputs)
of the op types ORT's quantizer knows (Conv, Gemm, MatMul, Add, Mul, pooling, Resize...) and BatchNormalization,
ConvTranspose, LayerNormalization and HardSwish, less copy and activation ops, where its TensorRT fusion patterns
place them; INT8 symmetric per-channel weights; the rest of the graph converted to FP16 (high_precision_dtype="fp16"),
FP32 inputs and outputs kept; opset raised to 19. That conversion casts BatchNormalization's running variance too:
PP-OCRv4's detector has variances up to 9.8e7, past FP16's 65504, which become inf (its map is 0 everywhere; with
high_precision_dtype="fp32" the same Q/DQ gives a cosine of 0.96 to FP32 on one photo).

The calibration array is split into batches of the graph's own batch size (1 where it is dynamic). ModelOpt writes
shape inference's result into the file it is given (onnx.shape_inference.infer_shapes_path on it) and its
intermediate files beside the output, so it is handed a copy of SOURCE in a temporary folder there: the other recipes
read the same FP32 file after it.

Its ONNX code imports torch at the top (qdq_utils), which .venv-modelopt borrows from .venv as .venv-quark does. That
also brings .venv's tensorrt/ folder (tensorrt-stubs' __init__.pyi, no TensorRT), which Python imports as an empty
namespace package and ModelOpt would take for TensorRT; it is hidden, so ModelOpt runs as it does without TensorRT.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np


def main(source: str, out: str, calib_path: str) -> None:
    spec = importlib.util.find_spec("tensorrt")
    if spec is not None and spec.origin is None:  # a namespace package: no module of TensorRT's in it
        sys.modules["tensorrt"] = None  # import tensorrt now raises ImportError
    from modelopt.onnx.quantization import quantize

    with tempfile.TemporaryDirectory(dir=Path(out).resolve().parent) as folder:
        copy = shutil.copy(source, Path(folder) / Path(source).name)
        quantize(onnx_path=str(copy), quantize_mode="int8", calibration_data=np.load(calib_path),
                 calibration_method="max", calibration_eps=["cpu"], output_path=out)


if __name__ == "__main__":
    main(*sys.argv[1:])
