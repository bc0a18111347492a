"""Labelled data sets that ship with a package, loadable by name.

``digits`` is scikit-learn's 1,797 8x8 handwritten digits, upsampled to 1x32x32 and split (stratified, fixed
seed) into train / calibration / eval. The eval split is held out from training and calibration alike and is
kept as large as training allows, because a 0.5-point accuracy change must be more than one image.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from trtpipe.errors import BadInput

SPLIT_SEED = 0
DIGITS_SPLIT_SIZES = {"train": 800, "calibration": 150}  # the eval split gets the remaining 847 images
DIGITS_IMAGE_SIZE = 32
DIGITS_MEAN = 0.5
DIGITS_STD = 0.5


@dataclass(frozen=True)
class LabelledSplit:
    name: str
    images: np.ndarray  # float32, N x C x H x W, already preprocessed for the model
    labels: np.ndarray  # int64, N

    def __len__(self) -> int:
        return len(self.labels)


def preprocess_digits(raw: np.ndarray) -> np.ndarray:
    """8x8 images with values 0..16 -> float32 N x 1 x 32 x 32, bilinear upsampling, scaled to [-1, 1]."""
    import torch
    import torch.nn.functional as F

    x = torch.from_numpy(raw.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
    x = F.interpolate(x, size=(DIGITS_IMAGE_SIZE, DIGITS_IMAGE_SIZE), mode="bilinear", align_corners=False)
    return ((x - DIGITS_MEAN) / DIGITS_STD).numpy().astype(np.float32)


@lru_cache(maxsize=1)
def _digits_splits() -> dict[str, LabelledSplit]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = preprocess_digits(digits.images)
    labels = digits.target.astype(np.int64)
    index = np.arange(len(labels))
    n_keep = DIGITS_SPLIT_SIZES["train"] + DIGITS_SPLIT_SIZES["calibration"]
    kept, eval_idx = train_test_split(index, train_size=n_keep, stratify=labels, random_state=SPLIT_SEED)
    train_idx, calib_idx = train_test_split(
        kept, train_size=DIGITS_SPLIT_SIZES["train"], stratify=labels[kept], random_state=SPLIT_SEED
    )
    return {
        name: LabelledSplit(name, images[np.sort(idx)], labels[np.sort(idx)])
        for name, idx in (("train", train_idx), ("calibration", calib_idx), ("eval", eval_idx))
    }


DATASETS = {"digits": _digits_splits}


def load_split(dataset: str, split: str) -> LabelledSplit:
    """Load ``split`` (train, calibration, eval) of a bundled data set."""
    if dataset not in DATASETS:
        raise BadInput(f"Unknown data set '{dataset}': the bundled ones are {', '.join(DATASETS)}.")
    splits = DATASETS[dataset]()
    if split not in splits:
        raise BadInput(f"Data set '{dataset}' has no split '{split}': it has {', '.join(splits)}.")
    return splits[split]
