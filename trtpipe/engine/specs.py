"""The optimisation profiles an engine is built with, planned from the ONNX inputs and the shape options
before TensorRT is touched, so every rule is tested on machines without a GPU.

One profile comes from ``--shapes``/``--min-shapes``/``--opt-shapes``/``--max-shapes`` (trtexec's vocabulary);
several come from ``--profiles`` (trtexec writes ``--profile=0 --minShapes=... --profile=1 ...``; one flag whose
value lists the profiles reads the same on the command line and in the pipeline file).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trtpipe.errors import BadInput
from trtpipe.shapes import format_shape, parse_shape
from trtpipe.vocab import DEFAULT_BATCHES

Shape = tuple[int, ...]


@dataclass(frozen=True)
class InputInfo:
    """An ONNX graph input: None marks a dynamic dimension."""

    name: str
    dims: tuple[int | None, ...]


@dataclass(frozen=True)
class ProfileShapes:
    name: str
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]

    def to_dict(self) -> dict[str, object]:
        return {"input": self.name, "min": list(self.min), "opt": list(self.opt), "max": list(self.max)}


def plan_profile(
    inputs: list[InputInfo],
    *,
    shapes: dict[str, tuple[int, ...]] | None = None,
    min_shapes: dict[str, tuple[int, ...]] | None = None,
    opt_shapes: dict[str, tuple[int, ...]] | None = None,
    max_shapes: dict[str, tuple[int, ...]] | None = None,
) -> list[ProfileShapes]:
    """The optimisation profile for ``inputs``: --shapes fixes min=opt=max; --min/--opt/--max-shapes set each;
    a dynamic batch axis not mentioned gets min/opt/max batch 1/8/32; every other dynamic axis gets all three from
    whichever of them are given (see :func:`_fill`), and is refused when none is."""
    shapes, min_shapes, opt_shapes, max_shapes = shapes or {}, min_shapes or {}, opt_shapes or {}, max_shapes or {}
    known = {i.name for i in inputs}
    for declared in (shapes, min_shapes, opt_shapes, max_shapes):
        unknown = sorted(set(declared) - known)
        if unknown:
            raise BadInput(f"Shape given for {', '.join(unknown)}, which the ONNX does not have: its inputs are "
                           f"{', '.join(sorted(known))}.")
    profile = []
    for info in inputs:
        if info.name in shapes:
            low = opt = high = shapes[info.name]
        else:
            given: dict[str, tuple[int, ...] | None] = {
                "min": min_shapes.get(info.name), "opt": opt_shapes.get(info.name), "max": max_shapes.get(info.name)}
            for label, dims in given.items():
                if dims is not None:
                    _check_fits(info, dims, label)
            low, opt, high = (_fill(info, given, label, batch) for label, batch in zip(("min", "opt", "max"),
                                                                                       DEFAULT_BATCHES, strict=True))
        for label, dims in (("min", low), ("opt", opt), ("max", high)):
            _check_fits(info, dims, label)
        if not all(a <= b <= c for a, b, c in zip(low, opt, high, strict=True)):
            raise BadInput(f"Input '{info.name}': need min <= opt <= max in every dimension, got min "
                           f"{format_shape(low)}, opt {format_shape(opt)}, max {format_shape(high)}.")
        profile.append(ProfileShapes(info.name, low, opt, high))
    return profile


def _fill(info: InputInfo, given: dict[str, tuple[int, ...] | None], label: str, batch: int) -> tuple[int, ...]:
    """The ``label`` (min/opt/max) shape of one input: as given, else axis by axis: a fixed axis its size, a dynamic
    batch axis (the first) the default batch, any other dynamic axis from the shapes given for the others (min: the
    smallest, max: the largest, opt: max's, else min's), so ``--opt-shapes input:8x3x640x640`` alone gives every
    dynamic axis its min/opt/max."""
    shape = given[label]
    if shape is not None:
        return shape
    dims = []
    for axis, fixed in enumerate(info.dims):
        if fixed is not None:
            dims.append(fixed)
            continue
        known = {name: value[axis] for name, value in given.items() if value is not None}
        if axis == 0:
            dims.append(batch)
        elif not known:
            raise BadInput(f"Input '{info.name}' ({format_shape(info.dims)}) has dynamic dimensions besides the "
                           f"batch: give them with --shapes or --min-shapes/--opt-shapes/--max-shapes.")
        elif label == "min":
            dims.append(min(known.values()))
        elif label == "max":
            dims.append(max(known.values()))
        else:
            dims.append(known.get("max", known.get("min", 0)))
    return tuple(dims)


def _check_fits(info: InputInfo, dims: tuple[int, ...], label: str) -> None:
    if len(dims) != len(info.dims) or any(d is not None and d != g for d, g in zip(info.dims, dims, strict=True)):
        raise BadInput(f"{label} shape {format_shape(dims)} does not fit input '{info.name}' "
                       f"({format_shape(info.dims)}; '?' is free).")


# -- several profiles: --profiles NAME:MIN:OPT:MAX[+NAME:...],... ---------------------------------------------------

PROFILE_SEPARATOR = ","  # between profiles: the options machinery joins a TOML list of profiles with it
INPUT_SEPARATOR = "+"  # between the inputs of one profile


class ProfileSpec(dict[str, tuple[Shape, Shape, Shape]]):
    """One optimisation profile as the user wrote it: input name -> (min, opt, max).

    A dict, so ``to_plain`` writes it as JSON (stage keys, settings); its ``str()`` is its normalised text, so the
    options machinery, which re-reads a tuple value from the text of its items, gets the same profile back."""

    def __str__(self) -> str:
        return INPUT_SEPARATOR.join(
            f"{name}:{format_shape(low)}" if low == opt == high else
            f"{name}:{format_shape(low)}:{format_shape(opt)}:{format_shape(high)}"
            for name, (low, opt, high) in self.items())


def parse_profiles(text: str) -> tuple[ProfileSpec, ...]:
    """``input:1x3x224x224:8x3x224x224:32x3x224x224,input:33x3x224x224:64x3x224x224:128x3x224x224`` -> two
    profiles. An entry is ``NAME:MIN:OPT:MAX`` or ``NAME:SHAPE`` (min = opt = max); the inputs of one profile are
    joined by ``+``. Tensor names may hold ':' (the shapes are read from the right). ValueError, fit for the user."""
    profiles = []
    for number, part in enumerate(filter(None, (p.strip() for p in text.split(PROFILE_SEPARATOR))), start=1):
        profile = ProfileSpec()
        for entry in filter(None, (e.strip() for e in part.split(INPUT_SEPARATOR))):
            name, shapes = _profile_entry(entry)
            if name in profile:
                raise ValueError(f"profile {number} gives input '{name}' twice: separate profiles with "
                                 f"'{PROFILE_SEPARATOR}' and the inputs of one profile with '{INPUT_SEPARATOR}'")
            profile[name] = shapes
        if not profile:
            raise ValueError(f"profile {number} is empty: {PROFILES_EXAMPLE}")
        profiles.append(profile)
    if not profiles:
        raise ValueError(f"no profiles given: {PROFILES_EXAMPLE}")
    return tuple(profiles)


PROFILES_EXAMPLE = ("write NAME:MIN:OPT:MAX (or NAME:SHAPE), inputs of one profile joined by '+', profiles by ',', "
                    "e.g. input:1x3x224x224:8x3x224x224:32x3x224x224,input:33x3x224x224:64x3x224x224:128x3x224x224")


def _profile_entry(entry: str) -> tuple[str, tuple[Shape, Shape, Shape]]:
    parts = entry.split(":")
    trailing = 0  # how many parts, from the right, are shapes
    while trailing < len(parts) - 1 and _is_shape(parts[-1 - trailing]):
        trailing += 1
    name = ":".join(parts[: len(parts) - trailing])
    if not name:
        raise ValueError(f"'{entry}' names no input: {PROFILES_EXAMPLE}")
    if trailing not in (1, 3):
        raise ValueError(f"'{entry}' has {trailing or 'no'} shape{'' if trailing == 1 else 's'}, not 1 or 3: "
                         f"{PROFILES_EXAMPLE}")
    shapes = [parse_shape(p) for p in parts[-trailing:]]
    low, opt, high = shapes if trailing == 3 else shapes * 3
    return name, (low, opt, high)


def _is_shape(text: str) -> bool:
    try:
        parse_shape(text)
    except ValueError:
        return False
    return "," not in text  # ',' separates profiles here, so a shape is written with 'x' only


def format_profiles(profiles: Sequence[ProfileSpec]) -> str:
    return PROFILE_SEPARATOR.join(str(p) for p in profiles)


def plan_profiles(inputs: list[InputInfo], profiles: Sequence[ProfileSpec]) -> list[list[ProfileShapes]]:
    """One :class:`ProfileShapes` list per profile given with ``--profiles``, each checked as
    :func:`plan_profile` checks one. Every input with a dynamic dimension is named in every profile: a default
    filled in for an input left out (batch 1/8/32) would silently disagree with the other inputs' range."""
    planned = []
    for number, spec in enumerate(profiles, start=1):
        dynamic = [i.name for i in inputs if any(d is None for d in i.dims) and i.name not in spec]
        if dynamic:
            raise BadInput(f"Profile {number} ({spec}) does not give {', '.join(dynamic)}, which has dynamic "
                           "dimensions: name every dynamic input in every profile of --profiles.")
        try:
            planned.append(plan_profile(inputs, min_shapes={n: s[0] for n, s in spec.items()},
                                        opt_shapes={n: s[1] for n, s in spec.items()},
                                        max_shapes={n: s[2] for n, s in spec.items()}))
        except BadInput as error:
            raise BadInput(f"Profile {number} ({spec}): {error.message}") from None
    return planned


def profile_text(profile: Sequence[ProfileShapes]) -> str:
    """One profile in a line: ``input 1x3x224x224/8x3x224x224/32x3x224x224``."""
    return ", ".join(f"{p.name} {format_shape(p.min)}/{format_shape(p.opt)}/{format_shape(p.max)}"
                     for p in profile) or "no inputs"
