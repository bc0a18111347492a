"""Sequence recognizers trained with CTC (a text line's characters): per-timestep class scores ``[N, T, C]``
(probabilities, log-probabilities or logits; a time-major ``[T, N, C]`` output, as PyTorch's CTC loss takes it,
arrives here samples first too, joined on its batch axis by trtpipe.runtime.batch_axes) with one class the *blank*,
read by CTC's greedy decoding: each timestep's best class, repeats collapsed, blanks dropped (Graves et al., 2006;
PaddleOCR's and CRNN's decoding).

Two figures against the reference's own reading: **exact-line agreement**, the share of lines the candidate reads
exactly as FP32 does (the headline: a line with one character wrong is a wrong line), with Wilson's interval over
lines; and **per-character agreement**, 1 - the edit distance between the two readings over the longer one's
length, pooled over lines, its interval the bootstrap over lines at least as wide as Wilson's (characters of one
line are not independent: the line is the unit). Labels are not read: the measure is agreement with FP32.

The blank is the class CTC emits between characters, so it is the best class at many timesteps: the first or the
last class, whichever is the argmax more often in the reference (PaddleOCR and CRNN put it first).
"""

from __future__ import annotations

import numpy as np

from trtpipe.errors import BadInput
from trtpipe.intervals import wilson
from trtpipe.tasks.base import Fidelity, pooled_share
from trtpipe.vocab import Task

EXPECTED = ("[N, T, C] per-timestep class scores of a CTC recognizer (C > 2, the blank class first or last; a "
            "time-major [T, N, C] output is read on its batch axis)")
# Evidence of a CTC head (see :func:`recognised`): at least this many classes (ten digits and the blank)...
MIN_CLASSES = 11
# ... and the blank the best class at this share of the timesteps at least (PP-OCRv4 reading a line: about half).
BLANK_SHARE = 0.25
ROW_SUM_TOLERANCE = 1e-2


def fits(shape: tuple[int, ...]) -> bool:
    return len(shape) == 3 and shape[1] >= 1 and shape[2] > 2


def blank_class(scores: np.ndarray) -> int:
    """The blank: the first or the last class, whichever is the best class at more timesteps (the first on a tie)."""
    best = scores.argmax(-1)
    return 0 if (best == 0).sum() >= (best == scores.shape[-1] - 1).sum() else scores.shape[-1] - 1


def greedy(scores: np.ndarray, blank: int) -> list[tuple[int, ...]]:
    """CTC's greedy decoding of ``scores`` [N, T, C]: per line, each timestep's best class, repeats collapsed,
    blanks dropped."""
    lines = []
    for best in scores.argmax(-1):
        changed = np.concatenate([[True], best[1:] != best[:-1]])
        lines.append(tuple(int(c) for c in best[changed & (best != blank)]))
    return lines


def edit_distance(first: tuple[int, ...], second: tuple[int, ...]) -> int:
    """Levenshtein's distance: the fewest insertions, deletions and substitutions turning one into the other."""
    previous = list(range(len(second) + 1))
    for i, a in enumerate(first, 1):
        current = [i]
        for j, b in enumerate(second, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a != b)))
        previous = current
    return previous[-1]


def recognised(scores: np.ndarray, shape: str | None = None) -> str | None:
    """Why one output ``scores`` (samples first: ``[N, T, C]``, however the model lays it out; ``shape``: the
    model's own layout, for the line) reads as a CTC recognizer's, or None where the evidence is not there: a rank-3
    output of many classes per timestep, each timestep a distribution over the classes (or logits), and an edge
    class the best at many timesteps (the blank) while the other timesteps' best classes vary (characters), not
    one fixed class as a box head's coordinate columns would be."""
    if scores.ndim != 3 or scores.shape[2] < MIN_CLASSES or scores.shape[1] < 2 or not np.isfinite(scores).all():
        return None
    if np.mean(scores.max(-1) - scores.min(-1) > 1e-6) < 0.5:
        return None  # flat rows: no class is the best, so none is a blank
    sums = scores.sum(-1)
    if scores.min() >= 0 and scores.max() <= 1 and np.abs(sums - 1).max() <= ROW_SUM_TOLERANCE:
        kind = "probabilities"
    elif scores.max() <= 0 and np.abs(np.log(np.exp(scores).sum(-1))).max() <= ROW_SUM_TOLERANCE:
        kind = "log-probabilities"
    else:
        kind = "logits"
    blank = blank_class(scores)
    best = scores.argmax(-1).ravel()
    share = float((best == blank).mean())
    if share < BLANK_SHARE:
        return None
    others = best[best != blank]
    if kind == "logits" and len(others) and np.bincount(others).max() > 0.5 * len(others):
        return None  # one fixed class wins where the blank does not: a box head's column, not characters
    return (f"output {shape or list(scores.shape)} holds {kind} over {scores.shape[2]} classes at each of "
            f"{scores.shape[1]} timesteps, class {blank} (the CTC blank) the best at {100 * share:.0f}% of them: a CTC "
            "recognizer, read by greedy decoding")


def measure(reference: np.ndarray, candidate: np.ndarray, labels: object | None) -> Fidelity:
    if labels is not None:
        raise BadInput("The sequence measure reads no labels (it judges the lines each model reads against FP32's "
                       "own reading): give data without labels, or --task generic.")
    if reference.ndim != 3 or reference.shape[2] < 3:
        raise BadInput(f"The sequence measure expects {EXPECTED}; the model's output is {list(reference.shape)}.")
    blank = blank_class(reference)
    read, candidate_read = greedy(reference, blank), greedy(candidate, blank)
    exact = np.array([a == b for a, b in zip(read, candidate_read, strict=True)])
    longer = np.array([max(len(a), len(b)) for a, b in zip(read, candidate_read, strict=True)], dtype=np.float64)
    distance = np.array([edit_distance(a, b) for a, b in zip(read, candidate_read, strict=True)], dtype=np.float64)
    characters, characters_interval, _ = pooled_share(longer - distance, longer)
    figures = {"char_agreement": characters, "blank_class": float(blank),
               "reference_chars_per_line": float(np.mean([len(line) for line in read]))}
    return Fidelity(Task.SEQUENCE, float(exact.mean()), "exact-line agreement", figures,
                    agreement_interval=wilson(int(exact.sum()), len(exact)),
                    agreement_on=lambda i: float(exact[i].mean()),
                    figure_intervals={"char_agreement": characters_interval})
