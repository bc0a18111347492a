"""Torch's own output kept out of the terminal while a package is exported, compiled or loaded.

torch.export prints the partial graph it failed on and logs where it looked for the user's code; Inductor warns
about the CUDA toolkit it did not find. trtpipe says what matters in one line instead. ``TORCH_LOGS`` set by the
user turns this off: they asked for torch's logs.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from collections.abc import Iterator


@contextlib.contextmanager
def quiet_torch(*, compiling: bool = False) -> Iterator[None]:
    """Python warnings and log records up to WARNING are dropped while the block runs; ``compiling`` (export and
    compilation, in a command of their own) also drops ERROR records and what torch prints to stderr, which is
    where torch.export puts the graph it failed on. Exceptions still propagate with their messages."""
    if os.environ.get("TORCH_LOGS"):
        yield
        return
    previous = logging.root.manager.disable
    logging.disable(logging.ERROR if compiling else logging.WARNING)
    try:
        with warnings.catch_warnings(), contextlib.ExitStack() as stack:
            warnings.simplefilter("ignore")
            if compiling:
                stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
            yield
    finally:
        logging.disable(previous)
