"""Autoregressive decoding: batched greedy search and beam search, both stopping at EOS.

Both run the encoder once and then feed the decoder one token per step. With
``use_cache=True`` each decoder self-attention keeps the keys and values of the
positions already decoded (a *KV cache*), so a step costs one position of work
instead of re-running the whole prefix; the outputs are identical.

Both can also refuse to repeat themselves (``no_repeat_ngram_size``, fairseq's and Hugging Face's
option): a token that would complete an n-gram already in the hypothesis is never chosen. And both
can be held to a least length (``min_len``, fairseq's ``--min-len``): EOS is never chosen earlier.
"""
from __future__ import annotations

from typing import List

import numpy as np

from ..errors import NumpyTransformerError
from ..core.softmax import log_softmax
from ..validation import check_bool, check_int, check_real, inputs_checked

__all__ = ["greedy_decode", "beam_search", "log_softmax"]  # log_softmax from softmax.py, kept importable here


class _eval_mode:
    """Decode with dropout off, and give the model back in the mode it was in."""

    def __init__(self, model):
        self.model = model

    def __enter__(self):
        self.was_training = self.model.training
        self.model.eval()

    def __exit__(self, *exc):
        self.model.train(self.was_training)
        return False


def _forbid(logits: np.ndarray, *ids: int) -> np.ndarray:
    """Never generate these tokens (pad, BOS): the cached and uncached decoders only agree on
    prefixes without pad, and neither token belongs inside an output."""
    logits[..., list(ids)] = -np.inf
    return logits


def _block_repeats(logits: np.ndarray, seqs: np.ndarray, n: int) -> np.ndarray:
    """Ban the tokens that would repeat an n-gram: sibling of lesson 9 §2's greedy loop, whose
    ``_forbid`` bans tokens everywhere, where this bans them per hypothesis.

    For a hypothesis :math:`y_1..y_t`, token v is banned when
    :math:`(y_{t-n+2}, \\dots, y_t, v) = (y_{i}, \\dots, y_{i+n-1})` for some earlier i: whatever
    followed an earlier occurrence of the last n - 1 tokens cannot follow them again (n = 1 bans
    every token already generated).

    Parameters
    ----------
    logits : float ndarray (R, V)
        Scores of the next token of R hypotheses; banned entries become -inf, in place.
    seqs : int ndarray (R, L)
        The R hypotheses so far, BOS first.
    n : int
        The n-gram size; 0 bans nothing.

    Returns
    -------
    ``logits``
    """
    if n == 0:
        return logits
    ### BEGIN SOLUTION 9.1: for each hypothesis, every token that followed an earlier occurrence of its last n - 1 tokens, banned
    for row, hyp in zip(logits, seqs[:, 1:].tolist()):  # BOS is never generated, so never part of a repeat
        t = len(hyp)
        last = hyp[t - n + 1:] if n > 1 else []
        for i in range(t - n + 1):  # every n-gram (y_i .. y_{i+n-1}) already in the hypothesis
            if hyp[i:i + n - 1] == last:
                row[hyp[i + n - 1]] = -np.inf
    ### END SOLUTION
    return logits


def _ban_early_eos(logits: np.ndarray, t: int, min_len: int, eos_id: int) -> np.ndarray:
    """Forbid EOS while the outputs are shorter than ``min_len``: sibling of lesson 9 §2's ``_forbid``,
    which bans tokens at every step, where this bans one token at the first steps only.

    At step t (from 0) each output holds t tokens, so an EOS chosen now would end it at length t:

    .. math:: z_{\\text{EOS}} \\leftarrow -\\infty \\quad \\text{while } t < \\text{min\\_len}

    Parameters
    ----------
    logits : float ndarray (R, V)
        Scores (or log-probabilities) of the next token of R hypotheses; changed in place.
    t : int
        The step: tokens generated so far.
    min_len, eos_id : int

    Returns
    -------
    logits, with EOS at -inf while ``t < min_len``.
    """
    if not min_len:  # off: decoding without a least length bans nothing
        return logits
    ### BEGIN SOLUTION 9.2: while the outputs hold fewer than min_len tokens, EOS's score set to -inf (in place)
    if t < min_len:
        logits[:, eos_id] = -np.inf
    ### END SOLUTION
    return logits


