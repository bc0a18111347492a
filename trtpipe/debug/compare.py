"""``trtpipe debug``: run an optimized ONNX and its FP32 reference side by side on ONNX Runtime CPU, every
intermediate tensor exposed, and say where the error jumps.

This is the part of Polygraphy's ``polygraphy run model.onnx --onnxrt --trt --onnx-outputs mark all
--trt-outputs mark all`` workflow that needs no GPU: the model side here is the optimized graph itself (its Q/DQ
and FP16 casts as ONNX Runtime computes them, with graph optimizations off so that every tensor is the value the
graph says, and every FP16 tensor rounded to FP16 where it is written, as a GPU computes it, where ONNX Runtime's
CPU provider alone would carry a chain of FP16 operators in FP32: runtime/onnxruntime/fp16_rounding.py), which is
what TensorRT is asked to reproduce; a mismatch already visible here is the graph's, not the
engine's. Tensors are paired by name (:mod:`trtpipe.debug.match`) and judged by :mod:`trtpipe.debug.report`.

Memory stays bounded: the paired tensors are exposed a chunk at a time, sized from shape inference so that one
batch's exposed outputs fit in ``--memory`` per model, and each chunk keeps only running sums over the samples
(:class:`~trtpipe.debug.report.ErrorStats`), never the tensors (Polygraphy's answer to the same problem is
``POLYGRAPHY_ARRAY_SWAP_THRESHOLD_MB``, which swaps them to disk).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from trtpipe import console
from trtpipe.artifact.artifact import Artifact
from trtpipe.artifact.records.manifest import ArtifactManifest
from trtpipe.artifact.tensors import TensorInfo
from trtpipe.debug.match import Matching, Skipped, TensorPair, match_tensors
from trtpipe.debug.options import DebugOptions
from trtpipe.debug.report import DebugReport, ErrorStats, LayerRow, mark_jumps
from trtpipe.errors import BadInput
from trtpipe.inputs import Batch, InputSpec, named, random_batch, take
from trtpipe.models.data_spec import DataKind, DataSpec
from trtpipe.onnx_info import graph_inputs
from trtpipe.optimize.data import Dataset, ImagePreprocessing, load_dataset
from trtpipe.runtime.registry import probe_session
from trtpipe.shapes import format_shape
from trtpipe.vocab import ChannelOrder, Precision

_UNKNOWN_SIZE = 4 * 2**20  # bytes assumed for a tensor shape inference cannot size, when none can be sized


def debug_model(model_path: Path, options: DebugOptions | None = None) -> DebugReport:
    """Compare every tensor ``model_path`` shares with its FP32 reference, in topological order.

    Both files are opened once, each as an :class:`~trtpipe.artifact.Artifact`, and all that is read of them (their
    descriptions, the model's manifest, the reference it records, input specs, graphs, hashes) is asked of those
    two objects; what is left here is debug's own job: pairing tensors, running both graphs, the report."""
    options = options or DebugOptions()
    model = Artifact.open(model_path, what="ONNX file")
    model_inputs = model.description.inputs  # its graph read, and its manifest judged (a warning where not its own)
    manifest = model.manifest
    reference = reference_of(model, options.reference)
    found = reference.description.precision
    if found is not Precision.FP32:
        raise BadInput(f"The reference {reference.path} is {found}, not FP32: give the FP32 ONNX that "
                       f"'{model.path.name}' was optimized from with --reference.")
    check_inputs(model_inputs, reference.description.inputs)
    specs = reference.input_specs(shapes=options.input_shape, recorded_shapes=True, recorded_by=model)
    dataset = _dataset(options, specs, reference, manifest)
    batch_size = _static_batch(reference.description.inputs) or 1
    usable = len(dataset) // batch_size * batch_size
    if usable == 0:
        raise BadInput(f"{dataset.source} has {len(dataset)} samples; the model takes batches of {batch_size}: give "
                       "more data or a larger --samples.")
    batches = [take(dataset.images, i, i + batch_size) for i in range(0, usable, batch_size)]
    matching = match_tensors(model.graph, reference.graph)
    if not matching.pairs:
        raise BadInput(f"{model.path} and {reference.path} share no float tensor by name ({matching.unmatched} "
                       f"unmatched, {len(matching.skipped)} skipped): give the FP32 ONNX it was optimized from with "
                       "--reference.")
    console.note(f"Comparing {len(matching.pairs)} tensors of {model.path.name} with {reference.path.name} on "
                 f"{usable} samples of {dataset.source}")
    stats, runs = _run(model.graph, reference.graph, matching, batches, options.memory, (model.path, reference.path))
    rows = _rows(matching, stats)
    report = DebugReport(str(model.path), str(reference.path), dataset.source, usable, options.jump_threshold,
                         options.jump_factor, rows, list(matching.skipped), matching.unmatched, runs)
    mismatched = [s for s in report.skipped if s.reason.startswith("shape ")]
    if not report.rows:
        first = mismatched[0] if mismatched else None
        raise BadInput(f"Every tensor {model.path.name} shares with {reference.path.name} has another shape there"
                       f"{f' ({first.tensor}: {first.reason})' if first else ''}: the two are not the same network.")
    mark_jumps(report.rows, options.jump_threshold, options.jump_factor)
    return report


# -- the reference and the inputs ------------------------------------------------------------------------------

def reference_of(model: Artifact, given: Path | None) -> Artifact:
    """The FP32 ONNX to compare with: as given, else the source the model's manifest records (its path as optimize
    was given it: tried from here, then from the model's folder; its SHA-256 must still be the recorded one)."""
    if given is not None:
        return Artifact.open(given, what="Reference ONNX file")
    source = model.made_from
    if source is None:
        why = "has no trtpipe manifest" if model.manifest is None else "has a manifest that names no source ONNX"
        raise BadInput(f"{model.path} {why}: give the FP32 ONNX it was made from with --reference FP32.onnx.")
    if not source.present:
        raise BadInput(f"{model.path} was optimized from {source.recorded}, which is not there any more: give it "
                       "with --reference FP32.onnx.")
    if source.found is None:
        raise BadInput(f"{source.present[0]} has changed since {model.path.name} was optimized from it (its SHA-256 "
                       "differs from the one the manifest records): give the FP32 ONNX it was made from with "
                       "--reference.")
    console.note(f"Reference: {source.found} (the source {model.path.name}'s manifest records)")
    return Artifact.open(source.found, what="Reference ONNX file")


def _shape(tensor: TensorInfo) -> tuple[int | None, ...]:
    """A tensor's dims, each a size or None where the graph leaves it free."""
    return tuple(d if isinstance(d, int) and d > 0 else None for d in tensor.shape)


def check_inputs(model: Sequence[TensorInfo], reference: Sequence[TensorInfo]) -> None:
    """BadInput where the model takes other inputs than the reference (names, or a fixed size that differs)."""
    ours = {t.name: t for t in model}
    theirs = {t.name: t for t in reference}
    if set(ours) != set(theirs):
        raise BadInput(f"The model takes inputs {', '.join(ours) or 'none'}; the reference takes "
                       f"{', '.join(theirs) or 'none'}: give the FP32 ONNX it was optimized from with --reference.")
    for name, tensor in ours.items():
        mine, other = _shape(tensor), _shape(theirs[name])
        if len(mine) != len(other) or any(a is not None and b is not None and a != b
                                          for a, b in zip(mine, other, strict=False)):
            raise BadInput(f"Input '{name}' has shape {format_shape(mine)} in the model and {format_shape(other)} in "
                           "the reference: shapes differ, so they are not the same network.")


def _dataset(options: DebugOptions, specs: tuple[InputSpec, ...], reference: Artifact,
             manifest: ArtifactManifest | None) -> Dataset:
    """The samples to run: --data, else a packaged model's own inputs, else the data the model was evaluated or
    calibrated on (as its ``manifest`` records it), else seeded random inputs with a warning."""
    text = options.data
    if text is None:
        from trtpipe.models.sources import for_file

        known = for_file(reference.path, reference.sha256)
        if known.data_spec is not None:
            text = known.data_spec
            console.note(f"{reference.path.name} is the packaged model {known.name}: running its own inputs")
        else:
            text = _recorded_data(manifest)
    if text is None or DataSpec.parse(text).kind is DataKind.RANDOM:
        drawn = "; ".join(s.describe_random() for s in specs)
        if options.data is None:
            console.warn(f"No --data, and the model is no packaged model: comparing on {options.samples} seeded random "
                         f"inputs ({drawn}). Errors on noise can differ from those on real inputs: give --data.")
        images = random_batch(specs, options.samples, np.random.default_rng(0))
        return Dataset(images, None, f"seeded random inputs ({drawn})")
    data = DataSpec.parse(text)
    makes_count = data.kind in (DataKind.PACKAGED, DataKind.PHOTOS)
    dataset = load_dataset(data, specs, purpose="calibration", samples=options.samples if makes_count else None,
                           preprocessing=_preprocessing(manifest))
    return dataset.head(options.samples) if len(dataset) > options.samples else dataset


def _recorded_data(manifest: ArtifactManifest | None) -> str | None:
    """The eval (else calibration) DATA optimize was given, where it can still be loaded from here."""
    recorded = manifest.recorded_options if manifest is not None else None
    for key in ("eval", "calib"):
        text = recorded.text(key) if recorded is not None else None
        if text is None:
            continue
        data = DataSpec.parse(text)
        if data.kind is DataKind.RANDOM or (data.path is not None and not data.path.exists()):
            continue
        console.note(f"No --data: running the {'evaluation' if key == 'eval' else 'calibration'} data the model was "
                     f"optimized with ({text})")
        return text
    return None


def _preprocessing(manifest: ArtifactManifest | None) -> ImagePreprocessing:
    """Image preprocessing as optimize used it (its recorded options), for data made from image files."""
    if manifest is None:
        return ImagePreprocessing()
    recorded = manifest.recorded_options.preprocessing
    return ImagePreprocessing(resize=recorded.resize, mean=recorded.mean, std=recorded.std,
                              channel_order=recorded.channel_order or ChannelOrder.RGB)


def _static_batch(inputs: Sequence[TensorInfo]) -> int | None:
    shape = _shape(inputs[0]) if inputs else ()
    return shape[0] if shape else None


# -- running both models ---------------------------------------------------------------------------------------

def _session(model: onnx.ModelProto, path: Path, exposing: list[str], *, round_fp16: bool = False) -> Any:
    """The probe session over ``model`` with ``exposing`` as extra outputs (``round_fp16``: FP16 tensors rounded where
    they are written, as a GPU computes them); a model the runtime cannot run so is refused in one line."""
    try:
        return probe_session(model, exposing=exposing, round_fp16=round_fp16)
    except Exception as error:  # ONNX Runtime raises its own Fail/InvalidGraph/NotImplemented types
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise BadInput(f"ONNX Runtime cannot run {path} with its intermediate tensors exposed: {reason}") from None


def _feeds(session: Any, batch: Batch) -> dict[str, np.ndarray]:
    """``batch`` for the session's inputs, each cast to the type the session takes (an FP16 graph without FP32 IO
    takes float16)."""
    given = named(batch, [i.name for i in session.get_inputs()])
    feeds = {}
    for item in session.get_inputs():
        value = given[item.name]
        if item.type == "tensor(float16)" and value.dtype != np.float16:
            value = value.astype(np.float16)
        feeds[item.name] = value
    return feeds


def _bytes(model: onnx.ModelProto, batch: Batch) -> dict[str, int]:
    """Bytes of one batch's value of every tensor shape inference can size, with the inputs fixed to the batch's
    shapes (a dynamic H and W then propagate)."""
    sized = onnx.ModelProto()
    sized.CopyFrom(model)
    del sized.graph.value_info[:]
    shapes = named(batch, [v.name for v in graph_inputs(sized)])
    for value in graph_inputs(sized):
        if value.name in shapes:
            dims = value.type.tensor_type.shape.dim
            for dim, size in zip(dims, shapes[value.name].shape, strict=False):
                dim.Clear()
                dim.dim_value = int(size)
    try:
        inferred = onnx.shape_inference.infer_shapes(sized)
    except Exception:  # graphs shape inference cannot follow: every size is then the fallback
        return {}
    sizes = {}
    for value in inferred.graph.value_info:
        tensor = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else 0 for d in tensor.shape.dim]
        if tensor.HasField("shape") and all(d > 0 for d in dims) and tensor.elem_type:
            item = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)).itemsize
            sizes[value.name] = int(np.prod(dims, dtype=np.int64)) * item
    return sizes


