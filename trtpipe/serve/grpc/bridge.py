"""The server's side of gRPC: it starts the gRPC listener process (``listener.py``), restarts it if it dies,
and answers the calls it forwards (``forwarding.py``) with the endpoints of ``service.py``.

Each forwarded call is answered on the gRPC event loop (a thread of its own, :class:`GrpcThread`); its request
message is read in a worker thread with the GIL released (``forwarding.receive_blocking``), only once the service
has room for it. While the call is answered, the loop listens for the listener closing its connection (the client
cancelled): the request is then dropped as a cancelled gRPC call would be.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from trtpipe import console
from trtpipe.errors import BadInput
from trtpipe.serve.grpc.forwarding import (
    INLINE,
    OK,
    ConnectionGone,
    frame,
    receive_blocking,
    receive_exactly,
    receive_frame,
    send_blocking,
)
from trtpipe.serve.options import ServeOptions

START_TIMEOUT_S = 120.0  # for the listener process to bind its port (its imports, on a loaded machine)
LARGE_ANSWER = 1 << 20  # bytes: an answer above this is sent from a worker thread (the GIL released meanwhile)
ANSWER_FRAMING = 1 << 16  # bytes of an answer besides its tensors (names, shapes): allowed past --max-response-mb
RESTART_PAUSE_S = 1.0  # before the first retry of a restart that failed; doubled each time, up to
MAX_RESTART_PAUSE_S = 60.0
PING_S = 1.0  # between the pings that tell whether the listener process still answers
UNANSWERED_S = 3.0  # a listener that has answered no ping for this long is reported not answering (not ready)


class CallAborted(Exception):
    """A forwarded call answered with a status other than OK (what ``context.abort`` raises in grpc.aio)."""

    def __init__(self, code: Any, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class ForwardedCall:
    """One forwarded call, as its handler sees it: the part of grpc.aio's ServicerContext the endpoints use.

    ``read`` tells the listener to send the message and reads it (``size`` bytes, declared up front, so that
    admission can refuse a request before it crosses); ``abort`` ends the call with a status."""

    def __init__(self, sock: socket.socket, method: str, size: int, inline: bool, executor: Any,
                 timeout_s: float) -> None:
        self.sock, self.method, self.size, self.inline = sock, method, size, inline
        self.executor, self.timeout_s = executor, timeout_s
        self.on_read: Callable[[], None] = lambda: None  # once the message is read (the bridge then listens)

    async def read(self) -> bytes:
        loop = asyncio.get_running_loop()
        if self.inline:  # a small message, sent with its frame (forwarding.INLINE)
            message = await asyncio.wait_for(receive_exactly(self.sock, self.size), self.timeout_s)
            self.on_read()
            return message
        await loop.sock_sendall(self.sock, frame({"go": True}))
        message = await loop.run_in_executor(self.executor, receive_blocking, self.sock, self.size, self.timeout_s)
        if len(message) < self.size:
            raise ConnectionGone
        self.on_read()
        return message

    async def abort(self, code: Any, details: str) -> None:
        raise CallAborted(code, details)

    def set_code(self, code: Any) -> None:  # the generated servicer's unimplemented RPCs call these
        pass

    def set_details(self, details: str) -> None:
        pass


Dispatch = Callable[[ForwardedCall], Awaitable[tuple[Any, str, bytes]]]


FOLDER_PREFIX = "trtpipe-grpc-"  # then the server's pid and mkdtemp's letters: trtpipe-grpc-1234-k2j4_x


def remove_dead_folders(temp: Path | None = None) -> list[Path]:
    """Remove the socket folders that servers killed without a chance to clean up left in the temp folder, and
    return them. A folder is a dead server's when the pid in its name is not running and its socket (if any)
    refuses connections (nobody listens on it); any other folder, and one of another user, is left alone."""
    removed = []
    for folder in Path(temp or tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*"):
        try:
            if not folder.is_dir() or folder.is_symlink() or folder.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        if _owner_alive(folder) or _answers(folder / "calls.sock"):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _owner_alive(folder: Path) -> bool:
    """Whether the pid in the folder's name is a running process (a name without one has no known owner)."""
    pid = folder.name.removeprefix(FOLDER_PREFIX).split("-")[0]
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # running, as another user
        return True
    return True


def _answers(path: Path) -> bool:
    """Whether something listens on the Unix socket at ``path``."""
    if not path.exists():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


