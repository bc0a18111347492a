"""What Triton's onnxruntime platform is told about an artifact this backend runs: the CUDA provider options its
probe chose (model.tuned.json), as the parameters of Triton's "cuda" accelerator."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trtpipe.vocab import OnnxExecution

if TYPE_CHECKING:
    from trtpipe.artifact.description import ArtifactDescription


def accelerator_options(description: ArtifactDescription) -> tuple[tuple[str, str], ...]:
    """The CUDA provider options an artifact's probe chose (prefer_nhwc, cuDNN search), as Triton parameters."""
    from trtpipe.runtime.onnxruntime.providers import cuda_provider_options
    from trtpipe.runtime.options import RunOptions

    tuned = description.tuned.get(OnnxExecution.CUDA)
    if tuned is None:
        return ()
    chosen = cuda_provider_options(RunOptions.from_keywords(tuned))
    return tuple((key, str(chosen[key])) for key in ("prefer_nhwc", "cudnn_conv_algo_search",
                                                     "cudnn_conv_use_max_workspace") if key in chosen)
