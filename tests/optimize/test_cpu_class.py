"""INT8 for the CPU it will run on: the class is an input (flags, --cpu-class), it chooses the weights' bits, and the
manifest records what the artifact was made for, where its accuracy was measured and where it is unsafe."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tests.conftest import error_line
from trtpipe.artifact.records.manifest import read_manifest
from trtpipe.hardware import cpu_class
from trtpipe.optimize.int8.qdq.profiles import profile_for, unsafe_classes
from trtpipe.vocab import CpuClass, Target

# /proc/cpuinfo flag sets of real CPUs (trimmed to the ones that matter and a few that do not).
HASWELL = {"sse4_1", "sse4_2", "avx", "avx2", "fma"}
ZEN3 = HASWELL | {"sha_ni", "vaes"}  # AVX2 only: no AVX-512, no VNNI
ALDER_LAKE = HASWELL | {"avx_vnni"}  # VNNI on 256-bit registers, no AVX-512
ZEN4 = HASWELL | {"avx512f", "avx512bw", "avx512_vnni", "avx512_bf16"}
SAPPHIRE_RAPIDS = ZEN4 | {"amx_tile", "amx_int8", "amx_bf16"}


@pytest.mark.parametrize(("flags", "expected"), [
    ({"sse4_1", "sse4_2"}, CpuClass.PORTABLE), (HASWELL, CpuClass.AVX2), (ZEN3, CpuClass.AVX2),
    (ALDER_LAKE, CpuClass.AVX_VNNI), (ZEN4, CpuClass.AVX512_VNNI), (SAPPHIRE_RAPIDS, CpuClass.AMX),
])
def test_class_from_flag_sets(flags: set[str], expected: CpuClass) -> None:
    assert cpu_class(flags) is expected


@pytest.mark.parametrize("target", [Target.CPU, Target.OPENVINO])
@pytest.mark.parametrize("made_for", list(CpuClass))
def test_the_class_chooses_the_weights(target: Target, made_for: CpuClass) -> None:
    profile = profile_for(target, made_for)
    assert profile.cpu_class is made_for
    assert profile.reduce_range is (not made_for.vnni)  # 7-bit weights where 8-bit ones would saturate
    assert unsafe_classes(profile) == (() if not made_for.vnni else (CpuClass.PORTABLE, CpuClass.AVX2))
    assert profile.to_dict()["cpu_class"] == str(made_for)


def test_tensorrt_has_no_cpu_class() -> None:
    profile = profile_for(Target.TENSORRT, CpuClass.AVX2)
    assert profile.cpu_class is None and not profile.reduce_range and unsafe_classes(profile) == ()


def _weight_levels(path: Path) -> int:
    """The largest |integer| any quantized convolution weight uses: 127 for 8-bit weights, 64 at most for 7-bit
    (ONNX Runtime's reduce_range: 255 x 64 x 2 still fits 16 bits)."""
    model = onnx.load(str(path))
    weights = [numpy_helper.to_array(i) for i in model.graph.initializer if i.data_type == onnx.TensorProto.INT8]
    return max(int(np.abs(w.astype(np.int32)).max()) for w in weights if w.ndim == 4)


def test_optimize_makes_weights_for_the_class_and_records_it(digits_onnx: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                              run_cli) -> None:
    made = {}
    for made_for in (CpuClass.AVX512_VNNI, CpuClass.AVX2):
        out = tmp_path / f"{made_for}.onnx"
        result = run_cli("optimize", digits_onnx, "-o", out, "--precision", "int8", "--target", "cpu", "--calib",
                         "digits", "--calib-samples", "64", "--quality", "fast", "--cpu-class", made_for)
        assert result.exit_code == 0, result.output
        assert f"INT8 made for CPU class {made_for} (as asked)" in result.output
        made[made_for] = out
    assert _weight_levels(made[CpuClass.AVX512_VNNI]) > 64 >= _weight_levels(made[CpuClass.AVX2])

    here = cpu_class()
    for made_for, unsafe in ((CpuClass.AVX512_VNNI, (CpuClass.PORTABLE, CpuClass.AVX2)), (CpuClass.AVX2, ())):
        manifest = read_manifest(made[made_for])
        assert manifest is not None and manifest.cpu is not None
        assert manifest.cpu.made_for is made_for and manifest.cpu.unsafe_on == unsafe
        final = manifest.details["int8"]["final"]
        assert manifest.cpu.measured_on == (here,)  # measured on the machine that built it
        assert manifest.cpu.measured[here]["agreement"] == final["agreement"]
        assert manifest.cpu.measured[here]["samples"] == final["samples"]
        assert manifest.details["options"]["cpu_class"] == str(made_for)


def test_the_default_class_is_this_machines_and_tensorrt_records_none(digits_onnx: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                      run_cli) -> None:
    result = run_cli("optimize", digits_onnx, "-o", tmp_path / "cpu.onnx", "--precision", "int8", "--target", "cpu",
                     "--calib", "digits", "--calib-samples", "32", "--quality", "fast")
    assert result.exit_code == 0, result.output
    assert f"INT8 made for CPU class {cpu_class()}, this machine's" in result.output
    manifest = read_manifest(tmp_path / "cpu.onnx")
    assert manifest is not None and manifest.cpu is not None and manifest.cpu.made_for is cpu_class()

    result = run_cli("optimize", digits_onnx, "-o", tmp_path / "trt.onnx", "--precision", "int8", "--target",
                     "tensorrt", "--calib", "digits", "--calib-samples", "32", "--quality", "fast", "--cpu-class",
                     "avx2")
    assert result.exit_code == 0, result.output
    assert "--cpu-class avx2 is ignored" in result.output
    manifest = read_manifest(tmp_path / "trt.onnx")
    assert manifest is not None and manifest.cpu is None and manifest.details["options"]["cpu_class"] is None


def test_an_unknown_class_names_the_known_ones(digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("optimize", digits_onnx, "-o", tmp_path / "x.onnx", "--precision", "int8", "--calib", "digits",
                     "--cpu-class", "avx3")
    assert result.exit_code == 2
    line = error_line(result.output)
    assert "avx3" in line and all(str(c) in line for c in CpuClass)
    assert not (tmp_path / "x.onnx").exists()


def test_a_pipeline_file_takes_the_class_in_data_and_variants(tmp_path: Path) -> None:
    from trtpipe.errors import BadInput
    from trtpipe.pipeline.config import load_pipeline

    text = ('[model]\nsource = "digits_resnet"\n\n[data]\ncalib = "digits"\ncpu_class = "avx2"\n\n'
            '[[variants]]\nname = "int8_here"\nprecision = "int8"\ntarget = "cpu"\n\n'
            '[[variants]]\nname = "int8_vnni"\nprecision = "int8"\ntarget = "openvino"\ncpu_class = "avx512-vnni"\n')
    path = tmp_path / "pipeline.toml"
    path.write_text(text)
    here, vnni = load_pipeline(path).variants
    assert here.options.cpu_class is CpuClass.AVX2 and vnni.options.cpu_class is CpuClass.AVX512_VNNI
    path.write_text(text.replace('"avx2"', '"avx3"'))
    with pytest.raises(BadInput) as caught:
        load_pipeline(path)
    assert "pipeline.toml:6: 'cpu_class' in [data] must be one of portable, avx2, avx-vnni, avx512-vnni, amx" in \
        caught.value.message
