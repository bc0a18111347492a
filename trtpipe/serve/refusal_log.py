"""One log line per inference request the server refused (a malformed or oversized request, an unknown model, the
model refusing the data, memory running out, the model failing, a timeout), rate-limited so that a client flooding
the server with such requests cannot flood its log.

The first ``burst`` refusals of each window are logged one by one; the others are counted and said in one line when
the window ends (and when the server stops). /metrics counts every one (``trtpipe_inference_failures``). The runtime's
own log lines stay off (ONNX Runtime logs fatal errors only, see ``runtime/onnxruntime/backend.py``): a batch that a
bad request makes fail is run again in halves, and each run would add its lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable

from trtpipe import console

BURST = 10  # refusals logged one by one per window
WINDOW_S = 60.0


class RefusalLog:
    """Callable with a refusal's line; see the module's docstring."""

    def __init__(self, burst: int = BURST, window_s: float = WINDOW_S,
                 write: Callable[[str], None] = console.warn) -> None:
        self.burst, self.window_s, self.write = burst, window_s, write
        self._lock = threading.Lock()
        self._window_start: float | None = None
        self._logged = 0
        self._held = 0  # refusals of this window not logged one by one

    def __call__(self, line: str) -> None:
        with self._lock:
            now = time.monotonic()
            if self._window_start is None or now - self._window_start >= self.window_s:
                self._say_held()
                self._window_start, self._logged = now, 0
            if self._logged < self.burst:
                self._logged += 1
                self.write(line)
                return
            self._held += 1
            if self._held == 1:
                self._flush_at(self._window_start + self.window_s - now)

    def flush(self) -> None:
        """Say how many refusals were not logged one by one, if any: at the window's end and at shutdown."""
        with self._lock:
            self._say_held()

    def _say_held(self) -> None:
        if self._held:
            held, self._held = self._held, 0
            self.write(f"{held} more refused request{'s' if held > 1 else ''} in {self.window_s:g} s, not logged one "
                       "by one (/metrics counts each in trtpipe_inference_failures_total).")

    def _flush_at(self, delay: float) -> None:
        # Without an event loop (a caller outside a server) they are said with the next window's first line.
        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop().call_later(max(delay, 0.0), self.flush)


REFUSALS = RefusalLog()  # the server process's
