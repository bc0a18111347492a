"""What a backend folder declares about itself, so nothing outside it needs to know: its class, settings type, the
artifact kinds it runs, the Python package it needs, and what it can do (its capabilities, runtime/capabilities.py).
Each ``runtime/<engine>/__init__.py`` exports one ``ENTRY``; ``registry.py`` lists them, one line each. Standard
library and the vocabulary only: listing backends never imports an engine. (What an artifact is comes from the
record of its kind, in the artifact room: trtpipe.artifact.description.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from trtpipe.vocab import ArtifactKind, BackendKind, Device

C = TypeVar("C")


def settings_names(settings: type) -> frozenset[str]:
    """The run settings a backend's settings type holds (the fields of its dataclass)."""
    return frozenset(f.name for f in dataclasses.fields(settings))


@dataclass(frozen=True)
class BackendEntry:
    """One backend as the registry lists it: what every backend has, and in ``can`` what it can do beyond opening
    its artifacts (runtime/capabilities.py). Its class is imported only when an artifact is opened on it."""

    kind: BackendKind
    implementation: str  # "module:Class", imported when an artifact is opened on it
    settings: type  # the dataclass of run settings it receives (each field also a RunOptions field at the edge)
    runs: tuple[ArtifactKind, ...] = ()  # the artifact kinds it opens (an engine, a package; ONNX on two backends)
    library: str = ""  # the Python package it runs on
    optional: bool = False  # an optional extra: its library's version is recorded where it is installed
    # The device what it runs runs on where the artifact's record names none (TensorRT's engines: the GPU); None
    # where its settings choose the device (ONNX Runtime: an execution's providers).
    runs_on: Device | None = Device.CPU
    title: str = ""  # its name in prose ("ONNX Runtime"); its kind where empty
    # How portable what it runs is (lower: more): a tie between rows goes to the more portable runtime
    portability: int = 0
    # What it can do, by capability type: the implementation, or "module" / "module:NAME" of its own folder naming
    # it, imported when a question needs it
    can: Mapping[type, object] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """Its name in prose."""
        return self.title or str(self.kind)

    def offers(self, capability: type) -> bool:
        """Whether it declares ``capability`` (nothing imported)."""
        return capability in self.can

    def ability(self, capability: type[C]) -> C:
        """What implements ``capability`` for it, imported now (TypeError where it declares none)."""
        if capability not in self.can:
            raise TypeError(f"{self.kind} does not declare {capability.__name__}")
        found = self.can[capability]
        implementation: C = _imported(found) if isinstance(found, str) else found  # type: ignore[assignment]
        return implementation

    def ability_if(self, capability: type[C]) -> C | None:
        """What implements ``capability`` for it, imported now, or None where it declares none."""
        return self.ability(capability) if capability in self.can else None

    def opener(self) -> Any:
        """The backend class, imported now."""
        return _imported(self.implementation)


def _imported(target: str) -> Any:
    """What "module:NAME" names, or the module "module" itself."""
    import importlib

    module_name, _, name = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, name) if name else module
