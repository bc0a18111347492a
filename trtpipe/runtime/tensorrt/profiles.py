"""Which optimisation profile of an engine runs a request, and the largest batch every chunk of a long run fits.

An engine built with several profiles (``trtpipe build --profiles``, or trtexec's ``--profile=N``) runs a request
in one of them: the execution context is switched with ``set_optimization_profile_async`` before the input shapes
are set (TensorRT's ``IExecutionContext::setOptimizationProfileAsync``: "must be called before calling
setInputShape()"; Polygraphy's TrtRunner.set_profile does the same on its own stream). The profiles are read from
the engine itself (``get_tensor_profile_shape`` for each profile and input), so an engine without a trtpipe sidecar
is handled alike. The choice is a pure function of those ranges and the request's shapes, tested without TensorRT:
the first profile, in build order, whose min..max holds every input's shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trtpipe.errors import BadInput
from trtpipe.shapes import format_shape

Shape = tuple[int, ...]


@dataclass(frozen=True)
class InputRange:
    """The shapes one profile accepts for one input: every dimension between ``min`` and ``max``."""

    min: Shape
    opt: Shape
    max: Shape

    def holds(self, shape: Shape) -> bool:
        return len(shape) == len(self.min) == len(self.max) and all(
            low <= size <= high for low, size, high in zip(self.min, shape, self.max, strict=True))

    def describe(self) -> str:
        if self.min == self.max:
            return format_shape(self.min)
        return f"{format_shape(self.min)} to {format_shape(self.max)}"


@dataclass(frozen=True)
class EngineProfile:
    """One optimisation profile of an engine: its index and each input's range (inputs in engine order)."""

    index: int
    inputs: tuple[tuple[str, InputRange], ...]

    def holds(self, shapes: Mapping[str, Shape]) -> bool:
        return all(name in shapes and accepted.holds(shapes[name]) for name, accepted in self.inputs)

    def describe(self) -> str:
        return f"profile {self.index}: " + ", ".join(f"{name} {r.describe()}" for name, r in self.inputs)

    def batch_range(self) -> tuple[int, int] | None:
        """(min, max) of the first input's first dimension, or None for an engine without inputs."""
        if not self.inputs or not self.inputs[0][1].min:
            return None
        first = self.inputs[0][1]
        return first.min[0], first.max[0]


def profiles_from_table(table: Sequence[Mapping[str, tuple[Sequence[int], Sequence[int], Sequence[int]]]]
                        ) -> list[EngineProfile]:
    """The engine's profiles from what TensorRT reports, one mapping per profile index: input name -> (min, opt,
    max), as ``ICudaEngine.get_tensor_profile_shape(name, index)`` returns them."""
    return [EngineProfile(index, tuple((name, InputRange(*(tuple(int(d) for d in dims) for dims in shapes)))
                                       for name, shapes in entry.items()))
            for index, entry in enumerate(table)]


def choose_profile(profiles: Sequence[EngineProfile], shapes: Mapping[str, Shape], engine: str = "The engine") -> int:
    """The index of the first profile whose ranges hold ``shapes``; BadInput naming the shapes and every profile
    when none does (an engine reports at least one profile; none at all means nothing to choose)."""
    for profile in profiles:
        if profile.holds(shapes):
            return profile.index
    asked = ", ".join(f"{name} {format_shape(shape)}" for name, shape in shapes.items())
    have = "; ".join(p.describe() for p in profiles) or "none"
    several = len(profiles) > 1
    raise BadInput(f"{engine}: input shapes {asked} fit none of its optimisation profiles ({have}): run within "
                   f"{'one of them' if several else 'it'}, or rebuild with "
                   f"{'--profiles' if several else '--min-shapes/--max-shapes (or --profiles)'} covering them.")


def covered_max_batch(profiles: Sequence[EngineProfile]) -> int | None:
    """The largest batch B such that every batch from the smallest profile minimum up to B fits some profile (the
    first input's first dimension), so chunks of B and the smaller remainder all run. Profiles 1..32 and 33..128
    give 128; 1..32 and 64..128 give 32 (a remainder of 40 would fit neither). None without inputs."""
    ranges = sorted(r for p in profiles if (r := p.batch_range()) is not None)
    if not ranges:
        return None
    low, high = ranges[0]
    for start, end in ranges[1:]:
        if start > high + 1:
            break
        high = max(high, end)
    return high if low <= high else None
