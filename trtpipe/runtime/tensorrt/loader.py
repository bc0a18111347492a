"""Finding TensorRT and a CUDA GPU, and collecting TensorRT's messages: shared by the engine builder and the
TensorRT backend. Nothing here imports tensorrt at module load; each function does when it is called, and a
missing piece fails at once with the install line. TensorRT's log goes to one process-wide logger
(:func:`tensorrt_logger`) whose messages each build or engine call collects in its own scope (:data:`MESSAGES`).
"""

from __future__ import annotations

import collections
import contextlib
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import ModuleType
from typing import Any

from trtpipe.artifact.records.engine import sidecar_path
from trtpipe.errors import BadInput, MissingDependency

INSTALL_TENSORRT = ("pip install 'trtpipe[gpu]' with NVIDIA's Python package index as an extra index "
                    "(TensorRT's library wheels are published only there; see NVIDIA's TensorRT install guide)")
LEAN_MODULES = ("tensorrt_lean", "tensorrt_lean_bindings")


def import_tensorrt(purpose: str) -> ModuleType:
    """The full TensorRT package (builder and parser), or MissingDependency with the install line.

    tensorrt-stubs installs an empty ``tensorrt`` namespace package, so an import that succeeds is not enough.
    """
    try:
        import tensorrt as trt
    except ImportError:
        trt = None
    if trt is None or not hasattr(trt, "Builder"):
        raise MissingDependency("TensorRT", purpose, INSTALL_TENSORRT)
    return trt


def import_tensorrt_runtime(purpose: str) -> tuple[ModuleType, bool]:
    """A TensorRT runtime: the full package, else the lean runtime. Returns (module, is_lean)."""
    try:
        return import_tensorrt(purpose), False
    except MissingDependency:
        pass
    for name in LEAN_MODULES:
        try:
            module = __import__(name)
        except ImportError:
            continue
        if hasattr(module, "Runtime"):
            return module, True
    raise MissingDependency("TensorRT", purpose, INSTALL_TENSORRT)


# -- may this plan be deserialised? ------------------------------------------------------------------------------

TRUST_ENGINE_FLAG = "--trust-engine"
TRUST_GUIDANCE = "https://docs.nvidia.com/deeplearning/tensorrt/latest/reference/security.html"


class EngineOrigin(StrEnum):
    """Why an engine file may be handed to TensorRT's deserializer."""

    TRTPIPE = "trtpipe"  # built by 'trtpipe build': its sidecar, checked against the file, says what it is
    TRUSTED = "trusted"  # no trtpipe sidecar: the user vouched for it with --trust-engine


def engine_origin(engine: Path, *, trusted: bool, flag: str = TRUST_ENGINE_FLAG) -> EngineOrigin:
    """Whether ``engine`` may be deserialised, before TensorRT reads a byte of it: an engine with a trtpipe sidecar
    (which the caller checks against the file) may; one without only when ``trusted`` (the command's ``flag``);
    otherwise BadInput, one line naming the flag.

    TensorRT's security guidance: "Serialized TensorRT engines are executable artifacts. Deserializing an engine
    from an untrusted source is equivalent to running untrusted native code on the GPU and host" (``TRUST_GUIDANCE``).
    Shared by every command that loads a plan (bench, inspect), so ``--trust-engine`` means one thing."""
    if sidecar_path(Path(engine)).is_file():
        return EngineOrigin.TRTPIPE
    if trusted:
        return EngineOrigin.TRUSTED
    raise BadInput(f"{engine} has no metadata sidecar ({sidecar_path(Path(engine)).name}), so trtpipe did not build "
                   f"it: a TensorRT engine is executable code, never to be deserialised from an untrusted source; "
                   f"pass {flag} if you built it or received it over a trusted channel, or rebuild it with "
                   "'trtpipe build'.")


def require_cuda_gpu(purpose: str) -> tuple[str, str]:
    """(GPU name, compute capability) of GPU 0, or MissingDependency when torch sees no CUDA GPU."""
    import torch

    if not torch.cuda.is_available():
        raise MissingDependency("a CUDA GPU", purpose, "run it on a machine with an NVIDIA GPU and its driver")
    major, minor = torch.cuda.get_device_capability(0)
    return torch.cuda.get_device_name(0), f"{major}.{minor}"


# ILogger.Severity, as NvInferRuntimeBase.h numbers it (the Python enum is arithmetic: int() gives these).
INTERNAL_ERROR, ERROR, WARNING, INFO, VERBOSE = range(5)
SEVERITY_NAMES = {INTERNAL_ERROR: "INTERNAL_ERROR", ERROR: "ERROR", WARNING: "WARNING", INFO: "INFO",
                  VERBOSE: "VERBOSE"}


@dataclass(frozen=True)
class LogMessage:
    severity: int
    text: str

    @property
    def severity_name(self) -> str:
        return SEVERITY_NAMES.get(self.severity, str(self.severity))


