"""How a model is served: address, dynamic batching, instances, admission and size limits. `trtpipe serve` runs with
these; `export-triton` and the pipeline's [serve] section write the batching part into Triton's config."""

from __future__ import annotations

from dataclasses import dataclass

from trtpipe.options import Options, option
from trtpipe.shapes import parse_batch_sizes
from trtpipe.vocab import SERVE_MAX_BATCH, ArtifactKind, BackendKind, Device, TritonBackend


@dataclass
class ServeOptions(Options):
    host: str = option("127.0.0.1", "Address to bind (loopback by default: the server has no authentication).")
    port: int = option(8000, "Port to listen on.", type=int, minimum=0, maximum=65535)
    grpc_port: int | None = option(None, "Also serve the KServe v2 gRPC service on this port (same host).",
                                   type=int, minimum=0, maximum=65535)
    batching: bool = option(True, "Dynamic batching per model.", type=bool)
    max_batch_size: int = option(SERVE_MAX_BATCH, "Largest batch a model runs (and Triton's max_batch_size).",
                                 type=int, minimum=1)
    max_queue_delay_ms: float = option(2.0, "How long a request may wait for others to batch with.", type=float,
                                       minimum=0)
    preferred_batch_sizes: tuple[int, ...] = option((), "Batch sizes to dispatch at once, e.g. 8,16.",
                                                    parse=parse_batch_sizes, format=lambda v: ",".join(map(str, v)),
                                                    metavar="LIST")
    max_queue: int = option(1024, "Requests waiting per model before 503.", type=int, minimum=1)
    timeout_ms: float | None = option(None, "Per-request inference timeout (504 past it).", type=float, minimum=1)
    max_body_mb: float = option(64.0, "Largest request body accepted, in MiB (1 MiB = 1,048,576 bytes; 413 past "
                                "it).", type=float, minimum=0.001)
    max_response_mb: float = option(64.0, "Largest answer sent, in MiB (413, gRPC RESOURCE_EXHAUSTED, past it: "
                                    "refused before it is encoded, JSON data counted at its longest text per value).",
                                    type=float, minimum=0.001)
    threads: int | None = option(None, "ONNX Runtime (or OpenVINO) threads per model.", type=int, minimum=1)
    device: Device = option(Device.CPU, "Where ONNX Runtime runs ONNX models: cpu, or cuda (its CUDA provider with "
                            "inputs and outputs bound on the device and the artifact's tuned settings, a CUDA graph "
                            "per batch shape where bench chose one; needs onnxruntime-gpu).", type=Device)
    runtime: BackendKind = option(ArtifactKind.ONNX.backend, f"What runs ONNX models: {ArtifactKind.ONNX.runtimes_help}"
                                  ". A BF16 file always runs on OpenVINO.",
                                  type=BackendKind, choices=ArtifactKind.ONNX.runtimes)
    allow_cpu_mismatch: bool = option(False, "Serve a cpu/openvino INT8 artifact on a CPU its manifest records it "
                                      "unsafe on (8-bit weights without VNNI saturate at 16 bits), which is "
                                      "otherwise refused.", type=bool)
    header_timeout_s: float = option(10.0, "Seconds a client may take to send a request's headers before the "
                                     "connection is closed.", type=float, minimum=0.1)
    body_timeout_s: float = option(30.0, "Seconds a client may take to send a request's body (408 past it).",
                                   type=float, minimum=0.1)
    max_connections: int = option(1024, "Concurrent connections and requests before new ones get 503.", type=int,
                                  minimum=1)
    drain_s: float = option(5.0, "Seconds after SIGTERM during which readiness answers false (HTTP 503, gRPC "
                            "ready=false) while requests are still served, so load balancers stop sending before "
                            "the listener closes; requests in flight then finish. 0: close at once.", type=float,
                            minimum=0)
    instances: int = option(1, "Times each model is opened: each instance its own session (on a GPU its own CUDA "
                            "stream and graphs), requests or batches going to the least busy one; also the instance "
                            "count of an exported Triton repository. More than one is refused at start when they do "
                            "not fit in memory.", type=int, minimum=1)
    memory_budget_mb: float | None = option(None, "Memory, in MiB, that the server's model instances may take in all "
                                            "(device memory on a GPU, host memory on the CPU; each instance measured "
                                            "after loading and a warm-up run); default: what is free. Checked with "
                                            "--instances above 1.", type=float, minimum=1)
    triton_backend: TritonBackend = option(
        TritonBackend.NATIVE, "Triton backend of an exported repository: native (Triton's onnxruntime/tensorrt "
        "backends) or python (Triton's Python backend running trtpipe's runtime).", type=TritonBackend,
        flag="--backend")

    @property
    def max_body_bytes(self) -> int:
        return int(self.max_body_mb * 1024 * 1024)

    @property
    def max_response_bytes(self) -> int:
        return int(self.max_response_mb * 1024 * 1024)

    @property
    def timeout_s(self) -> float | None:
        return self.timeout_ms / 1000 if self.timeout_ms else None
