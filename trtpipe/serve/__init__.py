"""Stage 5, serve: trtpipe.load, dynamic batching, the KServe v2 server and the Triton export."""
