"""MODEL as an FP32 ONNX file (an exporter's, or convert's): bench, run and optimize measure it on ONNX Runtime;
convert and compile, which need the PyTorch model, refuse it with the line that says where it goes. A file that
is a packaged model's (the same SHA-256) is that model: :func:`for_file` says so."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from trtpipe.errors import BadInput
from trtpipe.models.sources.base import Found, OnnxFound
from trtpipe.models.sources.pytorch_file import check_file


class OnnxFile:
    kind: ClassVar[str] = "onnx-file"

    def claims(self, spec: str) -> bool:
        return spec.lower().endswith(".onnx")

    def find(self, spec: str, arch: str | None, trust: bool) -> Found:
        path = Path(spec)
        check_file(path)
        raise BadInput(f"{path} is already ONNX: give the PyTorch model it came from (a registry name, "
                       "checkpoint or module:factory); ONNX files go after MODEL in 'trtpipe bench'.")

    def onnx(self, spec: str) -> OnnxFound:
        return OnnxFound(Path(spec))

    def natural_data(self, spec: str) -> str | None:
        return None  # a file from elsewhere brings no data (a packaged model's file is found by for_file)


def for_file(path: Path, sha256: str | None = None) -> OnnxFound:
    """The ONNX file at ``path`` as its source knows it: a packaged model's where its SHA-256 (``sha256``, where the
    caller has it) is one, so optimize and debug, given the file itself, judge it on its own data with its own
    decoder; else a plain file."""
    from trtpipe.files import sha256_file
    from trtpipe.models.packaged import packaged_by_sha256

    return OnnxFound(Path(path), packaged_by_sha256(sha256 or sha256_file(path)))
