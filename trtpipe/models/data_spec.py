"""What a user names as DATA (``--calib``, ``--eval``, the pipeline file's ``calib``/``eval``), parsed once.

DATA is a bundled name (``digits`` or ``digits:SPLIT``, ``photos``, ``random``) or a path: a folder of images, or a
file (``.npy``/``.npz``). A bundled name wins over a file or folder of the same name. Standard library only: the
optimize stage loads the data from this value and the pipeline keys its cache on it, so both read the grammar
the same way, and neither needs numpy to do it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path


class DataKind(StrEnum):
    DIGITS = "digits"  # the bundled digits data set; calibration split for calibration, eval split for eval
    PHOTOS = "photos"  # seeded crops of the photos that installed packages ship (trtpipe.models.photos)
    RANDOM = "random"  # seeded noise: calibration for speed tests only
    FILE = "file"  # a .npy/.npz array file (or a path that is neither file nor folder: the loader says so)
    FOLDER = "folder"  # a folder of images
    PACKAGED = "packaged"  # packaged:NAME, the natural inputs of a model shipped as ONNX in a wheel (models.packaged)


DIGITS_SPLITS = ("train", "calibration", "eval")  # digits:SPLIT names one of these


@dataclass(frozen=True)
class DataSpec:
    kind: DataKind
    path: Path | None = None  # FILE and FOLDER: where the data is
    split: str | None = None  # DIGITS: the split named after the colon; None: the split for the purpose
    name: str | None = None  # PACKAGED: the packaged model whose inputs these are

    @classmethod
    def parse(cls, text: str) -> DataSpec:
        """``text`` as DATA; ``digits:`` with an unknown split is a path (that the loader will not find)."""
        name, colon, split = text.partition(":")
        if name == DataKind.DIGITS and (not colon or split in DIGITS_SPLITS):
            return cls(DataKind.DIGITS, split=split or None)
        if text in (DataKind.PHOTOS, DataKind.RANDOM):
            return cls(DataKind(text))
        if name == DataKind.PACKAGED and colon and split:
            return cls(DataKind.PACKAGED, name=split)
        path = Path(text)
        return cls(DataKind.FOLDER if path.is_dir() else DataKind.FILE, path=path)

    def __str__(self) -> str:
        """As the user would write it."""
        if self.path is not None:
            return str(self.path)
        if self.name is not None:
            return f"{self.kind}:{self.name}"
        return f"{self.kind}:{self.split}" if self.split else str(self.kind)
