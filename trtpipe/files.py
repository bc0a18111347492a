"""Atomic artifact writes and content hashes.

A crash or Ctrl-C while writing must never leave a half-written model behind, so every artifact is written
to a temporary file in the destination folder and renamed into place (a rename is atomic on POSIX).

An artifact and the file describing it (an ONNX and its manifest, an engine and its sidecar) are committed as one
with :func:`commit_pair`: both are written under temporary names first, then renamed while a lock beside the
artifact is held, so two runs writing one path cannot interleave their renames. The lock file goes when the lock is
released: a model folder keeps no trace of it (a Triton repository would carry it).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from trtpipe.errors import BadInput

STDOUT = "-"  # an output path that means standard output (``--json -``), as in curl, tar and jq


def is_stdout(path: Path | str | None) -> bool:
    """Whether an output option names standard output (``-``) rather than a file."""
    return path is not None and str(path) == STDOUT


def write_output(path: Path, text: str) -> bool:
    """``text`` to the file ``path`` (atomically), or to standard output where ``path`` is ``-``; returns whether a
    file was written (a caller says "Wrote FILE" only then)."""
    if is_stdout(path):
        sys.stdout.write(text)
        sys.stdout.flush()
        return False
    write_text_atomic(path, text)
    return True


def write_json_output(path: Path, obj: Any) -> bool:
    """``obj`` as JSON to ``path`` or, where it is ``-``, to standard output (:func:`write_output`)."""
    return write_output(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def require_outputs(*paths: Path | None) -> None:
    """Every output folder exists, and at most one output goes to standard output (two would interleave)."""
    if sum(is_stdout(path) for path in paths) > 1:
        raise BadInput("Only one output can be '-' (standard output): name a file for the others.")
    for path in paths:
        if path is not None:
            require_parent_dir(path)


def require_parent_dir(path: Path) -> None:
    """Fail early, before any expensive work, when the output folder does not exist (standard output, ``-``, always
    does)."""
    if is_stdout(path):
        return
    parent = path.resolve().parent
    if not parent.is_dir():
        raise BadInput(f"Output folder {parent} does not exist: create it or choose another output path.")


# What a file's first bytes say it is, for a file given where an ONNX model was expected: said at once, before any
# parser spends seconds on it (a protobuf parser reads a PNG as a damaged message, and says only "DecodeError").
_MAGIC = ((b"\x89PNG\r\n\x1a\n", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"GIF8", "a GIF image"),
          (b"%PDF", "a PDF document"), (b"PK\x03\x04", "a ZIP archive (a PyTorch checkpoint or package?)"),
          (b"\x1f\x8b", "a gzip archive"), (b"\x80\x02", "a Python pickle (a PyTorch checkpoint?)"),
          (b"<!DOCTYPE", "an HTML page"), (b"<!doctype", "an HTML page"), (b"<html", "an HTML page"),
          (b"\x7fELF", "an executable"), (b"{", "a JSON file"))


def foreign_format(path: Path) -> str | None:
    """What ``path`` is by its first bytes where they name a format that is not ONNX ("a PNG image"), else None
    (an ONNX file has no magic number: only parsing tells a damaged one)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(16)
    except OSError:
        return None
    return next((name for magic, name in _MAGIC if head.startswith(magic)), None)


def require_onnx_bytes(path: Path) -> None:
    """Refuse at once, in one line, a file given as an ONNX model whose first bytes say it is something else."""
    if (found := foreign_format(path)) is not None:
        raise BadInput(f"{path} is {found}, not an ONNX model (its first bytes say so): give the .onnx file "
                       "'trtpipe convert' wrote.")


def require_file(path: Path, what: str = "File") -> Path:
    if not path.exists():
        raise BadInput(f"{what} {path} does not exist.")
    if not path.is_file():
        raise BadInput(f"{what} {path} is not a file.")
    return path


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds."""
    with staged_path(path) as tmp:
        yield tmp
        os.replace(tmp, path)


@contextlib.contextmanager
def staged_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` that the caller commits itself (with :func:`commit_pair`); whatever
    is still there when the block ends, by success or failure, is removed."""
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
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def lock_path(path: Path) -> Path:
    """The lock file of ``path``: ``.NAME.lock`` beside it, there only while a commit holds it."""
    return Path(path).parent / f".{Path(path).name}.lock"


@contextlib.contextmanager
def commit_lock(path: Path) -> Iterator[None]:
    """Hold the exclusive commit lock of ``path`` while the block runs (waiting for another writer's commit).

    ``flock`` rather than ``lockf``: its locks belong to the open file, so two threads of one process exclude
    each other as two processes do, and the kernel drops the lock when a killed writer's descriptor closes, so a
    dead run never leaves the path locked. The lock file is created with the umask's mode and opened read-only
    (flock needs no write access), so one made by another user still serves.

    The holder removes the lock file before it lets go, so none is left in the folder. That is safe because a
    writer, once it holds the lock, checks that the file it locked is still the one at the lock's path: one that
    waited on a file its holder has since removed tries again, on the file now there (or a new one), so two
    writers never hold locks on two different files at once. A killed writer's file stays until the next commit.
    """
    lock = lock_path(path)
    while True:
        fd = os.open(lock, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                current = os.path.samestat(os.fstat(fd), os.stat(lock))
            except FileNotFoundError:  # removed by the writer this one waited for
                current = False
        except BaseException:
            os.close(fd)
            raise
        if current:
            break
        os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)  # while the lock is held: see above
        os.close(fd)  # releases the lock


def commit_pair(staged: Path, path: Path, companion: Path, companion_data: bytes, *,
                between_renames: Callable[[], None] | None = None) -> None:
    """Rename ``staged`` onto ``path`` and write ``companion_data`` (its description) to ``companion``, as one.

    The description is written to its own temporary file first, so the lock is held for two renames only. With
    the lock, two runs writing one path end with one run's pair, never one run's artifact beside the other's
    description. A run killed between the renames leaves the new artifact beside the old description; the
    description records the hash of the bytes its own run wrote, so readers see that they differ.
    ``between_renames`` is a seam for tests: it runs after the artifact's rename, before the description's.
    """
    with staged_path(companion) as companion_tmp:
        companion_tmp.write_bytes(companion_data)
        with commit_lock(path):
            os.replace(staged, path)
            if between_renames is not None:
                between_renames()
            os.replace(companion_tmp, companion)


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


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path, chunk_size: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()