def _top_k(cand: np.ndarray, K: int) -> np.ndarray:
    """Per row, the indices of the K largest values, best first, ties to the lower index:
    ``np.argsort(-cand, axis=1, kind="stable")[:, :K]`` without sorting the whole row
    (K * V candidates a row; the full sort was 60% of beam search's time)."""
    kth = -np.partition(-cand, K - 1, axis=1)[:, K - 1]  # (B,) the K-th best value
    top = np.empty((cand.shape[0], K), dtype=np.int64)
    for b, row in enumerate(cand):
        idx = np.flatnonzero(row >= kth[b])  # the K best and every tie with the K-th, in index order
        top[b] = idx[np.argsort(-row[idx], kind="stable")[:K]]
    return top


def _strip(row: np.ndarray, eos_id: int) -> List[int]:
    """Tokens up to (not including) the first EOS."""
    out = []
    for t in row:
        if t == eos_id:
            break
        out.append(int(t))
    return out


def _check_args(model, max_len, bos_id, eos_id) -> tuple:
    """The arguments both searches share; bad ones are a NumpyTransformerError naming them."""
    from .ensemble import Ensemble
    from .models import Transformer  # here, not at the top: models.py is the lower layer

    if not isinstance(model.models[0] if isinstance(model, Ensemble) else model, Transformer):
        raise NumpyTransformerError(f"model must be an encoder-decoder Transformer or an Ensemble of them, got "
                                    f"{type(model).__name__}")
    max_len = check_int(max_len, "max_len", 1)
    V, pad = model.cfg.tgt_vocab_size, model.cfg.pad_id
    bos_id = check_int(bos_id, "bos_id", 0, V - 1)
    eos_id = check_int(eos_id, "eos_id", 0, V - 1)
    if eos_id in (bos_id, pad):
        raise NumpyTransformerError(f"eos_id={eos_id} must differ from bos_id={bos_id} and the pad id {pad}, "
                                    "which are never generated")
    return max_len, bos_id, eos_id


def greedy_decode(model, src: np.ndarray, max_len: int, bos_id: int = 1, eos_id: int = 2,
                  use_cache: bool = True, no_repeat_ngram_size: int = 0, min_len: int = 0) -> List[List[int]]:
    """Pick the most likely token at every step, for a whole batch at once.

    Parameters
    ----------
    model : Transformer (switched to eval mode while decoding, then restored)
    src : int ndarray (B, S), padded with the model's pad id
    max_len : int
        Most tokens generated per sequence (EOS included); at most the config's ``max_len`` are.
    bos_id, eos_id : int
        Target-vocabulary ids; EOS differs from BOS and from the pad id.
    use_cache : bool
        Reuse the decoder's keys and values (fast), or recompute the prefix each step.
    no_repeat_ngram_size : int
        n > 0: never complete an n-gram that the output already holds; 0 (the default): off.
    min_len : int
        No EOS before this many tokens (at most ``max_len``); 0 (the default): off.

    Returns
    -------
    list of B token lists, without BOS and EOS.
    """
    max_len, bos_id, eos_id = _check_args(model, max_len, bos_id, eos_id)
    use_cache = check_bool(use_cache, "use_cache")
    no_repeat = check_int(no_repeat_ngram_size, "no_repeat_ngram_size", 0, 1000)
    min_len = check_int(min_len, "min_len", 0, max_len)
    with _eval_mode(model):
        memory, src_mask = model.encode(src)  # checks src
        with inputs_checked():  # the steps below reuse checked values: no check per step
            return _greedy(model, memory, src_mask, max_len, bos_id, eos_id, use_cache, no_repeat, min_len)


def _greedy(model, memory, src_mask, max_len, bos_id, eos_id, use_cache, no_repeat=0, min_len=0):
    B = memory.shape[0]
    max_len = min(max_len, model.cfg.max_len)
    caches = [{} for _ in range(model.cfg.n_decoder_layers)]  # one KV cache per decoder layer, filled by the model
    ys = np.full((B, 1), bos_id, dtype=np.int64)
    done = np.zeros(B, dtype=bool)
    for t in range(max_len):
        if use_cache:
            logits = model._decode_step(ys[:, -1:], memory, src_mask, caches, position=t)[:, -1]
        else:
            logits = model._decode(ys, memory, src_mask)[:, -1]  # (B, V), the last position only
        _forbid(logits, model.cfg.pad_id, bos_id)
        _block_repeats(logits, ys, no_repeat)
        _ban_early_eos(logits, t, min_len, eos_id)
        nxt = np.where(done, eos_id, logits.argmax(axis=-1))
        ys = np.concatenate([ys, nxt[:, None]], axis=1)
        done |= nxt == eos_id
        if done.all():
            break
    return [_strip(row[1:], eos_id) for row in ys]


