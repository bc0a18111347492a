"""uvicorn's HTTP protocol with a header deadline, a JSON 400 for a request it cannot parse, and a 503 when memory
runs out while a request arrives.

A client that connects and then sends its request line and headers slowly (or not at all) is cut off, so slow
clients cannot hold connections and file descriptors. uvicorn bounds idle keep-alive time and concurrent
connections (``timeout_keep_alive``, ``limit_concurrency``) but not the time a request's headers may take; the
body's deadline is the app's (see ``app._read_body``).

When memory runs out while httptools parses a request (each piece of a body it reads is a new bytes object), the
MemoryError surfaces inside httptools' callback and httptools reports it as a parse error, which uvicorn answers
with 400 "Invalid HTTP request received.": a valid request called malformed. Here it is a JSON 503 the client may
retry. What the connection held of the request is let go at once (uvicorn's buffer, and the app's, which hears
that its client left), so the requests after it find the memory free; the rest of the refused body is read and
dropped, not buffered, until the client stops sending (a bounded while), so that the client reads the 503 rather
than a connection reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from trtpipe.serve.refusal_log import REFUSALS

HEADER_TIMEOUT_S = 10.0
LINGER_S = 10.0  # seconds the rest of a refused body is read and dropped before the connection is closed
_OUT_OF_MEMORY_BODY = json.dumps({"error": "The server ran out of memory while receiving this request: retry later "
                                           "or send a smaller request."}).encode()
# Built once: answering must not need memory when there is none.
OUT_OF_MEMORY_RESPONSE = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                          b"content-length: " + str(len(_OUT_OF_MEMORY_BODY)).encode() + b"\r\n"
                          b"connection: close\r\n\r\n" + _OUT_OF_MEMORY_BODY)
_MALFORMED_BODY = json.dumps({"error": "The request is not valid HTTP/1.1 (its request line or a header has a byte "
                                       "HTTP does not allow, or is cut short): check how the client builds it."}
                             ).encode()
MALFORMED_RESPONSE = (b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
                      b"content-length: " + str(len(_MALFORMED_BODY)).encode() + b"\r\n"
                      b"connection: close\r\n\r\n" + _MALFORMED_BODY)


class _OutOfMemory(Exception):
    """httptools ran out of memory: raised past uvicorn's handler of parse errors, which would answer 400."""


class _Parser:
    """httptools' parser, whose failure for want of memory (a MemoryError in a callback, which httptools reports
    as a parse error with the MemoryError as its context) is raised as _OutOfMemory; everything else is the
    parser's own."""

    def __init__(self, parser: Any) -> None:
        self._parser = parser

    def feed_data(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as error:
            if isinstance(error.__context__, MemoryError):
                raise _OutOfMemory from None
            raise
        except MemoryError:
            raise _OutOfMemory from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._parser, name)


class DeadlineHttpProtocol(HttpToolsProtocol):
    header_timeout_s = HEADER_TIMEOUT_S
    _header_timer: asyncio.TimerHandle | None = None  # armed while a request's headers are awaited

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # uvicorn types the attribute as httptools.HttpRequestParser; the wrapper forwards every call to one
        self.parser = _Parser(self.parser)  # type: ignore[assignment]  # a forwarding wrapper, not a subclass
        self._headers_done = False  # whether the request being parsed has its cycle (uvicorn's, for the app)
        self._refused = False
        self._linger: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._refused:  # the rest of a request refused for memory: dropped as it comes
            return
        try:
            super().data_received(data)
        except _OutOfMemory:
            self._refuse_for_memory()

    def send_400_response(self, msg: str) -> None:
        """A request httptools cannot parse (a 0x7f byte in a header, a broken request line) answered in the JSON
        shape of every other error, not uvicorn's text/plain."""
        self._disarm()
        self.transport.write(MALFORMED_RESPONSE)
        self.transport.close()

    def on_message_begin(self) -> None:
        self._headers_done = False
        super().on_message_begin()
        self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        self._headers_done = True
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        super().connection_lost(exc)

    def _refuse_for_memory(self) -> None:
        """Answer the request being received 503 (unless its answer has begun), let go of what it holds, and read
        and drop the rest of it until the client stops or LINGER_S pass."""
        self._disarm()
        self._refused = True
        cycle = self.cycle
        if self._headers_done:  # the cycle is this request's: the app is reading its body
            answer = not cycle.response_started
            if not cycle.response_complete:
                cycle.body = bytearray()  # uvicorn's buffer of the body
                cycle.disconnected = True  # the app's read ends as if the client had left: it drops its part too
                cycle.message_event.set()
        else:  # its head was arriving: the answer may not overtake the one to a request before it
            answer = cycle is None or cycle.response_complete
        if answer:
            self.transport.write(OUT_OF_MEMORY_RESPONSE)
        with contextlib.suppress(MemoryError):
            REFUSALS("HTTP request answered 503: memory ran out while it arrived.")
        if self.transport.can_write_eof():
            self.transport.write_eof()  # the answer, then FIN; reading goes on, so the client is not reset
            self.flow.resume_reading()
            self._linger = asyncio.get_running_loop().call_later(LINGER_S, self.transport.close)
        else:
            self.transport.close()

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
