"""Calibration and evaluation data, from wherever the user keeps it, shaped for the model's input.

DATA is one of: ``digits`` (the bundled splits: calibration for --calib, eval for --eval), ``photos`` (seeded
crops of natural photos that installed packages ship; disjoint crops for calibration and eval; labelled by the FP32
model's own top-1), a ``.npy`` or ``.npz`` array file, a folder of images (for --eval: one subfolder per class,
classes in sorted order), or ``random`` (calibration only, and only for speed tests: ranges from noise say
nothing about real inputs). :class:`~trtpipe.models.data_spec.DataSpec` parses it, the same way the pipeline's
cache does.

Data is a batch (:mod:`trtpipe.inputs`): one array for a single-input model, else {input name: array}; a
multi-input model's ``.npz`` is keyed by input name (plus optional ``labels``). Every input's data is checked
against its :class:`~trtpipe.inputs.InputSpec` (names, fixed dimensions, dtype) when it is loaded. Sources that make
images (photos, image folders, packaged inputs) make them as the image input takes them: uint8 pixels for a uint8
input, channels last for an NHWC one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trtpipe import console
from trtpipe.errors import BadInput
from trtpipe.inputs import Batch, InputSpec, Layout, count, random_batch, take
from trtpipe.models.data_spec import DataKind, DataSpec
from trtpipe.shapes import format_shape
from trtpipe.vocab import ChannelOrder

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm"}
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
PACKAGED_SAMPLES = 16  # natural inputs drawn for a packaged model when no count is asked for
# Sources that make images at the model's input size, so they need the image input's every dimension fixed.
_SIZED_BY_MODEL = (DataKind.PHOTOS, DataKind.FOLDER)
_MAKES_IMAGES = (DataKind.DIGITS, DataKind.PHOTOS, DataKind.FOLDER, DataKind.PACKAGED)
LABEL_KEYS = ("labels", "y", "targets", "target")
BOX_KEYS = ("boxes", "classes", "image")  # a detector's label boxes: [M, 4] x1 y1 x2 y2, [M] class, [M] image index
IMAGE_KEYS = ("images", "x", "inputs", "input", "data")  # a single-input model's array in an .npz


@dataclass(frozen=True)
class ImagePreprocessing:
    """How an image file becomes a model input: resize the short side, center-crop, scale, normalise."""

    resize: int | None = None  # short side before the crop; None: crop size * 256/224, as torchvision does
    mean: tuple[float, ...] | None = None  # None: ImageNet's for 3 channels, 0.5 for 1 channel
    std: tuple[float, ...] | None = None
    channel_order: str = ChannelOrder.RGB


@dataclass(frozen=True)
class Dataset:
    images: Batch  # one array (N x ...) for a single-input model, else {input name: array}; each of its input's dtype
    labels: np.ndarray | None
    source: str
    reference_labels: bool = False  # unlabelled by nature: the FP32 model's top-1 is the label

    @property
    def sha256(self) -> str:
        if isinstance(self.images, np.ndarray):
            digest = hashlib.sha256(np.ascontiguousarray(self.images).tobytes())
        else:
            digest = hashlib.sha256()
            for name in sorted(self.images):
                array = np.ascontiguousarray(self.images[name])
                digest.update(f"{name}:{array.dtype}:{array.shape}".encode())
                digest.update(array.tobytes())
        if self.labels is not None:
            digest.update(np.ascontiguousarray(self.labels).tobytes())
        return digest.hexdigest()

    def __len__(self) -> int:
        return count(self.images)

    @property
    def array(self) -> np.ndarray:
        """The one array of a single input's data (what image sources make); TypeError for several inputs'."""
        if not isinstance(self.images, np.ndarray):
            raise TypeError(f"{self.source} holds several inputs ({', '.join(self.images)}), not one array")
        return self.images

    def fingerprints(self) -> list[str]:
        """One short SHA-256 per sample (every input's bytes): what tells whether two data sets share samples
        (the manifest records its calibration samples' so select can tell a figure measured on them)."""
        return sample_fingerprints(self.images)

    def head(self, samples: int) -> Dataset:
        """The first ``samples`` samples (and their labels)."""
        return Dataset(take(self.images, 0, samples), _first_labels(self.labels, samples), self.source,
                       self.reference_labels)

    def batches(self, size: int) -> list[Batch]:
        return [take(self.images, i, i + size) for i in range(0, len(self), size)]

    def subset(self, indices: np.ndarray, source: str) -> Dataset:
        """The samples at ``indices`` (ascending), with their labels: a row each, or a detector's boxes of those
        images renumbered to their new positions."""
        images = self.images[indices] if isinstance(self.images, np.ndarray) else \
            {name: array[indices] for name, array in self.images.items()}
        labels = self.labels
        if labels is not None and labels.dtype.names and "image" in labels.dtype.names:
            position = np.full(len(self), -1, np.int64)
            position[indices] = np.arange(len(indices))
            labels = labels[position[labels["image"]] >= 0].copy()
            labels["image"] = position[labels["image"]]
        elif labels is not None:
            labels = labels[indices]
        return Dataset(images, labels, source, self.reference_labels)


FINGERPRINT_CHARS = 16


def sample_fingerprints(batch: Batch) -> list[str]:
    """The first ``FINGERPRINT_CHARS`` hex digits of each sample's SHA-256 over every input (by name) of ``batch``."""
    arrays = [("", batch)] if isinstance(batch, np.ndarray) else sorted(batch.items())
    found = []
    for index in range(count(batch)):
        digest = hashlib.sha256()
        for name, array in arrays:
            sample = np.ascontiguousarray(array[index])
            digest.update(f"{name}:{sample.dtype}:{sample.shape}".encode())
            digest.update(sample.tobytes())
        found.append(digest.hexdigest()[:FINGERPRINT_CHARS])
    return found


def load_dataset(
    spec: str | DataSpec,
    inputs: InputSpec | tuple[InputSpec, ...] | list[InputSpec],
    *,
    purpose: str,
    samples: int | None = None,
    preprocessing: ImagePreprocessing | None = None,
) -> Dataset:
    """Load DATA for ``purpose`` ("calibration" or "eval") as a batch for the model's ``inputs``."""
    data = spec if isinstance(spec, DataSpec) else DataSpec.parse(spec)
    specs = (inputs,) if isinstance(inputs, InputSpec) else tuple(inputs)
    if data.kind is DataKind.RANDOM:
        dataset = _random(specs, purpose, samples)
    elif data.kind in _MAKES_IMAGES:
        image = _image_input(specs, data)
        dataset = _images(data, image, purpose, samples, preprocessing or ImagePreprocessing())
        if len(specs) > 1:
            dataset = _with_others(dataset, specs, image)
    else:
        assert data.path is not None
        dataset = _file(data.path, str(spec), purpose, specs)
    dataset = _checked(dataset, specs)
    if purpose == "eval" and dataset.labels is None and not dataset.reference_labels:
        raise BadInput(f"Evaluation data {dataset.source} has no labels: give an .npz with 'labels' (or 'y'), a "
                       "folder with one subfolder per class, or 'digits'.")
    if samples is not None and data.kind in (DataKind.FILE, DataKind.FOLDER, DataKind.DIGITS):  # others make `samples`
        if len(dataset) < samples:
            raise BadInput(f"{dataset.source} has {len(dataset)} samples; {samples} were asked for. Lower "
                           "--calib-samples or give more data.")
        dataset = dataset.head(samples)
    return dataset


def _first_labels(labels: np.ndarray | None, samples: int) -> np.ndarray | None:
    """The labels of the first ``samples`` samples: a row each, or a detector's boxes of those images."""
    if labels is None:
        return None
    if labels.dtype.names and "image" in labels.dtype.names:
        return labels[labels["image"] < samples]
    return labels[:samples]


def _box_labels(loaded: Any, path: Path) -> np.ndarray:
    """A detector's label boxes as one structured array (fields boxes [4], classes, image), the layout
    :func:`trtpipe.tasks.detect.label_detections` reads; BadInput when the arrays do not line up."""
    boxes, classes, image = (np.asarray(loaded[k]) for k in BOX_KEYS)
    if boxes.ndim != 2 or boxes.shape[1] != 4 or not len(boxes) == len(classes) == len(image):
        raise BadInput(f"{path}: label boxes need boxes [M, 4] (x1 y1 x2 y2), classes [M] and image [M]; got "
                       f"{list(boxes.shape)}, {list(classes.shape)} and {list(image.shape)}.")
    labels = np.empty(len(boxes), dtype=[("boxes", np.float32, (4,)), ("classes", np.int64), ("image", np.int64)])
    labels["boxes"], labels["classes"], labels["image"] = boxes, classes, image
    return labels


def _names(specs: tuple[InputSpec, ...]) -> str:
    return ", ".join(s.name for s in specs)


def _image_input(specs: tuple[InputSpec, ...], data: DataSpec) -> InputSpec:
    """The input that ``data``'s images go to: the only input, or the only image input of several."""
    if len(specs) == 1:
        return specs[0]
    images = [s for s in specs if s.layout is not None]
    if len(images) != 1:
        which = "none" if not images else ", ".join(s.name for s in images)
        raise BadInput(f"{data} data makes images for one input; the model takes {len(specs)} inputs "
                       f"({_names(specs)}; images: {which}): give a .npz keyed by input names ({_names(specs)}).")
    return images[0]


def _chw(image: InputSpec, data: DataSpec) -> tuple[int | None, ...]:
    """The image input's (channels, height, width), whatever its layout."""
    sample = image.sample_shape
    if len(sample) != 3:
        raise BadInput(f"Input '{image.name}' ({format_shape(image.shape)}) is not an image (C x H x W or H x W x C), "
                       f"and {data} data makes images: give a .npy/.npz of its samples.")
    return (sample[2], sample[0], sample[1]) if image.layout is Layout.NHWC else sample


def _images(data: DataSpec, image: InputSpec, purpose: str, samples: int | None,
            prep: ImagePreprocessing) -> Dataset:
    """Images for ``image``: uint8 pixels (0-255, not normalised) for a uint8 input, channels last for NHWC."""
    if data.kind is DataKind.DIGITS:  # the bundled arrays as they are: the data checks say what does not fit
        from trtpipe.models.data import load_split

        split_name = data.split or ("calibration" if purpose == "calibration" else "eval")
        split = load_split(DataKind.DIGITS, split_name)
        return Dataset(split.images, split.labels, f"digits {split_name} split")
    if image.dtype not in ("float32", "float16", "uint8"):
        raise BadInput(f"Input '{image.name}' takes {image.dtype}; {data} data makes float or uint8 images: give a "
                       ".npy/.npz of {image.dtype} samples.")
    raw, last = image.dtype == "uint8", image.layout is Layout.NHWC
    chw = _chw(image, data)
    fixed = tuple(d for d in chw if d is not None)  # all of chw where the model sizes the data
    if data.kind in _SIZED_BY_MODEL and len(fixed) != len(chw):
        example = "x".join("N" if d is None else str(d) for d in (1, *image.sample_shape))
        raise BadInput(f"Input '{image.name}' has dynamic dimensions ({format_shape(image.shape)}), and {data} data is "
                       f"made at the model's size: give --input-shape {image.name}:{example} with N filled in, or "
                       "data of the size to calibrate and measure at (.npy/.npz, or packaged:NAME for a packaged "
                       "model).")
    if data.kind is DataKind.PHOTOS:
        from trtpipe.models.photos import photo_crops

        channels = fixed[0]
        mean = prep.mean or (IMAGENET_MEAN if channels == 3 else (0.5,) * channels)
        std = prep.std or (IMAGENET_STD if channels == 3 else (0.5,) * channels)
        images = photo_crops(purpose, fixed, mean, std, samples, raw=raw, channels_last=last)
        return Dataset(images.astype(image.dtype, copy=False), None, f"{len(images)} {purpose} crops of packaged "
                       f"photos{' (uint8 pixels)' if raw else ''}", reference_labels=True)
    if data.kind is DataKind.PACKAGED:
        from trtpipe.models.packaged import natural_batch

        assert data.name is not None
        # Calibration and evaluation draw different images (seeds), as the other bundled sources do.
        batch = natural_batch(data.name, count=samples or PACKAGED_SAMPLES, seed=0 if purpose == "calibration" else 1,
                              size=_spatial(chw), raw=raw, channels_last=last)
        return Dataset(batch.inputs.astype(image.dtype, copy=False), None, f"{len(batch.inputs)} {purpose} inputs "
                       f"of {data.name}: {batch.source}", reference_labels=True)
    assert data.path is not None
    dataset = _image_folder(data.path, fixed, purpose, prep, raw=raw)
    images = dataset.array.transpose(0, 2, 3, 1) if last else dataset.array
    return Dataset(np.ascontiguousarray(images).astype(image.dtype, copy=False), dataset.labels, dataset.source)


def _with_others(dataset: Dataset, specs: tuple[InputSpec, ...], image: InputSpec) -> Dataset:
    """The image input's data with every other input drawn from its range (seeded), said in one line."""
    rng = np.random.default_rng(0)
    others = [s for s in specs if s is not image]
    drawn = "; ".join(s.describe_random() for s in others)
    console.warn(f"Only '{image.name}' has data from {dataset.source}; the other inputs are drawn at random ({drawn}). "
                 f"Give a .npz keyed by input names ({_names(specs)}) for real data.")
    size = len(dataset)
    batch = {s.name: dataset.array if s is image else s.random(size, rng) for s in specs}
    return Dataset(batch, dataset.labels, f"{dataset.source}, other inputs random ({drawn})",
                   dataset.reference_labels)


def _file(path: Path, spec: str, purpose: str, specs: tuple[InputSpec, ...]) -> Dataset:
    """An array file; anything else at ``path`` (or nothing) refused, with what DATA can be."""
    if path.suffix.lower() in (".npy", ".npz"):
        if not path.is_file():
            raise BadInput(f"{purpose.capitalize()} data {path} does not exist.")
        return _arrays(path, specs)
    if path.exists():
        raise BadInput(f"{path} is not calibration or evaluation data: give a .npy/.npz file, a folder of images, "
                       "'digits', 'photos' or 'random'.")
    raise BadInput(f"{purpose.capitalize()} data '{spec}' does not exist: give a .npy/.npz file, a folder of "
                   "images, 'digits', 'photos' or 'random'.")


def _random(specs: tuple[InputSpec, ...], purpose: str, samples: int | None) -> Dataset:
    """Seeded draws from every input's range (a float input without one: N(0, 1)), said in one line."""
    if purpose != "calibration":
        raise BadInput("'random' data has no labels and cannot measure accuracy: give --eval real labelled data.")
    batch = random_batch(specs, samples or 32, np.random.default_rng(0))  # a dynamic axis is refused here
    console.warn("CALIBRATING ON RANDOM NOISE. The INT8 ranges will not fit real inputs: use this artifact for "
                 "speed tests only, and calibrate on real data (--calib) before deploying it.")
    drawn = "; ".join(s.describe_random() for s in specs)
    console.note(f"Random calibration data drawn: {drawn}")
    return Dataset(batch, None, f"random noise ({drawn})")


def _arrays(path: Path, specs: tuple[InputSpec, ...]) -> Dataset:
    """A .npy (one input's samples) or a .npz: a single-input model's array under its input's name or a usual key
    (images, x, inputs, input, data; else the first), a multi-input model's keyed by input names; labels under
    labels, y, targets or target."""
    try:
        loaded = np.load(path, allow_pickle=False)
    except Exception as error:  # numpy raises ValueError/OSError/BadZipFile for damaged files
        raise BadInput(f"{path} is not a readable numpy file ({error}).") from None
    names = [s.name for s in specs]
    if isinstance(loaded, np.ndarray):
        if len(specs) > 1:
            raise BadInput(f"{path} holds one array; the model takes {len(specs)} inputs ({_names(specs)}): give a "
                           ".npz keyed by input names (plus optional 'labels').")
        return Dataset(loaded, None, str(path))
    with loaded:
        keys = list(loaded.keys())
        label_key = next((k for k in LABEL_KEYS if k in keys and k not in names), None)
        labels = loaded[label_key].astype(np.int64) if label_key else None
        box_keys = [k for k in BOX_KEYS if k in keys and k not in names]
        if len(box_keys) == len(BOX_KEYS):
            labels = _box_labels(loaded, path)
        # Without labels, evaluation is agreement with FP32 (a classifier's reference label is its FP32 top-1).
        unlabelled = labels is None
        if len(specs) == 1:
            default = keys[0] if keys else None
            image_key = names[0] if names[0] in keys else next((k for k in IMAGE_KEYS if k in keys), default)
            if image_key is None:
                raise BadInput(f"{path} holds no arrays.")
            return Dataset(loaded[image_key], labels, str(path), reference_labels=unlabelled)
        missing = [n for n in names if n not in keys]
        unknown = [k for k in keys if k not in names and k != label_key and k not in box_keys]
        if missing or unknown:
            raise BadInput(f"{path} holds {', '.join(keys) or 'no arrays'}; the model's inputs are {_names(specs)} "
                           f"(missing: {', '.join(missing) or 'none'}; unknown: {', '.join(unknown) or 'none'}): key "
                           "the .npz by input name, plus optional 'labels'.")
        return Dataset({n: loaded[n] for n in names}, labels, str(path), reference_labels=unlabelled)


def _spatial(sample_shape: tuple[int | None, ...]) -> tuple[int, int] | None:
    """The (height, width) a (C, H, W) sample shape fixes, or None where either is dynamic (the data's own size
    then)."""
    height, width = sample_shape[-2:] if len(sample_shape) >= 2 else (None, None)
    return (height, width) if isinstance(height, int) and isinstance(width, int) else None


def _checked(dataset: Dataset, specs: tuple[InputSpec, ...]) -> Dataset:
    """``dataset`` with every input's samples fitting its spec: the model's inputs, by name; every fixed dimension
    equal (a dynamic one any size); the input's dtype (integer data cast only where exact). BadInput naming the
    input, what it takes and what came, otherwise."""
    images = dataset.images
    if isinstance(images, np.ndarray):
        if len(specs) != 1:
            raise BadInput(f"{dataset.source} holds one array; the model takes {len(specs)} inputs ({_names(specs)}): "
                           "give a .npz keyed by input names.")
        conformed: Batch = _fit(images, specs[0], dataset.source, single=True)
    else:
        names = [s.name for s in specs]
        if set(images) != set(names):
            raise BadInput(f"{dataset.source} holds inputs {', '.join(images)}; the model takes {_names(specs)}.")
        conformed = {s.name: _fit(images[s.name], s, dataset.source, single=False) for s in specs}
    size = count(conformed)
    if size == 0:
        raise BadInput(f"{dataset.source} holds no samples.")
    labels = dataset.labels
    boxes = labels is not None and bool(labels.dtype.names)
    if labels is not None and boxes and len(labels) and int(labels["image"].max()) >= size:
        raise BadInput(f"{dataset.source} has {size} samples but label boxes for image {int(labels['image'].max())}.")
    if labels is not None and not boxes and len(labels) != size:
        raise BadInput(f"{dataset.source} has {size} samples but {len(labels)} labels.")
    return Dataset(conformed, dataset.labels, dataset.source, dataset.reference_labels)


def _fit(array: np.ndarray, spec: InputSpec, source: str, *, single: bool) -> np.ndarray:
    array = np.asarray(array)
    where = "" if single else f" for input '{spec.name}'"
    if array.ndim == 0 or len(array) == 0:
        raise BadInput(f"{source} holds no samples{where}.")
    want, got = spec.sample_shape, tuple(array.shape[1:])
    if len(got) != len(want) or any(w is not None and w != g for w, g in zip(want, got, strict=False)):
        hint = ""
        if len(want) == 3 and spec.layout is not Layout.NHWC and got == (*want[1:], want[0]):
            hint = " It looks channels-last (NHWC): transpose it to NCHW."
        elif len(want) == 3 and spec.layout is Layout.NHWC and got == (want[2], *want[:2]):
            hint = " It looks channels-first (NCHW): transpose it to NHWC."
        raise BadInput(f"{source} has samples of shape {format_shape(got)}{where} (batch {format_shape(array.shape)}); "
                       f"the model takes {format_shape(want)}{'' if single else ' there'}.{hint}")
    return _dtype(array, spec, source)


def _dtype(array: np.ndarray, spec: InputSpec, source: str) -> np.ndarray:
    """``array`` as ``spec``'s dtype: float data for a float input; for an integer input, integer data, or float
    data only where every value is a whole number its dtype holds (the cast is exact)."""
    want = np.dtype(spec.dtype)
    if array.dtype == want:
        return array
    if array.dtype.kind not in "biuf":
        raise BadInput(f"Input '{spec.name}' takes {spec.dtype}; {source} gives {array.dtype} data.")
    if not spec.is_integer:
        return array.astype(want)
    if spec.dtype == "bool":
        exact, held = bool(np.isin(array, (0, 1)).all()), "0 or 1"
    else:
        info = np.iinfo(want)
        held = f"whole numbers in [{info.min}, {info.max}]"
        whole = array.dtype.kind != "f" or (bool(np.isfinite(array).all()) and bool((array == np.round(array)).all()))
        exact = whole and float(array.min()) >= info.min and float(array.max()) <= info.max
    if not exact:
        raise BadInput(f"Input '{spec.name}' takes {spec.dtype}; {source} gives {array.dtype} data that is not all "
                       f"{held} (min {float(array.min()):g}, max {float(array.max()):g}): give {spec.dtype} data.")
    return array.astype(want)


def _image_folder(folder: Path, sample_shape: tuple[int, ...], purpose: str,
                  preprocessing: ImagePreprocessing, *, raw: bool = False) -> Dataset:
    """The folder's images as N x C x H x W: normalised float32, or uint8 pixels (``raw``)."""
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
    images = np.stack([_read_image(f, sample_shape, preprocessing, raw=raw) for f, _ in files])
    labels = np.asarray([label for _, label in files], dtype=np.int64) if purpose == "eval" else None
    return Dataset(images, labels, f"{folder} ({len(files)} images)")


def _read_image(path: Path, sample_shape: tuple[int, ...], prep: ImagePreprocessing, *,
                raw: bool = False) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    channels, height, width = sample_shape
    try:
        with Image.open(path) as opened:
            image = opened.convert("L" if channels == 1 else "RGB")
            short = prep.resize or round(min(height, width) * 256 / 224)
            scale = short / min(image.size)
            image = image.resize((max(width, round(image.size[0] * scale)), max(height, round(image.size[1] * scale))),
                                 Image.Resampling.BILINEAR)
            left, top = (image.size[0] - width) // 2, (image.size[1] - height) // 2
            array = np.asarray(image.crop((left, top, left + width, top + height)))
    except (UnidentifiedImageError, OSError) as error:
        raise BadInput(f"Cannot read image {path} ({error}).") from None
    array = array[None] if channels == 1 else array.transpose(2, 0, 1)
    if channels == 3 and prep.channel_order == ChannelOrder.BGR:
        array = array[::-1]
    if raw:
        return np.ascontiguousarray(array, dtype=np.uint8)
    array = array.astype(np.float32) / 255.0
    mean = np.asarray(prep.mean or (IMAGENET_MEAN if channels == 3 else (0.5,) * channels), np.float32)
    std = np.asarray(prep.std or (IMAGENET_STD if channels == 3 else (0.5,) * channels), np.float32)
    return ((array - mean[:, None, None]) / std[:, None, None]).astype(np.float32)
