"""An artifact's input specs, resolved once: the graph's inputs, what its manifest records, what the user declares.

optimize, bench and debug each used to lay these three over one another themselves; they now call
:func:`resolve_inputs`, and ``tests/artifact/test_artifact_room.py`` keeps it the one place that does.
The order of precedence is the same everywhere: the graph fixes names, dtypes and fixed axes; the manifest's record
(what convert or optimize wrote) gives value ranges and layouts; the user's ``--input-shape``/``--input-dtype``/
``--input-range`` win over the record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from trtpipe.artifact.records.manifest import ArtifactManifest
from trtpipe.inputs import InputSpec, check_declared, resolve
from trtpipe.shapes import FIRST, declared_for

Dims = tuple[int | str | None, ...]  # as the graph declares them: a str (its name) or None marks a dynamic axis
Graph = Sequence[tuple[str, Dims, str]]
# A caller's rule for the shape of an input the user does not size: (its index, its name, the graph's dims) -> the
# shape (bench's: the size it runs at, or BadInput where an axis is left that only the user can size).
Sizing = Callable[[int, str, Dims], tuple[int, ...]]


def recorded_inputs(manifest: ArtifactManifest | None, names: Sequence[str]) -> dict[str, InputSpec]:
    """The inputs the manifest records (``details.input_specs``), by name, for the inputs the graph has (an entry
    naming another input, as an older layout wrote, is left out: the graph's facts stand then)."""
    recorded = manifest.input_specs if manifest is not None else {}
    return {name: spec for name, spec in recorded.items() if name in names}


def resolve_inputs(graph: Graph, manifest: ArtifactManifest | None, *,
                   shapes: Mapping[str, tuple[int, ...]] | None = None,
                   dtypes: Mapping[str, str] | None = None,
                   ranges: Mapping[str, tuple[float, float]] | None = None,
                   recorded_shapes: bool = False, size: Sizing | None = None) -> tuple[InputSpec, ...]:
    """The specs of ``graph``'s inputs ((name, dims, dtype) each, in order): sized by ``shapes`` (else, with
    ``recorded_shapes``, by the fixed shapes the manifest records: those optimize calibrated at; or, with ``size``,
    each input ``shapes`` leaves unsized by the caller's rule instead), typed as the graph says or ``dtypes``
    declares, with the manifest's ranges under ``ranges`` (the user's; ``FIRST`` names the first input) and the
    manifest's layouts where it records one. BadInput where a declaration does not fit the graph."""
    names = [name for name, _, _ in graph]
    if size is not None:
        shapes = _sized(graph, shapes, size)
    recorded = recorded_inputs(manifest, names)
    if recorded_shapes and not shapes:
        shapes = {name: shape for name, spec in recorded.items() if (shape := spec.fixed_shape) is not None}
    merged = {name: spec.value_range for name, spec in recorded.items() if spec.value_range is not None}
    for name, bounds in (ranges or {}).items():  # the user's win over the record
        merged[names[0] if name == FIRST and names else name] = bounds
    specs = resolve(graph, shapes=shapes or None, dtypes=dtypes, ranges=merged or None)
    return tuple(replace(spec, layout=known.layout) if (known := recorded.get(spec.name)) is not None and known.layout
                 else spec for spec in specs)


def _sized(graph: Graph, shapes: Mapping[str, tuple[int, ...]] | None, size: Sizing) -> dict[str, tuple[int, ...]]:
    """Every input's shape: the one the user declares (``shapes``; checked first, so an input the model lacks is
    named before any size is asked for), else the one ``size`` gives."""
    check_declared(shapes, [name for name, _, _ in graph], "--input-shape")
    sized = {}
    for index, (name, dims, _) in enumerate(graph):
        declared = declared_for(shapes, name, index)
        sized[name] = tuple(declared) if declared is not None else size(index, name, dims)
    return sized
