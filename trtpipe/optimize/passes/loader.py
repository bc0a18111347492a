"""What the optimize stage runs: a declared pass, imported and seen through the small :class:`Pass` protocol.

The registry's table names the passes; this module imports one when the stage needs it and checks that the module
has its ``apply``. Kept apart from the registry so that the CLI's choices, which read the
registry, never see the types a pass works on.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Protocol, cast

from trtpipe.optimize.passes.registry import Declaration, declarations, graph_pass_names, precision_pass_name
from trtpipe.vocab import Precision

if TYPE_CHECKING:
    import onnx

    from trtpipe.optimize.passes.context import PassContext


class Pass(Protocol):
    """An optimization pass: the name ``--passes`` knows it by, what it does, and the rewrite itself (which
    records what it did in the context and returns the new model)."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    def apply(self, model: onnx.ModelProto, context: PassContext) -> onnx.ModelProto: ...


@dataclass(frozen=True)
class DeclaredPass:
    """A pass module (its line in the registry's table and its module-level ``apply``) as a :class:`Pass`."""

    name: str
    declaration: Declaration
    module: ModuleType

    @property
    def description(self) -> str:
        return self.declaration.description

    def apply(self, model: onnx.ModelProto, context: PassContext) -> onnx.ModelProto:
        return cast("onnx.ModelProto", self.module.apply(model, context))


def load(name: str) -> Pass:
    """Import the pass module ``name`` the registry's table names, checking that it has its ``apply``."""
    declaration = declarations()[name]
    module = importlib.import_module(f"{__package__}.{name}")
    if not callable(getattr(module, "apply", None)):
        raise RuntimeError(f"{module.__file__}: named in the pass registry but has no apply(model, context)")
    return DeclaredPass(name, declaration, module)


def graph_pass(name: str) -> Pass:
    if name not in graph_pass_names():
        raise ValueError(f"unknown pass {name}")
    return load(name)


def precision_pass(precision: Precision) -> Pass | None:
    """The pass that writes ``precision`` into the graph; None for FP32 (nothing to write)."""
    name = precision_pass_name(precision)
    return None if name is None else load(name)
