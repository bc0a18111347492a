"""Is each artifact made from the model bench compares it with? A speedup or an agreement figure against a reference
whose weights differ from the artifact's compares two models, not two runtimes, and says nothing.

convert records the SHA-256 of the PyTorch weights in the ONNX file's manifest (``source.weights_sha256``);
optimize records the FP32 ONNX it read (``input``: path and hash), whose manifest is followed in turn; a TensorRT
engine's sidecar records the hash of the ONNX it was built from, matched with the ONNX files of the same bench. An
artifact whose chain leads to other weights than the reference's is refused; one without a chain (an ONNX from
elsewhere) is benched, with one line saying its weights could not be matched. The chain itself is the artifact
room's (:attr:`trtpipe.artifact.Artifact.lineage`, followed in trtpipe.artifact.lineage); what a mismatch means for
a comparison is judged here.

With an FP32 ONNX file as the reference (bench.reference), the chain is matched with that file: an artifact is of
the reference's model when its chain passes through the reference's own SHA-256 (or through a file the reference's
own chain passes through, or back to the same PyTorch weights); one optimized from another ONNX is refused, naming
both files. Where the reference came from ``trtpipe convert``, its lineage tells the PyTorch model and weights
behind it, and every report's reference line names them.
"""

from __future__ import annotations

from typing import Protocol

from trtpipe import console
from trtpipe.artifact.artifact import Artifact
from trtpipe.artifact.description import ArtifactDescription
from trtpipe.artifact.lineage import Lineage
from trtpipe.errors import BadInput
from trtpipe.models.loader import LoadedModel, load_model
from trtpipe.models.registry import factory_spec
from trtpipe.vocab import ArtifactKind

SHOWN = 12  # characters of a hash shown in a message


class FileReference(Protocol):
    """An FP32 ONNX file as bench's reference (bench.reference.OnnxReference): the artifact it is."""

    @property
    def artifact(self) -> Artifact: ...


def check_weights(loaded: LoadedModel | FileReference, descriptions: list[ArtifactDescription]) -> None:
    """Refuse (BadInput, one line) an artifact made from other weights than ``loaded``'s, saying whether the
    factory is unseeded or the artifact is stale; note in one line the artifacts whose weights cannot be traced.
    With an FP32 ONNX reference, refuse an artifact made from another ONNX file (both named)."""
    if not isinstance(loaded, LoadedModel):
        _check_onnx_reference(loaded, descriptions)
        return
    weights: dict[int, str | None] = {}
    by_onnx_hash: dict[str, str | None] = {}  # what an engine built from one of these ONNX files was made from
    for index, artifact in _recorded(descriptions).items():
        weights[index] = artifact.weights_sha256
        if artifact.manifest is not None:
            by_onnx_hash[artifact.manifest.sha256] = weights[index]
    for index, description in enumerate(descriptions):
        if description.engine is not None and description.engine.onnx_sha256:
            weights[index] = by_onnx_hash.get(description.engine.onnx_sha256)
    untraced = [_name(d) for i, d in enumerate(descriptions) if weights.get(i) is None]
    traced = [(d, w) for i, d in enumerate(descriptions) if (w := weights.get(i)) is not None]
    if traced:
        actual = loaded.weights_sha256()
        for description, recorded in traced:
            if recorded != actual:
                raise BadInput(_mismatch(loaded, _name(description), recorded, actual))
    if untraced:
        console.note(f"{', '.join(untraced)}: no trtpipe manifest leads back to the PyTorch weights it was made "
                     f"from, so they could not be matched with {loaded.name}'s (speedup and agreement assume the "
                     "same model).")


def _recorded(descriptions: list[ArtifactDescription]) -> dict[int, Artifact]:
    """The artifacts whose own manifest can lead back along a chain (ONNX files, AOTInductor packages), opened in
    the artifact room, by their index among ``descriptions``."""
    return {index: Artifact(description.path, description.kind) for index, description in enumerate(descriptions)
            if description.kind in (ArtifactKind.ONNX, ArtifactKind.AOTI) and description.path is not None}


