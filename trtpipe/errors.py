"""The error types a user sees, independent of any CLI library.

Every problem the user can fix (bad input, a missing file, a missing optional package) is raised as a
:class:`TrtpipeError` whose message names the problem and the fix in one line. Library callers catch it like
any exception; ``trtpipe.cli`` translates it once, into ``Error: <message>`` and the error's exit code, with
no traceback. Exit codes: 1 for a user error, 3 for a missing optional dependency (2 is click's, for a
malformed option).
"""

from __future__ import annotations


class TrtpipeError(Exception):
    """A problem with the user's input or environment; the message names the problem and the fix."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadInput(TrtpipeError):
    """Input that cannot be used as given (wrong shape, dtype, file kind...)."""


class VerificationFailed(TrtpipeError):
    """An artifact's outputs differ from the reference beyond tolerance."""


class MissingDependency(TrtpipeError):
    """An optional package (or a GPU) is needed for what was asked; the message carries the install line."""

    exit_code = 3

    def __init__(self, package: str, purpose: str, install: str) -> None:
        super().__init__(f"{purpose} needs {package}, which is not installed: {install}")
        self.package = package
        self.install = install


class UnloadableDependency(TrtpipeError):
    """An optional package that is installed but could not be loaded: a shared library that could not be mapped
    (under a memory limit), a broken or mismatched install. Saying "not installed" would hide the cause, so the
    message carries the underlying error."""

    exit_code = 3

    def __init__(self, package: str, purpose: str, error: BaseException) -> None:
        super().__init__(f"{purpose} needs {package}, which is installed but could not be loaded "
                         f"({type(error).__name__}: {error}).")
        self.package = package


def import_failure(error: ImportError, package: str, purpose: str, install: str,
                   modules: tuple[str, ...]) -> TrtpipeError:
    """The error for an optional import that failed: MissingDependency when one of ``modules`` (top-level package
    names, e.g. ``("grpc", "tritonclient")``) is not installed, UnloadableDependency with the underlying message
    when it is but could not be loaded (an ImportError of another kind, or a module missing inside it)."""
    missing = error.name.split(".")[0] if isinstance(error, ModuleNotFoundError) and error.name else None
    if missing in modules:
        return MissingDependency(package, purpose, install)
    return UnloadableDependency(package, purpose, error)
