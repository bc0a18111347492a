"""``python -m trtpipe.cli``: the same command line as ``trtpipe``."""

from trtpipe.cli.main import main

main()
