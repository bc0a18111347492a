"""``trtpipe serve``: load a model repository and serve it with uvicorn until SIGTERM or SIGINT.

On SIGTERM (what an orchestrator sends), readiness turns false at once, HTTP and gRPC alike, while the listeners
stay open and requests are still served for ``--drain-s``: load balancers probing readiness stop sending, and what
they send before they notice is answered instead of refused. Then the listeners close, requests in flight finish,
and the process exits 0. SIGINT (Ctrl-C), or a second signal, skips what is left of the drain.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from trtpipe import console
from trtpipe.serve.app import create_app
from trtpipe.serve.options import ServeOptions
from trtpipe.serve.repository import ServedModel, load_repository
from trtpipe.serve.service import Metrics

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def build_app(repository: Path, options: ServeOptions | None = None) -> tuple[Any, dict[str, dict[str, ServedModel]]]:
    options = options or ServeOptions()
    metrics = Metrics()
    models = load_repository(
        repository, options, on_batch=lambda name, rows: metrics.batch_size.labels(name).observe(rows),
        on_instance_run=lambda name, version, index: metrics.instance_runs.labels(name, version, str(index)).inc())
    for versions in models.values():  # every instance in /metrics from the start, an idle one at 0
        for entry in versions.values():
            for index in range(len(entry.instances or ())):
                metrics.instance_runs.labels(entry.name, entry.version, str(index))
    return create_app(models, options, metrics), models


def serve(repository: Path, options: ServeOptions | None = None) -> None:
    import uvicorn

    options = options or ServeOptions()
    host, port, batching = options.host, options.port, options.batching
    app, models = build_app(repository, options)
    ready = sum(e.ready for v in models.values() for e in v.values())
    total = sum(len(v) for v in models.values())
    copies = f", {options.instances} instances each" if options.instances > 1 else ""
    console.success(f"Serving {ready}/{total} model versions from {repository} on http://{host}:{port}/v2 "
                    f"({'dynamic batching' if batching else 'no batching'}{copies})")
    if host not in LOOPBACK:
        console.warn(f"Listening on {host}: the server has no authentication; expose it only behind one.")

    service = app.state.service

    class Server(uvicorn.Server):
        """uvicorn's server with a drain before its shutdown. The signal handler only sets flags (it may interrupt
        anything, printing included); ``on_tick``, which uvicorn's main loop calls every 0.1 s, ends the drain."""

        drain_until: float | None = None
        announced = False

        def handle_exit(self, sig: int, frame: Any) -> None:
            service.draining = True  # readiness false (HTTP and gRPC) before anything else
            if sig == signal.SIGTERM and options.drain_s > 0 and self.drain_until is None:
                self.drain_until = time.monotonic() + options.drain_s
                return
            service.shutting_down = True
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
                    console.note(f"SIGTERM: not ready; serving {options.drain_s:g} s more before closing")
                if time.monotonic() >= self.drain_until:
                    service.shutting_down = True
                    self.should_exit = True
            return await super().on_tick(counter)

    from trtpipe.serve.http_protocol import protocol_with

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=30,
                            access_log=False, http=protocol_with(options.header_timeout_s),
                            limit_concurrency=options.max_connections)
    Server(config).run()
    console.success("Server stopped cleanly")
