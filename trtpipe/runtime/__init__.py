"""The runtime seam: one backend per engine kind (a folder each), one interface for verify, bench and serve."""

from trtpipe.runtime.base import Backend, TensorInfo
from trtpipe.runtime.registry import artifact_kind, backend_class, open_artifact

__all__ = ["Backend", "TensorInfo", "artifact_kind", "backend_class", "open_artifact"]
