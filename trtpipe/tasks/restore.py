"""Image-to-image networks (restoration, denoising, demosaicking, super-resolution): an output image ``[N, C, H, W]``
of 1, 3 or 4 channels whose values are pixels. Judged against FP32's own output image by image:

- **SSIM** (Wang et al., 2004: means, variances and covariance over 7x7 windows, as scikit-image computes it by
  default, with its constants 0.01 and 0.03 of the pixels' range), averaged over each image's windows and channels;
  the headline (``agreement``, what a budget judges as 100 - it in points), its interval the bootstrap over images;
- **PSNR** beside it: 10 log10(range² / mean squared error) per image, its mean in dB with the bootstrap interval
  over images (an image equal to FP32's counts as PSNR_CAP dB, so the mean stays a number).

The pixels' range is the one FP32's output lives in: 0..1, -1..1 or 0..255. Labels are not read: the measure is
agreement with FP32.

:func:`looks_like_pixels` is the evidence a task inference reads: an image of 3 or 4 channels (1 only with
``--task restore``: a one-channel map is a dense map unless named) whose values stay in a pixel range, are not a
per-pixel distribution over the channels (a segmenter's softmax), and whose channels rise and fall together, as the
colours of a photo do (class scores compete instead).
"""

from __future__ import annotations

import numpy as np

from trtpipe.errors import BadInput
from trtpipe.intervals import bootstrap_values
from trtpipe.tasks.base import Fidelity
from trtpipe.vocab import Task

EXPECTED = "[N, C, H, W] an image of 1, 3 or 4 channels whose values are pixels (0..1, -1..1 or 0..255)"
CHANNELS = (1, 3, 4)
INFERRED_CHANNELS = (3, 4)  # a one-channel output is read as a dense map unless --task restore names it
WINDOW = 7  # SSIM's window side (scikit-image's default)
PSNR_CAP = 100.0  # dB counted for an image equal to FP32's
# Evidence of pixels: the values' 0.1 % and 99.9 % quantiles inside one of these ranges (widened by SLACK of it)...
RANGES = ((0.0, 1.0), (-1.0, 1.0), (0.0, 255.0))
SLACK = 0.1
# ... and the channels' mean pairwise correlation over the pixels at least this (RGB of photos: about 0.9)
MIN_CHANNEL_CORRELATION = 0.5
SOFTMAX_TOLERANCE = 1e-2


def fits(shape: tuple[int, ...]) -> bool:
    return len(shape) == 4 and shape[1] in CHANNELS


def pixel_range(images: np.ndarray) -> tuple[float, float] | None:
    """The pixel range ``images`` live in (the narrowest of RANGES holding their 0.1 % and 99.9 % quantiles), or
    None where none holds them."""
    low, high = (float(q) for q in np.quantile(images, [0.001, 0.999]))
    for start, end in RANGES:
        slack = SLACK * (end - start)
        if start - slack <= low and high <= end + slack:
            return start, end
    return None


def channel_correlation(images: np.ndarray) -> float:
    """The mean pairwise Pearson correlation of the channels over every pixel of every image (1.0 for one channel)."""
    channels = np.moveaxis(images, 1, 0).reshape(images.shape[1], -1)
    if len(channels) < 2:
        return 1.0
    spread = channels.std(1)
    if np.any(spread == 0):
        return 0.0  # a flat channel rises with nothing
    matrix = np.corrcoef(channels)
    return float(matrix[np.triu_indices(len(channels), 1)].mean())


def is_softmax(scores: np.ndarray) -> bool:
    """Whether every pixel's values are a distribution over the channels (in 0..1, summing to 1)."""
    return scores.min() >= 0 and scores.max() <= 1 and np.abs(scores.sum(1) - 1).max() <= SOFTMAX_TOLERANCE


