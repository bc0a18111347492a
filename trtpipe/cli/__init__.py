"""The ``trtpipe`` command line (entry point ``trtpipe.cli:main``)."""

from trtpipe.cli.main import main

__all__ = ["main"]
