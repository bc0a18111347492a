"""gRPC: the listener process, how it forwards calls, the server's side of the bridge, decoding and the endpoints."""
