"""One place for what trtpipe tells the user while it works.

Progress, notes and warnings go to stderr, so tables and reports on stdout stay clean for pipes.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn


def _width(stream: object) -> int | None:
    """Rich wraps at 80 columns when not on a terminal; logs and CI deserve full-width tables."""
    isatty = getattr(stream, "isatty", None)
    if isatty and isatty():
        return None
    return int(os.environ.get("COLUMNS", 200))


err = Console(stderr=True, highlight=False, width=_width(sys.stderr))
out = Console(highlight=False, width=_width(sys.stdout))


def note(message: str) -> None:
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
    finally:
        _recorders.remove(lines)


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


def progress() -> Progress:
    return Progress(
        SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), console=err, transient=True,
    )
