"""An AOTInductor variant in trtpipe run: compiled from the PyTorch model, benched beside the ONNX, choosable by
select, reused when nothing changed; its pipeline keys checked like every other variant's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trtpipe.errors import BadInput
from trtpipe.vocab import BackendKind, Device

PIPELINE = """\
[model]
source = "digits_resnet"

[[variants]]
name = "aoti"
kind = "aoti"
batch_range = "1-8"
channels_last = true

[bench]
batches = [1, 4]
iters = 3
warmup = 1
rounds = 1

[output]
repository = "models"
reports = "reports"
"""


@pytest.fixture(scope="module")
def pipeline_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from click.testing import CliRunner

    from trtpipe.cli import main

    folder = tmp_path_factory.mktemp("aoti-run")
    (folder / "pipeline.toml").write_text(PIPELINE)
    result = CliRunner().invoke(main, ["run", str(folder / "pipeline.toml"), "--out", str(folder)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return folder


def test_an_aoti_variant_is_compiled_benched_and_can_be_chosen(pipeline_run: Path) -> None:
    from trtpipe.bench.rows import BenchRow
    from trtpipe.pipeline.select import choose

    reports = pipeline_run / "reports" / "digits_resnet"
    statuses = {s["stage"]: s["status"] for s in json.loads((reports / "run.json").read_text())["stages"]}
    assert statuses["convert"] == statuses["compile:aoti"] == statuses["bench"] == "ran"
    package = pipeline_run / "models" / "digits_resnet_aoti" / "1" / "model.pt2"
    manifest = json.loads(package.with_name(package.name + ".manifest.json").read_text())
    assert manifest["aotinductor"]["batch_range"] == [1, 8] and manifest["aotinductor"]["channels_last"] is True
    assert manifest["artifact"]["device"] == Device.CPU and manifest["verification"]["passed"]
    rows = [BenchRow.from_dict(r) for r in json.loads((reports / "bench.json").read_text())["results"]]
    ours = [r for r in rows if r.backend is BackendKind.AOTI]
    assert [r.batch for r in ours] == [1, 4] and all(r.artifact == str(package) for r in ours)
    assert all(r.top1_agreement == 1.0 for r in ours)
    # select weighs it like any artifact: without the ONNX rows beside it, it is the choice.
    choice = choose([r for r in rows if r.backend is not BackendKind.ONNXRUNTIME], batch=1, latency_budget_ms=None,
                    max_accuracy_drop=1.0)
    assert choice is not None and choice.artifact == str(package) and choice.runtime is BackendKind.AOTI


def test_a_rerun_reuses_the_compiled_package(pipeline_run: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("run", pipeline_run / "pipeline.toml", "--out", pipeline_run)
    assert result.exit_code == 0 and "0 stage(s) ran" in result.output
    statuses = {s["stage"]: s["status"]
                for s in json.loads((pipeline_run / "reports" / "digits_resnet" / "run.json").read_text())["stages"]}
    assert statuses["compile:aoti"] == "cached"


def test_an_aoti_variant_takes_the_compile_options_and_nothing_else(tmp_path: Path) -> None:
    from trtpipe.compile.options import CompileOptions
    from trtpipe.pipeline.config import load_pipeline
    from trtpipe.vocab import Precision

    path = tmp_path / "p.toml"
    path.write_text('[model]\nsource = "digits_resnet"\n[data]\ncalib = "digits"\n'
                    '[[variants]]\nname = "int8"\nprecision = "int8"\n'
                    '[[variants]]\nname = "half"\nkind = "aoti"\nprecision = "bf16"\ndevice = "cuda"\n')
    pipeline = load_pipeline(path, ["variants.calib_samples=32", "variants.batch_range=2-4"])
    compiled = pipeline.variants[1].options
    assert isinstance(compiled, CompileOptions) and compiled.precision is Precision.BF16
    assert compiled.device is Device.CUDA and compiled.batch_range == (2, 4)
    assert pipeline.variants[0].options.calib_samples == 32  # type: ignore[union-attr]
    path.write_text('[model]\nsource = "digits_resnet"\n[[variants]]\nname = "a"\nkind = "aoti"\ncalib = "digits"\n')
    with pytest.raises(BadInput, match=r"p\.toml:6: unknown key 'calib' in \[variants\] \(known: name, kind, "
                                       r"precision, device, batch_range"):
        load_pipeline(path)
    path.write_text('[model]\nsource = "digits_resnet"\n[[variants]]\nname = "a"\nkind = "tflite"\n')
    with pytest.raises(BadInput, match=r"'kind' in \[\[variants\]\] must be one of onnx, aoti, not 'tflite'"):
        load_pipeline(path)
