"""Each way optimize's input can be wrong gets one line naming it, and writes nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import error_line


@pytest.fixture()
def int8_onnx(digits_onnx: Path, tmp_path: Path, run_cli) -> Path:  # type: ignore[no-untyped-def]
    out = tmp_path / "already.onnx"
    assert run_cli("optimize", digits_onnx, "-o", out, "--precision", "int8", "--calib", "digits",
                   "--calib-samples", "32").exit_code == 0
    return out


def _optimize(run_cli, digits_onnx: Path, tmp_path: Path, *extra: object):  # type: ignore[no-untyped-def]
    return run_cli("optimize", digits_onnx, "-o", tmp_path / "out.onnx", "--precision", "int8", *extra)


def test_calibration_shape_mismatch_names_both(digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    data = tmp_path / "wrong.npy"
    np.save(data, np.zeros((8, 3, 32, 32), np.float32))
    result = _optimize(run_cli, digits_onnx, tmp_path, "--calib", data)
    assert result.exit_code == 1
    assert "samples of shape 3x32x32" in error_line(result.output) and "model takes 1x32x32" in result.output
    nhwc = tmp_path / "nhwc.npy"
    np.save(nhwc, np.zeros((8, 32, 32, 1), np.float32))
    assert "channels-last (NHWC)" in error_line(_optimize(run_cli, digits_onnx, tmp_path, "--calib", nhwc).output)
    assert not (tmp_path / "out.onnx").exists()


def test_empty_and_unreadable_image_folders(digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "holds no images" in error_line(_optimize(run_cli, digits_onnx, tmp_path, "--calib", empty).output)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "a.png").write_bytes(b"not a png")
    result = _optimize(run_cli, digits_onnx, tmp_path, "--calib", broken)
    assert result.exit_code == 1 and "Cannot read image" in error_line(result.output)


def test_image_folder_calibration_and_evaluation(digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    from PIL import Image

    from trtpipe.models.data import load_split

    split = load_split("digits", "eval")
    for i, (image, label) in enumerate(zip(split.images[:40], split.labels[:40], strict=True)):
        folder = tmp_path / "images" / f"{label}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = ((image[0] * 0.5 + 0.5) * 255).clip(0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(folder / f"{i}.png")
    result = _optimize(run_cli, digits_onnx, tmp_path, "--target", "cpu", "--calib", tmp_path / "images",
                       "--eval", tmp_path / "images", "--resize", "32")
    assert result.exit_code == 0, result.output
    assert "(40 images)" in result.output and "accuracy" in result.output


def test_fewer_samples_than_asked(digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    result = _optimize(run_cli, digits_onnx, tmp_path, "--calib", "digits", "--calib-samples", "500")
    assert result.exit_code == 1
    assert "has 150 samples; 500 were asked for" in error_line(result.output)


def test_already_quantised_model_is_refused(int8_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    result = _optimize(run_cli, int8_onnx, tmp_path, "--calib", "digits")
    assert result.exit_code == 1 and "is quantised" in error_line(result.output)


@pytest.mark.parametrize(("extra", "code", "message"), [
    (["--calib", "digits", "--calib-method", "kl"], 2, "'kl' is not one of"),
    (["--calib", "digits", "--target", "tpu"], 2, "'tpu' is not one of"),
    ([], 1, "INT8 calibration needs --calib DATA"),
    (["--max-accuracy-drop", "1"], 1, "INT8 calibration needs --calib DATA"),
    (["--calib", "random", "--eval", "random"], 1, "'random' data has no labels"),
    (["--calib", "nowhere.npz"], 1, "does not exist"),
])
def test_option_errors(digits_onnx: Path, tmp_path: Path, run_cli, extra: list[str], code: int,  # type: ignore[no-untyped-def]
                       message: str) -> None:
    result = _optimize(run_cli, digits_onnx, tmp_path, *extra)
    assert result.exit_code == code
    assert message in result.output and "Traceback" not in result.output


def test_random_calibration_warns_loudly(digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    result = _optimize(run_cli, digits_onnx, tmp_path, "--calib", "random", "--calib-samples", "8")
    assert result.exit_code == 0
    assert "CALIBRATING ON RANDOM NOISE" in result.output and "speed tests only" in result.output
