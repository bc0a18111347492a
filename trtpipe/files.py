"""Atomic artifact writes and content hashes.

A crash or Ctrl-C while writing must never leave a half-written model behind, so every artifact is written
to a temporary file in the destination folder and renamed into place (a rename is atomic on POSIX).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trtpipe.errors import BadInput


def require_parent_dir(path: Path) -> None:
    """Fail early, before any expensive work, when the output folder does not exist."""
    parent = path.resolve().parent
    if not parent.is_dir():
        raise BadInput(f"Output folder {parent} does not exist: create it or choose another output path.")


def require_file(path: Path, what: str = "File") -> Path:
    if not path.exists():
        raise BadInput(f"{what} {path} does not exist.")
    if not path.is_file():
        raise BadInput(f"{what} {path} is not a file.")
    return path


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds."""
    path = Path(path)
    require_parent_dir(path)
    remove_stale_temporaries(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    # mkstemp creates 0600 files; an artifact is for other users too (a Triton or web server running as another
    # user), so it gets the mode any new file gets here: 0666 less the umask.
    os.fchmod(fd, 0o666 & ~current_umask())
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def remove_stale_temporaries(path: Path) -> list[Path]:
    """Delete temporaries of ``path`` that a killed trtpipe left behind (their writer process is gone).

    Temporaries are named ``.NAME.PID.RANDOM.tmp``: one whose PID no longer runs can never be renamed into place.
    """
    removed = []
    for candidate in Path(path).parent.glob(f".{Path(path).name}.*.tmp"):
        pid_text = candidate.name[len(Path(path).name) + 2:].split(".", 1)[0]
        if pid_text.isdigit() and not _alive(int(pid_text)):
            with contextlib.suppress(FileNotFoundError):
                candidate.unlink()
                removed.append(candidate)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """The process umask (reading it means setting it: done under a lock and put back at once)."""
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def write_bytes_atomic(path: Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def sha256_file(path: Path, chunk_size: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()
