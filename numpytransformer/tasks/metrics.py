"""Sequence metrics: token accuracy and exact match."""
from __future__ import annotations

from typing import Dict, Sequence

__all__ = ["sequence_metrics"]


def sequence_metrics(predictions: Sequence[Sequence[int]], references: Sequence[Sequence[int]]) -> Dict[str, float]:
    """Token accuracy and sequence exact match of decoded outputs.

    ``token_accuracy`` counts reference positions whose predicted token is right,
    divided by ``sum(max(len(pred), len(ref)))``, so a prediction that is too long or
    too short loses the positions it gets wrong. ``exact_match`` is the fraction of
    sequences predicted exactly (same length, same tokens).
    """
    if len(predictions) != len(references):
        raise ValueError(f"predictions ({len(predictions)}) and references ({len(references)}) differ in length")
    correct = total = exact = 0
    for p, r in zip(predictions, references):
        p, r = list(p), list(r)
        correct += sum(a == b for a, b in zip(p, r))
        total += max(len(p), len(r))
        exact += p == r
    n = max(len(references), 1)
    return {"token_accuracy": correct / max(total, 1), "exact_match": exact / n}
