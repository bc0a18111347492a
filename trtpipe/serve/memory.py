"""The server process's memory: few allocator arenas, memory handed back after a large request, and room kept for
the code that cannot fail gracefully.

Three things make a serving process's memory hard to bound, and each has its remedy here:

- glibc gives each thread that allocates its own malloc arena (up to eight per core), each reserving 64 MiB of
  address space: a process with gRPC's, ONNX Runtime's and the service's threads carries hundreds of MiB of
  reservations an address-space limit (``ulimit -v``, RLIMIT_AS) counts, and memory freed in one arena is not
  reused by another. :func:`bound_arenas` sets M_ARENA_MAX before the threads start.
- Memory freed after a large request stays in the arenas, in pieces, unless malloc is asked to give it back:
  :func:`give_back` calls ``malloc_trim(0)`` after each large request (docs/results/serving-memory.md measures it).
- gRPC's core aborts the process when an allocation fails, and glibc aborts a thread that cannot get memory for a
  library's thread-local storage. Under a memory limit the Python side must therefore never take the last of it:
  :func:`short_of_room` refuses (503 / UNAVAILABLE) a large request whose decoding would leave less than
  :data:`RESERVE` of address space, before anything is allocated for it.

Everything here is a no-op where it does not apply (no glibc, no limit).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import resource
import threading
from functools import lru_cache
from typing import Any

M_ARENA_MAX = -8  # mallopt's parameter number (malloc.h)
ARENAS = 2  # malloc arenas: the main one and one that threads share
RESERVE = 96 << 20  # bytes of address space a large request must leave free (gRPC's core, threads' storage)


@lru_cache(maxsize=1)
def _libc() -> Any | None:
    """glibc, where this process runs on it; None elsewhere (musl, macOS): nothing here then applies."""
    name = ctypes.util.find_library("c") or "libc.so.6"
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


def bound_arenas(count: int = ARENAS) -> bool:
    """Let malloc use at most ``count`` arenas, from now on (glibc fixes its limit when a thread first needs a new
    arena beyond eight, so call this before the server's threads start). Returns whether it took effect; a
    ``MALLOC_ARENA_MAX`` in the environment is the user's choice and is left as it is."""
    libc = _libc()
    if libc is None or os.environ.get("MALLOC_ARENA_MAX"):
        return False
    return bool(libc.mallopt(M_ARENA_MAX, count))


_trim_lock = threading.Lock()


def give_back() -> None:
    """Hand the memory freed since the last call back to the system (``malloc_trim(0)``): called after each large
    request, in a worker thread, so that what its buffers took does not stay with the process (freed in pieces
    across arenas, it would). Calls take turns; ctypes lets go of the GIL meanwhile."""
    libc = _libc()
    if libc is None:
        return
    with _trim_lock:
        libc.malloc_trim(0)


def address_space_room() -> int | None:
    """Bytes of address space this process may still map under its RLIMIT_AS; None without a limit (or where the
    process's size cannot be read)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        with open("/proc/self/statm", "rb") as statm:
            pages = int(statm.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return soft - pages * os.sysconf("SC_PAGE_SIZE")


def short_of_room(need: int) -> str | None:
    """Why taking ``need`` more bytes would leave less than RESERVE of address space (a request to refuse, 503 /
    UNAVAILABLE, before anything is allocated for it), or None when there is room (or no limit)."""
    room = address_space_room()
    if room is not None and room - need < RESERVE:
        return (f"The server is short of memory for this request ({need >> 20} MiB to decode, "
                f"{max(room - RESERVE, 0) >> 20} MiB free): retry later or send a smaller request.")
    return None


def warm_thread(*work: Any) -> None:
    """Run in a worker thread before the server is ready: each of ``work`` (callables) once, so that the thread
    has touched the thread-local storage of the libraries it will use (glibc allocates a dynamically loaded
    library's thread-local storage on a thread's first use, and aborts the process when that allocation fails)."""
    for job in work:
        with contextlib.suppress(Exception):
            job()
