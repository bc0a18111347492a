"""One place for what trtpipe tells the user while it works.

Progress, notes and warnings go to stderr, so tables and reports on stdout stay clean for pipes.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text


def _width(stream: object) -> int | None:
    """Rich wraps at 80 columns when not on a terminal; logs and CI deserve full-width tables."""
    isatty = getattr(stream, "isatty", None)
    if isatty and isatty():
        return None
    return int(os.environ.get("COLUMNS", 200))


err = Console(stderr=True, highlight=False, width=_width(sys.stderr))
out = Console(highlight=False, width=_width(sys.stdout))


QUIET = False  # --quiet: no notes, progress bars or heartbeats; warnings, errors and results still print
HEARTBEAT_S = 10.0  # off a terminal, long work says where it is this often


def set_quiet(quiet: bool) -> None:
    global QUIET
    QUIET = quiet


def note(message: str) -> None:
    if QUIET:
        return
    err.print(f"[dim]•[/dim] {escape(message)}", soft_wrap=True)


def success(message: str) -> None:
    err.print(f"[green]✓[/green] {escape(message)}", soft_wrap=True)


_recorders: list[list[str]] = []


def warn(message: str, *, record: bool = True) -> None:
    """A warning on stderr; ``record=False``: one the report says elsewhere, kept out of recording_warnings' list
    (the reports' "Not in this report, and why")."""
    for lines in _recorders if record else ():
        lines.append(message)
    err.print(f"[bold yellow]warning:[/bold yellow] {escape(message)}", soft_wrap=True)


@contextlib.contextmanager
def recording_warnings() -> Iterator[list[str]]:
    """The warnings given while the block runs, in order: for a report to repeat what its reader was not there
    to see (a row skipped on this CPU, and why)."""
    lines: list[str] = []
    _recorders.append(lines)
    try:
        yield lines
    finally:  # by identity: a nested recorder holding the same lines is equal to this one, not this one
        _recorders[:] = [kept for kept in _recorders if kept is not lines]


@contextlib.contextmanager
def stdout_kept(active: bool) -> Iterator[None]:
    """While ``active``, what would print on stdout (tables, reports) goes to stderr instead: stdout is kept for the
    output named ``-`` (``--json -``), so a pipe gets that alone."""
    if not active:
        yield
        return
    kept = out.stderr  # the console resolves its stream when it writes (so a test's captured streams are honoured)
    out.stderr = True
    try:
        yield
    finally:
        out.stderr = kept


@contextlib.contextmanager
def step(message: str) -> Iterator[None]:
    """A spinner while a step runs; the step's own lines print above it."""
    with err.status(escape(message), spinner="dots"):
        yield


class _Progress(Progress):
    """rich's bars, and off a terminal (a log, CI: where no bar draws) a :class:`Heartbeat` line per task at most
    every HEARTBEAT_S seconds, so long work is never silent there."""

    def __init__(self, *columns: Any, **options: Any) -> None:
        super().__init__(*columns, **options)
        self._beats: dict[TaskID, Heartbeat] = {}

    def add_task(self, description: str, *args: Any, **options: Any) -> TaskID:
        task = super().add_task(description, *args, **options)
        total = options.get("total", args[1] if len(args) > 1 else None)
        if total:
            self._beats[task] = Heartbeat(Text.from_markup(description).plain, int(total))
        return task

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        super().advance(task_id, advance)
        if beat := self._beats.get(task_id):
            beat.tick(int(advance))


def progress() -> Progress:
    """A bar per task with its elapsed time and, once it can tell, the time left (hidden under --quiet); off a
    terminal, a line every HEARTBEAT_S seconds instead."""
    return _Progress(
        SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=err, transient=True,
        disable=QUIET or not err.is_terminal,  # off a terminal a bar draws nothing but a blank line when it ends
    )


class Heartbeat:
    """Where long work is, for a log rather than a terminal: off a terminal (where no bar draws), a line at most
    every HEARTBEAT_S seconds with what is done of the total and the time left at the pace so far."""

    def __init__(self, what: str, total: int) -> None:
        self.what, self.total, self.done = what, total, 0
        self.started = self.said = time.monotonic()
        self.on = not QUIET and not err.is_terminal

    def tick(self, step: int = 1) -> None:
        self.done += step
        now = time.monotonic()
        if not self.on or now - self.said < HEARTBEAT_S or self.done >= self.total:
            return
        self.said = now
        left = (now - self.started) / self.done * (self.total - self.done)
        err.print(f"[dim]•[/dim] {escape(self.what)}: {self.done} of {self.total} done, about {left:.0f} s left",
                  soft_wrap=True)


@contextlib.contextmanager
def tracked(what: str, total: int) -> Iterator[Callable[[int], None]]:
    """Long work of ``total`` units, shown where the user is: a bar with the time left on a terminal, a
    :class:`Heartbeat` line every HEARTBEAT_S seconds off one (a log, CI), nothing under --quiet. Yields the
    function that counts units done."""
    with progress() as bar:
        task = bar.add_task(escape(what), total=total)

        def advance(done: int = 1) -> None:
            bar.advance(task, done)

        yield advance


@contextlib.contextmanager
def hushed() -> Iterator[None]:
    """Nothing the block says is shown (notes, warnings, spinners, bars): for work repeated in the background whose
    result is said once after it (cross-fitting's folds, whose steps the written file's chain runs and says again)."""
    global err
    shown = err
    err = Console(stderr=True, quiet=True)
    try:
        yield
    finally:
        err = shown
