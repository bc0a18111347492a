"""Where the PyTorch model comes from: shared by convert, verify, bench and the pipeline's [model] section."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trtpipe.options import Options, option
from trtpipe.shapes import (
    FIRST,
    INPUT_DTYPES,
    declared_for,
    format_input_dtypes,
    format_input_ranges,
    format_input_shapes,
    parse_input_dtypes,
    parse_input_ranges,
    parse_input_shapes,
)
from trtpipe.vocab import Task

TASK_HELP = ("What the outputs mean, and so how fidelity to FP32 is measured: classify (top-1/top-5 "
             "agreement), detect (mAP@0.5 of the detections against FP32's), segment (pixel agreement, mIoU), "
             "dense (F1 of the map, mean error), embed (cosine), sequence (a CTC recognizer's lines: exact-line and "
             "per-character agreement), restore (an image-to-image network's PSNR and SSIM), heatmap (keypoint or "
             "centre heatmaps: peak recall and location error), generic (every output's errors only). Default: "
             "inferred from FP32's outputs where they show it (a detector's boxes must decode plausibly, a "
             "segmenter's maps must be class scores, a restorer's pixels), else generic; the line says which.")
POSTPROCESS_HELP = ("A detector's decoding for the detect measure, for heads the yolov8/yolov5/yolox decoders do not "
                    "read: "
                    "path/to/file.py:fn or package.module:fn, taking the model's outputs (a list of arrays) and "
                    "returning per image (boxes [K, 4] x1 y1 x2 y2, scores [K], classes [K]). Runs your code.")


@dataclass
class ModelOptions(Options):
    source: str | None = option(None, "A registry name, a checkpoint (.pt/.pth/.safetensors, with arch), a "
                                "TorchScript file, or path/to/file.py:factory / package.module:factory.", cli=False)
    name: str | None = option(None, "Name of the model in the repository and reports (default: from the source).",
                              cli=False)
    arch: str | None = option(None, "Registry architecture a state_dict checkpoint fits.", metavar="NAME")
    # Each input declaration is {input name: value}; the key "" (FIRST) is a value written without a name, which
    # belongs to the model's only (or first) input.
    input_shape: dict[str, tuple[int, ...]] | None = option(
        None, "Input shape, e.g. 1x3x224x224 (the only or first input; default: the registry's or the model's "
        "input_shape attribute), or one per input of a model whose forward takes several: "
        "image:1x3x640x640,scale:1x2.", parse=parse_input_shapes, format=format_input_shapes,
        metavar="[NAME:]SHAPE")
    input_dtype: dict[str, str] | None = option(
        None, f"Input dtype ({', '.join(INPUT_DTYPES)}; default float32), e.g. uint8 for a model that takes "
        "pixels and normalises inside, or per input: image:uint8,scale:float32.", parse=parse_input_dtypes,
        format=format_input_dtypes, metavar="[NAME:]DTYPE")
    input_range: dict[str, tuple[float, float]] | None = option(
        None, "The range the input's values live in, for random and calibration inputs, e.g. 0..255, or per "
        "input: image:0..255,scale:0.5..2 (default: an 8-bit dtype's whole range; else standard normal).",
        parse=parse_input_ranges, format=format_input_ranges, metavar="[NAME:]LOW..HIGH")
    task: Task | None = option(None, TASK_HELP, type=Task, choices=Task.every)
    postprocess: str | None = option(None, POSTPROCESS_HELP, metavar="MODULE:FN")
    eval_samples: int | None = option(
        None, "Samples of a packaged ONNX model's own data that bench judges each variant on (default 16). More "
        "narrow each figure's 95 % interval: at a perfect score about 73 decide a 5-point budget, 381 a 1-point one.",
        type=int, minimum=1)
    trust_checkpoint: bool = option(
        False, "Allow full unpickling of a checkpoint (runs code from the file: only for trusted files).", type=bool,
        flag="--trust-checkpoint")

    def first_input_shape(self) -> tuple[int, ...] | None:
        """The shape declared for the only (or first) input: the unnamed one, or the only one declared."""
        return first_declared(self.input_shape)

    def input_shape_for(self, name: str, index: int = 0) -> tuple[int, ...] | None:
        """The shape declared for input ``name``, the model's ``index``-th (the unnamed one is the first's)."""
        return declared_for(self.input_shape, name, index)

    def loader_keywords(self) -> dict[str, Any]:
        """The keyword arguments of :func:`trtpipe.models.loader.load_model` these options set."""
        return {"arch": self.arch, "input_shape": self.input_shape, "input_dtype": self.input_dtype,
                "input_range": self.input_range, "trust_checkpoint": self.trust_checkpoint, "task": self.task,
                "postprocess": self.postprocess}


def first_declared(values: dict[str, Any] | None) -> Any:
    """The value declared for the only (or first) input: the unnamed one, or the only one declared."""
    if not values:
        return None
    if FIRST in values:
        return values[FIRST]
    return next(iter(values.values())) if len(values) == 1 else None
