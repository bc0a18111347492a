"""``trtpipe serve``: load a model repository and serve it with uvicorn until SIGTERM or SIGINT.

On a signal, readiness turns false at once (load balancers stop sending), requests in flight finish, and the
process exits 0.
"""

from __future__ import annotations

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
    models = load_repository(repository, options,
                             on_batch=lambda name, rows: metrics.batch_size.labels(name).observe(rows))
    return create_app(models, options, metrics), models


def serve(repository: Path, options: ServeOptions | None = None) -> None:
    import uvicorn

    options = options or ServeOptions()
    host, port, batching = options.host, options.port, options.batching
    app, models = build_app(repository, options)
    ready = sum(e.ready for v in models.values() for e in v.values())
    total = sum(len(v) for v in models.values())
    console.success(f"Serving {ready}/{total} model versions from {repository} on http://{host}:{port}/v2 "
                    f"({'dynamic batching' if batching else 'no batching'})")
    if host not in LOOPBACK:
        console.warn(f"Listening on {host}: the server has no authentication; expose it only behind one.")

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            app.state.service.shutting_down = True  # readiness false (HTTP and gRPC) before anything else
            super().handle_exit(sig, frame)
            # uvicorn re-raises a captured signal after its graceful shutdown, so the process dies of it (exit
            # -15). A shutdown that went as planned is a success: exit 0.
            captured = getattr(self, "_captured_signals", None)
            if isinstance(captured, list):
                captured.clear()

    from trtpipe.serve.http_protocol import protocol_with

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=30,
                            access_log=False, http=protocol_with(options.header_timeout_s),
                            limit_concurrency=options.max_connections)
    Server(config).run()
    console.success("Server stopped cleanly")
