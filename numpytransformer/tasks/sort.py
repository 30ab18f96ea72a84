"""Sorting: the smallest example of adding a task.

It reuses everything of :class:`~numpytransformer.tasks.reverse.ReversalTask` (data,
model, decoding, metrics, the command line) and changes only what the output is. With
one line in :data:`~numpytransformer.tasks.base.TASKS` it becomes ``train sort``.
"""
import numpy as np

from .reverse import ReversalTask


class SortTask(ReversalTask):
    """Sort sequences of integer symbols, e.g. '3 5 4 2 1' -> '1 2 3 4 5'."""

    name = "sort"
    summary = "sequence sorting (the example of adding a task)"

    def target(self, seq: np.ndarray) -> np.ndarray:
        return np.sort(seq)
