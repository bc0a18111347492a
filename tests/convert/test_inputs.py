"""Models of several inputs, and of typed ones (uint8 NHWC pixels normalised inside): exported under their names and
dtypes with a dynamic batch on every axis, verified on real ONNX Runtime sessions; wrong declarations refused."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from tests.conftest import error_line
from trtpipe.models.loader import load_model
from trtpipe.runtime.torch.backend import TorchBackend

MODELS = textwrap.dedent("""
    import torch

    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, image, scale):
            features = torch.relu(self.conv(image)).mean((2, 3))  # [N, 4]
            return features * scale.repeat(1, 2)  # scale: [N, 2]

    class Pixels(torch.nn.Module):
        input_shape = (1, 16, 16, 3)

        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, pixels):
            x = pixels.permute(0, 3, 1, 2).float() / 255
            return self.conv(x).mean((2, 3))

    def scaled():
        torch.manual_seed(0)
        return Scaled()

    def pixels():
        torch.manual_seed(0)
        return Pixels()
""")
SHAPES = "image:1x3x16x16,scale:1x2"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("inputs") / "models.py"
    path.write_text(MODELS)
    return path


def test_a_model_of_two_inputs_converts_under_their_names_with_a_dynamic_batch(models: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                               run_cli) -> None:
    out = tmp_path / "scaled.onnx"
    result = run_cli("convert", f"{models}:scaled", "--input-shape", SHAPES, "-o", out)
    assert result.exit_code == 0, result.output
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert [(i.name, i.type, i.shape) for i in session.get_inputs()] == [
        ("image", "tensor(float)", ["batch", 3, 16, 16]), ("scale", "tensor(float)", ["batch", 2])]
    assert session.get_outputs()[0].shape == ["batch", 4]

    rng = np.random.default_rng(3)
    image = rng.standard_normal((3, 3, 16, 16), dtype=np.float32)
    scale = rng.uniform(0.5, 2, (3, 2)).astype(np.float32)
    got = session.run(None, {"image": image, "scale": scale})[0]  # batch 3: neither traced nor verified at
    loaded = load_model(f"{models}:scaled", input_shape=SHAPES)
    with torch.inference_mode():
        want = loaded.module(torch.from_numpy(image), torch.from_numpy(scale)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

    manifest = json.loads(out.with_suffix(".manifest.json").read_text())
    assert [s["name"] for s in manifest["input_specs"]] == ["image", "scale"]
    assert manifest["input_specs"][1] == {"name": "scale", "shape": [None, 2], "dtype": "float32", "range": None,
                                          "layout": None}
    assert manifest["dynamic_axes"] == {"image": {"0": "batch"}, "scale": {"0": "batch"}, "output": {"0": "batch"}}
    assert manifest["verification"]["passed"] and len(manifest["verification"]["cases"]) == 3

    verified = run_cli("verify", f"{models}:scaled", out, "--input-shape", SHAPES)
    assert verified.exit_code == 0, verified.output
    assert "Verified on onnxruntime" in verified.output


def test_a_uint8_nhwc_model_keeps_its_pixels_uint8_in_the_graph(models: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                run_cli) -> None:
    out = tmp_path / "pixels.onnx"
    result = run_cli("convert", f"{models}:pixels", "--input-dtype", "uint8", "-o", out)
    assert result.exit_code == 0, result.output
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (graph_input,) = session.get_inputs()
    assert (graph_input.name, graph_input.type, graph_input.shape) == ("input", "tensor(uint8)", ["batch", 16, 16, 3])
    pixels = np.random.default_rng(0).integers(0, 255, (3, 16, 16, 3), endpoint=True, dtype=np.uint8)
    with torch.inference_mode():
        want = load_model(f"{models}:pixels", input_dtype="uint8").module(torch.from_numpy(pixels)).numpy()
    np.testing.assert_allclose(session.run(None, {"input": pixels})[0], want, rtol=1e-5, atol=1e-6)
    (spec,) = json.loads(out.with_suffix(".manifest.json").read_text())["input_specs"]
    assert spec == {"name": "input", "shape": [None, 16, 16, 3], "dtype": "uint8", "range": None, "layout": "nhwc"}
    # bench of the ONNX leads back to the factory, which it loads with the recorded uint8 input (no flag needed)
    bench = run_cli("bench", out, "--batch", "1", "--iters", "2", "--warmup", "0", "--rounds", "1", "--threads", "1")
    assert bench.exit_code == 0, bench.output
    assert "benched against that PyTorch model" in bench.output


def test_inputs_are_named_after_forward_and_fed_in_their_dtypes(models: Path) -> None:
    loaded = load_model(f"{models}:scaled", input_shape=SHAPES, input_range="scale:0.5..2")
    assert [(s.name, s.shape, s.dtype, s.value_range) for s in loaded.inputs] == [
        ("image", (1, 3, 16, 16), "float32", None), ("scale", (1, 2), "float32", (0.5, 2.0))]
    assert loaded.input_shape == (1, 3, 16, 16) and loaded.sample_shape == (3, 16, 16)  # the first input's
    calibration = loaded.calibration_data(8)
    assert isinstance(calibration, dict) and calibration["scale"].shape == (8, 2)
    assert calibration["scale"].min() >= 0.5 and calibration["scale"].max() <= 2
    backend = TorchBackend(loaded.module, loaded.inputs)
    assert [(t.name, t.shape) for t in backend.inputs] == [("image", ("batch", 3, 16, 16)), ("scale", ("batch", 2))]
    assert backend.run(loaded.random_inputs(5))[0].shape == (5, 4)

    # One input keeps the name 'input'; its parameter's name ('pixels') is accepted in declarations too.
    pixels = load_model(f"{models}:pixels", input_dtype="pixels:uint8", input_range=(0, 100))
    (spec,) = pixels.inputs
    assert (spec.name, spec.dtype, spec.value_range, str(spec.layout)) == ("input", "uint8", (0.0, 100.0), "nhwc")
    drawn = pixels.random_inputs(16)
    assert isinstance(drawn, np.ndarray) and drawn.dtype == np.uint8 and drawn.max() <= 100
    assert TorchBackend(pixels.module, pixels.inputs).inputs[0].dtype == "uint8"
    again = load_model(f"{models}:pixels", **pixels.input_declarations())
    assert again.inputs == pixels.inputs


@pytest.mark.parametrize(("args", "code", "message"), [
    (["--input-shape", "image:1x3x16x16,scale:1x2,mask:1x1"], 1,
     "--input-shape names 'mask', which the model does not take (its inputs: image, scale)"),
    (["--input-shape", SHAPES, "--input-dtype", "depth:uint8"], 1,
     "--input-dtype names 'depth', which the model does not take (its inputs: image, scale)"),
    (["--input-shape", "image:1x3x16x16"], 1,
     "takes 2 inputs (image, scale) and nothing says the shape of 'scale': give each input's with --input-shape "
     "image:1x3x16x16,scale:SHAPE"),
    (["--input-shape", "image:1x3x16x16,scale:2x2"], 1, "Every input's first dimension is the batch"),
    (["--input-shape", SHAPES, "--input-dtype", "image:uint9"], 2, "'uint9' is not an input dtype"),
    (["--input-shape", SHAPES, "--input-range", "image:0-255"], 2, "'0-255' is not a range: write LOW..HIGH"),
    (["--input-shape", SHAPES, "--input-range", "255..0"], 2, "with finite LOW < HIGH"),
    (["--input-shape", SHAPES, "--input-dtype", "image:uint8", "--input-range", "image:0..1000"], 1,
     "--input-range 0..1000 does not fit input 'image', whose dtype uint8 holds 0..255"),
    (["--input-shape", SHAPES, "--input-dtype", "uint8"], 1,
     "Model 'scaled' fails on inputs image 2x3x16x16 uint8, scale 2x2 float32"),
])
def test_wrong_declarations_are_refused_in_one_line_before_anything_is_written(  # type: ignore[no-untyped-def]
        models: Path, tmp_path: Path, run_cli, args: list[str], code: int, message: str) -> None:
    out = tmp_path / "refused.onnx"
    result = run_cli("convert", f"{models}:scaled", *args, "-o", out)
    assert result.exit_code == code, result.output
    assert message in error_line(result.output)
    assert "Traceback" not in result.output
    assert not out.exists() and not out.with_suffix(".manifest.json").exists()
