"""MODEL given as an FP32 ONNX file rather than a PyTorch model: the most common starting point (an exporter's
file, a model shipped in a wheel). The reference every artifact is measured against is then that file on ONNX
Runtime CPU, and every report says so; speedups are against it, not against PyTorch.

Which file MODEL names, and what its source knows beyond the graph, is :mod:`trtpipe.models.sources`' answer: a
packaged model (a real trained network shipped as ONNX inside a wheel) is named by its name, and brings its size
and natural inputs: the agreement samples are those, so its task figure means something.

The file may take several inputs, of any dtype (NHWC uint8 pixels a model normalises inside): each is an
:class:`~trtpipe.inputs.InputSpec` of the graph's name and dtype, sized by ``--input-shape`` where the graph leaves
an axis dynamic, and ranged by ``--input-range`` or what convert recorded in the file's manifest.

The file is opened once, as an :class:`~trtpipe.artifact.Artifact`, and everything bench needs of it is asked of
that one object: its description (precision, task, tensors), its input specs (bench brings only its sizing rule),
its manifest and its lineage (the PyTorch model convert made it from).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from trtpipe.artifact.artifact import Artifact
from trtpipe.artifact.inputs import Dims, Sizing
from trtpipe.errors import BadInput
from trtpipe.files import sha256_file
from trtpipe.inputs import Batch, InputSpec, random_batch
from trtpipe.models.loader import EvaluationData, LoadedModel
from trtpipe.models.options import ModelOptions
from trtpipe.models.sources import OnnxFound, onnx_source
from trtpipe.shapes import FIRST, format_shape
from trtpipe.vocab import ArtifactKind, Precision, Task

REFERENCE = "the FP32 ONNX on ONNX Runtime CPU"


@dataclass
class OnnxReference:
    """What bench needs of its model, for an FP32 ONNX file: its inputs, task, data and description."""

    artifact: Artifact  # the file, opened once: its description, manifest and lineage are read from it
    name: str
    inputs: tuple[InputSpec, ...]  # every input, each dimension fixed (the batch at 1 where the graph leaves it free)
    task: Task | None = None
    decoder: Callable[[Sequence[np.ndarray]], list[Any]] | None = None
    origin: OnnxFound | None = None  # what its source knows of it: a packaged model's natural inputs and size
    module: None = None  # no PyTorch module: the reference row runs the file itself
    source_kind: str = str(ArtifactKind.ONNX)
    dataset: str | None = None
    eval_samples: int = 16  # how many of a packaged model's natural inputs bench judges agreement on (--eval-samples)

    @property
    def path(self) -> Path:
        return self.artifact.path

    @property
    def source(self) -> str:
        return str(self.path)

    @property
    def packaged(self) -> str | None:
        """The packaged model it is (its natural inputs are the agreement samples), else None."""
        return self.origin.name if self.origin is not None else None

    @property
    def input_shape(self) -> tuple[int, ...]:
        """The first input's shape (the only one of most models)."""
        return tuple(int(d or 1) for d in self.inputs[0].shape)

    @property
    def sample_shape(self) -> tuple[int, ...]:
        return self.input_shape[1:]

    def random_inputs(self, count: int, seed: int = 0) -> Batch:
        """``count`` seeded random samples of every input, each in its dtype and range."""
        return random_batch(self.inputs, count, np.random.default_rng(seed))

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "source_kind": self.source_kind,
                "source_sha256": sha256_file(self.path), "input_shape": list(self.input_shape),
                **({"inputs": [s.to_dict() for s in self.inputs]} if len(self.inputs) > 1 else {}),
                "reference": REFERENCE, "packaged": self.packaged,
                "converted_from": self.artifact.lineage.source}

    def _natural(self, seed: int) -> EvaluationData | None:
        batch = self.origin.natural_batch(self.inputs[0], self.eval_samples, seed) if self.origin else None
        if batch is None:
            return None
        return EvaluationData(batch.inputs.astype(self.inputs[0].dtype, copy=False), None,
                              f"{batch.source} (reference: {REFERENCE}; agreement, no labels)")

    def evaluation_data(self) -> EvaluationData | None:
        return self._natural(seed=1)

    def calibration_data(self) -> Batch:
        data = self._natural(seed=0)
        if data is None:
            raise BadInput(f"Peers quantize on calibration data, and {self.name} brings none: bench it as a "
                           "packaged model or from its PyTorch model.")
        return data.images


def onnx_reference(spec: str, options: ModelOptions) -> OnnxReference | None:
    """The ONNX reference ``spec`` names (a packaged model's name or a .onnx path), or None for a PyTorch model."""
    found = onnx_source(spec)
    if found is None:
        return None
    artifact = Artifact.open(found.path)
    described = artifact.description
    if described.precision is not Precision.FP32:
        raise BadInput(f"MODEL {artifact.path} is {described.precision}: the reference must be the FP32 ONNX (give "
                       "the file optimize started from, or the PyTorch model).")
    found.check_inputs(len(described.inputs))
    declared = options.input_shape
    if declared is not None and not isinstance(declared, dict):  # a bare shape, as ModelOptions held it before
        declared = {FIRST: tuple(declared)}
    inputs = artifact.input_specs(shapes=declared, size=_bench_size(artifact.path, len(described.inputs), found),
                                  dtypes=getattr(options, "input_dtype", None),
                                  ranges=getattr(options, "input_range", None))
    task = options.task or found.task or described.task
    decoder = found.decoder()
    if task is Task.DETECT and len(described.outputs) > 1 and not options.postprocess and decoder is None:
        task = Task.GENERIC  # a multi-output head no decoder reads: compared output by output
    if options.postprocess:
        from trtpipe.models.user_code import load_postprocess

        decoder = load_postprocess(options.postprocess)
    name = options.name or found.name or artifact.name
    return OnnxReference(artifact, name, inputs, task, decoder, found, eval_samples=options.eval_samples or 16)


