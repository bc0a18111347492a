"""Every kind of model source MODEL may name, one module each, and the one table that orders them.

A kind is a class with ``kind``, ``claims(spec)``, ``find(spec, arch, trust)`` (the PyTorch module, a
:class:`~trtpipe.models.sources.base.Found`) and ``onnx(spec)`` (the ONNX file, an
:class:`~trtpipe.models.sources.base.OnnxFound`, or None): see :class:`~trtpipe.models.sources.base.ModelSource`.
The first kind in :data:`SOURCES` that claims a spec resolves it; the registry, last, claims every name left.
Adding a kind of source is its own module here and one line in :data:`SOURCES`; nothing else asks what kind a
MODEL is (:func:`trtpipe.models.loader.load_model` resolves its inputs and data from what the kind found; bench,
optimize and the pipeline file ask :func:`onnx_source` and :func:`for_file`).

Light at import (no torch, no numpy): each kind loads what it needs when it finds.
"""

from __future__ import annotations

from trtpipe.models.sources.base import Found, ModelSource, OnnxFound
from trtpipe.models.sources.onnx_file import OnnxFile, for_file
from trtpipe.models.sources.packaged_name import PackagedName
from trtpipe.models.sources.pytorch_file import PytorchFile
from trtpipe.models.sources.registry_name import RegistryName
from trtpipe.models.sources.user_code import UserCode

# In the order they are asked: user code before files (a 'file.py:make' that exists is a file), a packaged name
# before files and the registry, and the registry last (it claims every name left, and suggests close ones).
SOURCES: tuple[ModelSource, ...] = (
    UserCode(),
    PackagedName(),
    OnnxFile(),
    PytorchFile(),
    RegistryName(),
)


def source_for(spec: str) -> ModelSource:
    """The kind of source ``spec`` names: the first in :data:`SOURCES` that claims it (loads nothing)."""
    return next(source for source in SOURCES if source.claims(spec))


def find_module(spec: str, arch: str | None, trust: bool) -> Found:
    """The PyTorch module ``spec`` names (``arch``: a state_dict's architecture; ``trust``: full unpickling)."""
    return source_for(spec).find(spec, arch, trust)


def onnx_source(spec: str) -> OnnxFound | None:
    """The ONNX file ``spec`` names (a packaged model's name or a .onnx path), or None for a PyTorch model."""
    return source_for(spec).onnx(spec)


def natural_data(spec: str) -> str | None:
    """The DATA spec of the inputs the source ``spec`` names brings of its own (``packaged:NAME``), else None:
    read without opening any file, so the pipeline file can default its variants' data."""
    return source_for(spec).natural_data(spec)


__all__ = ["SOURCES", "Found", "ModelSource", "OnnxFound", "find_module", "for_file", "natural_data", "onnx_source",
           "source_for"]
