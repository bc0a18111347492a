"""OpenVINO as a second CPU runtime for ONNX artifacts: same answers as ONNX Runtime, BF16 where the CPU has it,
and one line with the install command where OpenVINO is not installed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format

import trtpipe
from tests.conftest import error_line
from tests.optional import optional
from trtpipe.hardware import has_bf16
from trtpipe.optimize import OptimizeOptions, optimize
from trtpipe.runtime import RunOptions, open_artifact
from trtpipe.vocab import BackendKind

model_config_pb2 = optional("tritonclient.grpc.model_config_pb2")

openvino = pytest.importorskip("openvino", reason="OpenVINO is not installed (pip install 'trtpipe[openvino]')")


@pytest.fixture(scope="module")
def variants(digits_onnx: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("ov")
    made = {"fp32": digits_onnx}
    for name, options in (("int8_cpu", OptimizeOptions(precision="int8", target="cpu", calib="digits",
                                                       calib_samples=64)),
                          ("int8_trt", OptimizeOptions(precision="int8", target="tensorrt", calib="digits",
                                                       calib_samples=64)),
                          ("bf16", OptimizeOptions(precision="bf16", eval="digits"))):
        made[name] = optimize(digits_onnx, folder / f"{name}.onnx", options).path
    return made


def _images(count: int = 64) -> np.ndarray:
    from trtpipe.models.loader import load_model

    return load_model("digits_resnet").evaluation_data().images[:count]  # type: ignore[union-attr]


def test_openvino_computes_what_onnxruntime_computes(variants: dict[str, Path]) -> None:
    x = _images()
    for name in ("fp32", "int8_cpu"):
        with open_artifact(variants[name], RunOptions(threads=1)) as ort, \
                open_artifact(variants[name], RunOptions(threads=1), runtime=BackendKind.OPENVINO) as ov:
            assert ov.kind == "openvino" and ov.precision == ort.precision
            assert [(t.name, t.dtype, t.shape[1:]) for t in ov.inputs] == [(t.name, t.dtype, t.shape[1:])
                                                                           for t in ort.inputs]
            expected, got = ort.run(x)[0], ov.run(x)[0]
            if name == "fp32":  # FP32 stays FP32 on OpenVINO (its CPU plugin would pick BF16 on its own)
                np.testing.assert_allclose(got, expected, atol=1e-4)
            else:  # both run integer kernels on the same Q/DQ: the same classes
                assert (got.argmax(1) == expected.argmax(1)).mean() >= 0.98


def test_a_bf16_artifact_runs_on_openvino_in_bf16(variants: dict[str, Path]) -> None:
    """The manifest pins BF16 files to OpenVINO; on a CPU with BF16 hardware its arithmetic is really BF16 (its
    answers differ from FP32 arithmetic on the same BF16-rounded weights), and the classes stay."""
    x = _images()
    manifest = json.loads(variants["bf16"].with_suffix(".manifest.json").read_text())
    assert manifest["artifact"]["precision"] == "bf16" and manifest["bf16"]["weights"] > 0
    with trtpipe.load(variants["bf16"]) as model:
        assert model.kind == "openvino" and model.precision == "bf16"
        bf16 = model.predict(x)
    with open_artifact(variants["bf16"], runtime=BackendKind.ONNXRUNTIME) as ort:  # FP32 arithmetic, BF16 weights
        rounded_weights = ort.run(x)[0]
    with trtpipe.load(variants["fp32"]) as reference:
        fp32 = reference.predict(x)
    assert (bf16.argmax(1) == fp32.argmax(1)).mean() >= 0.98
    if has_bf16():
        assert np.abs(bf16 - rounded_weights).max() > 1e-4  # BF16 activations, not only BF16 weights


def test_tensorrt_target_int8_is_refused_on_openvino(variants: dict[str, Path]) -> None:
    with pytest.raises(trtpipe.errors.BadInput, match="TensorRT-target INT8"):
        open_artifact(variants["int8_trt"], runtime=BackendKind.OPENVINO)


def test_bench_runs_each_onnx_file_on_both_runtimes_and_selection_names_the_runtime(
        variants: dict[str, Path], tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    from trtpipe.bench.rows import BenchRow
    from trtpipe.pipeline.select import choose

    json_path = tmp_path / "r.json"
    result = run_cli("bench", "digits_resnet", variants["fp32"], variants["int8_trt"], variants["bf16"],
                     "--backend", "onnxruntime,openvino", "--batch", "1", "--iters", "3", "--warmup", "1",
                     "--json", json_path)
    assert result.exit_code == 0, result.output
    rows = [BenchRow.from_dict(r) for r in json.loads(json_path.read_text())["results"]]
    ran = {(r.backend, Path(r.artifact).stem) for r in rows if r.artifact}
    # FP32 on both; TensorRT-target INT8 on ONNX Runtime only (simulated); BF16 on OpenVINO only.
    assert ran == {("onnxruntime", "model"), ("openvino", "model"), ("onnxruntime", "int8_trt"),
                   ("openvino", "bf16")}
    assert "not run on OpenVINO" in result.output
    assert all(r.host_memory_mb for r in rows)
    choice = choose(rows, batch=1, latency_budget_ms=None, max_accuracy_drop=None)
    assert choice is not None
    fastest = min((r for r in rows if r.artifact and not r.simulated), key=lambda r: r.p50_ms)
    assert (choice.runtime, choice.artifact) == (fastest.backend, fastest.artifact)


def test_serve_and_triton_export_take_the_runtime(variants: dict[str, Path], tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    import shutil

    from trtpipe.serve.options import ServeOptions
    from trtpipe.serve.repository.loading import load_repository

    repository = tmp_path / "repo"
    for name in ("fp32", "bf16"):
        (repository / name / "1").mkdir(parents=True)
        shutil.copy(variants[name], repository / name / "1" / "model.onnx")
        shutil.copy(variants[name].with_suffix(".manifest.json"), repository / name / "1" / "model.manifest.json")
    served = load_repository(repository, ServeOptions(runtime="openvino", batching=False))
    assert {name: versions["1"].model.kind for name, versions in served.items()} == {"fp32": "openvino",
                                                                                     "bf16": "openvino"}
    served = load_repository(repository, ServeOptions(batching=False))
    assert served["fp32"]["1"].model.kind == "onnxruntime" and served["bf16"]["1"].model.kind == "openvino"

    def config(folder: Path, name: str) -> model_config_pb2.ModelConfig:
        return text_format.Parse((folder / name / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())

    assert run_cli("export-triton", "--repository", repository, "-o", tmp_path / "native", "--runtime",
                   "openvino", "--threads", "2").exit_code == 0
    fp32, bf16 = config(tmp_path / "native", "fp32"), config(tmp_path / "native", "bf16")
    assert fp32.backend == "openvino" and fp32.default_model_filename == "model.onnx" and not fp32.platform
    assert fp32.parameters["INFERENCE_PRECISION_HINT"].string_value == "f32"
    assert fp32.parameters["INFERENCE_NUM_THREADS"].string_value == "2"
    assert bf16.parameters["INFERENCE_PRECISION_HINT"].string_value == "bf16"
    assert run_cli("export-triton", "--repository", repository, "-o", tmp_path / "python", "--backend",
                   "python").exit_code == 0
    assert config(tmp_path / "python", "fp32").parameters["trtpipe_runtime"].string_value == "onnxruntime"
    assert config(tmp_path / "python", "bf16").parameters["trtpipe_runtime"].string_value == "openvino"


def test_without_openvino_one_line_says_how_to_install(digits_onnx: Path, monkeypatch, run_cli) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setitem(sys.modules, "openvino", None)  # what `import openvino` does where it is not installed
    result = run_cli("bench", "digits_resnet", digits_onnx, "--backend", "openvino", "--iters", "2")
    assert result.exit_code == 3
    assert "pip install 'trtpipe[openvino]'" in error_line(result.output)


PIPELINE = """\
[model]
source = "digits_resnet"

