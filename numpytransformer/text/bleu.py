r"""Corpus BLEU (Papineni et al., 2002), written out so a student can follow it.

BLEU compares n-grams (n = 1..4) of the system output with those of the
references, over the whole corpus at once:

.. math::

    \mathrm{BLEU} = 100 \cdot \mathrm{BP} \cdot \exp\Big(\tfrac14 \sum_{n=1}^{4} \log p_n\Big),
    \qquad \mathrm{BP} = \min\big(1,\; e^{\,1 - r/c}\big)

where :math:`p_n` is the clipped n-gram precision (each hypothesis n-gram counts
at most as often as it occurs in a reference), :math:`c` the total hypothesis
length and :math:`r` the total reference length.

Two flavours, because papers and tutorials report two different numbers:

* :func:`corpus_bleu` is sacreBLEU's ``corpus_bleu`` with its defaults (the
  ``13a`` tokenizer of mteval-v13a.pl on detokenized text, mixed case, "exp"
  smoothing). This is the number to put in a table.
* :func:`bleu_tokens` is what ``torchtext.data.metrics.bleu_score`` computes on
  already tokenized, lower-cased word lists, the way the PyTorch tutorials report
  Multi30K. It is usually several points higher than sacreBLEU on the same output.
"""

import math
import re
from collections import Counter
from typing import List, NamedTuple

__all__ = ["BLEUResult", "tokenize_13a", "corpus_bleu", "bleu_tokens"]

MAX_ORDER = 4


class BLEUResult(NamedTuple):
    """A corpus BLEU score and the statistics behind it.

    Attributes
    ----------
    score : float
        BLEU in [0, 100].
    precisions : list of float
        The n-gram precisions :math:`p_1..p_4` in percent (smoothed where the
        method smooths).
    bp : float
        Brevity penalty in [0, 1].
    sys_len : int
        Total hypothesis length in tokens.
    ref_len : int
        Total (effective) reference length in tokens.
    """

    score: float
    precisions: List[float]
    bp: float
    sys_len: int
    ref_len: int


# --------------------------------------------------------------------------- #
# The 13a tokenizer
# --------------------------------------------------------------------------- #

# ASCII symbols that always become tokens of their own. Missing on purpose:
# the apostrophe (so "don't" stays whole), and "," "." "-", which get the
# context-dependent rules below (so "2.00", "10,000" and "T-shirt" stay whole).
_SYMBOLS = " !\"#$%&()*+/:;<=>?@[\\]^_`{|}~"
_SYMBOL_RE = re.compile("([" + re.escape(_SYMBOLS) + "])")
_POINT_AFTER_NONDIGIT_RE = re.compile(r"([^0-9])([.,])")
_POINT_BEFORE_NONDIGIT_RE = re.compile(r"([.,])([^0-9])")
_DASH_AFTER_DIGIT_RE = re.compile(r"([0-9])(-)")


def tokenize_13a(line):
    """Tokenize a line like mteval-v13a.pl, as sacreBLEU's default ``13a`` does.

    Steps (in this order; the order matters for strings such as ``"a.,b"``):

    1. drop ``<skipped>``, join words hyphenated across a line break, turn line
       breaks into spaces, and unescape ``&quot; &amp; &lt; &gt;``;
    2. put spaces around every ASCII symbol except ``' , . -``;
    3. split off ``.`` and ``,`` unless they sit between two digits
       (first where a non-digit precedes them, then where a non-digit follows);
    4. split a ``-`` that follows a digit;
    5. collapse whitespace.

    Parameters
    ----------
    line : str
        A detokenized sentence.

    Returns
    -------
    str
        Tokens separated by single spaces.

    Examples
    --------
    >>> tokenize_13a('A man, in a "blue" T-shirt, paid $2.50.')
    'A man , in a " blue " T-shirt , paid $ 2.50 .'
    """
    if not isinstance(line, str):
        raise TypeError(f"line must be a str, got {type(line).__name__}")
    line = line.replace("<skipped>", "").replace("-\n", "").replace("\n", " ")
    if "&" in line:
        # &amp; last, so that "&amp;quot;" becomes "&quot;" and not '"'.
        for escaped, char in (("&quot;", '"'), ("&amp;", "&"), ("&lt;", "<"), ("&gt;", ">")):
            line = line.replace(escaped, char)
    # The padding spaces give the point/comma rules a non-digit at both ends.
    line = " " + line + " "
    line = _SYMBOL_RE.sub(r" \1 ", line)
    line = _POINT_AFTER_NONDIGIT_RE.sub(r"\1 \2 ", line)
    line = _POINT_BEFORE_NONDIGIT_RE.sub(r" \1 \2", line)
    line = _DASH_AFTER_DIGIT_RE.sub(r"\1 \2 ", line)
    return " ".join(line.split())


