"""Optional client packages imported at a test module's top without breaking its collection where they are absent.

A GPU machine carries neither ``tritonclient`` nor OpenVINO: a module that imported them at its top failed to
collect there, pytest exited 2 and no test ran, not even the GPU ones. :func:`optional` returns the module where it
imports; else a stand-in whose first use skips the test that uses it, naming the package and its install line. The
module's other tests collect and run.
"""

from __future__ import annotations

import importlib
from typing import Any, NoReturn

import pytest

INSTALL = {"tritonclient": "pip install 'trtpipe[triton]'", "openvino": "pip install 'trtpipe[openvino]'"}


class Missing:
    """Stands in for a package that is not installed: any attribute or call skips the test that reaches it."""

    def __init__(self, name: str, error: ImportError) -> None:
        self._name = name
        self._error = error

    def _skip(self) -> NoReturn:
        root = self._name.split(".")[0]
        install = INSTALL.get(root, f"pip install {root}")
        pytest.skip(f"{self._name} is not installed ({install}): {self._error}", allow_module_level=True)

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__"):  # copy, pickle and inspect probe dunders: answer as an ordinary object
            raise AttributeError(attribute)
        self._skip()

    def __call__(self, *args: object, **kwargs: object) -> Any:
        self._skip()


def optional(name: str) -> Any:
    """The module ``name``, or a :class:`Missing` stand-in where it cannot be imported."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        return Missing(name, error)


def optional_error(module: str, name: str) -> type[BaseException]:
    """The exception class ``module.name``, or where ``module`` cannot be imported a class of that name that nothing
    raises (so ``except`` and ``pytest.raises`` clauses still read; the tests that could raise it skip first)."""
    found = optional(module)
    if isinstance(found, Missing):
        return type(name, (Exception,), {"__module__": __name__})
    error: type[BaseException] = getattr(found, name)
    return error