[data]
calib = "digits"
eval = "digits"
calib_samples = 64

[[variants]]
name = "int8_cpu"
precision = "int8"
target = "cpu"

[[variants]]
name = "bf16"
precision = "bf16"

[bench]
batches = [1]
iters = 5
warmup = 1
backend = ["onnxruntime", "openvino"]

[output]
repository = "models"
reports = "reports"
triton = "triton"
"""


def test_run_chooses_a_runtime_and_artifact_pair_and_exports_it_for_that_runtime(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "pipeline.toml").write_text(PIPELINE)
    result = run_cli("run", tmp_path / "pipeline.toml", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    bench = json.loads((tmp_path / "reports" / "digits_resnet" / "bench.json").read_text())["results"]
    runtimes = {(r["backend"], Path(r["artifact"]).parent.parent.name) for r in bench if r["artifact"]}
    assert ("openvino", "digits_resnet_int8_cpu") in runtimes and ("onnxruntime", "digits_resnet_int8_cpu") in runtimes
    if has_bf16():
        assert ("openvino", "digits_resnet_bf16") in runtimes
    choice = json.loads((tmp_path / "models" / "digits_resnet" / "chosen.json").read_text())["choice"]
    assert choice["runtime"] in ("onnxruntime", "openvino")
    # The fastest by the table's speedup (pipeline/ranking.py), or one its interval cannot tell from it (tied).
    chosen = next(r for r in bench if (r["backend"], r["artifact"]) == (choice["runtime"], choice["artifact"]))
    rows = [r for r in bench if r["artifact"] and not r["simulated"] and r["batch"] == chosen["batch"]]
    fastest = max(rows, key=lambda r: r["speedup_vs_torch_fp32"] or 0.0)
    tied = chosen["speedup_interval"]["high"] >= fastest["speedup_interval"]["low"]
    assert chosen is fastest or tied, (chosen["variant"], fastest["variant"])
    name = Path(choice["artifact"]).parent.parent.name
    config = text_format.Parse((tmp_path / "triton" / name / "config.pbtxt").read_text(),
                               model_config_pb2.ModelConfig())
    if choice["runtime"] == "openvino":
        assert config.backend == "openvino" and not config.platform
    else:
        assert config.platform == "onnxruntime_onnx"


def test_a_bf16_variant_is_skipped_with_one_line_where_the_cpu_lacks_bf16(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import trtpipe.hardware
    from trtpipe.pipeline.config import Variant
    from trtpipe.pipeline.run import _unavailable

    variant = Variant("bf16", OptimizeOptions(precision="bf16"))
    monkeypatch.setattr(trtpipe.hardware, "has_bf16", lambda: False)  # this CPU's flags, as one without BF16
    assert "neither AVX512-BF16 nor AMX" in str(_unavailable(variant))
    monkeypatch.setattr(trtpipe.hardware, "has_bf16", lambda: True)
    monkeypatch.setitem(sys.modules, "openvino", None)
    assert "pip install 'trtpipe[openvino]'" in str(_unavailable(variant))
    assert _unavailable(Variant("int8", OptimizeOptions(precision="int8"))) is None


def test_verify_checks_an_onnx_file_on_openvino_too(digits_onnx: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("verify", "digits_resnet", digits_onnx, "--runtime", "openvino")
    assert result.exit_code == 0, result.output
    assert "on openvino" in result.output and "top-1 agreement 100.00%" in result.output