def chunks(pairs: Sequence[TensorPair], model_bytes: dict[str, int], reference_bytes: dict[str, int],
           budget: int) -> Iterator[list[TensorPair]]:
    """``pairs`` in order, cut so that each chunk's exposed tensors take at most ``budget`` bytes in either model
    (a tensor larger than the budget goes alone); a size shape inference could not give is taken as the largest
    it gave."""
    fallback_model = max(model_bytes.values(), default=_UNKNOWN_SIZE)
    fallback_reference = max(reference_bytes.values(), default=_UNKNOWN_SIZE)
    chunk: list[TensorPair] = []
    used_model = used_reference = 0
    for pair in pairs:
        size_model = model_bytes.get(pair.tensor, fallback_model)
        size_reference = reference_bytes.get(pair.reference, fallback_reference)
        if chunk and (used_model + size_model > budget or used_reference + size_reference > budget):
            yield chunk
            chunk, used_model, used_reference = [], 0, 0
        chunk.append(pair)
        used_model += size_model
        used_reference += size_reference
    if chunk:
        yield chunk


def _run(model: onnx.ModelProto, reference: onnx.ModelProto, matching: Matching, batches: list[Batch], budget: int,
         paths: tuple[Path, Path]) -> tuple[dict[str, ErrorStats], int]:
    """Running sums for every pair, exposing one chunk of tensors at a time in both models."""
    stats = {pair.tensor: ErrorStats() for pair in matching.pairs}
    fed = set(matching.reference_inputs)
    parts = list(chunks(matching.pairs, _bytes(model, batches[0]), _bytes(reference, batches[0]), budget))
    for number, part in enumerate(parts, start=1):
        ours = list(dict.fromkeys(p.tensor for p in part))
        theirs = list(dict.fromkeys(p.reference for p in part if p.reference not in fed))
        with console.step(f"Running both models, tensors {number}/{len(parts)}..."):
            model_session = _session(model, paths[0], ours, round_fp16=True)
            reference_session = _session(reference, paths[1], theirs) if theirs else None
            for batch in batches:
                values = dict(zip(ours, model_session.run(ours, _feeds(model_session, batch)), strict=True))
                expected: dict[str, np.ndarray] = named(batch, list(matching.reference_inputs))
                if reference_session is not None:
                    expected = {**expected, **dict(zip(theirs, reference_session.run(
                        theirs, _feeds(reference_session, batch)), strict=True))}
                for pair in part:
                    stats[pair.tensor].update(np.asarray(expected[pair.reference]), np.asarray(values[pair.tensor]))
            del model_session, reference_session
    return stats, len(parts)


def _rows(matching: Matching, stats: dict[str, ErrorStats]) -> list[LayerRow]:
    """One row per pair that could be compared; a pair whose shapes differ moves to ``matching.skipped``."""
    rows: list[LayerRow] = []
    for pair in matching.pairs:
        figures = stats[pair.tensor]
        if figures.mismatch is not None:
            mine, theirs = figures.mismatch
            matching.skipped.append(Skipped(pair.tensor, f"shape {format_shape(mine)} here, {format_shape(theirs)} "
                                                         f"for {pair.reference} in the reference"))
            continue
        fit = figures.gain_fit()
        rows.append(LayerRow(len(rows) + 1, pair.tensor, pair.reference, pair.relation, pair.op, pair.node,
                             figures.shape or (), figures.cosine, figures.relative_error, figures.max_abs,
                             fit[0] if fit else figures.relative_error, fit[1] if fit else None,
                             matching.upstream.get(pair.tensor, ())))
    return rows
