"""The one way an artifact and its record reach the disk: both as one commit.

An artifact's bytes (an ONNX file, a package, an engine) and the document that describes them (its manifest, its
engine sidecar) are written under temporary names first and renamed under the artifact's commit lock
(:func:`trtpipe.files.commit_pair`), so two runs writing one path end with one run's pair, never one run's artifact
beside the other's record. The record describes the bytes this run staged (their SHA-256 is taken from the staged
file or the bytes, never from whatever is at the path after a rename); ``commit_artifact`` (manifest.py) and
``commit_engine`` (engine.py) say how each record is stamped, then call :func:`commit`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from trtpipe.artifact.records.document import record_bytes
from trtpipe.files import commit_pair, staged_path


def commit(artifact: Path, content: Path | bytes, record: Path, document: Mapping[str, Any], *,
           between_renames: Callable[[], None] | None = None) -> Path:
    """Put ``content`` at ``artifact`` and ``document`` at ``record``, as one commit; returns ``record``.

    ``content`` is the temporary file this run staged beside ``artifact`` (:func:`trtpipe.files.staged_path`),
    renamed into place, or the bytes themselves, staged here. ``document`` must describe exactly those bytes.
    ``between_renames`` is a seam for tests: it runs after the artifact's rename, before the record's.
    """
    artifact, record, data = Path(artifact), Path(record), record_bytes(document)
    if isinstance(content, bytes):
        with staged_path(artifact) as staged:
            staged.write_bytes(content)
            commit_pair(staged, artifact, record, data, between_renames=between_renames)
    else:
        commit_pair(Path(content), artifact, record, data, between_renames=between_renames)
    return record