class LogScope:
    """TensorRT's messages (INFO and more severe) logged during one build, or one call into an engine."""

    def __init__(self, label: str, keep: int, hide: re.Pattern[str] | None = None) -> None:
        self.label = label
        self.messages: collections.deque[LogMessage] = collections.deque(maxlen=keep)
        self.hide = hide  # warnings kept but not shown one by one (the caller summarises them)
        self._shown: set[str] = set()

    def errors(self) -> list[str]:
        return [m.text for m in self.messages if m.severity <= ERROR]

    def warnings(self) -> list[str]:
        return [m.text for m in self.messages if m.severity == WARNING]

    def matching(self, pattern: re.Pattern[str]) -> list[str]:
        """Messages of any kept severity that ``pattern`` finds something in."""
        return [m.text for m in self.messages if pattern.search(m.text)]

    def first_sight(self, text: str) -> bool:
        """True the first time ``text`` is to be shown for this scope (a builder repeats a warning per tactic);
        False for a warning the scope hides."""
        if text in self._shown or (self.hide is not None and self.hide.search(text)):
            return False
        self._shown.add(text)
        return True


class TensorRTMessages:
    """The one sink for TensorRT's log in this process, shared by every build and every engine.

    TensorRT keeps a single logger pointer per process: a Builder or Runtime created with a second logger keeps
    using the first (TensorRT's own warning, NVIDIA/TensorRT#1475: "TensorRT maintains only a single logger pointer
    at any given time"), so a second backend's errors went to the first backend's collector and read "no message".
    Here one logger feeds this sink, and each build or engine call opens a :meth:`scope` that collects what was
    logged while it ran: messages from the thread that opened a scope go to that thread's scopes; messages from
    TensorRT's own worker threads go to every open scope. Warnings are shown once per scope through ``show``
    (trtpipe.console's warning line for the process-wide sink); INFO is kept for checks such as the workspace
    notice, VERBOSE is dropped. Pure Python: tested without TensorRT.
    """

    def __init__(self, show: Callable[[str], None] | None = None, keep: int = 2000) -> None:
        self._lock = threading.Lock()
        self._scopes: list[tuple[LogScope, int]] = []  # (scope, id of the thread that opened it)
        self.recent: collections.deque[LogMessage] = collections.deque(maxlen=keep)  # logged outside any scope
        self._shown_outside: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._show = show
        self._keep = keep

    def log(self, severity: int, text: str) -> None:
        """Called by the TensorRT logger for every message, from any thread."""
        if severity > INFO:
            return
        message = LogMessage(int(severity), str(text))
        thread = threading.get_ident()
        with self._lock:
            own = [scope for scope, opener in self._scopes if opener == thread]
            targets = own or [scope for scope, _ in self._scopes]
            for scope in targets:
                scope.messages.append(message)
            if not targets:
                self.recent.append(message)
            show = message.severity == WARNING and self._show is not None and self._first_sight(targets, text)
        if show and self._show is not None:
            self._show(f"TensorRT: {text}")

    def _first_sight(self, targets: list[LogScope], text: str) -> bool:
        if targets:
            return all([scope.first_sight(text) for scope in targets])  # every scope records it; any may hide
        if text in self._shown_outside:
            return False
        self._shown_outside[text] = None
        if len(self._shown_outside) > self._keep:
            self._shown_outside.popitem(last=False)
        return True

    @contextlib.contextmanager
    def scope(self, label: str = "", hide: re.Pattern[str] | None = None) -> Iterator[LogScope]:
        """Collect what TensorRT logs while the block runs; warnings ``hide`` finds are collected, not shown."""
        scope = LogScope(label, self._keep, hide)
        entry = (scope, threading.get_ident())
        with self._lock:
            self._scopes.append(entry)
        try:
            yield scope
        finally:
            with self._lock:
                self._scopes.remove(entry)


def _show_warning(text: str) -> None:
    from trtpipe import console

    console.warn(text)


MESSAGES = TensorRTMessages(show=_show_warning)
_LOGGERS: dict[str, Any] = {}  # TensorRT module name -> its one ILogger, alive as long as the process
_LOGGERS_LOCK = threading.Lock()


def tensorrt_logger(trt: ModuleType) -> Any:
    """The process's one ``trt.ILogger`` for the TensorRT module ``trt`` (the full package and the lean runtime are
    separate libraries, each with its own logger), created on first use and never released: TensorRT holds only a
    pointer to it. Everything it is told goes to :data:`MESSAGES`."""
    key = getattr(trt, "__name__", repr(trt))
    with _LOGGERS_LOCK:
        logger = _LOGGERS.get(key)
        if logger is None:
            logger = _LOGGERS[key] = logger_class(trt)(MESSAGES)
    return logger


def logger_class(trt: ModuleType) -> type:
    """A ``trt.ILogger`` subclass forwarding to a :class:`TensorRTMessages`; defined only when TensorRT is there."""

    base: Any = trt.ILogger  # from the module passed in: a class the checker cannot see

    class Logger(base):
        def __init__(self, sink: TensorRTMessages) -> None:
            trt.ILogger.__init__(self)
            self._sink = sink

        def log(self, severity: Any, msg: str) -> None:
            self._sink.log(int(severity), msg)

    return Logger
