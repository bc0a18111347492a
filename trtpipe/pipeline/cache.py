"""Stage keys and the run manifest: a stage reruns only when something it depends on changed.

A key is the SHA-256 of everything that determines a stage's output: its input artifacts' hashes, its
options, the data's identity and the versions that matter. The run manifest records each stage's key, status
(ran, cached, skipped), duration and its artifacts' hashes; a rerun reuses a stage when the key matches and
every artifact is still on disk with the recorded hash.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trtpipe.files import sha256_file, write_json_atomic
from trtpipe.models.data_spec import DataKind, DataSpec


def stage_key(**parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def data_identity(spec: str | None) -> str | None:
    """A data spec's identity: bundled names as they are, files and folders by content."""
    if spec is None:
        return None
    data = DataSpec.parse(spec)
    if data.kind is DataKind.FOLDER and data.path is not None:
        digest = hashlib.sha256()
        for file in sorted(p for p in data.path.rglob("*") if p.is_file()):
            digest.update(str(file.relative_to(data.path)).encode())
            digest.update(sha256_file(file).encode())
        return digest.hexdigest()
    if data.kind is DataKind.FILE and data.path is not None and data.path.is_file():
        return sha256_file(data.path)
    return spec  # a bundled name, or a path with nothing there (optimize will say so)


@dataclass
class StageRecord:
    stage: str  # e.g. "convert", "optimize:int8_cpu"
    key: str
    status: str  # ran | cached | skipped
    seconds: float = 0.0
    artifacts: dict[str, str] = field(default_factory=dict)  # path -> sha256
    note: str | None = None


class RunManifest:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.previous: dict[str, dict[str, Any]] = {}
        if path.is_file():
            try:
                self.previous = {s["stage"]: s for s in json.loads(path.read_text()).get("stages", [])}
            except (ValueError, KeyError, TypeError):
                self.previous = {}
        self.stages: list[StageRecord] = []

    def reusable(self, stage: str, key: str) -> dict[str, str] | None:
        """The artifacts of a previous run of ``stage`` with the same key, if they are all intact."""
        old = self.previous.get(stage)
        if not old or old.get("key") != key or old.get("status") == "skipped":
            return None
        artifacts = old.get("artifacts", {})
        for path, digest in artifacts.items():
            if not Path(path).is_file() or sha256_file(Path(path)) != digest:
                return None
        return artifacts

    def record(self, record: StageRecord) -> None:
        self.stages.append(record)

    def write(self, extra: dict[str, Any]) -> None:
        write_json_atomic(self.path, {**extra, "stages": [asdict(s) for s in self.stages]})
