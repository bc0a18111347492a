"""``trtpipe serve``: load a model repository and serve it with uvicorn until SIGTERM or SIGINT.

On SIGTERM (what an orchestrator sends), readiness turns false at once, HTTP and gRPC alike, while the listeners
stay open and requests are still served for ``--drain-s``: load balancers probing readiness stop sending, and what
they send before they notice is answered instead of refused. Then the listeners close, requests in flight finish,
and the process exits 0. SIGINT (Ctrl-C), or a second signal, skips what is left of the drain.

The HTTP socket is bound (and listening) before anything is loaded, and the gRPC port is bound without
``SO_REUSEPORT`` before HTTP starts answering: a port another process holds ends the start with one line naming it
and a non-zero exit, and "Serving" is printed only once every listener is bound and every model loaded.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from pathlib import Path
from typing import Any

from trtpipe import console
from trtpipe.errors import BadInput
from trtpipe.serve.http.app import create_app
from trtpipe.serve.memory import bound_arenas
from trtpipe.serve.options import ServeOptions
from trtpipe.serve.repository.loading import ServedModel, load_repository
from trtpipe.serve.service import Metrics, out_of_memory

LOOPBACK = ("127.0.0.1", "localhost", "::1")
BACKLOG = 2048  # uvicorn's default


def bind_http(host: str, port: int) -> socket.socket:
    """The HTTP listener, bound and listening: a port another process listens on is refused here, in one line.

    Listening at once is what makes the port ours: Linux lets two sockets with ``SO_REUSEADDR`` bind one port as
    long as neither listens, so a bound socket that waits to listen could still lose the port to another server.
    Connections that arrive while the models load wait in the backlog and are answered once the server starts.
    """
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart binds while old connections linger
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            raise BadInput(f"Port {port} on {host} is taken by another process: stop it or choose another --port."
                           ) from None
        raise BadInput(f"Cannot listen on {host} port {port} ({error.strerror}): choose another --host or --port."
                       ) from None
    sock.set_inheritable(True)
    return sock


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
    from trtpipe.serve.draining import draining_server, no_room

    options = options or ServeOptions()
    bound_arenas()  # before any of the server's threads start (trtpipe/serve/memory.py)
    if options.grpc_port is not None:
        # gRPC's core writes its own errors to stderr in its own format (a taken port as a second line beside
        # trtpipe's): trtpipe reports what fails itself. A GRPC_VERBOSITY the user sets wins; read at grpc's import.
        os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    listener = bind_http(options.host, options.port)
    with contextlib.closing(listener):
        port = listener.getsockname()[1]  # the one the OS chose, for --port 0
        try:
            app, models = build_app(repository, options)
        except (MemoryError, RuntimeError) as error:  # a model too large for the limit fails alone (not ready)
            if not out_of_memory(error):
                raise
            raise no_room(error) from None
        server = draining_server(app, options, port, lambda: _announce(models, repository, options, port))
        server.run(sockets=[listener])
    if server.failure is not None:
        app.state.service.close()
        raise server.failure
    console.success("Server stopped cleanly")


def _announce(models: dict[str, dict[str, ServedModel]], repository: Path, options: ServeOptions, port: int) -> None:
    ready = sum(e.ready for v in models.values() for e in v.values())
    total = sum(len(v) for v in models.values())
    copies = f", {options.instances} instances each" if options.instances > 1 else ""
    grpc = f" and gRPC on {options.host}:{options.grpc_port}" if options.grpc_port is not None else ""
    console.success(f"Serving {ready}/{total} model versions from {repository} on http://{options.host}:{port}/v2"
                    f"{grpc} ({'dynamic batching' if options.batching else 'no batching'}{copies})")
    if options.host not in LOOPBACK:
        console.warn(f"Listening on {options.host}: the server has no authentication; expose it only behind one.")
