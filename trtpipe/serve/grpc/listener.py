"""The gRPC listener: a process of its own that holds the gRPC port and hands every call to the server process.

gRPC's Python binding turns each request message into a bytes object while it holds the GIL (two full copies,
page faults included); in the server's process that stalled HTTP's health checks and every other request for as
long, which for a large message on a busy machine is long enough to fail a liveness probe
(docs/results/serving-memory.md). Here that work
holds this process's GIL only. The server (``bridge.py``) reads what is forwarded to it with the GIL released
(``forwarding.py``), and does everything else: admission, decoding, models, metrics, answers. This process knows no
model and imports neither numpy nor a runtime: it binds the port (without ``SO_REUSEPORT``), bounds concurrent calls
and message sizes as ``--max-connections`` and ``--max-body-mb`` say, and forwards.

Run by the server as ``python -m trtpipe.serve.grpc.listener CONFIG`` (a JSON object, see :func:`main`). It writes
one line to its standard output once the port is bound (``ready``) or could not be (``error <message>``), answers
``ping`` with ``pong`` (the server's readiness follows the answers: bridge.Bridge.problem), stops when told
``stop <grace seconds>`` on its standard input, and exits when that input closes (its server is gone).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
from typing import Any

from trtpipe.serve.grpc.forwarding import INLINE, OK, ConnectionGone, frame, receive_exactly, receive_frame
from trtpipe.serve.memory import bound_arenas, give_back

LARGE_MESSAGE = 1 << 20  # bytes: after a request above this, freed memory goes back to the system
OUT_OF_MEMORY = "The server ran out of memory while receiving this request: retry later or send a smaller request."
SERVER_GONE = "The server is not taking requests (it is restarting or stopping): retry later."


class Connections:
    """Connections to the server, each carrying one call at a time and kept for the next (up to KEPT idle): a
    connection per call cost a small request more than the rest of the hop."""

    KEPT = 64

    def __init__(self, path: str) -> None:
        self.path = path
        self.idle: list[socket.socket] = []

    async def take(self) -> socket.socket:
        if self.idle:
            return self.idle.pop()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            await asyncio.get_running_loop().sock_connect(sock, self.path)
        except BaseException:
            sock.close()
            raise
        return sock

    def give_back(self, sock: socket.socket) -> None:
        if len(self.idle) < self.KEPT:
            self.idle.append(sock)
        else:
            sock.close()


async def forward(connections: Connections, method: str, message: bytes) -> tuple[int, str, bytes]:
    """``message`` handed to the server: (status number, details, response bytes). Cancelled (the client gave up),
    or failed, the connection is closed, and the server drops the request."""
    loop = asyncio.get_running_loop()
    sock = await connections.take()
    try:
        inline = len(message) <= INLINE
        header = frame({"method": method, "size": len(message), "inline": inline})
        await loop.sock_sendall(sock, header + message if inline else header)
        answer = await receive_frame(sock)
        if answer.get("go") and not inline:
            if message:  # an empty one is read at once: sent, it could meet a closed connection
                await loop.sock_sendall(sock, message)
            answer = await receive_frame(sock)
        payload = await receive_exactly(sock, int(answer.get("size", 0)))
        result = int(answer["code"]), str(answer.get("details", "")), payload
    except BaseException:
        sock.close()
        raise
    connections.give_back(sock)
    return result


def unary(method: str, connections: Connections, grpc: Any, codes: dict[int, Any]) -> Any:
    """The handler of a unary RPC: its one message read as bytes (no deserializer: the server decodes it),
    forwarded, and the server's answer returned as it is (bytes) or aborted with its status."""

    async def handle(requests: Any, context: Any) -> Any:
        try:
            message = await context.read()
        except MemoryError:
            await context.abort(grpc.StatusCode.UNAVAILABLE, OUT_OF_MEMORY)
        if message is grpc.aio.EOF:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"The {method} call carries no request message.")
        size = len(message)
        try:
            code, details, payload = await forward(connections, method, message)
        except (OSError, ConnectionGone, ValueError, KeyError):
            code, details, payload = grpc.StatusCode.UNAVAILABLE.value[0], SERVER_GONE, b""
        finally:
            del message
            if size > LARGE_MESSAGE:
                asyncio.get_running_loop().run_in_executor(None, give_back)
        if code != OK:
            await context.abort(codes.get(code, grpc.StatusCode.UNKNOWN), details)
        return payload

    # Read by the handler as a one-message stream: a MemoryError while gRPC turns the message into bytes is then
    # raised where it is answered (raised in gRPC's own code it would be UNKNOWN), and the call's request iterator,
    # never started, holds no copy of the message.
    return grpc.stream_unary_rpc_method_handler(handle)


def unimplemented(method: str, streaming: tuple[bool, bool], grpc: Any) -> Any:
    async def refuse(requests: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"trtpipe does not implement {method}.")

    makers = {(False, True): grpc.unary_stream_rpc_method_handler,
              (True, False): grpc.stream_unary_rpc_method_handler,
              (True, True): grpc.stream_stream_rpc_method_handler}
    return makers[streaming](refuse)


def bind(server: Any, host: str, port: int) -> str | None:
    """Listen on ``host:port``; the message that says why not, or None. gRPC answers a port it cannot bind with 0
    or, in newer versions, a RuntimeError."""
    address = f"{'[::1]' if host == '::1' else host}:{port}"
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError:
        bound = 0
    if bound == 0:
        return (f"gRPC port {port} on {host} is taken by another process (or cannot be bound): stop it or choose "
                "another --grpc-port.")
    return None


async def serve(config: dict[str, Any]) -> int:
    """Bind, say so, forward calls until told to stop (or until standard input closes)."""
    import grpc

    codes = {code.value[0]: code for code in grpc.StatusCode}
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", config["max_message"]),
                                      ("grpc.max_send_message_length", config.get("max_answer",
                                                                                  config["max_message"])),
                                      ("grpc.so_reuseport", 0)],  # a second server must not share the port
                             maximum_concurrent_rpcs=config["max_calls"])
    connections = Connections(config["socket"])
    handlers = {name: unary(name, connections, grpc, codes) for name in config["unary"]}
    handlers |= {name: unimplemented(name, tuple(streaming), grpc) for name, streaming in config["streaming"]}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(config["service"], handlers),))
    problem = bind(server, config["host"], config["port"])
    if problem is not None:
        print(f"error {problem}", flush=True)
        return 2
    await server.start()
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    grace: float | None = None
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:  # the server process is gone
            break
        if line.startswith("ping"):  # from this process's event loop: a frozen one does not answer
            print("pong", flush=True)
            continue
        if line.startswith("stop"):
            with contextlib.suppress(ValueError, IndexError):
                grace = float(line.split()[1])
            break
    await server.stop(grace)
    return 0


def main(argv: list[str]) -> int:
    """``argv[1]``: {"host", "port", "socket" (the server's Unix socket), "max_message" (bytes), "max_calls",
    "service" (its full name), "unary" (method names), "streaming" ([name, [client, server]] pairs)}."""
    bound_arenas()  # before gRPC's threads start (memory.py)
    return asyncio.run(serve(json.loads(argv[1])))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
