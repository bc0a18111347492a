"""Is each artifact made from the model bench compares it with? A speedup or an agreement figure against a reference
whose weights differ from the artifact's compares two models, not two runtimes, and says nothing.

convert records the SHA-256 of the PyTorch weights in the ONNX file's manifest (``source.weights_sha256``);
optimize records the FP32 ONNX it read (``input``: path and hash), whose manifest is followed in turn; a TensorRT
engine's sidecar records the hash of the ONNX it was built from, matched with the ONNX files of the same bench. An
artifact whose chain leads to other weights than the reference's is refused; one without a chain (an ONNX from
elsewhere) is benched, with one line saying its weights could not be matched.
"""

from __future__ import annotations

from pathlib import Path

from trtpipe import console
from trtpipe.errors import BadInput
from trtpipe.manifest import ArtifactManifest, read_manifest
from trtpipe.models.loader import LoadedModel, load_model
from trtpipe.models.registry import factory_spec
from trtpipe.runtime.artifacts import ArtifactDescription
from trtpipe.vocab import ArtifactKind

MAX_CHAIN = 8  # optimize reads convert's FP32 ONNX: two links in practice; the bound only stops a cycle
SHOWN = 12  # characters of a hash shown in a message


def recorded_weights(artifact: Path) -> str | None:
    """The SHA-256 of the PyTorch weights the ONNX file ``artifact`` was made from, as its manifests tell, or None
    where the chain breaks: no manifest (or one describing another file), or an optimize input that is gone or
    changed since (none of the places it can be has the hash optimize recorded)."""
    return _followed(Path(artifact), read_manifest(artifact))


def _followed(artifact: Path, manifest: ArtifactManifest | None) -> str | None:
    for _ in range(MAX_CHAIN):
        if manifest is None:
            return None
        source = manifest.details.get("source")
        if isinstance(source, dict) and isinstance(source.get("weights_sha256"), str):
            return str(source["weights_sha256"])
        given = manifest.details.get("input")
        if not isinstance(given, dict) or not isinstance(given.get("path"), str):
            return None
        artifact, manifest = _upstream(artifact, Path(given["path"]), given.get("sha256"))
    return None


def _upstream(artifact: Path, recorded: Path, sha256: object) -> tuple[Path, ArtifactManifest | None]:
    """The file optimize read and its manifest: at the path it recorded (relative to where optimize ran) or, where
    that is gone or another file now, beside ``artifact`` (the two were moved together); the hash decides."""
    for candidate in (recorded, artifact.parent / recorded.name):
        manifest = read_manifest(candidate) if candidate.is_file() else None
        if manifest is not None and manifest.sha256 == sha256:
            return candidate, manifest
    return recorded, None


def check_weights(loaded: LoadedModel, descriptions: list[ArtifactDescription]) -> None:
    """Refuse (BadInput, one line) an artifact made from other weights than ``loaded``'s, saying whether the
    factory is unseeded or the artifact is stale; note in one line the artifacts whose weights cannot be traced."""
    weights: dict[int, str | None] = {}
    by_onnx_hash: dict[str, str | None] = {}  # what an engine built from one of these ONNX files was made from
    for index, description in enumerate(descriptions):
        if description.kind is ArtifactKind.ONNX and description.path is not None:
            manifest = read_manifest(Path(description.path))
            weights[index] = _followed(Path(description.path), manifest)
            if manifest is not None:
                by_onnx_hash[manifest.sha256] = weights[index]
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
