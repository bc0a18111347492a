"""``trtpipe debug``: where in the graph an optimized ONNX starts to differ from its FP32 reference.

Light on purpose: the CLI imports :mod:`trtpipe.debug.options` to build its flags, and this package's ``__init__``
loads with it. The comparison itself lives in :mod:`trtpipe.debug.compare` (tensor matching in
:mod:`trtpipe.debug.match`, the report in :mod:`trtpipe.debug.report`) and is imported when the command runs.
"""
