"""The error types a user sees.

Every problem the user can fix (bad input, a missing file, a missing optional package) is raised as a
:class:`TrtpipeError`. It is a ``click.ClickException``, so the CLI prints ``Error: <message>`` on one line
and exits non-zero without a traceback; library callers catch it like any exception.
"""

from __future__ import annotations

import click


class TrtpipeError(click.ClickException):
    """A problem with the user's input or environment; the message names the problem and the fix."""

    exit_code = 1


class BadInput(TrtpipeError):
    """Input that cannot be used as given (wrong shape, dtype, file kind...)."""


class VerificationFailed(TrtpipeError):
    """An artifact's outputs differ from the reference beyond tolerance."""


class MissingDependency(TrtpipeError):
    """An optional package is needed for what was asked; the message carries the install line."""

    exit_code = 2

    def __init__(self, package: str, purpose: str, install: str) -> None:
        super().__init__(f"{purpose} needs {package}, which is not installed: {install}")
        self.package = package
        self.install = install
