"""Which measure judges which task, and the task a model's outputs show when the user names none.

A new task measure is one module here (``EXPECTED``, ``fits(shape)``, ``measure(reference, candidate, labels)``)
and one line in MEASURES; the comparison, and so every stage that reports or gates accuracy, picks it up.

A task is inferred only where the evidence says so, and every inference says which measure (and decoder) it chose
and why (:class:`Inference`): shapes alone choose a classifier ``[N, C]``, a segmenter ``[N, C, H, W]`` and a dense
map ``[N, 1, H, W]``; a detector's head must also decode to plausible boxes on the data (``detect.choose``) and a
recognizer's outputs must show CTC's blank (``sequence.recognised``); several maps of one size whose first is sparse
scores in 0..1 that peak are a heatmap head (``heatmap.head``). A head that looks like a detector's but that
no built-in decoder reads plausibly is not measured as one: generic, with the line naming ``--task`` and
``--postprocess``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from trtpipe.errors import BadInput
from trtpipe.tasks import classify, dense, detect, embed, generic, heatmap, restore, segment, sequence
from trtpipe.vocab import Task

MEASURES: dict[Task, ModuleType] = {
    Task.CLASSIFY: classify, Task.DETECT: detect, Task.SEGMENT: segment, Task.DENSE: dense, Task.EMBED: embed,
    Task.SEQUENCE: sequence, Task.RESTORE: restore, Task.HEATMAP: heatmap, Task.GENERIC: generic,
}
# Read from one output's shape alone; [N, C] is read as class scores (name --task embed for embeddings). A map of
# several channels [N, C, H, W] is read by its values (:func:`_maps`).
_BY_SHAPE = {Task.CLASSIFY: "class scores", Task.DENSE: "a map of one value per pixel"}
NAMED = "--task " + "|".join(str(t) for t in MEASURES if t is not Task.GENERIC)



@dataclass(frozen=True)
class Inference:
    """The task a model's outputs showed, the built-in detection decoder that reads them (detect), and why."""

    task: Task
    reason: str
    decoder: str | None = None
    # Read from the output's values (several maps: class scores, an image, or neither), not from its shape alone:
    # such an inference means something only on the model's real inputs (convert's random ones show nothing)
    from_values: bool = False

    def line(self) -> str:
        """``Task: detect, decoded as yolox (inferred: ...)``: the one line every inference prints."""
        decoded = f", decoded as {self.decoder}" if self.decoder else ""
        return f"Task: {self.task}{decoded} (inferred: {self.reason})"


def model_shape(shape: tuple[int, ...], axis: int | None) -> str:
    """An output's shape as the model lays it out, from its samples-first ``shape`` and the model's batch axis
    ``axis``: ``[24, 8, 37] (batch on axis 1)`` for a time-major output; as it is where the batch is first."""
    if not axis:
        return str(list(shape)) + (" (no batch axis)" if axis is None and shape else "")
    dims = list(shape[1:])
    dims.insert(axis, shape[0])
    return f"{dims} (batch on axis {axis})"


def _shapes(outputs: Sequence[np.ndarray], axes: Sequence[int | None]) -> str:
    return ("output " if len(outputs) == 1 else "outputs ") + ", ".join(
        model_shape(tuple(np.asarray(o).shape), axis) for o, axis in zip(outputs, axes, strict=True))


