"""Builds sharing one timing cache file keep each other's entries (lock, merge, atomic write).

The file handling is plain Python: "entries" here are JSON lists merged as sets, standing in for TensorRT's
ITimingCache.combine, so concurrent writers can be checked on any machine."""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
from pathlib import Path

from trtpipe.engine import timing_cache


def _add_entry(path: str, entry: str) -> None:
    """One build's write-back: merge what is on disk now with this build's entry, slowly, to invite a race."""

    def merge(current: bytes | None) -> bytes:
        entries = set(json.loads(current)) if current else set()
        time.sleep(0.05)  # another writer would slip in here without the lock
        return json.dumps(sorted(entries | {entry})).encode()

    timing_cache.update(Path(path), merge)


def test_concurrent_processes_lose_no_entries(tmp_path: Path) -> None:
    path = tmp_path / "shared.cache"
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_add_entry, args=(str(path), f"build{i}")) for i in range(4)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(60)
    assert all(w.exitcode == 0 for w in writers)
    assert json.loads(path.read_bytes()) == [f"build{i}" for i in range(4)]


def test_concurrent_threads_lose_no_entries(tmp_path: Path) -> None:
    # fcntl locks belong to a process: threads of one process need their own lock as well.
    path = tmp_path / "shared.cache"
    threads = [threading.Thread(target=_add_entry, args=(str(path), f"build{i}")) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert json.loads(path.read_bytes()) == [f"build{i}" for i in range(4)]


def test_the_merge_sees_the_cache_on_disk_and_an_empty_file_is_no_cache(tmp_path: Path) -> None:
    path = tmp_path / "t.cache"
    seen: list[bytes | None] = []
    timing_cache.update(path, lambda current: seen.append(current) or b"first")
    timing_cache.update(path, lambda current: seen.append(current) or b"second")
    assert seen == [None, b"first"] and path.read_bytes() == b"second"
    path.write_bytes(b"")
    assert timing_cache.read(path) is None and timing_cache.read(None) is None
    assert timing_cache.lock_path(path).name == "t.cache.lock"


class _Cache:
    """Stands in for ITimingCache: a set of entries; combine() fails for another TensorRT version's cache."""

    def __init__(self, entries: set[str], version: str = "10.13") -> None:
        self.entries, self.version = entries, version

    def combine(self, other: _Cache, ignore_mismatch: bool) -> bool:
        assert ignore_mismatch  # a cache from another GPU of the same version is still merged
        if other.version != self.version:
            return False
        self.entries |= other.entries
        return True

    def serialize(self) -> bytes:
        return json.dumps({"version": self.version, "entries": sorted(self.entries)}).encode()


class _Config:
    """Stands in for IBuilderConfig's two timing-cache calls."""

    def __init__(self, built: _Cache) -> None:
        self.built = built

    def get_timing_cache(self) -> _Cache:
        return self.built

    def create_timing_cache(self, data: bytes) -> _Cache:
        loaded = json.loads(data)
        return _Cache(set(loaded["entries"]), loaded["version"])


def test_save_timing_cache_combines_the_cache_on_disk_into_the_builds(tmp_path: Path) -> None:
    from trtpipe.engine.builder import save_timing_cache

    path = tmp_path / "t.cache"
    path.write_bytes(_Cache({"other build"}).serialize())  # written by a build that finished meanwhile
    notes: list[str] = []
    save_timing_cache(_Config(_Cache({"this build"})), path, notes.append)
    assert json.loads(path.read_bytes())["entries"] == ["other build", "this build"] and not notes
    path.write_bytes(_Cache({"old"}, version="10.8").serialize())
    save_timing_cache(_Config(_Cache({"this build"})), path, notes.append)
    assert json.loads(path.read_bytes())["entries"] == ["this build"] and "another TensorRT version" in notes[0]
    # The cache the build started with was already reported when the build refused it: no second note.
    old = _Cache({"old"}, version="10.8").serialize()
    path.write_bytes(old)
    save_timing_cache(_Config(_Cache({"this build"})), path, notes.append, read_at_start=old)
    assert len(notes) == 1
