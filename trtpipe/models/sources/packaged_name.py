"""MODEL as a packaged model's name (``ppocrv4_det``, ``picodet_layout_cdla``): a trained ONNX file inside an
installed wheel, checked by its SHA-256, with its own task, decoder, input size and natural inputs
(:mod:`trtpipe.models.packaged` holds the table of them and draws the inputs)."""

from __future__ import annotations

from typing import ClassVar

from trtpipe.errors import BadInput
from trtpipe.models.sources.base import Found, OnnxFound, packaged_data


class PackagedName:
    kind: ClassVar[str] = "packaged"

    def claims(self, spec: str) -> bool:
        from trtpipe.models.packaged import PACKAGED

        return spec in PACKAGED

    def find(self, spec: str, arch: str | None, trust: bool) -> Found:
        raise BadInput(f"'{spec}' is a packaged ONNX model: it has no PyTorch model to convert; give it to "
                       "'trtpipe run', 'bench' or 'optimize' (see 'trtpipe models').")

    def onnx(self, spec: str) -> OnnxFound:
        from trtpipe.models.packaged import packaged_model, packaged_onnx

        return OnnxFound(packaged_onnx(spec), packaged_model(spec))

    def natural_data(self, spec: str) -> str | None:
        return packaged_data(spec)
