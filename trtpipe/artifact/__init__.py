"""The artifact room: one deployable file and what trtpipe records of it.

``Artifact.open(path)`` (``artifact.py``) gives its kind, its records (manifest, engine sidecar, tuned runs), its
input specs (resolved once: ``inputs.py``) and its lineage (``lineage.py``); ``trtpipe.load`` (``load.py``) opens
it on the runtime it needs, as a program holds it.
"""

from trtpipe._lazy import lazy_exports

__all__ = ["Artifact"]
__getattr__, __dir__ = lazy_exports(__name__, {"Artifact": "trtpipe.artifact.artifact:Artifact"})
