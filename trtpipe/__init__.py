"""trtpipe: turn a trained PyTorch CNN into the fastest deployable inference artifact that keeps its accuracy.

Importing the package stays cheap: no torch, onnxruntime or tensorrt import happens until a stage needs it,
so ``trtpipe --help`` and option parsing work on any machine.
"""

__version__ = "0.1.0"


def load(source, **options):  # type: ignore[no-untyped-def]
    """Load an artifact (.onnx, .plan) or a PyTorch model and return a :class:`trtpipe.serve.model.Model`
    with ``predict(array) -> array``. See :func:`trtpipe.serve.model.load`."""
    from trtpipe.serve.model import load as _load

    return _load(source, **options)