def looks_like_pixels(output: np.ndarray, channels: tuple[int, ...] = INFERRED_CHANNELS) -> str | None:
    """The evidence that ``output`` [N, C, H, W] is an image (see the module's docstring), or None."""
    if output.ndim != 4 or output.shape[1] not in channels or not np.isfinite(output).all() or output.size == 0:
        return None
    if output.shape[1] > 1 and is_softmax(output):
        return None
    found = pixel_range(output)
    if found is None or float(output.std()) <= 1e-3 * (found[1] - found[0]):
        return None
    correlation = channel_correlation(output)
    if correlation < MIN_CHANNEL_CORRELATION:
        return None
    return (f"values {float(output.min()):.3g}..{float(output.max()):.3g} in the pixel range {found[0]:g}..{found[1]:g}"
            + (f", its {output.shape[1]} channels rising and falling together (mean correlation {correlation:.2f}, "
               "as a photo's colours; class scores compete)" if output.shape[1] > 1 else ""))


def _box_mean(images: np.ndarray) -> np.ndarray:
    """The mean over every WINDOW x WINDOW window of the last two axes (the windows inside the image)."""
    summed = np.cumsum(np.cumsum(np.pad(images, [(0, 0)] * (images.ndim - 2) + [(1, 0), (1, 0)]), -1), -2)
    w = WINDOW
    total = summed[..., w:, w:] - summed[..., :-w, w:] - summed[..., w:, :-w] + summed[..., :-w, :-w]
    return total / (w * w)


def ssim(reference: np.ndarray, candidate: np.ndarray, data_range: float) -> np.ndarray:
    """Each image's SSIM of ``candidate`` against ``reference`` [N, C, H, W] (a smaller image than the window: the
    window is the whole image)."""
    if min(reference.shape[-2:]) < WINDOW:
        x, y = reference.reshape(*reference.shape[:2], -1), candidate.reshape(*candidate.shape[:2], -1)
        mx, my = x.mean(-1), y.mean(-1)
        stats = [mx, my, x.var(-1, ddof=1), y.var(-1, ddof=1),
                 ((x - mx[..., None]) * (y - my[..., None])).sum(-1) / max(x.shape[-1] - 1, 1)]
    else:
        mx, my = _box_mean(reference), _box_mean(candidate)
        correction = WINDOW * WINDOW / (WINDOW * WINDOW - 1)  # sample variances, as scikit-image
        stats = [mx, my, (_box_mean(reference**2) - mx**2) * correction, (_box_mean(candidate**2) - my**2) * correction,
                 (_box_mean(reference * candidate) - mx * my) * correction]
    mx, my, vx, vy, cov = stats
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    index = ((2 * mx * my + c1) * (2 * cov + c2)) / ((mx**2 + my**2 + c1) * (vx + vy + c2))
    return index.reshape(len(index), -1).mean(1)


def psnr(reference: np.ndarray, candidate: np.ndarray, data_range: float) -> np.ndarray:
    """Each image's PSNR in dB of ``candidate`` against ``reference`` (PSNR_CAP where they are equal)."""
    error = ((reference - candidate) ** 2).reshape(len(reference), -1).mean(1)
    with np.errstate(divide="ignore"):
        found = 10 * np.log10(data_range**2 / error)
    return np.minimum(found, PSNR_CAP)


def measure(reference: np.ndarray, candidate: np.ndarray, labels: object | None) -> Fidelity:
    if labels is not None:
        raise BadInput("The restore measure reads no labels (it judges each image against FP32's own output): give "
                       "data without labels, or --task generic.")
    if not fits(tuple(reference.shape)):
        raise BadInput(f"The restore measure expects {EXPECTED}; the model's output is {list(reference.shape)}.")
    found = pixel_range(reference)
    start, end = found if found is not None else (float(reference.min()), float(reference.max()))
    data_range = max(end - start, 1e-12)
    similarity, decibels = ssim(reference, candidate, data_range), psnr(reference, candidate, data_range)
    figures = {"psnr_db": float(decibels.mean()), "min_psnr_db": float(decibels.min()),
               "min_ssim": float(similarity.min()), "pixel_range": data_range}
    return Fidelity(Task.RESTORE, float(similarity.mean()), "mean SSIM vs FP32", figures,
                    agreement_interval=bootstrap_values(similarity, np.mean),
                    agreement_on=lambda i: float(similarity[i].mean()),
                    figure_intervals={"psnr_db": bootstrap_values(decibels, np.mean)},
                    note=None if found is not None else f"values {start:.3g}..{end:.3g} are in no pixel range: PSNR "
                                                        "and SSIM over that span")
