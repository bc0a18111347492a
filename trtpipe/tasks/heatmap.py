"""Heatmap heads (keypoints, face or object centres: pose nets, CenterNet, CenterFace): maps ``[N, K, H, W]``, one per
keypoint or class, whose local maxima above a threshold are the answers; of a multi-map head (heatmap, sizes,
offsets, landmarks), the heatmap is the first output and the one measured.

FP32's peaks are the truth: a **peak** is a value that is the largest of its 3x3 neighbourhood and at least THRESHOLD
(on scores in 0..1; values outside 0..1 are logits, read through a sigmoid), the MAX_PEAKS highest per map. Each of
FP32's peaks, highest first, is matched to the nearest unmatched peak of the candidate in the same map within RADIUS
map pixels. Figures: **peak recall** (the headline: the share of FP32's peaks the candidate finds), pooled over images
with the bootstrap over images at least as wide as Wilson's (peaks of one image are not independent); peak precision
(the share of the candidate's peaks that are FP32's) likewise; and the mean **location error** of the matched peaks,
in map pixels. Labels are not read: the measure is agreement with FP32.
"""

from __future__ import annotations

import numpy as np

from trtpipe.errors import BadInput
from trtpipe.tasks.base import Fidelity, pooled_share
from trtpipe.vocab import Task

EXPECTED = "[N, K, H, W] heatmaps, one per keypoint or class (of several maps, the first output)"
THRESHOLD = 0.3  # a peak's least score (CenterNet's and CenterFace's demos keep centres above 0.3-0.5)
RADIUS = 2.0  # map pixels within which a candidate's peak is FP32's
MAX_PEAKS = 100  # per map, the highest
# Inferred (:func:`head`) only where the first map is sparse: at most this share of its values at THRESHOLD or above
MAX_HIGH_SHARE = 0.02


def fits(shape: tuple[int, ...]) -> bool:
    return len(shape) == 4 and min(shape[2:]) >= 3


def head(outputs: list[np.ndarray]) -> str | None:
    """The evidence that ``outputs`` (samples first) are a multi-map heatmap head, or None: two outputs or more, all
    maps ``[N, C, H, W]`` of one height and width (one stride: heatmap, sizes, offsets, landmarks), the first of
    scores already in 0..1 (logits are not told from regression maps) that are sparse (at most MAX_HIGH_SHARE of them
    at THRESHOLD or above) and peak on these samples."""
    shapes = [tuple(o.shape) for o in outputs]
    if len(outputs) < 2 or any(len(shape) != 4 for shape in shapes) or len({shape[2:] for shape in shapes}) != 1 \
            or not fits(shapes[0]):
        return None
    first = outputs[0]
    if first.size == 0 or not np.isfinite(first).all() or first.min() < 0 or first.max() > 1:
        return None
    high = float((first >= THRESHOLD).mean())
    found = sum(len(peaks(one_map)[0]) for image in first for one_map in image)
    if high > MAX_HIGH_SHARE or not found:
        return None
    return (f"{len(outputs)} maps of one size, the first {shapes[0][1]} channel(s) of scores in 0..1, sparse "
            f"({100 * high:.2f}% at {THRESHOLD:g} or above) with {found / len(first):.1f} peaks per sample: a keypoint "
            "or centre heatmap beside its regression maps; judged by peak recall and location error against FP32's "
            "peaks")


def scores(maps: np.ndarray) -> np.ndarray:
    """``maps`` as scores in 0..1: as they are where they already are, else through a sigmoid (logits)."""
    if maps.min() >= 0 and maps.max() <= 1:
        return maps
    return 1.0 / (1.0 + np.exp(-np.clip(maps, -60, 60)))


def peaks(score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One map's peaks [P, 2] (row, column), highest first, and their scores [P]."""
    padded = np.pad(score, 1, constant_values=-np.inf)
    rows, cols = score.shape
    neighbourhood = np.max([padded[dy:dy + rows, dx:dx + cols] for dy in range(3) for dx in range(3)], axis=0)
    found = np.argwhere((score >= neighbourhood) & (score >= THRESHOLD))
    values = score[found[:, 0], found[:, 1]]
    order = np.argsort(-values, kind="stable")[:MAX_PEAKS]
    return found[order].astype(np.float64), values[order]


def match(truth: np.ndarray, found: np.ndarray) -> list[float]:
    """The distances of FP32's peaks ``truth`` (highest first) matched one to one to the nearest unmatched peak of
    ``found`` within RADIUS."""
    if not len(truth) or not len(found):
        return []
    distances = np.linalg.norm(truth[:, None, :] - found[None, :, :], axis=-1)
    taken = np.zeros(len(found), dtype=bool)
    matched = []
    for row in distances:
        free = np.where(taken, np.inf, row)
        best = int(np.argmin(free))
        if free[best] <= RADIUS:
            taken[best] = True
            matched.append(float(free[best]))
    return matched


def measure(reference: np.ndarray, candidate: np.ndarray, labels: object | None) -> Fidelity:
    if labels is not None:
        raise BadInput("The heatmap measure reads no labels (it judges the candidate's peaks against FP32's own): "
                       "give data without labels, or --task generic.")
    if not fits(tuple(reference.shape)):
        raise BadInput(f"The heatmap measure expects {EXPECTED}; the model's output is {list(reference.shape)}.")
    ref_scores, cand_scores = scores(reference), scores(candidate)
    truths, founds, hits, errors = [], [], [], []
    for ref_image, cand_image in zip(ref_scores, cand_scores, strict=True):
        image_truth = image_found = image_hits = 0
        for ref_map, cand_map in zip(ref_image, cand_image, strict=True):
            truth, found = peaks(ref_map)[0], peaks(cand_map)[0]
            matched = match(truth, found)
            image_truth, image_found, image_hits = image_truth + len(truth), image_found + len(found), \
                image_hits + len(matched)
            errors += matched
        truths.append(image_truth)
        founds.append(image_found)
        hits.append(image_hits)
    hit, truth_count, found_count = np.array(hits), np.array(truths), np.array(founds)
    recall, recall_interval, recall_on = pooled_share(hit, truth_count)
    precision, precision_interval, _ = pooled_share(hit, found_count)
    figures = {"peak_precision": precision, "location_error_px": float(np.mean(errors)) if errors else 0.0,
               "reference_peaks_per_image": float(truth_count.mean()), "threshold": THRESHOLD}
    note = None if truth_count.sum() else (f"FP32's maps have no peak at {THRESHOLD:g} or above on these samples: "
                                           "the recall is vacuous")
    return Fidelity(Task.HEATMAP, recall, "peak recall vs FP32", figures, agreement_interval=recall_interval,
                    agreement_on=recall_on, figure_intervals={"peak_precision": precision_interval}, note=note)
