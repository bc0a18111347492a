"""The accuracy figures budgets are judged on."""

from __future__ import annotations

import numpy as np

from trtpipe.comparison import compare


def test_a_drop_exactly_at_the_budget_is_within_it() -> None:
    """95 of 100 right against 100 of 100 loses 5.0 points, which a 5-point budget accepts (floating point
    alone gives 5.000000000000004)."""
    labels = np.arange(100) % 10
    reference = np.eye(10, dtype=np.float32)[labels]
    candidate = reference.copy()
    candidate[:5] = np.roll(candidate[:5], 1, axis=1)  # five samples now pick another class
    result = compare(reference, candidate, labels)
    assert result.accuracy == 0.95 and result.reference_accuracy == 1.0
    assert result.accuracy_drop_pp == 5.0
