"""MODEL as the user's own code: ``path/to/file.py:make_model`` or ``package.module:make_model``, a factory that
returns the ``torch.nn.Module``. Its input shape is ``--arch``'s, else an ``input_shape`` attribute of the module
or the factory. First in the table: a path that looks like ``a.py:b`` but exists is a file, not code."""

from __future__ import annotations

from typing import ClassVar

from trtpipe.errors import BadInput
from trtpipe.models.registry import factory_spec, get_architecture
from trtpipe.models.sources.base import Found, PytorchSource, declared_shape


class UserCode(PytorchSource):
    kind: ClassVar[str] = "user-code"

    def claims(self, spec: str) -> bool:
        return factory_spec(spec) is not None

    def find(self, spec: str, arch: str | None, trust: bool) -> Found:
        from torch import nn

        from trtpipe.models.checkpoint import first_line
        from trtpipe.models.user_code import import_attribute

        named = factory_spec(spec)
        assert named is not None, "claimed by factory_spec"
        shape = get_architecture(arch).input_shape if arch else None
        factory, source_sha = import_attribute(spec, named.module, named.factory)
        try:
            module = factory()
        except Exception as error:  # the user's factory failed
            raise BadInput(f"{spec}() failed: {first_line(error)}") from None
        if not isinstance(module, nn.Module):
            raise BadInput(f"{spec}() returned a {type(module).__name__}, not a torch.nn.Module.")
        return Found(module, named.factory, spec, "factory", shape or declared_shape(module) or declared_shape(factory),
                     source_sha, no_shape=f"'{spec}' does not say its input shape: pass --input-shape (e.g. "
                     "1x3x224x224) or give the module an 'input_shape' attribute.")
