"""What every model source gives back, and the one shape a source has (:class:`ModelSource`).

A PyTorch source (a registry name, a file, user code) finds a :class:`Found`: a module and what the source says of
its inputs and data. An ONNX source (a file, a packaged model) finds an :class:`OnnxFound`: the file, and what the
source knows of it beyond its graph (its task, its decoder, the size and data its inputs are made at). Light at
import (no torch, no numpy): the pipeline file's reader asks the table which source a MODEL names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from trtpipe.errors import BadInput

if TYPE_CHECKING:
    from torch import nn

    from trtpipe.inputs import InputSpec
    from trtpipe.models.packaged import PackagedBatch, PackagedOnnx
    from trtpipe.tasks.detect import Decoder
    from trtpipe.vocab import Task

Shape = tuple[int, ...] | dict[str, tuple[int, ...]]


@dataclass
class Found:
    """A module and where it came from, before its inputs are resolved."""

    module: nn.Module
    name: str
    source: str
    kind: str
    shape: Shape | None  # what the source itself says (registry, attribute)
    sha256: str | None
    dataset: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    no_shape: str = "The model does not say its input shape: pass --input-shape (e.g. 1x3x224x224)."


@dataclass(frozen=True)
class OnnxFound:
    """An ONNX file MODEL names, and what its source knows beyond the graph: for a packaged model (``packaged``) its
    name, task, decoder, the size its image input is made at and its natural inputs; for a plain file, nothing."""

    path: Path
    packaged: PackagedOnnx | None = None

    @property
    def name(self) -> str | None:
        """The source's own name for the model (a packaged model's), else None: it is named after its file."""
        return self.packaged.name if self.packaged is not None else None

    @property
    def task(self) -> Task | None:
        return self.packaged.task if self.packaged is not None else None

    @property
    def data_spec(self) -> str | None:
        """The DATA spec of the source's own inputs (``packaged:NAME``), else None: it brings no data."""
        return packaged_data(self.packaged.name) if self.packaged is not None else None

    def decoder(self) -> Decoder | None:
        """The detect measure's decoder the source brings for its head, else None."""
        return self.packaged.decoder() if self.packaged is not None else None

    def check_inputs(self, count: int) -> None:
        """A packaged model's natural inputs feed one image input: refuse a file of several."""
        if self.packaged is not None and count != 1:
            raise BadInput(f"Packaged model {self.packaged.name} has {count} inputs; its natural inputs feed one.")

    def sample_dims(self, index: int, dims: tuple[int | str | None, ...]) -> tuple[int, ...] | None:
        """The per-sample size (all but the batch) the source makes input ``index`` at where its graph ``dims``
        leave axes free (a packaged model's image: its channels at its own height and width), else None."""
        if self.packaged is None or index != 0 or len(dims) < 2:
            return None
        channels = dims[1] if isinstance(dims[1], int) else 3
        return (channels, *self.packaged.preprocessing.size.size)

    def natural_batch(self, image: InputSpec, count: int, seed: int) -> PackagedBatch | None:
        """``count`` seeded natural inputs for ``image`` (its size, dtype and layout), made with the source's own
        preprocessing; None where the source brings no data."""
        if self.packaged is None:
            return None
        from trtpipe.inputs import Layout
        from trtpipe.models.packaged import natural_batch

        last = image.layout is Layout.NHWC
        sample = tuple(int(d or 1) for d in image.shape[1:])
        height, width = sample[:2] if last else sample[-2:]
        return natural_batch(self.packaged.name, count=count, seed=seed, size=(height, width),
                             raw=image.dtype == "uint8", channels_last=last)


class ModelSource(Protocol):
    """One kind of model source: which MODEL specs it claims, and what it finds for one. ``find`` gives a PyTorch
    module (an ONNX source refuses with the line that says where ONNX goes); ``onnx`` gives the ONNX file (None for
    a PyTorch source); ``natural_data`` the DATA spec of the inputs the source brings of its own, read without
    opening a file (None: none). ``claims`` is cheap and loads nothing: the table asks each kind in turn."""

    kind: ClassVar[str]

    def claims(self, spec: str) -> bool: ...

    def find(self, spec: str, arch: str | None, trust: bool) -> Found: ...

    def onnx(self, spec: str) -> OnnxFound | None: ...

    def natural_data(self, spec: str) -> str | None: ...


class PytorchSource:
    """A source of PyTorch modules: it names no ONNX file, and its data comes with the module it finds
    (:attr:`Found.dataset`)."""

    def onnx(self, spec: str) -> OnnxFound | None:
        return None

    def natural_data(self, spec: str) -> str | None:
        return None


def packaged_data(name: str) -> str:
    """The DATA spec of packaged model ``name``'s natural inputs."""
    from trtpipe.models.data_spec import DataKind

    return f"{DataKind.PACKAGED}:{name}"


def declared_shape(obj: Any) -> Shape | None:
    """An ``input_shape`` attribute: a shape (the only or first input's), or {input name: shape}."""
    shape = getattr(obj, "input_shape", None)
    if isinstance(shape, Mapping):
        shapes = {str(name): _shape_value(value) for name, value in shape.items()}
        return {k: v for k, v in shapes.items() if v is not None} if all(shapes.values()) and shapes else None
    return _shape_value(shape)


def _shape_value(shape: Any) -> tuple[int, ...] | None:
    if isinstance(shape, (tuple, list)) and shape and all(isinstance(d, int) and d > 0 for d in shape):
        return tuple(shape)
    return None


def name_from(path: Path) -> str:
    """A model's name from its file: the stem, with anything but letters, digits, '_', '.' and '-' made '_'."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", path.stem) or "model"
