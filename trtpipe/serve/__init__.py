"""Stage 5, serve: the KServe v2 server over HTTP (``http/``) and gRPC (``grpc/``), running models (``batching/``), and
model repositories (``repository/``: loading one, exporting one for Triton); what both transports share sits here.

The embedding API, ``trtpipe.load``, is ``trtpipe/embedding.py``; the load generator and test harnesses are
``trtpipe/tools/``.
"""
