"""Calibration and evaluation data, from wherever the user keeps it, shaped for the model's input.

DATA is one of: ``digits`` (the bundled splits: calibration for --calib, eval for --eval), ``photos`` (seeded
crops of natural photos that installed packages ship; disjoint crops for calibration and eval; labelled by the FP32
model's own top-1), a ``.npy`` or ``.npz`` array file, a folder of images (for --eval: one subfolder per class,
classes in sorted order), or ``random`` (calibration only, and only for speed tests: ranges from noise say
nothing about real inputs). :class:`~trtpipe.models.data_spec.DataSpec` parses it, the same way the pipeline's
cache does.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trtpipe import console
from trtpipe.errors import BadInput
from trtpipe.models.data_spec import DataKind, DataSpec
from trtpipe.shapes import format_shape
from trtpipe.vocab import ChannelOrder

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm"}
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
PACKAGED_SAMPLES = 16  # natural inputs drawn for a packaged model when no count is asked for
# Sources that make samples at the model's input size, so they need every dimension fixed.
_SIZED_BY_MODEL = (DataKind.RANDOM, DataKind.PHOTOS, DataKind.FOLDER)


@dataclass(frozen=True)
class ImagePreprocessing:
    """How an image file becomes a model input: resize the short side, center-crop, scale, normalise."""

    resize: int | None = None  # short side before the crop; None: crop size * 256/224, as torchvision does
    mean: tuple[float, ...] | None = None  # None: ImageNet's for 3 channels, 0.5 for 1 channel
    std: tuple[float, ...] | None = None
    channel_order: str = ChannelOrder.RGB


@dataclass(frozen=True)
class Dataset:
    images: np.ndarray  # float32 N x C x H x W
    labels: np.ndarray | None
    source: str
    reference_labels: bool = False  # unlabelled by nature: the FP32 model's top-1 is the label

    @property
    def sha256(self) -> str:
        digest = hashlib.sha256(np.ascontiguousarray(self.images).tobytes())
        if self.labels is not None:
            digest.update(np.ascontiguousarray(self.labels).tobytes())
        return digest.hexdigest()

    def __len__(self) -> int:
        return len(self.images)

    def batches(self, size: int) -> list[np.ndarray]:
        return [self.images[i : i + size] for i in range(0, len(self.images), size)]


def load_dataset(
    spec: str | DataSpec,
    sample_shape: tuple[int | None, ...],
    *,
    purpose: str,
    samples: int | None = None,
    preprocessing: ImagePreprocessing | None = None,
) -> Dataset:
    """Load DATA for ``purpose`` ("calibration" or "eval") as inputs of shape ``sample_shape`` (C, H, W)."""
    data = spec if isinstance(spec, DataSpec) else DataSpec.parse(spec)
    if data.kind in _SIZED_BY_MODEL and any(d is None for d in sample_shape):
        raise BadInput(f"The model's input has dynamic dimensions ({format_shape(sample_shape)}), and {data} data is "
                       "made at the model's size: give data of the size to calibrate and measure at (.npy/.npz, "
                       "or packaged:NAME for a packaged model).")
    if data.kind is DataKind.RANDOM:
        dataset = _random(sample_shape, purpose, samples)
    elif data.kind is DataKind.DIGITS:
        from trtpipe.models.data import load_split

        split_name = data.split or ("calibration" if purpose == "calibration" else "eval")
        split = load_split(DataKind.DIGITS, split_name)
        dataset = Dataset(split.images, split.labels, f"digits {split_name} split")
    elif data.kind is DataKind.PHOTOS:
        from trtpipe.models.photos import photo_crops

        prep = preprocessing or ImagePreprocessing()
        channels = sample_shape[0]
        mean = prep.mean or (IMAGENET_MEAN if channels == 3 else (0.5,) * channels)
        std = prep.std or (IMAGENET_STD if channels == 3 else (0.5,) * channels)
        images = photo_crops(purpose, sample_shape, mean, std, samples)
        dataset = Dataset(images, None, f"{len(images)} {purpose} crops of packaged photos", reference_labels=True)
    elif data.kind is DataKind.PACKAGED:
        from trtpipe.models.packaged import natural_batch

        assert data.name is not None
        # Calibration and evaluation draw different images (seeds), as the other bundled sources do.
        batch = natural_batch(data.name, count=samples or PACKAGED_SAMPLES, seed=0 if purpose == "calibration" else 1,
                              size=_spatial(sample_shape))
        dataset = Dataset(batch.inputs, None, f"{len(batch.inputs)} {purpose} inputs of {data.name}: "
                          f"{batch.source}", reference_labels=True)
    elif data.kind is DataKind.FOLDER:
        assert data.path is not None
        dataset = _image_folder(data.path, sample_shape, purpose, preprocessing or ImagePreprocessing())
    else:
        assert data.path is not None
        dataset = _file(data.path, str(spec), purpose)
    _check_layout(dataset, sample_shape)
    if purpose == "eval" and dataset.labels is None and not dataset.reference_labels:
        raise BadInput(f"Evaluation data {dataset.source} has no labels: give an .npz with 'labels' (or 'y'), a "
                       "folder with one subfolder per class, or 'digits'.")
    if samples is not None and not dataset.reference_labels:
        if len(dataset) < samples:
            raise BadInput(f"{dataset.source} has {len(dataset)} samples; {samples} were asked for. Lower "
                           "--calib-samples or give more data.")
        dataset = Dataset(dataset.images[:samples],
                          None if dataset.labels is None else dataset.labels[:samples], dataset.source)
    return dataset


def _file(path: Path, spec: str, purpose: str) -> Dataset:
    """An array file; anything else at ``path`` (or nothing) refused, with what DATA can be."""
    if path.suffix.lower() in (".npy", ".npz"):
        if not path.is_file():
            raise BadInput(f"{purpose.capitalize()} data {path} does not exist.")
        return _arrays(path)
    if path.exists():
        raise BadInput(f"{path} is not calibration or evaluation data: give a .npy/.npz file, a folder of images, "
                       "'digits', 'photos' or 'random'.")
    raise BadInput(f"{purpose.capitalize()} data '{spec}' does not exist: give a .npy/.npz file, a folder of "
                   "images, 'digits', 'photos' or 'random'.")


def _random(sample_shape: tuple[int, ...], purpose: str, samples: int | None) -> Dataset:
    if purpose != "calibration":
        raise BadInput("'random' data has no labels and cannot measure accuracy: give --eval real labelled data.")
    console.warn("CALIBRATING ON RANDOM NOISE. The INT8 ranges will not fit real inputs: use this artifact for "
                 "speed tests only, and calibrate on real data (--calib) before deploying it.")
    rng = np.random.default_rng(0)
    return Dataset(rng.standard_normal((samples or 32, *sample_shape), dtype=np.float32), None, "random noise")


def _arrays(path: Path) -> Dataset:
    try:
        loaded = np.load(path, allow_pickle=False)
    except Exception as error:  # numpy raises ValueError/OSError/BadZipFile for damaged files
        raise BadInput(f"{path} is not a readable numpy file ({error}).") from None
    if isinstance(loaded, np.ndarray):
        return Dataset(np.asarray(loaded, dtype=np.float32), None, str(path))
    with loaded:
        keys = list(loaded.keys())
        default = keys[0] if keys else None
        image_key = next((k for k in ("images", "x", "inputs", "input", "data") if k in keys), default)
        label_key = next((k for k in ("labels", "y", "targets", "target") if k in keys), None)
        if image_key is None:
            raise BadInput(f"{path} holds no arrays.")
        labels = loaded[label_key].astype(np.int64) if label_key else None
        return Dataset(np.asarray(loaded[image_key], dtype=np.float32), labels, str(path))


def _spatial(sample_shape: tuple[int | None, ...]) -> tuple[int, int] | None:
    """The (height, width) a sample shape fixes, or None where either is dynamic (the data's own size then)."""
    height, width = sample_shape[-2:] if len(sample_shape) >= 2 else (None, None)
    return (height, width) if isinstance(height, int) and isinstance(width, int) else None


def _check_layout(dataset: Dataset, sample_shape: tuple[int | None, ...]) -> None:
    """The samples fit the model's input: every fixed dimension equal, a dynamic one (None) any size."""
    images = dataset.images
    if len(images) == 0:
        raise BadInput(f"{dataset.source} holds no samples.")
    got = tuple(images.shape[1:])
    if len(got) == len(sample_shape) and all(want is None or want == have for want, have in zip(sample_shape, got,
                                                                                                   strict=True)):
        if dataset.labels is not None and len(dataset.labels) != len(images):
            raise BadInput(f"{dataset.source} has {len(images)} samples but {len(dataset.labels)} labels.")
        return
    hint = ""
    if len(sample_shape) == 3 and got == (*sample_shape[1:], sample_shape[0]):
        hint = " It looks channels-last (NHWC): transpose it to NCHW."
    raise BadInput(f"{dataset.source} has samples of shape {format_shape(got)} (NCHW batch "
                   f"{format_shape(images.shape)}); the model takes {format_shape(sample_shape)}.{hint}")


def _image_folder(folder: Path, sample_shape: tuple[int, ...], purpose: str,
                  preprocessing: ImagePreprocessing) -> Dataset:
    if purpose == "eval":
        classes = sorted(p for p in folder.iterdir() if p.is_dir())
        if not classes:
            raise BadInput(f"Evaluation folder {folder} has no class subfolders: put each class's images in a "
                           "subfolder named after it.")
        files = [(f, index) for index, cls in enumerate(classes) for f in sorted(cls.rglob("*"))
                 if f.suffix.lower() in IMAGE_SUFFIXES]
    else:
        files = [(f, -1) for f in sorted(folder.rglob("*")) if f.suffix.lower() in IMAGE_SUFFIXES]
    if not files:
        raise BadInput(f"{folder} holds no images ({', '.join(sorted(IMAGE_SUFFIXES))}).")
    images = np.stack([_read_image(f, sample_shape, preprocessing) for f, _ in files])
    labels = np.asarray([label for _, label in files], dtype=np.int64) if purpose == "eval" else None
    return Dataset(images, labels, f"{folder} ({len(files)} images)")


def _read_image(path: Path, sample_shape: tuple[int, ...], prep: ImagePreprocessing) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    channels, height, width = sample_shape
    try:
        with Image.open(path) as image:
            image = image.convert("L" if channels == 1 else "RGB")
            short = prep.resize or round(min(height, width) * 256 / 224)
            scale = short / min(image.size)
            image = image.resize((max(width, round(image.size[0] * scale)), max(height, round(image.size[1] * scale))),
                                 Image.Resampling.BILINEAR)
            left, top = (image.size[0] - width) // 2, (image.size[1] - height) // 2
            array = np.asarray(image.crop((left, top, left + width, top + height)), dtype=np.float32) / 255.0
    except (UnidentifiedImageError, OSError) as error:
        raise BadInput(f"Cannot read image {path} ({error}).") from None
    array = array[None] if channels == 1 else array.transpose(2, 0, 1)
    if channels == 3 and prep.channel_order == ChannelOrder.BGR:
        array = array[::-1]
    mean = np.asarray(prep.mean or (IMAGENET_MEAN if channels == 3 else (0.5,) * channels), np.float32)
    std = np.asarray(prep.std or (IMAGENET_STD if channels == 3 else (0.5,) * channels), np.float32)
    return ((array - mean[:, None, None]) / std[:, None, None]).astype(np.float32)
