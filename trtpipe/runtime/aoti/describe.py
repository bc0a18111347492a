"""An AOTInductor package's description, from the manifest it must have: the describe hook this folder gives the
registry for ``.pt2`` files."""

from __future__ import annotations

from pathlib import Path

from trtpipe.runtime.artifacts import ArtifactDescription
from trtpipe.vocab import ArtifactKind


def describe(path: Path) -> ArtifactDescription:
    """Refused in one line without a manifest that describes exactly the package's bytes: it is native code."""
    from trtpipe.runtime.aoti.package import read_package

    manifest, package = read_package(path)
    return ArtifactDescription(path, ArtifactKind.AOTI, manifest.precision, None, manifest.task, package.record.inputs,
                               package.record.outputs, size_bytes=manifest.size_bytes, build_seconds=manifest.seconds,
                               package=package)
