"""The process's one TensorRT logger: what each build or engine call collects, and which warnings are shown.

The collecting logic is plain Python and runs everywhere; the lazily defined ``trt.ILogger`` subclass is checked
against TensorRT's lean runtime bindings where they are installed (they import without a GPU)."""

from __future__ import annotations

import re
import threading

import pytest

from trtpipe.runtime.tensorrt.loader import ERROR, INFO, VERBOSE, WARNING, TensorRTMessages


def _sink() -> tuple[TensorRTMessages, list[str]]:
    shown: list[str] = []
    return TensorRTMessages(show=shown.append), shown


def test_each_scope_collects_what_was_logged_while_it_was_open() -> None:
    messages, _ = _sink()
    with messages.scope("first backend") as first:
        messages.log(ERROR, "engine one is broken")
    with messages.scope("second backend") as second:
        messages.log(ERROR, "engine two is broken")
    # The second backend's error is its own, not "no message" (nor the first one's).
    assert first.errors() == ["engine one is broken"] and second.errors() == ["engine two is broken"]
    messages.log(ERROR, "outside any scope")
    assert [m.text for m in messages.recent] == ["outside any scope"]


def test_warnings_are_shown_once_per_scope_and_verbose_is_dropped() -> None:
    messages, shown = _sink()
    with messages.scope("build") as build:
        for _ in range(3):
            messages.log(WARNING, "weights were clamped to FP16")
        messages.log(INFO, "Some tactics do not have sufficient workspace memory to run.")
        messages.log(VERBOSE, "Tactic 0x1 time 0.2 ms")
    assert shown == ["TensorRT: weights were clamped to FP16"]
    assert build.warnings() == ["weights were clamped to FP16"] * 3
    assert build.matching(re.compile("workspace memory")) and not build.matching(re.compile("Tactic 0x1"))
    with messages.scope("another build"):
        messages.log(WARNING, "weights were clamped to FP16")
    assert len(shown) == 2  # a new scope shows it again: it is news to that build


def test_hidden_warnings_are_kept_for_a_summary_but_not_shown() -> None:
    messages, shown = _sink()
    with messages.scope("build", hide=re.compile("insufficient to use tactic")) as build:
        messages.log(WARNING, "Tactic Device request: 9385MB Available: 7649MB. Device memory is insufficient to "
                              "use tactic.")
    assert shown == [] and len(build.warnings()) == 1


def test_messages_from_another_thread_go_to_that_threads_scope() -> None:
    messages, _ = _sink()
    opened, logged, done = threading.Event(), threading.Event(), threading.Event()
    scopes = {}

    def server_thread() -> None:
        with messages.scope("request") as scope:
            scopes["request"] = scope
            opened.set()
            logged.wait(5)
            messages.log(ERROR, "request failed")
        done.set()

    thread = threading.Thread(target=server_thread)
    thread.start()
    opened.wait(5)
    with messages.scope("build") as build:
        messages.log(ERROR, "build failed")
        logged.set()
        done.wait(5)
    thread.join(5)
    assert build.errors() == ["build failed"] and scopes["request"].errors() == ["request failed"]


def test_a_tensorrt_worker_thread_reaches_every_open_scope() -> None:
    messages, _ = _sink()
    with messages.scope("build") as build:
        worker = threading.Thread(target=messages.log, args=(ERROR, "from TensorRT's own thread"))
        worker.start()
        worker.join(5)
    assert build.errors() == ["from TensorRT's own thread"]


def test_the_ilogger_subclass_is_defined_lazily_and_forwards() -> None:
    trt = pytest.importorskip("tensorrt_lean_bindings", reason="tensorrt-lean-cu13-bindings is not installed")
    from trtpipe.runtime.tensorrt.loader import logger_class

    messages, shown = _sink()
    logger = logger_class(trt)(messages)
    assert isinstance(logger, trt.ILogger)
    with messages.scope("run") as run:
        logger.log(trt.ILogger.Severity.ERROR, "bad engine")
        logger.log(trt.ILogger.Severity.WARNING, "careful")
    assert run.errors() == ["bad engine"] and shown == ["TensorRT: careful"]


def test_one_logger_per_tensorrt_module() -> None:
    trt = pytest.importorskip("tensorrt_lean_bindings", reason="tensorrt-lean-cu13-bindings is not installed")
    from trtpipe.runtime.tensorrt.loader import MESSAGES, tensorrt_logger

    assert tensorrt_logger(trt) is tensorrt_logger(trt)
    with MESSAGES.scope("run") as run:
        tensorrt_logger(trt).log(trt.ILogger.Severity.ERROR, "through the shared logger")
    assert run.errors() == ["through the shared logger"]
