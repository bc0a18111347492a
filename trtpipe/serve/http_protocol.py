"""uvicorn's HTTP protocol with a header deadline: a client that connects and then sends its request line and
headers slowly (or not at all) is cut off, so slow clients cannot hold connections and file descriptors.

uvicorn bounds idle keep-alive time and concurrent connections (``timeout_keep_alive``, ``limit_concurrency``) but
not the time a request's headers may take; the body's deadline is the app's (see ``app._read_body``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

HEADER_TIMEOUT_S = 10.0


class DeadlineHttpProtocol(HttpToolsProtocol):
    header_timeout_s = HEADER_TIMEOUT_S

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = asyncio.get_running_loop().call_later(self.header_timeout_s, self._headers_too_slow)

    def _disarm(self) -> None:
        timer = getattr(self, "_header_timer", None)
        if timer is not None:
            timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()


def protocol_with(header_timeout_s: float) -> type[DeadlineHttpProtocol]:
    return type("ServeHttpProtocol", (DeadlineHttpProtocol,), {"header_timeout_s": header_timeout_s})