def infer_task(outputs: Sequence[np.ndarray], image_size: tuple[int, int] | None = None,
               batch_axes: Sequence[int | None] | None = None) -> Inference:
    """The task FP32's ``outputs`` on some samples show (samples first, as Backend.run_chunked gives them;
    ``image_size``: the input's height and width, where known, to check a detector's boxes against; ``batch_axes``:
    where the model had each output's batch, for the line), with the reason; generic where nothing does."""
    outputs = [np.asarray(o) for o in outputs]
    axes = list(batch_axes) if batch_axes is not None else [0] * len(outputs)
    shapes = [tuple(o.shape) for o in outputs]
    fix = (f"give {NAMED} (a detector: and --postprocess MODULE:FN where its head is none of "
           f"{', '.join(n for n in detect.DECODERS if n != 'scores_boxes')})")
    if axes and axes[0] is None:
        return Inference(Task.GENERIC, f"{_shapes(outputs, axes)}: the first output has no batch axis, so no task "
                                       f"measure reads it sample by sample: compared output by output")
    # One raw head, or scores and boxes: a model of several other outputs names its own task
    looks_detect = bool(detect.candidates(shapes)) and (len(shapes) == 1 or detect.scores_and_boxes(shapes))
    readings = list[detect.Reading]()
    if looks_detect:
        chosen, readings = detect.choose(outputs, image_size)
        if chosen is not None:
            passed = "; ".join(f"not {r.decoder}: {r.evidence}" for r in readings if r is not chosen)
            return Inference(Task.DETECT, f"{_shapes(outputs, axes)} read by the {chosen.decoder} decoder: "
                             f"{chosen.evidence}" + (f" ({passed})" if passed else ""), chosen.decoder)
    if len(outputs) == 1 and (why := sequence.recognised(np.asarray(outputs[0], dtype=np.float64),
                                                          model_shape(shapes[0], axes[0]))):
        return Inference(Task.SEQUENCE, why)
    if looks_detect:
        return Inference(Task.GENERIC, f"{detect.unrecognised(readings)}: compared output by output; {fix}")
    if len(outputs) == 1:
        shape = shapes[0]
        if len(shape) == 4 and shape[1] > 1:
            return _maps(np.asarray(outputs[0], dtype=np.float64), model_shape(shape, axes[0]), fix)
        for task, meaning in _BY_SHAPE.items():
            if MEASURES[task].fits(shape):
                also = ""
                if task is Task.DENSE and restore.looks_like_pixels(np.asarray(outputs[0], np.float64), (1,)):
                    also = " (its values are pixel-like too: --task restore reads it as an image)"
                return Inference(task, f"one output {model_shape(shape, axes[0])}, read as {meaning}{also}")
    if why := heatmap.head([np.asarray(o, dtype=np.float64) for o in outputs]):
        return Inference(Task.HEATMAP, f"{_shapes(outputs, axes)}: {why}", from_values=True)
    return Inference(Task.GENERIC, f"{_shapes(outputs, axes)}: no layout a task measure reads: compared "
                                   f"output by output; {fix}")


def _maps(output: np.ndarray, shown: str, fix: str) -> Inference:
    """One output of several maps [N, C, H, W], read by its values: an image where they are pixels (restore), class
    scores where they are (segment), else generic; the line gives the evidence either way."""
    if why := restore.looks_like_pixels(output):
        return Inference(Task.RESTORE, f"one output {shown}, an image: {why}; judged by PSNR and SSIM against FP32",
                         from_values=True)
    scores, why = segment.class_scores(output)
    if scores:
        return Inference(Task.SEGMENT, f"one output {shown}, read as per-pixel class scores: {why}", from_values=True)
    return Inference(Task.GENERIC, f"one output {shown}: not class scores ({why}) nor pixels: compared output by "
                                   f"output; {fix} (heatmaps of keypoints or centres: --task heatmap)",
                     from_values=True)


def check_fits(task: Task, shapes: Sequence[tuple[int, ...]]) -> None:
    """BadInput when the task's measure cannot read outputs of ``shapes`` (the first one decides, but for a
    detector's scores and boxes): which shape it expected."""
    if task is Task.DETECT and detect.scores_and_boxes(shapes):
        return
    shape = tuple(shapes[0])
    if not MEASURES[task].fits(shape):
        decode = " or give --postprocess MODULE:FN that decodes its outputs into detections," \
            if task is Task.DETECT else ""
        raise BadInput(f"--task {task} does not fit the model's first output, shaped {list(shape)}: {task} expects "
                       f"{MEASURES[task].EXPECTED}. Name the task its outputs have{decode} (--task generic compares "
                       "them without a task figure).")