def beam_search(model, src: np.ndarray, max_len: int, beam_size: int = 4, length_penalty: float = 0.6,
                bos_id: int = 1, eos_id: int = 2, no_repeat_ngram_size: int = 0, min_len: int = 0) -> List[List[int]]:
    """Keep the ``beam_size`` best partial hypotheses of every sentence, batched.

    A hypothesis's score is its summed log-probability; finished hypotheses (those
    that produced EOS) keep their score and only extend with EOS at no cost. The
    final choice divides by the GNMT length penalty
    :math:`lp(n) = ((5 + n) / 6)^{\\alpha}` (Wu et al., 2016), so that longer
    outputs are not punished merely for having more terms; ``alpha=0`` picks the
    raw highest score.

    ``beam_size`` is an integer in [1, 1000], ``length_penalty`` a finite number >= 0;
    the other arguments are those of :func:`greedy_decode`. With ``no_repeat_ngram_size`` n > 0 a
    beam's banned tokens get log-probability -inf, the others keep theirs (not renormalised, as
    in fairseq); so does EOS before ``min_len`` tokens.

    Returns
    -------
    list of B token lists, without BOS and EOS.
    """
    max_len, bos_id, eos_id = _check_args(model, max_len, bos_id, eos_id)
    beam_size = check_int(beam_size, "beam_size", 1, 1000)
    length_penalty = check_real(length_penalty, "length_penalty", 0.0)
    no_repeat = check_int(no_repeat_ngram_size, "no_repeat_ngram_size", 0, 1000)
    min_len = check_int(min_len, "min_len", 0, max_len)
    with _eval_mode(model):
        memory, src_mask = model.encode(src)  # checks src
        with inputs_checked():
            return _beam(model, memory, src_mask, max_len, beam_size, length_penalty, bos_id, eos_id, no_repeat,
                         min_len)


def _beam(model, memory, src_mask, max_len, K, length_penalty, bos_id, eos_id, no_repeat=0, min_len=0):
    B = memory.shape[0]
    max_len = min(max_len, model.cfg.max_len)
    memory = np.repeat(memory, K, axis=0)  # (B*K, S, D): every beam reads its own sentence
    src_mask = np.repeat(src_mask, K, axis=0)
    caches = [{} for _ in range(model.cfg.n_decoder_layers)]  # one KV cache per decoder layer, filled by the model
    scores = np.full((B, K), -np.inf)
    scores[:, 0] = 0.0  # at first all beams are the same, so only one may expand
    seqs = np.full((B, K, 1), bos_id, dtype=np.int64)
    finished = np.zeros((B, K), dtype=bool)
    lengths = np.zeros((B, K), dtype=np.int64)
    for t in range(max_len):
        logits = model._decode_step(seqs[:, :, -1].reshape(B * K, 1), memory, src_mask, caches, position=t)
        logp = log_softmax(_forbid(logits[:, -1].astype(np.float64), model.cfg.pad_id, bos_id))
        logp = _block_repeats(logp, seqs.reshape(B * K, -1), no_repeat)
        logp = _ban_early_eos(logp, t, min_len, eos_id).reshape(B, K, -1)  # (B, K, V)
        V = logp.shape[-1]
        logp[finished] = -np.inf
        logp[finished, eos_id] = 0.0  # a finished beam stays as it is
        cand = (scores[:, :, None] + logp).reshape(B, K * V)
        top = _top_k(cand, K)  # (B, K)
        beam, tok = top // V, top % V
        scores = np.take_along_axis(cand, top, axis=1)
        seqs = np.concatenate([np.take_along_axis(seqs, beam[:, :, None], axis=1), tok[:, :, None]], axis=2)
        was_finished = np.take_along_axis(finished, beam, axis=1)
        lengths = np.take_along_axis(lengths, beam, axis=1) + ~was_finished
        finished = was_finished | (tok == eos_id)
        flat = (np.arange(B)[:, None] * K + beam).reshape(-1)  # the parent of each new beam
        for cache in caches:  # reorder in place, so the cache keeps its room to grow (fast.append_positions);
            for part in ("k", "v"):  # no loop name may keep an array: a reference more forces a copy
                cache["self"][part][...] = cache["self"][part][flat]
        if finished.all():
            break
    final = scores / ((5.0 + lengths) / 6.0) ** length_penalty
    best = np.argmax(final, axis=1)
    return [_strip(seqs[b, best[b], 1:], eos_id) for b in range(B)]
