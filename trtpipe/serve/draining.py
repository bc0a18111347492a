"""uvicorn's server as ``trtpipe serve`` runs it: the app's lifespan entered by trtpipe, and a drain before shutdown.

The app's lifespan (the service's threads, the gRPC listener) is entered here rather than by uvicorn, so that a gRPC
port that cannot be bound ends the start with trtpipe's one line (uvicorn would print a traceback and exit 3). On
SIGTERM readiness turns false and requests are still served for ``--drain-s`` before the listeners close (see
:mod:`trtpipe.serve.server`). A module of its own, apart from :mod:`server`, so that importing the server's app
(``build_app``, the tests) does not import uvicorn, and the drain reads as one class with what it needs handed in.
"""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Callable
from typing import Any

import uvicorn

from trtpipe import console
from trtpipe.errors import BadInput, TrtpipeError
from trtpipe.serve.options import ServeOptions
from trtpipe.serve.service import out_of_memory


def no_room(error: BaseException) -> BadInput:
    """A start that ran out of memory (or of room for a thread's stack) as one line: what to change."""
    return BadInput(f"The server does not fit in the memory it may use ({type(error).__name__}: {error}): raise "
                    "the limit (ulimit -v, the container's memory) or serve fewer models or --instances.")


class DrainingServer(uvicorn.Server):
    """uvicorn's server with a drain before its shutdown. The signal handler only sets flags (it may interrupt
    anything, printing included); ``on_tick``, which uvicorn's main loop calls every 0.1 s, ends the drain.
    ``announce`` runs once HTTP listens too."""

    drain_until: float | None = None
    announced = False
    failure: TrtpipeError | None = None
    lifespan_context: Any = None

    def __init__(self, config: uvicorn.Config, app: Any, options: ServeOptions, announce: Callable[[], None]) -> None:
        super().__init__(config)
        self.app = app
        self.service = app.state.service
        self.options = options
        self.announce = announce

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        context = self.app.router.lifespan_context(self.app)
        try:
            await context.__aenter__()
        except TrtpipeError as error:
            self.failure, self.should_exit = error, True
            return
        except Exception as error:  # the service's threads, the gRPC listener: memory that ran out is one line
            if not out_of_memory(error):
                raise
            self.failure, self.should_exit = no_room(error), True
            return
        self.lifespan_context = context
        await super().startup(sockets)
        if self.started:
            self.announce()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets)
        if self.lifespan_context is not None and not self.force_exit:
            await self.lifespan_context.__aexit__(None, None, None)

    def handle_exit(self, sig: int, frame: Any) -> None:
        self.service.draining = True  # readiness false (HTTP and gRPC) before anything else
        if sig == signal.SIGTERM and self.options.drain_s > 0 and self.drain_until is None:
            self.drain_until = time.monotonic() + self.options.drain_s
            return
        self.service.shutting_down = True
        super().handle_exit(sig, frame)
        # uvicorn re-raises a captured signal after its graceful shutdown, so the process dies of it (exit
        # -15). A shutdown that went as planned is a success: exit 0.
        captured = getattr(self, "_captured_signals", None)
        if isinstance(captured, list):
            captured.clear()

    async def on_tick(self, counter: int) -> bool:
        if self.drain_until is not None and not self.should_exit:
            if not self.announced:
                self.announced = True
                console.note(f"SIGTERM: not ready; serving {self.options.drain_s:g} s more before closing")
            if time.monotonic() >= self.drain_until:
                self.service.shutting_down = True
                self.should_exit = True
        return await super().on_tick(counter)


def draining_server(app: Any, options: ServeOptions, port: int, announce: Callable[[], None]) -> DrainingServer:
    """The server for ``app``, on the listener ``serve`` hands its ``run``: uvicorn's lifespan off (the server
    enters it), the header deadline and connection limit from ``options``."""
    from trtpipe.serve.http.uvicorn_protocol import protocol_with

    config = uvicorn.Config(app, host=options.host, port=port, log_level="warning", timeout_graceful_shutdown=30,
                            access_log=False, http=protocol_with(options.header_timeout_s),
                            limit_concurrency=options.max_connections, lifespan="off")
    return DrainingServer(config, app, options, announce)
