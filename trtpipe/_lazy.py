"""Re-exports that import their module on first use, so a package's ``__init__`` can name its API without
loading torch or onnx for someone who only wanted the package's light options module (PEP 562)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` re-exporting ``{name: "module:attribute"}``."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module_name, attribute = exports[name].split(":")
        return getattr(importlib.import_module(module_name), attribute)

    def __dir__() -> list[str]:
        return sorted(exports)

    return __getattr__, __dir__
