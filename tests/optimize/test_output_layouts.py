"""Optimize on outputs whose batch is not their first axis, or that have none: a time-major CTC reader ``[T, N, C]``
(read as the sequence task, its line naming the model's own layout), a batch-first one whose batch only runs reveal,
one with a batch-free second output, and a static-batch reader whose graph declares its time-major logits as
``[1, seqlen]`` (ddddocr 1.6.1's CRNN). Every run ends with a file, never a traceback, and the manifest records
each output's batch axis."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.builders import ctc_reader, misdeclared_reader, photo_like, restorer

SAMPLES = 150  # more than one chunk of 64 in every check


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("layouts") / "lines.npy"
    np.save(path, np.random.default_rng(1).standard_normal((SAMPLES, 1, 8, 24)).astype(np.float32))
    return path


@pytest.mark.parametrize(("layout", "batch_free", "precision", "target"), [
    ("tnc", False, "fp16", "cpu"),
    ("tnc", False, "int8", "tensorrt"),
    ("tnc", False, "int8", "cpu"),
    ("ntc", True, "fp16", "cpu"),
    ("ntc", True, "int8", "cpu"),
])
def test_every_output_layout_is_optimized_end_to_end(data: Path, tmp_path: Path, run_cli, layout: str,  # type: ignore[no-untyped-def]
                                                     batch_free: bool, precision: str, target: str) -> None:
    source = tmp_path / f"{layout}.onnx"
    onnx.save(ctc_reader(layout, batch_free=batch_free), source)
    out = tmp_path / f"{precision}_{target}.onnx"
    quality = ["--quality", "fast"] if precision == "int8" else []
    result = run_cli("optimize", source, "-o", out, "--precision", precision, "--target", target, "--calib", data,
                     *quality)
    assert result.exit_code == 0, result.output
    assert out.exists()
    details = json.loads(out.with_suffix(".manifest.json").read_text())
    text = " ".join(result.output.split())
    if layout == "tnc":
        assert details["output_batch_axes"] == {"axes": {"logits": 1}, "found_from": "the graph's shapes"}
        assert "Task: sequence (inferred: output [24, 8, 37] (batch on axis 1) holds logits over 37 classes at " \
               "each of 24 timesteps" in text
        assert "exact-line agreement" in text
    else:
        assert details["output_batch_axes"] == {"axes": {"logits": 0, "anchors": None},
                                                "found_from": "runs of 1 and 2 samples"}
        assert "the batch axis of 'anchors' has none" in text


@pytest.mark.parametrize(("precision", "target"), [("fp16", "cpu"), ("int8", "cpu")])
def test_an_image_to_image_network_is_judged_as_restore(tmp_path: Path, run_cli, precision: str,  # type: ignore[no-untyped-def]
                                                        target: str) -> None:
    """An RGB output smaller than its input, in 0..1: restore (PSNR and SSIM against FP32), not segmentation."""
    source, data = tmp_path / "restorer.onnx", tmp_path / "photos.npy"
    onnx.save(restorer(), source)
    np.save(data, photo_like(120))
    out = tmp_path / f"{precision}.onnx"
    quality = ["--quality", "fast"] if precision == "int8" else []
    result = run_cli("optimize", source, "-o", out, "--precision", precision, "--target", target, "--calib", data,
                     *quality)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "Task: restore (inferred: one output [8, 3, 8, 8], an image: values" in text
    assert "in the pixel range 0..1, its 3 channels rising and falling together" in text
    assert "PSNR vs FP32" in text and "mean SSIM vs FP32" in text


def test_a_misdeclared_output_shape_survives_fusion(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """ddddocr 1.6.1's CRNN declares ``[1, seqlen]`` for the ``[T, 1, C]`` logits it computes: fusion must keep
    what the graph computes (onnxslim alone folds the reshape to the declaration, and every run then ended in
    "Output 0 is shaped [36, 164200] and the reference's [36, 20, 8210]"), and the outputs' declarations as given."""
    from trtpipe.optimize.passes.fuse import simplify

    model = misdeclared_reader()
    fused, _ = simplify(model)
    sample = np.random.default_rng(0).standard_normal((1, 1, 8, 24)).astype(np.float32)
    shapes = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
              .run(None, {"x": sample})[0].shape for m in (model, fused)]
    assert shapes == [(24, 1, 37), (24, 1, 37)]
    assert fused.graph.output[0] == model.graph.output[0]

    source, data, out = tmp_path / "reader.onnx", tmp_path / "lines.npy", tmp_path / "fp16.onnx"
    onnx.save(model, source)
    np.save(data, np.random.default_rng(1).standard_normal((20, 1, 1, 8, 24)).astype(np.float32)[:, 0])
    result = run_cli("optimize", source, "-o", out, "--precision", "fp16", "--calib", data)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "Task: sequence (inferred: output [24, 8, 37] (batch on axis 1)" in text


def test_convert_leaves_a_task_read_from_random_maps_to_optimize(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """demosaicnet 0.0.14's Bayer net converted with default options: on convert's random N(0, 1) inputs its RGB
    output read as class scores, so the manifest recorded segment and optimize judged the real images by pixel class
    agreement ("from the manifest"). The task read from several maps' values is not recorded; optimize infers it on
    the calibration photos: restore."""
    (tmp_path / "restorer.py").write_text(textwrap.dedent("""
        import torch

        class Restorer(torch.nn.Module):
            input_shape = (1, 3, 16, 16)

            def __init__(self):
                super().__init__()
                self.conv = torch.nn.Conv2d(3, 3, 3, padding=1, bias=False)
                with torch.no_grad():
                    self.conv.weight.normal_(0, 0.02, generator=torch.Generator().manual_seed(0))
                    self.conv.weight[range(3), range(3), 1, 1] += 1.0

            def forward(self, x):
                return torch.nn.functional.avg_pool2d(self.conv(x), 2).clamp(0, 1)

        def make():
            return Restorer().eval()
    """))
    source, data = tmp_path / "restorer.onnx", tmp_path / "photos.npy"
    result = run_cli("convert", f"{tmp_path}/restorer.py:make", "-o", source)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "Task: not recorded: on random inputs the outputs read as segment (inferred: one output" in text
    assert "optimize and bench infer it on their data (give --task to record one)" in text
    assert "task" not in json.loads(source.with_suffix(".manifest.json").read_text())["artifact"]

    np.save(data, photo_like(40))
    result = run_cli("optimize", source, "-o", tmp_path / "fp16.onnx", "--precision", "fp16", "--calib", data)
    assert result.exit_code == 0, result.output
    assert "Task: restore (inferred: one output [8, 3, 8, 8], an image" in " ".join(result.output.split())
