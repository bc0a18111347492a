"""Where the PyTorch model comes from: shared by convert, verify, bench and the pipeline's [model] section."""

from __future__ import annotations

from dataclasses import dataclass

from trtpipe.options import Options, option
from trtpipe.shapes import format_shape, parse_shape
from trtpipe.vocab import Task

TASK_HELP = ("What the outputs mean, and so how fidelity to FP32 is measured: classify (top-1/top-5 "
             "agreement), detect (mAP@0.5 of the detections against FP32's), segment (pixel agreement, mIoU), "
             "dense (F1 of the map, mean error), embed (cosine), generic (every output's errors only). Default: "
             "inferred from the output shapes where that is unambiguous, else generic.")
POSTPROCESS_HELP = ("A detector's decoding for the detect measure, for heads the yolov8/yolov5 decoders do not read: "
                    "path/to/file.py:fn or package.module:fn, taking the model's outputs (a list of arrays) and "
                    "returning per image (boxes [K, 4] x1 y1 x2 y2, scores [K], classes [K]). Runs your code.")


@dataclass
class ModelOptions(Options):
    source: str | None = option(None, "A registry name, a checkpoint (.pt/.pth/.safetensors, with arch), a "
                                "TorchScript file, or path/to/file.py:factory / package.module:factory.", cli=False)
    name: str | None = option(None, "Name of the model in the repository and reports (default: from the source).",
                              cli=False)
    arch: str | None = option(None, "Registry architecture a state_dict checkpoint fits.", metavar="NAME")
    input_shape: tuple[int, ...] | None = option(
        None, "Model input shape, e.g. 1x3x224x224 (default: the registry's).", parse=parse_shape,
        format=format_shape, metavar="SHAPE")
    task: Task | None = option(None, TASK_HELP, type=Task)
    postprocess: str | None = option(None, POSTPROCESS_HELP, metavar="MODULE:FN")
    trust_checkpoint: bool = option(
        False, "Allow full unpickling of a checkpoint (runs code from the file: only for trusted files).", type=bool,
        flag="--trust-checkpoint")
