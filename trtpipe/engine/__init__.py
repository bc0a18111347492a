"""Stage 3, engine build: strongly typed TensorRT 10/11 engines with a sidecar, checked before TensorRT loads."""

from trtpipe._lazy import lazy_exports
from trtpipe.engine.options import EngineOptions

__all__ = ["BuildResult", "EngineOptions", "build_engine", "planned_profile"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "build_engine": "trtpipe.engine.build:build_engine", "BuildResult": "trtpipe.engine.build:BuildResult",
    "planned_profile": "trtpipe.engine.build:planned_profile"})
