"""Writing a shared timing cache back without losing another build's entries.

Builds that share one cache file (the pipeline gives every engine of a run ``.trt-timing.cache``; users run builds in
parallel) used to write back the cache they read at their start: the last writer won and the other builds'
measurements were lost. Polygraphy's ``EngineBytesFromNetwork`` (tools/Polygraphy/polygraphy/backend/trt/loader.py
in NVIDIA/TensorRT) shows the way: take ``util.LockFile`` (an ``fcntl.lockf`` lock on ``PATH.lock``), load the cache
now on disk, ``combine`` it into the cache the build made (``ignore_mismatch=True``), and save. Here the write is
also atomic, so a reader that takes no lock (the start of a build) never sees half a file.

Only the locking and the read-merge-write order live here, in plain Python; the TensorRT merge is a callback.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from trtpipe.files import write_bytes_atomic


def lock_path(path: Path) -> Path:
    """``cache.bin`` -> ``cache.bin.lock`` (Polygraphy's naming)."""
    return path.with_name(f"{path.name}.lock")


_THREAD_LOCKS: dict[str, threading.Lock] = {}
_THREAD_LOCKS_GUARD = threading.Lock()


def _thread_lock(path: Path) -> threading.Lock:
    with _THREAD_LOCKS_GUARD:
        return _THREAD_LOCKS.setdefault(str(path.resolve()), threading.Lock())


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (through ``PATH.lock``) against other processes and threads that lock it
    too. ``fcntl.lockf`` locks belong to a process, so threads of one process also take a lock of their own first.
    Where fcntl does not exist (Windows) only the thread lock is taken; the write stays atomic."""
    try:
        import fcntl
    except ImportError:
        with _thread_lock(path):
            yield
        return
    with _thread_lock(path), open(lock_path(path), "a+b") as handle:
        fcntl.lockf(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.lockf(handle.fileno(), fcntl.LOCK_UN)


def read(path: Path | None) -> bytes | None:
    """The cache on disk, or None where there is none yet (or it is empty)."""
    if path is None or not path.is_file():
        return None
    data = path.read_bytes()
    return data or None


def update(path: Path, merge: Callable[[bytes | None], bytes]) -> bytes:
    """Under the lock: read the cache on disk now (None if absent), write ``merge(current)`` atomically, return it.

    ``merge`` receives what other builds saved since this one started, so their entries survive."""
    path = Path(path)
    with locked(path):
        data = merge(read(path))
        write_bytes_atomic(path, data)
    return data

