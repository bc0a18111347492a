"""trtpipe: turn a trained PyTorch CNN into the fastest deployable inference artifact that keeps its accuracy.

Importing the package stays cheap: no torch, onnxruntime or tensorrt import happens until a stage needs it,
so ``trtpipe --help`` and option parsing work on any machine.
"""

__version__ = "0.1.0"