# --------------------------------------------------------------------------- #
# Sufficient statistics
# --------------------------------------------------------------------------- #

def _ngrams(tokens, max_order=MAX_ORDER):
    """Counter of all n-grams, 1 <= n <= max_order, as tuples."""
    counts = Counter()
    for n in range(1, max_order + 1):
        for i in range(len(tokens) - n + 1):
            counts[tuple(tokens[i:i + n])] += 1
    return counts


def _segment_stats(hyp, refs, prefer_shorter):
    """Match statistics of one hypothesis against its references.

    Parameters
    ----------
    hyp : list of str
    refs : list of list of str
        At least one reference.
    prefer_shorter : bool
        How to break a tie between two references equally close in length to
        the hypothesis: the shorter one (sacreBLEU) or the first listed
        (torchtext).

    Returns
    -------
    hyp_len, ref_len : int
    correct, total : list of int
        Clipped matches and hypothesis n-grams, per order.
    """
    hyp_len = len(hyp)
    ref_lens = [len(r) for r in refs]
    if prefer_shorter:
        ref_len = min(ref_lens, key=lambda r: (abs(hyp_len - r), r))
    else:
        ref_len = min(ref_lens, key=lambda r: abs(hyp_len - r))

    correct = [0] * MAX_ORDER
    total = [0] * MAX_ORDER
    # With several references an n-gram may match as often as its largest
    # count in any single reference.
    max_ref = Counter()
    for ref in refs:
        for gram, c in _ngrams(ref).items():
            if c > max_ref[gram]:
                max_ref[gram] = c

    for gram, c in _ngrams(hyp).items():
        n = len(gram) - 1
        total[n] += c
        correct[n] += min(c, max_ref.get(gram, 0))
    return hyp_len, ref_len, correct, total


def _corpus_stats(hyps, refs_per_hyp, prefer_shorter):
    sys_len = ref_len = 0
    correct = [0] * MAX_ORDER
    total = [0] * MAX_ORDER
    for hyp, refs in zip(hyps, refs_per_hyp):
        h, r, c, t = _segment_stats(hyp, refs, prefer_shorter)
        sys_len += h
        ref_len += r
        for n in range(MAX_ORDER):
            correct[n] += c[n]
            total[n] += t[n]
    return sys_len, ref_len, correct, total


# --------------------------------------------------------------------------- #
# sacreBLEU-compatible corpus BLEU
# --------------------------------------------------------------------------- #