class Bridge:
    """The Unix socket the listener forwards to, the listener process, and the calls in flight."""

    def __init__(self, settings: ServeOptions, dispatch: Dispatch, executor: Any, methods: dict[str, Any]) -> None:
        self.settings, self.dispatch, self.executor, self.methods = settings, dispatch, executor, methods
        remove_dead_folders()  # a server killed with SIGKILL could not remove its own
        # Only this user may enter it; the pid in its name tells later servers whether its owner still runs.
        self.folder = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-"))
        self.path = str(self.folder / "calls.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(max(settings.max_connections, 64))
        self.listener.setblocking(False)
        self.process: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self.tasks: set[asyncio.Task[Any]] = set()
        self.down: str | None = "The gRPC listener is starting."  # why it cannot take calls, until it answers
        self.answered = 0.0  # time.monotonic() of its last answer to a ping

    def problem(self) -> str | None:
        """Why the gRPC listener cannot take calls now (down, restarting, or not answering its pings), or None:
        the server's readiness reports it (read from HTTP's thread; the attributes are set on the gRPC loop)."""
        if self.down is not None:
            return self.down
        silent = time.monotonic() - self.answered
        if silent > UNANSWERED_S:
            return f"The gRPC listener has not answered for {silent:.0f} s."
        return None

    async def start(self) -> None:
        """Accept forwarded calls, then start the listener process; BadInput (its one line) when it cannot bind."""
        self._spawn_task(self._accept())
        await self._start_process()
        self._spawn_task(self._supervise())
        self._spawn_task(self._ping())

    async def stop(self, grace: float | None) -> None:
        """Stop the listener (calls in flight get ``grace`` seconds), then stop accepting."""
        self.stopping = True
        self.down = "The gRPC listener is stopping."
        process = self.process
        if process is not None and process.poll() is None:
            with contextlib.suppress(OSError):
                assert process.stdin is not None
                process.stdin.write(f"stop {grace if grace is not None else 0}\n".encode())
                process.stdin.flush()
                process.stdin.close()
            if not await _ended(process, (grace or 0) + 10):
                process.kill()
        for task in list(self.tasks):
            task.cancel()
        self.listener.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _spawn_task(self, work: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _config(self) -> str:
        settings = self.settings
        return json.dumps({"host": settings.host, "port": settings.grpc_port, "socket": self.path,
                           "max_message": settings.max_body_bytes, "max_calls": settings.max_connections,
                           "max_answer": settings.max_response_bytes + ANSWER_FRAMING,
                           **self.methods})

    async def _start_process(self) -> None:
        loop = asyncio.get_running_loop()
        process = subprocess.Popen([sys.executable, "-m", "trtpipe.serve.grpc.listener", self._config()],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=os.environ.copy())
        assert process.stdout is not None
        try:
            line = await asyncio.wait_for(loop.run_in_executor(None, process.stdout.readline), START_TIMEOUT_S)
        except TimeoutError:
            process.kill()
            raise BadInput(f"The gRPC listener did not start within {START_TIMEOUT_S:g} s.") from None
        text = line.decode(errors="replace").strip()
        if text != "ready":
            process.wait(30)
            raise BadInput(text.removeprefix("error ") if text.startswith("error ") else
                           "The gRPC listener process failed to start (its output is above): see --grpc-port.")
        self.process = process
        self._listen_for_answers(process)
        self.answered, self.down = time.monotonic(), None

    def _listen_for_answers(self, process: subprocess.Popen[bytes]) -> None:
        """Note the time of each ``pong`` the listener process writes (read when its pipe is readable: no thread)."""
        loop = asyncio.get_running_loop()
        assert process.stdout is not None
        fd = process.stdout.fileno()

        def readable() -> None:
            try:
                data = os.read(fd, 4096)
            except OSError:
                data = b""
            if not data:  # the process has ended
                loop.remove_reader(fd)
            elif b"pong" in data:
                self.answered = time.monotonic()

        loop.add_reader(fd, readable)

    async def _ping(self) -> None:
        """Ask the listener process to answer, every PING_S (see :meth:`problem`)."""
        while not self.stopping:
            process = self.process
            if process is not None and process.poll() is None and process.stdin is not None:
                with contextlib.suppress(OSError, ValueError):  # it has just ended, or its input was closed
                    process.stdin.write(b"ping\n")
                    process.stdin.flush()
            await asyncio.sleep(PING_S)

    async def _supervise(self) -> None:
        """Restart the listener process if it exits while the server runs (its server is then unreachable over
        gRPC, never HTTP): one warning line each time."""
        while not self.stopping:
            process = self.process
            assert process is not None
            while process.poll() is None:  # polled: a thread waiting on it would be one more to start
                await asyncio.sleep(0.1)
            code = process.returncode
            if self.stopping:
                return
            self.down = f"The gRPC listener process exited (code {code}) and is restarting."
            console.warn(f"The gRPC listener process exited (code {code}): restarting it.")
            pause = RESTART_PAUSE_S
            while not self.stopping:
                try:
                    await self._start_process()
                    break
                except BadInput as error:
                    console.warn(f"The gRPC listener could not restart ({error}): trying again in {pause:g} s.")
                    await asyncio.sleep(pause)
                    pause = min(2 * pause, MAX_RESTART_PAUSE_S)

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            connection, _ = await loop.sock_accept(self.listener)
            connection.setblocking(False)
            self._spawn_task(self._answer(connection))

    async def _answer(self, sock: socket.socket) -> None:
        """The calls of one connection, one after another, until the listener closes it."""
        with contextlib.closing(sock):
            while True:
                try:
                    header = await receive_frame(sock)
                    size = int(header["size"])
                    call = ForwardedCall(sock, str(header["method"]), size,
                                         bool(header.get("inline")) and size <= INLINE, self.executor,
                                         self.settings.body_timeout_s)
                except (ConnectionGone, OSError, ValueError, KeyError, TypeError):
                    return
                if not await self._answer_call(call):
                    return

    async def _answer_call(self, call: ForwardedCall) -> bool:
        """One forwarded call answered; False when the connection is done with (the listener closed it: the call's
        client gave up, and the call was cancelled, which drops its request)."""
        loop = asyncio.get_running_loop()
        work = asyncio.ensure_future(self.dispatch(call))
        fd = call.sock.fileno()
        left = False

        def listener_left() -> None:  # readable once the message is read: nothing comes but the end
            nonlocal left
            left = True
            loop.remove_reader(fd)
            work.cancel()

        call.on_read = lambda: loop.add_reader(fd, listener_left)
        try:
            code, details, payload = await work
        except asyncio.CancelledError:
            if left:
                return False
            raise
        except ConnectionGone:
            return False
        finally:
            loop.remove_reader(fd)
        answer = frame({"code": code, "details": details, "size": len(payload)})
        try:
            if len(payload) > LARGE_ANSWER:
                await loop.run_in_executor(self.executor, send_blocking, call.sock, answer + payload)
            else:
                await loop.sock_sendall(call.sock, answer + payload)
        except OSError:
            return False
        return True


async def _ended(process: subprocess.Popen[bytes], seconds: float) -> bool:
    """Whether ``process`` ends within ``seconds``, polled: stopping starts no thread (under an address-space limit
    a new thread's stack may not fit, and the server could not stop cleanly)."""
    deadline = time.monotonic() + seconds
    while process.poll() is None:
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def status_number(code: Any) -> int:
    """A grpc.StatusCode's number (``OK`` is 0)."""
    return int(code.value[0]) if code is not None else OK


class GrpcThread:
    """An event loop of its own, in a thread of its own, for the forwarded calls: what their answers take on a
    loop (protobuf's serialization of a response, the calls' bookkeeping) never holds up HTTP's loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="trtpipe-grpc", daemon=True)
        self.bridge: Bridge | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()
        self.loop.close()

    async def call(self, work: Awaitable[Any]) -> Any:
        """``work`` run on the gRPC loop, awaited from the caller's loop; its exception is raised here."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, self.loop))  # type: ignore[arg-type]

    async def start(self, make: Callable[[], Awaitable[Bridge]]) -> GrpcThread:
        self.thread.start()
        try:
            self.bridge = await self.call(make())
        except BaseException:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(30)
            raise
        return self

    async def stop(self, grace: float | None = None) -> None:
        """Stop the listener process (calls in flight get ``grace`` seconds), then the loop and its thread."""
        try:
            if self.bridge is not None:
                await self.call(self.bridge.stop(grace))
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            deadline = time.monotonic() + 30
            while self.thread.is_alive() and time.monotonic() < deadline:  # polled, as _ended: no thread started
                await asyncio.sleep(0.02)
