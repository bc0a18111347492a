"""Models of several inputs and of typed inputs (NHWC uint8 pixels) through optimize: data is a batch keyed by input
name, checked against each input, and every pass runs every input; refusals are one line naming the input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.builders import nhwc_uint8_onnx, two_input_data, two_input_onnx
from tests.conftest import error_line
from trtpipe.errors import BadInput
from trtpipe.inputs import InputSpec, Layout
from trtpipe.optimize.data import load_dataset


@pytest.fixture(scope="module")
def two_input(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return two_input_onnx(tmp_path_factory.mktemp("two_input") / "two_input.onnx")


@pytest.fixture(scope="module")
def nhwc_uint8(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return nhwc_uint8_onnx(tmp_path_factory.mktemp("nhwc") / "nhwc_uint8.onnx")


def _outputs(path: Path, feeds: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    types = {i.name: np.float16 if i.type == "tensor(float16)" else None for i in session.get_inputs()}
    return session.run(None, {n: a.astype(types[n]) if types[n] else a for n, a in feeds.items()})[0]


@pytest.mark.parametrize(("precision", "target", "extra"), [
    ("fp16", "cpu", ["--no-keep-io-fp32"]),  # inputs in FP16 too: the checks feed them FP16
    ("int8", "cpu", ["--adaround", "--adaround-iterations", "5", "--bias-correction"]),
    ("int8", "tensorrt", ["--passes", "fuse,equalize"]),
])
def test_a_two_input_onnx_from_elsewhere_is_optimized_on_data_keyed_by_input_name(
        two_input: Path, tmp_path: Path, run_cli, precision: str, target: str, extra: list[str]) -> None:  # type: ignore[no-untyped-def]
    calib = two_input_data(tmp_path / "calib.npz")
    evaluation = two_input_data(tmp_path / "eval.npz", labelled_by=two_input)
    out = tmp_path / f"{precision}_{target}.onnx"
    result = run_cli("optimize", two_input, "-o", out, "--precision", precision, "--target", target, "--calib", calib,
                     "--eval", evaluation, *extra)
    assert result.exit_code == 0, result.output
    model = onnx.load(str(out))
    assert [i.name for i in model.graph.input] == ["image", "aux"]
    if precision == "int8":
        assert {"QuantizeLinear", "DequantizeLinear"} <= {n.op_type for n in model.graph.node}
    data = dict(np.load(evaluation))
    feeds = {"image": data["image"], "aux": data["aux"]}
    reference, optimized = _outputs(two_input, feeds), _outputs(out, feeds)
    assert np.mean(reference.argmax(1) == optimized.argmax(1)) >= 0.9
    manifest = json.loads(out.with_suffix(".manifest.json").read_text())
    assert [s["name"] for s in manifest["input_specs"]] == ["image", "aux"]
    assert manifest["data"]["calibration"]["samples"] == 40


def test_nhwc_uint8_pixels_are_calibrated_on_uint8_draws(nhwc_uint8: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """--calib random draws each input from its range: whole numbers in [0, 255] for uint8 pixels, said in one
    line and recorded; the Cast's output (the first float tensor) is calibrated to exactly that range."""
    out = tmp_path / "int8.onnx"
    result = run_cli("optimize", nhwc_uint8, "-o", out, "--precision", "int8", "--target", "cpu", "--calib",
                     "random", "--passes", "fuse,equalize")  # no Conv pair to equalize: the graph is unchanged
    assert result.exit_code == 0, result.output
    assert "CALIBRATING ON RANDOM NOISE" in result.output
    assert "pixels: uniform uint8 integers in [0, 255]" in result.output
    manifest = json.loads(out.with_suffix(".manifest.json").read_text())
    assert "pixels: uniform uint8 integers in [0, 255]" in manifest["data"]["calibration"]["source"]
    assert manifest["input_specs"][0] | {"range": None} == {"name": "pixels", "shape": [None, 16, 16, 3],
                                                             "dtype": "uint8", "range": None, "layout": "nhwc"}
    ranges = json.loads(out.with_suffix(".calib.json").read_text())["ranges"]
    assert ranges["as_float"] == [0.0, 255.0]  # cpu: asymmetric ranges, so both ends of the draws show
    model = onnx.load(str(out))
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.UINT8
    pixels = np.random.default_rng(5).integers(0, 256, (4, 16, 16, 3), dtype=np.uint8)
    np.testing.assert_allclose(_outputs(out, {"pixels": pixels}), _outputs(nhwc_uint8, {"pixels": pixels}), atol=0.05)


