"""The artifact room: one deployable file and everything trtpipe records of it, below every runtime that opens it.

``Artifact.open(path)`` (``artifact.py``) gives its kind, its records (``records/``: the manifest, an engine's
sidecar, a package's section, tuned runs, the calibration cache, each read and written there only), its description
(``description.py``: what it computes and how it must run), its input specs (resolved once: ``inputs.py``) and its
lineage (``lineage.py``). The runtime opens it on a backend (``trtpipe.runtime.open_artifact``), and
``trtpipe.load`` (trtpipe/embedding.py) as a program holds it.
"""

from trtpipe._lazy import lazy_exports

__all__ = ["Artifact"]
__getattr__, __dir__ = lazy_exports(__name__, {"Artifact": "trtpipe.artifact.artifact:Artifact"})