def _score_sacrebleu(correct, total, sys_len, ref_len):
    """BLEU from corpus statistics with sacreBLEU's default "exp" smoothing.

    The smoothing (NIST's, from mteval-v13a.pl) only acts on an order n with
    zero matches: its precision becomes :math:`1 / (2^k \\cdot \\mathrm{total}_n)`,
    where k counts the zero-match orders so far (1 for the first). Edge cases,
    as in sacreBLEU:

    * no match at any order: score 0 and all precisions 0;
    * an order with no hypothesis n-grams at all (every hypothesis shorter
      than n): that precision and the higher ones stay 0, so the score is 0;
    * empty output: ``bp = 0``.
    """
    bp = 1.0
    if sys_len < ref_len:
        bp = math.exp(1.0 - ref_len / sys_len) if sys_len > 0 else 0.0

    precisions = [0.0] * MAX_ORDER
    if not any(correct):
        return BLEUResult(0.0, precisions, bp, sys_len, ref_len)

    halvings = 1.0
    for n in range(MAX_ORDER):
        if total[n] == 0:
            break
        if correct[n] == 0:
            halvings *= 2.0
            precisions[n] = 100.0 / (halvings * total[n])
        else:
            precisions[n] = 100.0 * correct[n] / total[n]

    if min(precisions) == 0.0:
        score = 0.0
    else:
        score = bp * math.exp(sum(math.log(p) for p in precisions) / MAX_ORDER)
    return BLEUResult(score, precisions, bp, sys_len, ref_len)


def _check_str_list(seq, name):
    if isinstance(seq, str) or not hasattr(seq, "__len__"):
        raise TypeError(f"{name} must be a list of str, got {type(seq).__name__}")
    for i, s in enumerate(seq):
        if not isinstance(s, str):
            raise TypeError(f"{name}[{i}] must be a str, got {type(s).__name__}")


def corpus_bleu(hypotheses, references, tokenize="13a", lowercase=False):
    """Corpus BLEU, the same number as ``sacrebleu.corpus_bleu`` with its defaults.

    Each line is lower-cased (if asked), stripped on the right, tokenized, and
    split on whitespace; then n-gram statistics are summed over the corpus and
    scored as in :func:`_score_sacrebleu`. With several references, each
    hypothesis n-gram is clipped by its largest count in any one reference, and
    the reference length used for the brevity penalty is the one closest to the
    hypothesis length (the shorter on a tie).

    Parameters
    ----------
    hypotheses : list of str
        Detokenized system outputs, one per segment.
    references : list of str, or list of list of str
        Either one reference per hypothesis, or several reference *streams* laid
        out as sacreBLEU takes them: ``references[k][i]`` is the k-th reference
        of hypothesis ``i``. In a stream, None means "no k-th reference here".
    tokenize : {"13a", "none"}, optional
        ``"13a"``: :func:`tokenize_13a`; ``"none"``: split on whitespace only.
    lowercase : bool, optional
        Case-insensitive BLEU.

    Returns
    -------
    BLEUResult
    """
    if tokenize not in ("13a", "none"):
        raise ValueError(f"tokenize must be '13a' or 'none', got {tokenize!r}")
    _check_str_list(hypotheses, "hypotheses")
    if len(hypotheses) == 0:
        raise ValueError("hypotheses must not be empty: BLEU of an empty corpus is undefined")
    if isinstance(references, str) or not hasattr(references, "__len__"):
        raise TypeError(
            f"references must be a list of str or a list of reference streams, "
            f"got {type(references).__name__}"
        )

    if all(isinstance(r, str) for r in references):
        streams = [references]
    else:
        streams = references
    for k, stream in enumerate(streams):
        if isinstance(stream, str) or not hasattr(stream, "__len__"):
            raise TypeError(
                f"references[{k}] must be a list of str (a reference stream), "
                f"got {type(stream).__name__}"
            )
        if len(stream) != len(hypotheses):
            where = "references" if stream is references else f"references[{k}]"
            raise ValueError(
                f"hypotheses and {where} must have the same length, got "
                f"{len(hypotheses)} hypotheses and {len(stream)} references"
            )
        for i, s in enumerate(stream):
            if s is not None and not isinstance(s, str):
                name = f"references[{i}]" if stream is references else f"references[{k}][{i}]"
                raise TypeError(f"{name} must be a str, got {type(s).__name__}")

    def prep(line):
        if lowercase:
            line = line.lower()
        line = line.rstrip()
        if tokenize == "13a":
            line = tokenize_13a(line)
        return line.split()

    hyps = [prep(h) for h in hypotheses]
    refs_per_hyp = []
    for i, refs in enumerate(zip(*streams)):
        refs = [prep(r) for r in refs if r is not None]
        if not refs:
            raise ValueError(f"hypothesis {i} has no reference (all None in references)")
        refs_per_hyp.append(refs)

    sys_len, ref_len, correct, total = _corpus_stats(hyps, refs_per_hyp, prefer_shorter=True)
    return _score_sacrebleu(correct, total, sys_len, ref_len)


