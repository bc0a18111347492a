"""The user's own code that trtpipe runs because they named it: a model factory or a detector's post-processing,
as ``path/to/file.py:name`` or ``package.module:name``. Light (no torch): optimize imports it too."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trtpipe.errors import BadInput
from trtpipe.files import sha256_file
from trtpipe.models.registry import factory_spec


def load_postprocess(spec: str) -> Callable[[Sequence[np.ndarray]], list[Any]]:
    """A detector's post-processing named as ``path/to/file.py:fn`` or ``package.module:fn``: it takes a model's
    outputs and returns, per image, (boxes [K, 4] x1 y1 x2 y2, scores [K], classes [K]). The user's own code, run
    only because they named it, as a factory is."""
    named = factory_spec(spec)
    if named is None:
        raise BadInput(f"--postprocess '{spec}' is not path/to/file.py:function or package.module:function.")
    function, _ = import_attribute(spec, named.module, named.factory)
    return function


def import_attribute(spec: str, module_name: str, attr: str) -> tuple[Callable[..., Any], str | None]:
    """The callable ``attr`` of the user's module (a .py file or an importable module), and its file's SHA-256."""
    source_sha = None
    try:
        if module_name.endswith(".py"):
            file = Path(module_name)
            if not file.is_file():
                raise BadInput(f"Factory file {file} does not exist.")
            source_sha = sha256_file(file)
            import_spec = importlib.util.spec_from_file_location(f"trtpipe_user_{file.stem}", file)
            assert import_spec is not None and import_spec.loader is not None
            python_module = importlib.util.module_from_spec(import_spec)
            sys.modules[import_spec.name] = python_module
            import_spec.loader.exec_module(python_module)
        else:
            python_module = importlib.import_module(module_name)
            file_name = getattr(python_module, "__file__", None)  # the code's identity, as for a .py path
            source_sha = sha256_file(Path(file_name)) if file_name and Path(file_name).is_file() else None
    except BadInput:
        raise
    except Exception as error:  # the user's code failed to import
        raise BadInput(f"Could not import {module_name} for '{spec}': {_first_line(error)}") from None
    found = getattr(python_module, attr, None)
    if not callable(found):
        raise BadInput(f"{module_name} has no callable '{attr}'.")
    return found, source_sha


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
