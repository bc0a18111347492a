"""AMD Quark's ONNX PTQ as a peer of `make peers`, run inside Quark's own environment.

amd-quark pins a newer onnx and brings datasets, pandas and pyarrow, so it does not share trtpipe's environment:
`make peers` builds .venv-quark and scripts/peers.py runs this file there, on the same FP32 ONNX and the same
calibration crops (a .npy file) as every other recipe. Usage:

    python quark_peer.py SOURCE.onnx OUT.onnx CALIB.npy {s8s8,u8s8} [cle] [adaround]

s8s8: symmetric INT8 activations (what TensorRT takes); u8s8: asymmetric UINT8 activations (ONNX Runtime CPU).
Weights: INT8 symmetric per channel; calibration: MinMax, as the ONNX Runtime peers; AdaRound: 100 iterations
per layer, as trtpipe's default.
"""

from __future__ import annotations

import sys

import numpy as np
import onnx


class Reader:
    def __init__(self, name: str, images: np.ndarray, batch: int = 8) -> None:
        self.batches = [images[i : i + batch] for i in range(0, len(images), batch)]
        self.name = name
        self.rewind()

    def get_next(self) -> dict[str, np.ndarray] | None:
        batch = next(self.items, None)
        return None if batch is None else {self.name: batch}

    def rewind(self) -> None:
        self.items = iter(self.batches)


def main(source: str, out: str, calib_path: str, flavour: str, *algorithms: str) -> None:
    from quark.onnx import AdaRoundConfig, CLEConfig, ModelQuantizer, QConfig, QLayerConfig
    from quark.onnx.quantization.config.spec import CalibMethod, Int8Spec, QuantGranularity, UInt8Spec

    signed = flavour == "s8s8"
    activation = (Int8Spec if signed else UInt8Spec)(symmetric=signed, calibration_method=CalibMethod.MinMax)
    weight = Int8Spec(symmetric=True, calibration_method=CalibMethod.MinMax,
                      quant_granularity=QuantGranularity.Channel)
    algo = []
    if "cle" in algorithms:
        algo.append(CLEConfig())
    if "adaround" in algorithms:
        algo.append(AdaRoundConfig(batch_size=8, num_iterations=100, learning_rate=0.1, early_stop=True))
    config = QConfig(global_config=QLayerConfig(activation=activation, weight=weight), algo_config=algo)
    images = np.load(calib_path)
    name = onnx.load(source).graph.input[0].name
    ModelQuantizer(config).quantize_model(source, out, Reader(name, images))


if __name__ == "__main__":
    main(*sys.argv[1:])
