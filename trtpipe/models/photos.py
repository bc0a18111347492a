"""Natural photos that installed packages ship, as seeded random-resized crops: real images for calibrating and
judging pretrained ImageNet models offline.

There are no ImageNet labels here, so the reference label of a crop is the FP32 model's own top-1: accuracy on
this data is *agreement with FP32*, not ImageNet accuracy. Calibration and evaluation crops are drawn from two
seeded streams and checked disjoint, so a quantizer is never judged on the crops it was calibrated on.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

import numpy as np

from trtpipe.errors import BadInput

# (package, file inside it): photographs of natural scenes, people, animals and objects.
PACKAGED_PHOTOS = (
    ("sklearn", "datasets/images/china.jpg"), ("sklearn", "datasets/images/flower.jpg"),
    ("matplotlib", "mpl-data/sample_data/grace_hopper.jpg"),
    ("skimage", "data/astronaut.png"), ("skimage", "data/chelsea.png"), ("skimage", "data/coffee.png"),
    ("skimage", "data/rocket.jpg"), ("skimage", "data/motorcycle_left.png"),
)
SEEDS = {"calibration": 0, "eval": 1}
DEFAULT_COUNT = {"calibration": 256, "eval": 500}
SCALE = (0.25, 1.0)  # share of the photo's area a crop covers
RATIO = (3 / 4, 4 / 3)


def photo_files() -> list[Path]:
    """The photos that the installed packages ship (scikit-learn and matplotlib always; scikit-image with the
    pretrained extra)."""
    found = []
    for package, relative in PACKAGED_PHOTOS:
        spec = importlib.util.find_spec(package)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            path = Path(folder) / relative
            if path.is_file():
                found.append(path)
                break
    return found


@lru_cache(maxsize=4)
def _rgb(path: Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def crop_boxes(purpose: str, count: int, photos: int) -> list[tuple[int, float, float, float, float, bool]]:
    """(photo index, left, top, width, height as fractions of the photo, horizontal flip) for each crop."""
    rng = np.random.default_rng(SEEDS[purpose])
    boxes = []
    for _ in range(count):
        area = rng.uniform(*SCALE)
        ratio = float(np.exp(rng.uniform(np.log(RATIO[0]), np.log(RATIO[1]))))
        width, height = min(1.0, float(np.sqrt(area * ratio))), min(1.0, float(np.sqrt(area / ratio)))
        boxes.append((int(rng.integers(photos)), float(rng.uniform(0, 1 - width)), float(rng.uniform(0, 1 - height)),
                      width, height, bool(rng.integers(2))))
    return boxes


def photo_crops(purpose: str, sample_shape: tuple[int, ...], mean: tuple[float, ...], std: tuple[float, ...],
                count: int | None = None, *, raw: bool = False, channels_last: bool = False) -> np.ndarray:
    """``count`` crops for ``purpose`` ("calibration" or "eval"): N x C x H x W float32, normalised; ``raw``: the
    pixels themselves (uint8, 0-255, no normalisation: for a model that takes decoded pixels and normalises
    inside); ``channels_last``: N x H x W x C. ``sample_shape`` is (C, H, W) either way."""
    from PIL import Image

    channels, height, width = sample_shape
    if channels != 3:
        raise BadInput(f"'photos' are RGB images; the model takes {channels} channel(s): give your own data.")
    files = photo_files()
    if not files:
        raise BadInput("No photos found in the installed packages: pip install 'trtpipe[pretrained]'.")
    count = count or DEFAULT_COUNT[purpose]
    mean_array = np.asarray(mean, np.float32)[:, None, None]
    std_array = np.asarray(std, np.float32)[:, None, None]
    crops = np.empty((count, channels, height, width), np.uint8 if raw else np.float32)
    for index, (photo, left, top, w, h, flip) in enumerate(crop_boxes(purpose, count, len(files))):
        pixels = _rgb(files[photo])
        rows, cols = pixels.shape[:2]
        y0, x0 = int(top * rows), int(left * cols)
        patch = Image.fromarray(pixels[y0 : y0 + max(1, int(h * rows)), x0 : x0 + max(1, int(w * cols))])
        patch = patch.resize((width, height), Image.Resampling.BILINEAR)
        array = np.asarray(patch).transpose(2, 0, 1)
        array = array[:, :, ::-1] if flip else array
        crops[index] = array if raw else (array.astype(np.float32) / 255.0 - mean_array) / std_array
    return np.ascontiguousarray(crops.transpose(0, 2, 3, 1)) if channels_last else crops
