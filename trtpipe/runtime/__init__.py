"""The runtime seam: one backend per engine kind (a folder each), one interface for verify, bench and serve."""

from trtpipe.artifact.description import ArtifactDescription, artifact_kind, describe_artifact
from trtpipe.artifact.tensors import TensorInfo
from trtpipe.runtime.base import Backend
from trtpipe.runtime.options import RunOptions
from trtpipe.runtime.registry import backend_class, open_artifact

__all__ = ["ArtifactDescription", "Backend", "RunOptions", "TensorInfo", "artifact_kind", "backend_class",
           "describe_artifact", "open_artifact"]
