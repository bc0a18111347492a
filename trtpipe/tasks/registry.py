"""Which measure judges which task, and the task a model's outputs imply when the user names none.

A new task measure is one module here (``EXPECTED``, ``fits(shape)``, ``measure(reference, candidate, labels)``)
and one line in MEASURES; the comparison, and so every stage that reports or gates accuracy, picks it up.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

from trtpipe.errors import BadInput
from trtpipe.tasks import classify, dense, detect, embed, generic, segment
from trtpipe.vocab import Task

MEASURES: dict[Task, ModuleType] = {
    Task.CLASSIFY: classify, Task.DETECT: detect, Task.SEGMENT: segment, Task.DENSE: dense, Task.EMBED: embed,
    Task.GENERIC: generic,
}
# Tried in this order on a single output; [N, C] is read as class scores (name --task embed for embeddings).
_INFERRED = (Task.CLASSIFY, Task.DETECT, Task.SEGMENT, Task.DENSE)


def infer_task(shapes: list[tuple[int, ...]]) -> Task:
    """The task a model's output shapes imply where that is unambiguous (one output of a known layout, or a
    detector's per-anchor class scores [N, A, C] and boxes [N, A, 4]), else generic."""
    if detect.scores_and_boxes(shapes):
        return Task.DETECT
    if len(shapes) != 1:
        return Task.GENERIC
    return next((task for task in _INFERRED if MEASURES[task].fits(tuple(shapes[0]))), Task.GENERIC)


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