# --------------------------------------------------------------------------- #
# Token-level BLEU, the PyTorch-tutorial way
# --------------------------------------------------------------------------- #

def bleu_tokens(hyp_token_lists, ref_token_lists, lowercase=True):
    """Corpus BLEU on word tokens, as ``torchtext.data.metrics.bleu_score``.

    No smoothing: if some order has no match at all, the score is 0. The
    reference length is the one closest to the hypothesis length (the first
    listed on a tie), and ``BP = exp(min(0, 1 - r/c))``. Unlike torchtext the
    score is in [0, 100].

    Parameters
    ----------
    hyp_token_lists : list of list of str
        Tokenized hypotheses.
    ref_token_lists : list of list of str, or list of list of list of str
        For each hypothesis, its tokenized reference, or a list of them (the
        torchtext layout: ``ref_token_lists[i][k]`` is the k-th reference of
        hypothesis ``i``).
    lowercase : bool, optional
        Lower-case every token first; the tutorials' number is lower-cased.

    Returns
    -------
    BLEUResult
        ``precisions`` are the plain clipped precisions in percent.
    """
    for name, seq in (("hyp_token_lists", hyp_token_lists), ("ref_token_lists", ref_token_lists)):
        if isinstance(seq, str) or not hasattr(seq, "__len__"):
            raise TypeError(f"{name} must be a list of token lists, got {type(seq).__name__}")
    if len(hyp_token_lists) != len(ref_token_lists):
        raise ValueError(
            f"hyp_token_lists and ref_token_lists must have the same length, got "
            f"{len(hyp_token_lists)} and {len(ref_token_lists)}"
        )

    def prep(tokens, name):
        if isinstance(tokens, str) or not hasattr(tokens, "__len__"):
            raise TypeError(f"{name} must be a list of str tokens, got {type(tokens).__name__}")
        for j, t in enumerate(tokens):
            if not isinstance(t, str):
                raise TypeError(f"{name}[{j}] must be a str token, got {type(t).__name__}")
        return [t.lower() for t in tokens] if lowercase else list(tokens)

    hyps = [prep(h, f"hyp_token_lists[{i}]") for i, h in enumerate(hyp_token_lists)]
    refs_per_hyp = []
    for i, refs in enumerate(ref_token_lists):
        # A list of token lists is several references; a list of str is one.
        if len(refs) and not isinstance(refs, str) and all(
                not isinstance(r, str) and hasattr(r, "__len__") for r in refs):
            refs_per_hyp.append([prep(r, f"ref_token_lists[{i}][{k}]") for k, r in enumerate(refs)])
        else:
            refs_per_hyp.append([prep(refs, f"ref_token_lists[{i}]")])

    sys_len, ref_len, correct, total = _corpus_stats(hyps, refs_per_hyp, prefer_shorter=False)
    precisions = [100.0 * c / t if t else 0.0 for c, t in zip(correct, total)]
    if min(correct) == 0:
        return BLEUResult(0.0, precisions, _plain_bp(sys_len, ref_len), sys_len, ref_len)
    bp = _plain_bp(sys_len, ref_len)
    score = 100.0 * bp * math.exp(sum(math.log(c / t) for c, t in zip(correct, total)) / MAX_ORDER)
    return BLEUResult(score, precisions, bp, sys_len, ref_len)


def _plain_bp(sys_len, ref_len):
    if sys_len == 0:
        return 0.0 if ref_len > 0 else 1.0
    return math.exp(min(0.0, 1.0 - ref_len / sys_len))
