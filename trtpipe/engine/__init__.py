"""Stage 3, the ``build`` stage (``trtpipe build``, the pipeline file's ``[build]`` section): strongly typed
TensorRT 10/11 engines with a sidecar, checked before TensorRT loads.

The package is named after what the stage makes, never ``build`` (tools treat such a folder as generated output);
its options are :class:`EngineOptions` and :func:`build_engine` runs it."""

from trtpipe._lazy import lazy_exports
from trtpipe.engine.options import EngineOptions

__all__ = ["BuildResult", "EngineOptions", "build_engine", "planned_profile", "planned_profiles"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "build_engine": "trtpipe.engine.build:build_engine", "BuildResult": "trtpipe.engine.build:BuildResult",
    "planned_profile": "trtpipe.engine.build:planned_profile",
    "planned_profiles": "trtpipe.engine.build:planned_profiles"})
