"""The one AOTInductor package most AOTInductor tests share: the bundled digits model compiled for the CPU, FP32,
batch 1-16, through the CLI, once per test session (a compile takes seconds of C++ compilation; every test that
changes the package works on a copy)."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

from click.testing import CliRunner

from trtpipe.artifact.records.manifest import manifest_path

BATCH_RANGE = (1, 16)


@functools.cache
def _digits_package(root: Path) -> Path:
    from trtpipe.cli import main

    output = root / "aoti-digits" / "model.pt2"
    output.parent.mkdir(parents=True)
    result = CliRunner().invoke(main, ["compile", "digits_resnet", "-o", str(output), "--batch-range",
                                       f"{BATCH_RANGE[0]}-{BATCH_RANGE[1]}"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"{output}\n{manifest_path(output)}" in result.output
    return output


def digits_package(basetemp: Path) -> Path:
    """The shared package (compiled on first use) under the session's base temporary folder."""
    return _digits_package(Path(basetemp))


def copy_package(package: Path, folder: Path, name: str = "model.pt2") -> Path:
    """``package`` and its manifest copied into ``folder`` (a test may then change either)."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / name
    shutil.copyfile(package, target)
    shutil.copyfile(manifest_path(package), manifest_path(target))
    return target
