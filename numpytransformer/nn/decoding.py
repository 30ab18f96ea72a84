"""Autoregressive decoding: batched greedy search and beam search, both stopping at EOS.

Both run the encoder once and then feed the decoder one token per step. With
``use_cache=True`` each decoder self-attention keeps the keys and values of the
positions already decoded (a *KV cache*), so a step costs one position of work
instead of re-running the whole prefix; the outputs are identical.
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
                  use_cache: bool = True) -> List[List[int]]:
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

    Returns
    -------
    list of B token lists, without BOS and EOS.
    """
    max_len, bos_id, eos_id = _check_args(model, max_len, bos_id, eos_id)
    use_cache = check_bool(use_cache, "use_cache")
    with _eval_mode(model):
        memory, src_mask = model.encode(src)  # checks src
        with inputs_checked():  # the steps below reuse checked values: no check per step
            return _greedy(model, memory, src_mask, max_len, bos_id, eos_id, use_cache)


def _greedy(model, memory, src_mask, max_len, bos_id, eos_id, use_cache):
    B = memory.shape[0]
    max_len = min(max_len, model.cfg.max_len)
    caches = [{} for _ in range(model.cfg.n_decoder_layers)]  # one KV cache per decoder layer, filled by the model
    ### BEGIN SOLUTION 9.1: the greedy loop: the last position's logits (from the KV cache or the whole prefix), the argmax, EOS bookkeeping
    ys = np.full((B, 1), bos_id, dtype=np.int64)
    done = np.zeros(B, dtype=bool)
    for t in range(max_len):
        if use_cache:
            logits = model._decode_step(ys[:, -1:], memory, src_mask, caches, position=t)[:, -1]
        else:
            logits = model._decode(ys, memory, src_mask)[:, -1]  # (B, V), the last position only
        _forbid(logits, model.cfg.pad_id, bos_id)
        nxt = np.where(done, eos_id, logits.argmax(axis=-1))
        ys = np.concatenate([ys, nxt[:, None]], axis=1)
        done |= nxt == eos_id
        if done.all():
            break
    ### END SOLUTION
    return [_strip(row[1:], eos_id) for row in ys]


def beam_search(model, src: np.ndarray, max_len: int, beam_size: int = 4, length_penalty: float = 0.6,
                bos_id: int = 1, eos_id: int = 2) -> List[List[int]]:
    """Keep the ``beam_size`` best partial hypotheses of every sentence, batched.

    A hypothesis's score is its summed log-probability; finished hypotheses (those
    that produced EOS) keep their score and only extend with EOS at no cost. The
    final choice divides by the GNMT length penalty
    :math:`lp(n) = ((5 + n) / 6)^{\\alpha}` (Wu et al., 2016), so that longer
    outputs are not punished merely for having more terms; ``alpha=0`` picks the
    raw highest score.

    ``beam_size`` is an integer in [1, 1000], ``length_penalty`` a finite number >= 0;
    the other arguments are those of :func:`greedy_decode`.

    Returns
    -------
    list of B token lists, without BOS and EOS.
    """
    max_len, bos_id, eos_id = _check_args(model, max_len, bos_id, eos_id)
    beam_size = check_int(beam_size, "beam_size", 1, 1000)
    length_penalty = check_real(length_penalty, "length_penalty", 0.0)
    with _eval_mode(model):
        memory, src_mask = model.encode(src)  # checks src
        with inputs_checked():
            return _beam(model, memory, src_mask, max_len, beam_size, length_penalty, bos_id, eos_id)


def _beam(model, memory, src_mask, max_len, K, length_penalty, bos_id, eos_id):
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
        logp = logp.reshape(B, K, -1)  # (B, K, V)
        V = logp.shape[-1]
        ### BEGIN SOLUTION 9.2: one beam step: finished beams kept, the K best of K*V candidates, their parents, lengths and reordered caches
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
        ### END SOLUTION
        if finished.all():
            break
    final = scores / ((5.0 + lengths) / 6.0) ** length_penalty
    best = np.argmax(final, axis=1)
    return [_strip(seqs[b, best[b], 1:], eos_id) for b in range(B)]
