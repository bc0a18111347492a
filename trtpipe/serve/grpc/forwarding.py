"""How the gRPC listener process (``listener.py``) hands each call to the server process (``bridge.py``).

One Unix-socket connection per call, in four steps, so that the server decides whether it has room for a request
before a byte of it crosses, and reads what it accepts without holding the GIL:

1. listener -> server: a frame ``{"method": name, "size": bytes, "inline": bool}``;
2. server -> listener: either ``{"go": true}`` or the call's answer (a refusal: step 3 is skipped);
3. listener -> server: the request message, ``size`` bytes;
4. server -> listener: the answer, ``{"code": grpc status number, "details": text, "size": bytes}`` then that many
   bytes of the serialized response.

A message of at most INLINE bytes follows its frame at once (``"inline": true``, no step 2): it costs nothing to
hold, and the round trip would cost a small request more than everything else the hop adds.

A frame is a 4-byte big-endian length and that much JSON. The listener closes the connection when its client
cancels the call: the server hears the end of the stream and drops the request (taken off its model's queue when
it has not run). The socket lives in a folder only this user can enter (``tempfile.mkdtemp``).
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from typing import Any

LENGTH = struct.Struct("!I")
MAX_FRAME = 1 << 16  # bytes of JSON in one frame: a header names a method and a few numbers
OK = 0  # grpc.StatusCode.OK's number
INLINE = 1 << 16  # bytes: a message up to this size is sent with its frame, without waiting for the server's go


class ConnectionGone(Exception):
    """The other side closed the connection before a whole frame or message arrived."""


def frame(content: dict[str, Any]) -> bytes:
    data = json.dumps(content).encode()
    return LENGTH.pack(len(data)) + data


async def receive_exactly(sock: socket.socket, size: int) -> bytes:
    """``size`` bytes from a non-blocking socket, read on the running loop (small things: frames, answers)."""
    loop = asyncio.get_running_loop()
    buffer = bytearray(size)
    view = memoryview(buffer)
    filled = 0
    while filled < size:
        count = await loop.sock_recv_into(sock, view[filled:])
        if count == 0:
            raise ConnectionGone
        filled += count
    return bytes(buffer)


async def receive_frame(sock: socket.socket) -> dict[str, Any]:
    (length,) = LENGTH.unpack(await receive_exactly(sock, LENGTH.size))
    if length > MAX_FRAME:
        raise ConnectionGone
    content = json.loads(await receive_exactly(sock, length))
    if not isinstance(content, dict):
        raise ConnectionGone
    return content


def receive_blocking(sock: socket.socket, size: int, timeout_s: float) -> bytes:
    """``size`` bytes, read in the calling (worker) thread with the socket blocking: ``recv`` with MSG_WAITALL
    allocates the bytes object and the kernel fills it while the GIL is released, so a large message costs the
    server's other threads nothing (gRPC's own receive copies it twice, holding the GIL). Fewer bytes than
    ``size`` when the other side closed or sent nothing for ``timeout_s``."""
    sock.setblocking(True)
    seconds = int(timeout_s)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                    struct.pack("ll", seconds, int((timeout_s - seconds) * 1e6)))
    try:
        pieces = []
        received = 0
        while received < size:
            try:
                piece = sock.recv(size - received, socket.MSG_WAITALL)
            except (BlockingIOError, TimeoutError):
                break  # SO_RCVTIMEO passed with nothing more
            if not piece:
                break
            pieces.append(piece)
            received += len(piece)
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)
    finally:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 0))
        sock.setblocking(False)


def send_blocking(sock: socket.socket, data: bytes) -> None:
    """All of ``data``, from a worker thread (the GIL is released while the kernel copies it)."""
    sock.setblocking(True)
    try:
        sock.sendall(data)
    finally:
        sock.setblocking(False)
