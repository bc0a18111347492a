"""Python's cyclic garbage collector paused while a request's JSON is turned into objects.

orjson builds each list and object of a body as a container the collector tracks, and every few thousand of them the
collector runs, its older generations walking the objects alive in the whole process: orjson took 75 to 110 ms of CPU
for a megabyte of small arrays with the collector on, 26 to 35 ms with it off (docs/results/serving.md, 'Hostile
requests of #56'). Parsing creates no garbage cycles, so the collector loses nothing by waiting until the parse is
over. Threads that parse at once share one pause, counted under a lock: the collector runs again when the last one is
done, and stays off if something else had turned it off.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_holders = 0  # threads inside paused_collection now
_resume = False  # whether the first of them found the collector on, and so the last one turns it back on


@contextmanager
def paused_collection() -> Iterator[None]:
    """The collector off for the duration (see the module's docstring)."""
    global _holders, _resume
    with _lock:
        if _holders == 0:
            _resume = gc.isenabled()
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _resume:
                gc.enable()
