"""What `trtpipe check` can be told: which runtime the graph must conform to."""

from __future__ import annotations

from dataclasses import dataclass

from trtpipe.options import Options, option
from trtpipe.vocab import Target


@dataclass
class CheckOptions(Options):
    target: Target = option(Target.TENSORRT, "The runtime the graph must conform to.", type=Target)
