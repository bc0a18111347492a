"""What ``trtpipe inspect`` can be told. Standard library only: the CLI builds the command's flags from it."""

from __future__ import annotations

from dataclasses import dataclass

from trtpipe.options import Options, option


@dataclass
class InspectOptions(Options):
    trust_engine: bool = option(False, "Deserialize an engine that has no matching trtpipe sidecar (one trtpipe did "
                                "not build). Engines are executable: only for engines you built or got over a "
                                "trusted channel.", type=bool)
