"""Whether a model's requests can be joined along axis 0 and given their own rows back: what decides that a model
is served with dynamic batching (the batcher itself checks each batch's outputs as well)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trtpipe.embedding import Model


def batches_on_axis_0(model: Model) -> bool:
    """Whether requests can be joined into one batch: every input has a dynamic first axis (an ONNX from elsewhere
    may take a scalar or a fixed-size tensor beside its batched ones: such a model runs each request alone)."""
    return bool(model.inputs) and all(t.shape and not isinstance(t.shape[0], int) for t in model.inputs)


def batch_axis_change(model: Model) -> str | None:
    """Why ``model``'s outputs may not keep its inputs' batch axis, naming the output; None when they keep it.

    A batcher joins requests along axis 0 and gives each its slice of every output, which is right only when each
    output's first axis is the inputs' batch axis. It is not when an output has no axis (a scalar), a fixed first
    dimension, or a first dimension named otherwise than the inputs' (a Reshape to ``[-1, 4]`` gives ``m`` rows
    for ``n``). A first dimension the runtime could not name is given the benefit of the doubt: the batcher checks
    the rows of each batch's outputs before splitting them.
    """
    batch = {t.shape[0] for t in model.inputs if t.shape}
    for output in model.outputs:
        first = output.shape[0] if output.shape else "no axis"
        if first is None or first in batch:
            continue
        what = "is a scalar" if not output.shape else f"has first dimension {first!r}"
        hint = " (if it is the same axis, export it under the inputs' name)" if isinstance(first, str) else ""
        return (f"output '{output.name}' {what}, not the inputs' batch axis "
                f"({', '.join(repr(b) for b in sorted(map(str, batch)))}){hint}")
    return None
