"""Where an artifact came from, as far as trtpipe's records tell: its lineage, checked by hash at every link.

convert records the SHA-256 of the PyTorch weights in the ONNX file's manifest (``source.weights_sha256``);
optimize records the FP32 ONNX it read (``input``: path and hash), whose manifest is followed in turn. The chain
is followed here, once, and handed out by :class:`trtpipe.artifact.Artifact` (``lineage``, ``weights_sha256``) to
every caller (bench's weight check, the PyTorch model behind an ONNX reference, the reference line of every
report); what a mismatch means for a comparison stays with bench (``trtpipe.bench.identity``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtpipe.artifact.records.manifest import ArtifactManifest, read_manifest
from trtpipe.files import sha256_file

MAX_CHAIN = 8  # optimize reads convert's FP32 ONNX: two links in practice; the bound only stops a cycle
MAX_ANCESTORS = 8  # folders above an artifact where the folder optimize ran in is looked for


@dataclass(frozen=True)
class Lineage:
    """Where an ONNX file came from, as far as trtpipe's manifests tell."""

    hashes: tuple[str, ...]  # its own SHA-256, then that of each file optimize read on the way back
    source: dict[str, Any] | None = None  # convert's record of the PyTorch model, where the chain reaches it
    made_from: Path | None = None  # the file optimize made it from (None: convert's output, or from elsewhere)
    complete: bool = True  # the chain reached its start (convert's output, or a file without a manifest)

    def same_model_as(self, reference: Lineage) -> bool | None:
        """True when this chain is of ``reference``'s model (a file somewhere along both, or the same PyTorch weights
        at both starts), False when both chains are known and it is not, None when this chain tells nothing (an
        ONNX from elsewhere, a file on the way gone). Bench refuses a comparison on False."""
        if set(reference.hashes) & set(self.hashes):
            return True
        if reference.source is not None and self.source is not None:
            return bool(reference.source["weights_sha256"] == self.source["weights_sha256"])
        if self.made_from is None or not (self.complete and reference.complete):
            return None
        return False


def lineage_of(artifact: Path, manifest: ArtifactManifest | None) -> Lineage:
    """``artifact``'s chain, from its ``manifest``: through optimize's recorded inputs back to convert's output or
    to a file that has no manifest (an ONNX from elsewhere that optimize started from); incomplete where a file on
    the way is gone or changed."""
    hashes = [manifest.sha256 if manifest is not None else sha256_file(artifact)]
    made_from = None
    for _ in range(MAX_CHAIN):
        if manifest is None:
            return Lineage(tuple(hashes), made_from=made_from)
        source = manifest.source_model
        if source is not None and source.weights_sha256 is not None:
            return Lineage(tuple(hashes), source.record, made_from)
        given = manifest.made_from
        if given is None or given.sha256 is None:
            return Lineage(tuple(hashes), made_from=made_from, complete=False)
        recorded, sha256 = Path(given.path), given.sha256
        hashes.append(sha256)
        made_from = made_from or recorded
        upstream, manifest = _upstream(artifact, recorded, sha256)
        if manifest is None:  # the file optimize read has no manifest (an ONNX from elsewhere), or it is gone
            present = any(c.is_file() and sha256_file(c) == sha256 for c in upstream_candidates(artifact, recorded))
            return Lineage(tuple(hashes), made_from=made_from, complete=present)
        artifact = upstream
    return Lineage(tuple(hashes), made_from=made_from, complete=False)


def upstream_candidates(artifact: Path, recorded: Path) -> list[Path]:
    """Where the file optimize made ``artifact`` from may be now, in the order tried: the path it recorded (relative
    to the folder optimize ran in), that path from each folder above ``artifact`` (the folder optimize ran in, when
    this process runs elsewhere), and beside ``artifact`` by name (the two were moved together). The recorded
    SHA-256 decides which, if any, is that file."""
    if recorded.is_absolute():
        return [recorded, artifact.parent / recorded.name]
    folders = list(Path(artifact).resolve().parents)[:MAX_ANCESTORS]
    return list(dict.fromkeys([recorded, *(folder / recorded for folder in folders), artifact.parent / recorded.name]))


def _upstream(artifact: Path, recorded: Path, sha256: object) -> tuple[Path, ArtifactManifest | None]:
    """The file optimize read and its manifest, where one of :func:`upstream_candidates` has the recorded hash."""
    for candidate in upstream_candidates(artifact, recorded):
        manifest = read_manifest(candidate) if candidate.is_file() else None
        if manifest is not None and manifest.sha256 == sha256:
            return candidate, manifest
    return recorded, None