def test_image_sources_make_what_the_input_takes(tmp_path: Path) -> None:
    """photos and image folders make raw uint8 pixels, channels last, for an NHWC uint8 input; float data of whole
    numbers is cast exactly."""
    from PIL import Image

    pixels = InputSpec("pixels", (None, 16, 16, 3), "uint8", None, Layout.NHWC)
    photos = load_dataset("photos", pixels, purpose="calibration", samples=4)
    assert photos.images.dtype == np.uint8 and photos.images.shape == (4, 16, 16, 3)  # type: ignore[union-attr]
    assert photos.images.max() > 1  # type: ignore[union-attr]  # pixels, not normalised values
    folder = tmp_path / "images"
    folder.mkdir()
    Image.fromarray(np.full((20, 24, 3), 200, np.uint8)).save(folder / "a.png")
    images = load_dataset(str(folder), pixels, purpose="calibration").images
    assert images.dtype == np.uint8 and images.shape == (1, 16, 16, 3) and int(images.max()) == 200  # type: ignore[union-attr]
    np.save(tmp_path / "whole.npy", np.full((3, 16, 16, 3), 7.0, np.float32))
    whole = load_dataset(str(tmp_path / "whole.npy"), pixels, purpose="calibration").images
    assert whole.dtype == np.uint8 and int(whole.max()) == 7  # type: ignore[union-attr]
    from trtpipe.models.packaged import PACKAGED
    from trtpipe.vocab import ChannelOrder

    prep = PACKAGED["ppocrv4_det"].preprocessing  # packaged natural inputs: the same pixels, as the input takes them
    rgb = np.arange(2 * 4 * 3, dtype=np.uint8).reshape(2, 4, 3)
    raw = prep.apply(rgb, raw=True, channels_last=True)
    assert raw.dtype == np.uint8 and raw.shape == (2, 4, 3)
    np.testing.assert_array_equal(raw, rgb[..., ::-1] if prep.channel_order is ChannelOrder.BGR else rgb)
    assert prep.apply(rgb).shape == (3, 2, 4) and prep.apply(rgb).dtype == np.float32
    with pytest.raises(BadInput, match=r"give a \.npz keyed by input names"):
        load_dataset("photos", (pixels, InputSpec("other", (None, 16, 16, 3), "uint8", None, Layout.NHWC)),
                     purpose="calibration", samples=2)


def test_data_that_does_not_fit_the_inputs_is_refused_in_one_line(two_input: Path, nhwc_uint8: Path,
                                                                   tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    def refused(model: Path, data: Path, *extra: str) -> str:
        result = run_cli("optimize", model, "-o", tmp_path / "out.onnx", "--precision", "int8", "--calib", data,
                         *extra)
        assert result.exit_code == 1 and "Traceback" not in result.output
        return error_line(result.output)

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "names.npz", image=rng.standard_normal((8, 3, 16, 16), dtype=np.float32),
             extra=np.zeros((8, 4), np.float32))
    line = refused(two_input, tmp_path / "names.npz")
    assert "the model's inputs are image, aux" in line and "missing: aux" in line and "unknown: extra" in line
    np.save(tmp_path / "one.npy", rng.standard_normal((8, 3, 16, 16), dtype=np.float32))
    assert "give a .npz keyed by input names" in refused(two_input, tmp_path / "one.npy")
    np.savez(tmp_path / "aux.npz", image=rng.standard_normal((8, 3, 16, 16), dtype=np.float32),
             aux=np.zeros((8, 5), np.float32))
    line = refused(two_input, tmp_path / "aux.npz")
    assert "shape 5 for input 'aux'" in line and "the model takes 4 there" in line
    np.savez(tmp_path / "fractions.npz", pixels=rng.uniform(0, 1, (8, 16, 16, 3)).astype(np.float32))
    line = refused(nhwc_uint8, tmp_path / "fractions.npz")
    assert "Input 'pixels' takes uint8" in line and "gives float32 data that is not all whole numbers in [0, 255]" \
        in line
    assert "--input-dtype float32 does not fit input 'pixels'" in refused(nhwc_uint8, tmp_path / "fractions.npz",
                                                                          "--input-dtype", "float32")
    # A range a uint8 input cannot hold would wrap (300 -> 44) or draw only zeros (0.2..0.8): refused, not drawn.
    assert "--input-range 0..300 does not fit input 'pixels', whose dtype uint8 holds 0..255" in refused(
        nhwc_uint8, "random", "--input-range", "0..300")
    assert "takes whole numbers" in refused(nhwc_uint8, "random", "--input-range", "0.2..0.8")


def test_a_dynamic_axis_needs_a_size_and_stays_dynamic(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    dynamic = nhwc_uint8_onnx(tmp_path / "dynamic.onnx", dynamic_size=True)
    out = tmp_path / "int8.onnx"
    result = run_cli("optimize", dynamic, "-o", out, "--precision", "int8", "--calib", "random")
    assert result.exit_code == 1
    line = error_line(result.output)
    assert "Input 'pixels' has dynamic dimensions" in line and "--input-shape pixels:" in line
    assert "CALIBRATING ON RANDOM NOISE" not in result.output  # refused before anything is drawn
    sized = run_cli("optimize", dynamic, "-o", out, "--precision", "int8", "--calib", "random", "--input-shape",
                    "pixels:1x16x16x3", "--input-range", "0..100")
    assert sized.exit_code == 0, sized.output
    assert "pixels: uniform uint8 integers in [0, 100]" in sized.output
    dims = onnx.load(str(out)).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["N", "H", "W", 3]  # the artifact keeps its dynamic axes


def test_ranges_come_from_what_convert_recorded(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """A PyTorch model declared to take [0, 1] inputs: convert records the range in the manifest, and optimize's
    random calibration draws from it; --input-range still wins."""
    import torch

    from trtpipe.convert import convert
    from trtpipe.models.loader import LoadedModel

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                 torch.nn.Flatten(), torch.nn.Linear(4, 10))
    source = tmp_path / "ranged.onnx"
    spec = InputSpec("input", (1, 3, 16, 16), "float32", (0.0, 1.0), Layout.NCHW)
    convert(LoadedModel(module, "ranged", "test", "factory", (1, 3, 16, 16), inputs=(spec,)), source)
    recorded = run_cli("optimize", source, "-o", tmp_path / "int8.onnx", "--precision", "int8", "--calib", "random")
    assert recorded.exit_code == 0, recorded.output
    assert "input: uniform float32 in [0, 1]" in recorded.output
    declared = run_cli("optimize", source, "-o", tmp_path / "int8b.onnx", "--precision", "int8", "--calib", "random",
                       "--input-range", "-1..1")
    assert declared.exit_code == 0 and "input: uniform float32 in [-1, 1]" in declared.output
