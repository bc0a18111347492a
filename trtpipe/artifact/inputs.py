"""An artifact's input specs, resolved once: the graph's inputs, what its manifest records, what the user declares.

optimize, bench and debug each used to lay these three over one another themselves; they now call
:func:`resolve_inputs`, and ``tests/artifact/test_artifact_room.py`` keeps it the one place that does.
The order of precedence is the same everywhere: the graph fixes names, dtypes and fixed axes; the manifest's record
(what convert or optimize wrote) gives value ranges and layouts; the user's ``--input-shape``/``--input-dtype``/
``--input-range`` win over the record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from trtpipe.artifact.records.manifest import ArtifactManifest
from trtpipe.inputs import InputSpec, resolve
from trtpipe.shapes import FIRST

Graph = Sequence[tuple[str, tuple[int | str | None, ...], str]]


def recorded_inputs(manifest: ArtifactManifest | None, names: Sequence[str]) -> dict[str, InputSpec]:
    """The inputs the manifest records (``details.input_specs``), by name, for the inputs the graph has (an entry
    naming another input, as an older layout wrote, is left out: the graph's facts stand then)."""
    recorded = manifest.input_specs if manifest is not None else {}
    return {name: spec for name, spec in recorded.items() if name in names}


def resolve_inputs(graph: Graph, manifest: ArtifactManifest | None, *,
                   shapes: Mapping[str, tuple[int, ...]] | None = None,
                   dtypes: Mapping[str, str] | None = None,
                   ranges: Mapping[str, tuple[float, float]] | None = None,
                   recorded_shapes: bool = False) -> tuple[InputSpec, ...]:
    """The specs of ``graph``'s inputs ((name, dims, dtype) each, in order): sized by ``shapes`` (else, with
    ``recorded_shapes``, by the fixed shapes the manifest records: those optimize calibrated at), typed as the graph
    says or ``dtypes`` declares, with the manifest's ranges under ``ranges`` (the user's; ``FIRST`` names the first
    input) and the manifest's layouts where it records one. BadInput where a declaration does not fit the graph."""
    names = [name for name, _, _ in graph]
    recorded = recorded_inputs(manifest, names)
    if recorded_shapes and not shapes:
        shapes = {name: shape for name, spec in recorded.items() if (shape := spec.fixed_shape) is not None}
    merged = {name: spec.value_range for name, spec in recorded.items() if spec.value_range is not None}
    for name, bounds in (ranges or {}).items():  # the user's win over the record
        merged[names[0] if name == FIRST and names else name] = bounds
    specs = resolve(graph, shapes=shapes or None, dtypes=dtypes, ranges=merged or None)
    return tuple(replace(spec, layout=known.layout) if (known := recorded.get(spec.name)) is not None and known.layout
                 else spec for spec in specs)