def _check_onnx_reference(reference: FileReference, descriptions: list[ArtifactDescription]) -> None:
    """Each artifact's chain against the reference file's: the same file somewhere along both, or the same
    PyTorch weights at both starts, is the same model; two complete chains that share neither are refused."""
    ours = reference.artifact.lineage
    lineages: dict[int, Lineage] = {}
    by_onnx_hash: dict[str, Lineage] = {}
    for index, artifact in _recorded(descriptions).items():
        lineages[index] = artifact.lineage
        by_onnx_hash[lineages[index].hashes[0]] = lineages[index]
    untraced = []
    for index, description in enumerate(descriptions):
        lineage = lineages.get(index)
        if lineage is None and description.engine is not None and description.engine.onnx_sha256:
            built_from = description.engine.onnx_sha256
            lineage = Lineage((built_from,)) if built_from in ours.hashes else by_onnx_hash.get(built_from)
        verdict = None if lineage is None else lineage.same_model_as(ours)
        if verdict is None:
            untraced.append(_name(description))
        elif not verdict:
            assert lineage is not None
            raise BadInput(_other_onnx(reference, ours, _name(description), lineage))
    if untraced:
        console.note(f"{', '.join(untraced)}: no trtpipe manifest leads back to the ONNX file it was made from, so "
                     f"it could not be matched with the reference {reference.artifact.path} (speedup and agreement "
                     "assume the same model).")


def _other_onnx(reference: FileReference, ours: Lineage, artifact: str, theirs: Lineage) -> str:
    path = reference.artifact.path
    if theirs.made_from is None:  # both convert's outputs, of other weights
        assert theirs.source is not None and ours.source is not None
        return (f"{artifact} was converted from {theirs.source.get('source')} (weights "
                f"{str(theirs.source['weights_sha256'])[:SHOWN]}), the reference {path} from "
                f"{ours.source.get('source')} (weights {str(ours.source['weights_sha256'])[:SHOWN]}): bench each "
                "against the ONNX it was made from.")
    return (f"{artifact} was optimized from {theirs.made_from} ({theirs.hashes[1][:SHOWN]}), not from the reference "
            f"{path} ({ours.hashes[0][:SHOWN]}): bench it against {theirs.made_from}, or optimize {path} "
            "again.")


def warn_if_unseeded(loaded: LoadedModel) -> None:
    """One warning when ``loaded`` comes from a factory that builds other weights on each call: every run then
    converts a new model, and its artifacts can be benched against no later load of it."""
    if _builds_new_weights(loaded, loaded.weights_sha256()):
        console.warn(f"The factory {loaded.source} builds different weights on each call: seed it (torch.manual_seed "
                     "before building the model) so that reruns reuse its stages and bench can match its artifacts.")


def _mismatch(loaded: LoadedModel, artifact: str, recorded: str, actual: str) -> str:
    hashes = f"{artifact} was converted from weights {recorded[:SHOWN]}, the reference has {actual[:SHOWN]}"
    if _builds_new_weights(loaded, actual):
        return (f"The factory {loaded.source} builds different weights on each call ({hashes}): seed it "
                "(torch.manual_seed before building the model), then re-run convert.")
    return (f"{artifact} is not made from {loaded.name} ({loaded.source}) as it is now: {hashes}. Re-run convert "
            "on this model (or bench the model the artifact was made from).")


def _builds_new_weights(loaded: LoadedModel, weights: str) -> bool:
    """Whether calling ``loaded``'s factory again builds weights other than ``weights`` (False for a source
    that is no factory, or one that cannot be loaded again here)."""
    if loaded.source_kind != "factory" or factory_spec(loaded.source) is None:
        return False
    try:
        again = load_model(loaded.source, input_shape=loaded.input_shape)
    except BadInput:
        return False
    return again.weights_sha256() != weights


def _name(description: ArtifactDescription) -> str:
    return str(description.path) if description.path is not None else "an in-memory model"
