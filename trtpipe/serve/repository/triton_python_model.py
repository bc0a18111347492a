"""A Triton Python-backend model that runs a trtpipe artifact: copied as ``<name>/<version>/model.py`` by ``trtpipe
export-triton --backend python``.

Triton's Python backend imports this file in a stub process of its own, never trtpipe: it opens the artifact as
``trtpipe serve`` does (``trtpipe.embedding``, ``serve/repository/serving.py``), so it runs on the runtime it was
made for (ONNX Runtime, OpenVINO, TensorRT), with the same faithful-execution rules (read from the manifest or
sidecar copied beside it). Triton's dynamic batcher hands ``execute`` several requests at once: they run as one
batch and the outputs are split back, so batching pays off here as it does in the native backends.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

# The stub embeds Python with an isolated configuration that ignores PYTHONPATH: honour it here, so a server
# started from a virtual environment (PYTHONPATH=<venv site-packages>) finds trtpipe and its runtimes.
for _entry in reversed(os.environ.get("PYTHONPATH", "").split(os.pathsep)):
    if _entry and _entry not in sys.path:
        sys.path.insert(0, _entry)

import numpy as np  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402

from trtpipe.artifact.description import check_cpu  # noqa: E402
from trtpipe.embedding import open_model  # noqa: E402
from trtpipe.hardware import cpu_class  # noqa: E402
from trtpipe.runtime import describe_artifact  # noqa: E402
from trtpipe.serve.repository.serving import serving_options, serving_runtime  # noqa: E402
from trtpipe.serve.repository.triton import (  # noqa: E402
    ARTIFACT_PARAMETER,
    DEVICE_PARAMETER,
    RUNTIME_PARAMETER,
    THREADS_PARAMETER,
)
from trtpipe.vocab import BackendKind, Device  # noqa: E402


class TritonPythonModel:
    """Triton's Python-backend interface: initialize, execute, finalize."""

    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        parameters = {key: value.get("string_value", "") for key, value in config.get("parameters", {}).items()}
        version_dir = Path(args["model_repository"]) / args["model_version"]
        artifact = (version_dir / parameters[ARTIFACT_PARAMETER]).resolve()
        if version_dir.resolve() not in artifact.parents:
            raise ValueError(f"{parameters[ARTIFACT_PARAMETER]!r} is outside the model's version folder")
        # As `trtpipe serve` runs its models: on the runtime the export names (onnxruntime or openvino), with
        # ONNX Runtime's idle pool threads sleeping rather than spinning between requests.
        description = describe_artifact(artifact)
        # A CPU-target INT8 file recorded unsafe on this CPU's class is refused here as trtpipe serve refuses it.
        check_cpu(description, cpu_class())
        asked = parameters.get(RUNTIME_PARAMETER)
        runtime = serving_runtime(description, BackendKind(asked) if asked in tuple(BackendKind) else None)
        threads = int(parameters[THREADS_PARAMETER]) if parameters.get(THREADS_PARAMETER) else None
        if args.get("model_instance_kind") == "GPU":
            # Each instance on the GPU Triton placed it on: trtpipe's TensorRT runtime uses torch's current device.
            import torch

            torch.cuda.set_device(int(args.get("model_instance_device_id", "0")))
        # An ONNX file tuned for ONNX Runtime CUDA (model.tuned.json beside it) runs on its CUDA provider.
        device = Device.CUDA if parameters.get(DEVICE_PARAMETER) == Device.CUDA else Device.CPU
        self.model = open_model(description, serving_options(runtime, threads, device), runtime=runtime)
        self.batched = int(config.get("max_batch_size", 0)) > 0
        self.input_names = [entry["name"] for entry in config["input"]]
        self.outputs = [(entry["name"], pb_utils.triton_string_to_numpy(entry["data_type"]))
                        for entry in config["output"]]

    def execute(self, requests: list[Any]) -> list[Any]:
        """One model run for all ``requests`` when the model batches, one per request otherwise."""
        if not self.batched or len(requests) == 1:
            return [self._run([request])[0] for request in requests]
        return self._run(requests)

    def _run(self, requests: list[Any]) -> list[Any]:
        try:
            feeds = [{name: pb_utils.get_input_tensor_by_name(request, name).as_numpy()
                      for name in self.input_names} for request in requests]
            sizes = [len(feed[self.input_names[0]]) for feed in feeds]
            joined = feeds[0] if len(feeds) == 1 else {
                name: np.concatenate([feed[name] for feed in feeds]) for name in self.input_names}
            results = self.model.predict_all(joined)
        except Exception as error:  # every request of the batch gets the error; the model keeps serving
            message = pb_utils.TritonError(f"{type(error).__name__}: {error}")
            return [pb_utils.InferenceResponse(output_tensors=[], error=message) for _ in requests]
        responses, start = [], 0
        for size in sizes:
            tensors = [pb_utils.Tensor(name, np.ascontiguousarray(result[start:start + size], dtype=dtype))
                       for (name, dtype), result in zip(self.outputs, results, strict=True)]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            start += size
        return responses

    def finalize(self) -> None:
        self.model.close()
