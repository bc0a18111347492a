"""`make conformance`: every registry model's TensorRT-target INT8 and FP16 ONNX, checked by `trtpipe check`.

Each model is converted at a small input (96x96; digits at its own 32x32), quantized for TensorRT on seeded
noise (the placement, not the accuracy, is what is checked) and converted to FP16, then checked against the
TensorRT rules. Prints one line per model and exits 1 if any artifact fails.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from trtpipe.conformance.check import check_file
from trtpipe.convert.options import ConvertOptions
from trtpipe.convert.stage import convert
from trtpipe.errors import VerificationFailed
from trtpipe.models.loader import load_model
from trtpipe.models.registry import ARCHITECTURES
from trtpipe.optimize.options import OptimizeOptions
from trtpipe.optimize.stage import optimize
from trtpipe.vocab import Precision, Target


def main() -> int:
    failed = 0
    names = sys.argv[1:] or list(ARCHITECTURES)
    with tempfile.TemporaryDirectory(prefix="trtpipe-conformance-") as folder:
        for name in names:
            start = time.perf_counter()
            shape = None if ARCHITECTURES[name].trained else (1, 3, 96, 96)
            source = Path(folder) / f"{name}.onnx"
            convert(load_model(name, input_shape=shape), source, ConvertOptions(rtol=1e-3))
            line = [name]
            for precision in (Precision.INT8, Precision.FP16):
                out = Path(folder) / f"{name}_{precision}.onnx"
                try:
                    optimize(source, out, OptimizeOptions(precision=precision, target=Target.TENSORRT,
                                                          calib="random", calib_samples=4))
                except VerificationFailed as error:  # e.g. random weights whose activations overflow FP16
                    line.append(f"{precision}: not produced ({error.message[:80]}...)")
                    continue
                report = check_file(out, Target.TENSORRT)
                failed += not report.passed
                line.append(f"{precision}: {len(report.errors)} errors, {len(report.warnings)} warnings")
            print(" | ".join(line) + f" | {time.perf_counter() - start:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