def _bench_size(path: Path, count: int, found: OnnxFound) -> Sizing:
    """Bench's rule for an input ``--input-shape`` does not size (of ``count`` inputs of the file at ``path``):
    the graph's dims where fixed, the size its source makes it at where it leaves one free (a packaged model's own),
    the batch at 1; BadInput (the option to give, with an example) where a dynamic axis is left."""

    def size(index: int, name: str, dims: Dims) -> tuple[int, ...]:
        rest = found.sample_dims(index, dims) or dims[1:]
        fixed = tuple(d for d in rest if isinstance(d, int))
        if len(fixed) != len(rest):
            example = "x".join(str(d) if isinstance(d, int) else "N" for d in (1, *rest))
            prefix = f"{name}:" if count > 1 else ""
            raise BadInput(f"{path}'s input {name} is {format_shape(dims)}: its dynamic axes need a size to bench "
                           f"at: give --input-shape {prefix}{example} with N filled in.")
        return (dims[0] if isinstance(dims[0], int) else 1, *fixed)

    return size


def bench_reference(spec: str, options: ModelOptions,
                    artifacts: Sequence[Path]) -> tuple[LoadedModel | OnnxReference | None, list[Path]]:
    """What bench measures against, and the artifacts it benches: for an FP32 ONNX that ``trtpipe convert`` made,
    the PyTorch model its manifest leads back to (loaded, and checked by its weights' SHA-256), with the ONNX itself
    among the artifacts, so the PyTorch FP32 row is there as for ``bench MODEL fp32.onnx``; for an ONNX from
    elsewhere (or a packaged model, or a source that cannot be loaded here: one line says why), the file on ONNX
    Runtime; None for a PyTorch MODEL (the caller loads it)."""
    reference = onnx_reference(spec, options)
    if reference is None or reference.packaged is not None:
        return reference, list(artifacts)
    origin = pytorch_origin(reference.artifact, options)
    if origin is None:
        return reference, list(artifacts)
    others = [a for a in artifacts if Path(a).resolve() != reference.path.resolve()]
    return origin, [reference.path, *others]


def pytorch_origin(artifact: Artifact, options: ModelOptions) -> LoadedModel | None:
    """The PyTorch model convert made the ONNX ``artifact`` from, as its lineage records it (source, inputs,
    weights' SHA-256), loaded; None, with a line saying why, where it cannot be loaded here or its weights are not
    those."""
    from trtpipe import console
    from trtpipe.errors import TrtpipeError
    from trtpipe.models.loader import load_model

    onnx_file = artifact.path
    origin = artifact.lineage.source
    if not origin or not origin.get("source") or not origin.get("weights_sha256"):
        return None
    source = str(origin.get("resolved_source") or origin["source"])  # absolute where convert read a file
    fallback = "the reference is the FP32 ONNX on ONNX Runtime"
    if origin.get("source_kind") == "pickled" and not options.trust_checkpoint:
        console.note(f"{onnx_file} was converted from {source}, which needs full unpickling (--trust-checkpoint): "
                     f"{fallback}.")
        return None
    # Every input as convert recorded it beside the file (name, shape, dtype, range), else the source's record.
    manifest = artifact.manifest
    recorded = [replace(spec, shape=tuple(1 if d is None else d for d in spec.shape)).to_dict()
                for spec in (manifest.input_specs.values() if manifest else [])]
    if len(recorded) == 1:
        recorded[0]["name"] = FIRST  # a single input: whatever its forward parameter is called
    recorded = recorded or origin.get("inputs") or [{"name": FIRST, "shape": origin.get("input_shape")}]
    # A checkpoint's architecture is recorded beside it (--arch); a registry name or a factory needs none.
    arch = origin.get("architecture") if origin.get("source_kind") in ("state_dict", "safetensors") else None
    try:
        loaded = load_model(
            source, arch=arch, trust_checkpoint=options.trust_checkpoint,
            input_shape={str(i["name"]): tuple(i["shape"]) for i in recorded if i.get("shape")} or None,
            input_dtype={str(i["name"]): str(i["dtype"]) for i in recorded if i.get("dtype")} or None,
            input_range={str(i["name"]): tuple(i["range"]) for i in recorded if i.get("range")} or None,
            task=options.task, postprocess=options.postprocess)
    except TrtpipeError as error:
        console.note(f"{onnx_file} was converted from {source}, which cannot be loaded here ({error.message}): "
                     f"{fallback}.")
        return None
    if loaded.weights_sha256() != origin["weights_sha256"]:
        console.note(f"{onnx_file} was converted from {source}, whose weights have changed since (SHA-256 "
                     f"{loaded.weights_sha256()[:12]}, not {str(origin['weights_sha256'])[:12]}): {fallback}.")
        return None
    console.note(f"{onnx_file} was converted from {source} (weights SHA-256 {loaded.weights_sha256()[:12]}): "
                 "benched against that PyTorch model, the ONNX file among the artifacts")
    return loaded
