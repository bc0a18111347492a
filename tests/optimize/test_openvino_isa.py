"""The openvino INT8 flavour on OpenVINO itself, as an AVX2-only CPU runs it: OpenVINO's oneDNN honours
``ONEDNN_MAX_CPU_ISA`` (read when its CPU plugin loads, so each run is a subprocess), and ``=AVX2`` makes it use the
int8 kernels of a CPU without VNNI, whose dot products saturate at 16 bits. On a PP-PicoDet-like FPN join (HardSwish
maps, one upsampled, concatenated and read by a convolution): OpenVINO computes what ONNX Runtime does for the file,
and 7-bit weights (what a CPU without VNNI gets) compute the same on AVX2 as on the machine's own kernels, where full
8-bit weights do not."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.builders import constant, x_to_y
from tests.optimize.conftest import run
from trtpipe.optimize.int8.calibration.calibrate import calibrate
from trtpipe.optimize.int8.qdq.profiles import profile_for
from trtpipe.optimize.int8.qdq.quantize import quantize
from trtpipe.vocab import CalibMethod, Target

pytest.importorskip("openvino", reason="OpenVINO is not installed (pip install 'trtpipe[openvino]')")

RUN_OPENVINO = """
import sys
import numpy as np
import openvino as ov
compiled = ov.Core().compile_model(sys.argv[1], "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
np.save(sys.argv[3], np.asarray(compiled(np.load(sys.argv[2]))[0]))
"""


def _hardswish_fpn(rng: np.random.Generator) -> onnx.ModelProto:
    """stem Conv+HardSwish -> (lateral 1x1 Conv+HardSwish, strided Conv+HardSwish -> nearest Resize x2) -> Concat ->
    head Conv, input [1, 3, 16, 16]: the Concat's inputs go below zero (HardSwish's -0.375) and a convolution reads
    it, as in PP-PicoDet's neck."""
    inits = [constant(rng.standard_normal((8, 3, 3, 3)) * 0.4, "w_stem"), constant(rng.standard_normal(8), "b_stem"),
             constant(rng.standard_normal((8, 8, 1, 1)) * 0.4, "w_lat"), constant(rng.standard_normal(8), "b_lat"),
             constant(rng.standard_normal((8, 8, 3, 3)) * 0.4, "w_down"), constant(rng.standard_normal(8), "b_down"),
             constant(rng.standard_normal((4, 16, 3, 3)) * 0.2, "w_head"), constant(np.zeros(4), "b_head"),
             constant([1, 1, 2, 2], "scales")]
    nodes = [helper.make_node("Conv", ["x", "w_stem", "b_stem"], ["stem_pre"], name="stem", pads=[1, 1, 1, 1]),
             helper.make_node("HardSwish", ["stem_pre"], ["stem"], name="stem_act"),
             helper.make_node("Conv", ["stem", "w_lat", "b_lat"], ["lateral_pre"], name="lateral"),
             helper.make_node("HardSwish", ["lateral_pre"], ["lateral"], name="lateral_act"),
             helper.make_node("Conv", ["stem", "w_down", "b_down"], ["down_pre"], name="down", pads=[1, 1, 1, 1],
                              strides=[2, 2]),
             helper.make_node("HardSwish", ["down_pre"], ["down"], name="down_act"),
             helper.make_node("Resize", ["down", "", "scales"], ["up"], name="upsample", mode="nearest"),
             helper.make_node("Concat", ["up", "lateral"], ["joined"], name="join", axis=1),
             helper.make_node("Conv", ["joined", "w_head", "b_head"], ["y"], name="head", pads=[1, 1, 1, 1])]
    return x_to_y(nodes, inits, [1, 3, 16, 16], [1, 4, 16, 16], name="fpn")


def _openvino(model: onnx.ModelProto, x: np.ndarray, folder: Path, isa: str | None) -> np.ndarray:
    """``model``'s output on OpenVINO in a fresh process, its oneDNN capped at ``isa`` (None: this CPU's own)."""
    tag = isa or "native"
    model_path, x_path, out_path = folder / f"model-{tag}.onnx", folder / f"x-{tag}.npy", folder / f"y-{tag}.npy"
    onnx.save(model, str(model_path))
    np.save(x_path, x)
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_MAX_CPU_ISA"}
    if isa:
        env["ONEDNN_MAX_CPU_ISA"] = isa
    subprocess.run([sys.executable, "-c", RUN_OPENVINO, str(model_path), str(x_path), str(out_path)], env=env,
                   check=True, capture_output=True, timeout=120)
    return np.load(out_path)


@pytest.fixture(scope="module")
def fpn_case() -> tuple[onnx.ModelProto, dict[str, np.ndarray], np.ndarray]:
    rng = np.random.default_rng(5)
    model = _hardswish_fpn(rng)
    ranges = calibrate(model, [rng.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(16)],
                       CalibMethod.MINMAX, symmetric=False)
    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    profile = profile_for(Target.OPENVINO)
    files = {bits: quantize(model, ranges, replace(profile, reduce_range=bits == 7)) for bits in (7, 8)}
    return model, {str(bits): f for bits, f in files.items()}, x


def test_openvino_computes_what_onnx_runtime_does_for_the_openvino_file(fpn_case, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The Concat of signed HardSwish maps keeps its Q/DQ (concat_in_place.py): with it gone, OpenVINO ran the
    Concat and the upsampling as uint8 and drifted from ONNX Runtime on every ISA."""
    model, files, x = fpn_case
    reference = run(model, x)
    quantized = files["7"]  # 7-bit weights: exact on every x86 kernel, so both runtimes compute the same sums anywhere
    on_ort = run(quantized, x)
    on_openvino = _openvino(quantized, x, tmp_path, None)
    assert np.abs(on_openvino - on_ort).max() < 0.5 * np.abs(on_ort - reference).max(), (
        np.abs(on_openvino - on_ort).max(), np.abs(on_ort - reference).max())


def test_7_bit_weights_hold_on_avx2_kernels_where_8_bit_weights_saturate(fpn_case, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model, files, x = fpn_case
    reference = run(model, x)
    reduced_avx2 = _openvino(files["7"], x, tmp_path, "AVX2")
    np.testing.assert_allclose(reduced_avx2, _openvino(files["7"], x, tmp_path, None), atol=1e-4)
    full_avx2 = _openvino(files["8"], x, tmp_path, "AVX2")
    full_error, reduced_error = np.abs(full_avx2 - reference).max(), np.abs(reduced_avx2 - reference).max()
    assert full_error > 1.5 * reduced_error, (full_error, reduced_error)
