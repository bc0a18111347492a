"""convert end to end: real exports, real ONNX Runtime sessions, the manifest, and every failure mode."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.conftest import error_line
from trtpipe.models.data import load_split


def test_digits_manifest_records_source_versions_io_and_verification(digits_onnx: Path) -> None:
    manifest = json.loads(digits_onnx.with_suffix(".manifest.json").read_text())
    assert manifest["source"]["name"] == "digits_resnet" and len(manifest["source"]["source_sha256"]) == 64
    assert manifest["export"]["exporter"] == "dynamo" and manifest["export"]["opset"] == 18
    assert set(manifest["versions"]) == {"torch", "onnx", "onnxruntime"}
    assert manifest["inputs"] == [{"name": "input", "dtype": "float32", "shape": ["batch", 1, 32, 32]}]
    assert manifest["outputs"][0]["shape"] == ["batch", 10]
    assert manifest["dynamic_axes"] == {"input": {"0": "batch"}, "output": {"0": "batch"}}
    verification = manifest["verification"]
    assert verification["passed"] and verification["eval_samples"] == 847
    assert verification["candidate_accuracy"] == pytest.approx(verification["reference_accuracy"])
    assert verification["top1_agreement"] == 1.0 and verification["max_abs_err"] < 1e-3


def test_converted_digits_model_classifies_held_out_images(digits_onnx: Path) -> None:
    split = load_split("digits", "eval")
    session = ort.InferenceSession(str(digits_onnx), providers=["CPUExecutionProvider"])
    logits = session.run(None, {"input": split.images})[0]
    assert float((logits.argmax(1) == split.labels).mean()) >= 0.95


def test_cli_convert_with_dynamic_and_static_batch(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    dynamic, static = tmp_path / "dynamic.onnx", tmp_path / "static.onnx"
    result = run_cli("convert", "resnet18", "--input-shape", "1x3x64x64", "-o", dynamic)
    assert result.exit_code == 0, result.output
    assert "Verified on onnxruntime: max abs error" in result.output
    assert run_cli("convert", "resnet18", "--input-shape", "4x3x64x64", "--static-batch", "-o", static).exit_code == 0
    batch = np.random.default_rng(0).standard_normal((3, 3, 64, 64), dtype=np.float32)
    assert ort.InferenceSession(str(dynamic)).run(None, {"input": batch})[0].shape == (3, 1000)
    static_input = ort.InferenceSession(str(static)).get_inputs()[0]
    assert static_input.shape == [4, 3, 64, 64]


def test_perturbed_weights_fail_verification(digits_onnx: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
                                             run_cli) -> None:
    model = onnx.load(str(digits_onnx))
    weight = max(model.graph.initializer, key=lambda t: np.prod(t.dims))
    array = onnx.numpy_helper.to_array(weight).copy()
    array.flat[:: max(1, array.size // 50)] += 0.05  # a small nudge to a few weights of the largest conv
    weight.CopyFrom(onnx.numpy_helper.from_array(array, weight.name))
    tampered = tmp_path / "tampered.onnx"
    onnx.save(model, str(tampered))

    assert run_cli("verify", "digits_resnet", digits_onnx).exit_code == 0
    result = run_cli("verify", "digits_resnet", tampered)
    assert result.exit_code == 1
    line = error_line(result.output)
    assert "differs from PyTorch FP32 beyond tolerance" in line
    assert "max abs error" in line and "allowed" in line and "cosine" in line


def test_failed_verification_writes_nothing_and_keeps_the_old_file(tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                   run_cli) -> None:
    """A model whose trace takes one branch: the TorchScript fallback exports it wrongly, and verification
    must catch that rather than ship it."""
    (tmp_path / "branchy.py").write_text(textwrap.dedent("""
        import torch

        class Branchy(torch.nn.Module):
            input_shape = (1, 2)

            def forward(self, x):
                if x.sum() > 0:  # data-dependent: torch.export refuses, tracing bakes in one branch
                    return x * 2
                return x * -3

        def make():
            return Branchy()
    """))
    out = tmp_path / "out.onnx"
    out.write_bytes(b"previous artifact")
    result = run_cli("convert", f"{tmp_path}/branchy.py:make", "-o", out)
    assert result.exit_code == 1
    assert "falling back to the TorchScript exporter" in result.output
    assert "Nothing was written" in error_line(result.output)
    assert "✓" not in result.output  # the export succeeded, but the command failed: no tick before its Error
    assert out.read_bytes() == b"previous artifact"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary files left


def test_dynamo_failure_falls_back_and_says_so(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "guarded.py").write_text(textwrap.dedent("""
        import torch

        class Guarded(torch.nn.Module):
            input_shape = (1, 3, 8, 8)

            def __init__(self):
                super().__init__()
                self.conv = torch.nn.Conv2d(3, 4, 3)

            def forward(self, x):
                if x.abs().sum() >= 0:  # always true, but data-dependent: torch.export cannot trace it
                    return self.conv(x).flatten(1)
                return x.flatten(1)

        def make():
            return Guarded()
    """))
    out = tmp_path / "guarded.onnx"
    result = run_cli("convert", f"{tmp_path}/guarded.py:make", "-o", out)
    assert result.exit_code == 0, result.output
    assert "The dynamo exporter failed" in result.output and "falling back" in result.output
    manifest = json.loads(out.with_suffix(".manifest.json").read_text())
    assert manifest["export"]["exporter"] == "torchscript" and manifest["export"]["fallback_reason"]


def test_unsupported_operator_is_named_with_an_opset_hint(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "svd.py").write_text(textwrap.dedent("""
        import torch

        class Svd(torch.nn.Module):
            input_shape = (1, 3, 4, 4)

            def forward(self, x):
                return torch.linalg.svd(x)[1].flatten(1)

        def make():
            return Svd()
    """))
    result = run_cli("convert", f"{tmp_path}/svd.py:make", "-o", tmp_path / "svd.onnx")
    assert result.exit_code == 1
    line = error_line(result.output)
    assert "aten::linalg_svd" in line and "--opset" in line
    assert "Traceback" not in result.output


def test_torchscript_model_converts(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    import torch

    from trtpipe.models.digits import load_trained

    scripted = tmp_path / "digits.ts"
    torch.jit.trace(load_trained(), torch.zeros(2, 1, 32, 32)).save(str(scripted))
    result = run_cli("convert", scripted, "--input-shape", "1x1x32x32", "-o", tmp_path / "ts.onnx")
    assert result.exit_code == 0, result.output
    assert "torchscript exporter" in result.output


@pytest.mark.parametrize(("args", "code", "message"), [
    (["convert", "resnet5", "-o", "{tmp}/x.onnx"], 1, "Unknown model 'resnet5'. Did you mean resnet50"),
    (["convert", "resnet18", "--input-shape", "1x3xfoo", "-o", "{tmp}/x.onnx"], 2, "is not a shape"),
    (["convert", "resnet18", "-o", "{tmp}/no/such/folder/x.onnx"], 1, "does not exist: create it"),
    (["convert", "digits_resnet", "--input-shape", "1x3x32x32", "-o", "{tmp}/x.onnx"], 1,
     "fails on input shape 1x3x32x32 (batch 1, each sample 3x32x32; run at batch 2 as 2x3x32x32 to check the "
     "dynamic batch axis)"),
])
def test_bad_input_gets_one_line_and_an_exit_code(tmp_path: Path, run_cli, args: list[str],  # type: ignore[no-untyped-def]
                                                   code: int, message: str) -> None:
    result = run_cli(*[a.format(tmp=tmp_path) for a in args])
    assert result.exit_code == code
    assert message in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "x.onnx").exists()


@pytest.mark.parametrize("content", [b"", b"\x08\x07garbage that is not protobuf", b"ir_version: 8"])
def test_file_that_is_not_onnx(tmp_path: Path, run_cli, content: bytes) -> None:  # type: ignore[no-untyped-def]
    fake = tmp_path / "fake.onnx"
    fake.write_bytes(content)
    result = run_cli("verify", "digits_resnet", fake)
    assert result.exit_code == 1
    assert str(fake) in error_line(result.output)
    assert "Traceback" not in result.output
