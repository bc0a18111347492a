"""An optional library that is installed but cannot be loaded is reported as such, with the loader's own message;
only one that is absent is "not installed" (#56: under a memory limit, gRPC's shared library that could not be mapped
was reported as tritonclient[grpc] not being installed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trtpipe.errors import MissingDependency, UnloadableDependency, import_failure

UNMAPPED = "libgrpc.so: failed to map segment from shared object"
CALL = "from trtpipe.serve.grpc.service import _grpc_modules; _grpc_modules()"


def _grpc_modules_with(tmp_path: Path, grpc_init: str | None) -> str:
    """What _grpc_modules raises in a fresh interpreter whose ``grpc`` package is ``grpc_init`` (None: absent)."""
    if grpc_init is None:
        code = f"import sys; sys.modules['grpc'] = None; {CALL}"
    else:
        (tmp_path / "grpc").mkdir()
        (tmp_path / "grpc" / "__init__.py").write_text(grpc_init)
        code = f"import sys; sys.path.insert(0, {str(tmp_path)!r}); {CALL}"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parents[2])
    assert done.returncode != 0
    return done.stderr.strip().splitlines()[-1]


def test_a_library_that_cannot_be_loaded_is_not_called_missing(tmp_path: Path) -> None:
    said = _grpc_modules_with(tmp_path, f"raise ImportError({UNMAPPED!r})")
    assert said == ("trtpipe.errors.UnloadableDependency: The gRPC service (--grpc-port) needs tritonclient[grpc], "
                    f"which is installed but could not be loaded (ImportError: {UNMAPPED})."), said


def test_a_library_that_is_absent_is_not_installed(tmp_path: Path) -> None:
    said = _grpc_modules_with(tmp_path, None)
    assert said.startswith("trtpipe.errors.MissingDependency: The gRPC service (--grpc-port) needs "
                           "tritonclient[grpc], which is not installed: pip install 'trtpipe[triton]'"), said


@pytest.mark.parametrize(("error", "kind"), [
    (ModuleNotFoundError("No module named 'grpc'", name="grpc"), MissingDependency),
    (ModuleNotFoundError("No module named 'tritonclient.grpc'", name="tritonclient.grpc"), MissingDependency),
    (ModuleNotFoundError("No module named 'numpy.core'", name="numpy.core"), UnloadableDependency),  # inside it
    (ImportError(UNMAPPED), UnloadableDependency),
])
def test_import_failures_are_told_apart(error: ImportError, kind: type) -> None:
    found = import_failure(error, "tritonclient[grpc]", "The gRPC service", "pip install x", ("grpc", "tritonclient"))
    assert type(found) is kind and found.exit_code == 3
    if kind is UnloadableDependency:
        assert str(error) in found.message
