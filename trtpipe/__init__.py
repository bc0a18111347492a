"""trtpipe: turn a trained PyTorch CNN into the fastest deployable inference artifact that keeps its accuracy.

Importing the package stays cheap: no torch, onnxruntime or tensorrt import happens until a stage needs it,
so ``trtpipe --help`` and option parsing work on any machine. ``trtpipe.load(path)`` is the embedding API
(:func:`trtpipe.embedding.load`).
"""

from trtpipe._lazy import lazy_exports
from trtpipe.vocab import __version__

__all__ = ["__version__", "load"]
__getattr__, __dir__ = lazy_exports(__name__, {"load": "trtpipe.embedding:load"})
