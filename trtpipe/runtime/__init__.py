"""The runtime seam: one backend per engine kind (a folder each), one interface for verify, bench and serve."""

from trtpipe.runtime.artifacts import ArtifactDescription, describe_artifact
from trtpipe.runtime.base import Backend, TensorInfo
from trtpipe.runtime.options import RunOptions
from trtpipe.runtime.registry import artifact_kind, backend_class, open_artifact

__all__ = ["ArtifactDescription", "Backend", "RunOptions", "TensorInfo", "artifact_kind", "backend_class",
           "describe_artifact", "open_artifact"]
