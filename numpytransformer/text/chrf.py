r"""chrF (Popović, 2015): the F-score of character n-grams, sacreBLEU's ``CHRF()`` with its defaults.

Where BLEU (lesson 10, :mod:`numpytransformer.text.bleu`) counts word n-grams and only their
precision, chrF counts the character n-grams (n = 1..6, whitespace removed) of the hypothesis and
the reference and weighs recall as well. A wrong inflection ("Hund" for "Hunde") loses one word
n-gram in BLEU but only a character or two in chrF, which is why chrF tracks human judgement
better for languages with rich morphology such as German.

.. math::

    \mathrm{chrP} = \frac{1}{N'} \sum_n \frac{m_n}{h_n},\qquad
    \mathrm{chrR} = \frac{1}{N'} \sum_n \frac{m_n}{r_n},\qquad
    \mathrm{chrF}_\beta = 100 \cdot \frac{(1 + \beta^2)\,\mathrm{chrP}\,\mathrm{chrR}}
                                        {\beta^2\,\mathrm{chrP} + \mathrm{chrR}}

where, summed over the corpus, :math:`h_n` and :math:`r_n` are the hypothesis and reference
n-grams of order n, :math:`m_n` the matched ones (each counted at most as often as on the other
side), and the means run over the :math:`N'` orders that both sides have; :math:`\beta = 2`
weighs recall twice as much as precision.

The statistics of each sentence (:func:`chrf_statistics`) add up over the corpus, and the score
is a function of their sum (:func:`chrf_from_statistics`): that is what
:func:`numpytransformer.sweep.paired_bootstrap` resamples.
"""
from collections import Counter
from typing import Sequence

import numpy as np

from ..errors import NumpyTransformerError

__all__ = ["CHAR_ORDER", "BETA", "chrf_statistics", "chrf_from_statistics", "corpus_chrf"]

#: The longest character n-gram, and the weight of recall: sacreBLEU's and the paper's defaults.
CHAR_ORDER = 6
BETA = 2.0


def chrf_statistics(hypothesis: str, reference: str, char_order: int = CHAR_ORDER) -> np.ndarray:
    """The sufficient statistics of one sentence pair.

    Parameters
    ----------
    hypothesis, reference : str
        One system output and its reference; whitespace is removed before counting.
    char_order : int
        The longest n-gram, N.

    Returns
    -------
    int64 ndarray (N, 3)
        Row n - 1 holds :math:`(h_n, r_n, m_n)`: the hypothesis's n-grams, the reference's, and
        those they share, :math:`m_n = \\sum_g \\min(\\text{count}_h(g), \\text{count}_r(g))`.
    """
    hyp, ref = "".join(hypothesis.split()), "".join(reference.split())
    stats = np.zeros((char_order, 3), dtype=np.int64)
    ### BEGIN SOLUTION 10.1: per order n, the counts of the hypothesis's and the reference's character n-grams and of the matched ones
    for n in range(1, char_order + 1):
        h = Counter(hyp[i:i + n] for i in range(len(hyp) - n + 1))  # each n-gram with its count
        r = Counter(ref[i:i + n] for i in range(len(ref) - n + 1))
        matched = sum((h & r).values())  # Counter's & keeps the smaller count of each n-gram: the clipping
        stats[n - 1] = (sum(h.values()), sum(r.values()), matched)
    ### END SOLUTION
    return stats


def chrf_from_statistics(stats: np.ndarray, beta: float = BETA) -> float:
    """chrF in [0, 100] from statistics summed over a corpus (or of one sentence).

    ``stats``: an (N, 3) array of :math:`(h_n, r_n, m_n)`, as :func:`chrf_statistics` gives and
    ``sum(axis=0)`` adds up. An order that one side lacks (a sentence shorter than n characters)
    is left out of the means; with no order left the score is 0.
    """
    stats = np.asarray(stats)
    ### BEGIN SOLUTION 10.2: the mean precision and recall over the orders both sides have, then their F-beta score in percent
    both = (stats[:, 0] > 0) & (stats[:, 1] > 0)
    if not both.any():
        return 0.0
    precision = float(np.mean(stats[both, 2] / stats[both, 0]))
    recall = float(np.mean(stats[both, 2] / stats[both, 1]))
    if precision + recall == 0:
        return 0.0
    return 100 * (1 + beta ** 2) * precision * recall / (beta ** 2 * precision + recall)
    ### END SOLUTION


def corpus_chrf(hypotheses: Sequence[str], references: Sequence[str], char_order: int = CHAR_ORDER,
                beta: float = BETA) -> float:
    """Corpus chrF: the statistics of every sentence summed, then scored once (not a mean of
    sentence scores). The same number as ``sacrebleu.metrics.CHRF().corpus_score`` with one
    reference per hypothesis.

    Parameters
    ----------
    hypotheses : list of str
        System outputs, one per segment.
    references : list of str
        One reference per hypothesis.
    char_order : int
        Longest character n-gram, from 1 to 20 (6: chrF).
    beta : float
        Weight of recall against precision, > 0 (2: chrF2, the usual chrF).
    """
    for name, seq in (("hypotheses", hypotheses), ("references", references)):
        if isinstance(seq, str) or not isinstance(seq, (list, tuple)):
            raise NumpyTransformerError(f"{name} must be a list of str, one per segment, got {type(seq).__name__}")
        bad = next((i for i, s in enumerate(seq) if not isinstance(s, str)), None)
        if bad is not None:
            raise NumpyTransformerError(f"{name}[{bad}] must be a str, got {type(seq[bad]).__name__}")
    if len(hypotheses) != len(references):
        raise NumpyTransformerError(f"hypotheses and references must pair up: {len(hypotheses)} hypotheses, "
                                    f"{len(references)} references")
    if isinstance(char_order, bool) or not isinstance(char_order, int) or not 1 <= char_order <= 20:
        raise NumpyTransformerError(f"char_order must be a whole number from 1 to 20, got {char_order!r}")
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 < beta < float("inf"):
        raise NumpyTransformerError(f"beta must be a finite number > 0, got {beta!r}")
    total = np.zeros((char_order, 3), dtype=np.int64)
    for hyp, ref in zip(hypotheses, references):
        total += chrf_statistics(hyp, ref, char_order)
    return chrf_from_statistics(total, beta)
