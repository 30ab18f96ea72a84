"""Sampling text from a language model: temperature, top-k, top-p, and the KV cache.

A language model gives, at every step, a distribution over the next token. Sampling
draws from it and feeds the draw back in. Three knobs reshape the distribution first:

- **temperature** ``tau``: :math:`p_i \\propto \\exp(z_i / \\tau)`; below 1 sharpens
  (0 is greedy, the argmax), above 1 flattens;
- **top-k**: keep the k most likely tokens, renormalise;
- **top-p** (nucleus, Holtzman et al., 2020): keep the smallest set of most likely
  tokens whose probability reaches p, renormalise;
- **min-p** (Nguyen et al., 2024): keep the tokens at least p times as likely as the most
  likely one, renormalise: the cut follows the model's confidence.

Generation is seeded: the same seed, prompt and settings give the same text. With the
KV cache (:meth:`~numpytransformer.nn.gpt.TransformerLM.forward_cached`) each step computes
the new token only and reads the keys and values of the earlier ones from the cache;
without it, every step reruns the whole context. Both give the same tokens.
"""
from __future__ import annotations

import numbers
from typing import List, Optional, Sequence

import numpy as np

from ..errors import NumpyTransformerError
from ..core.softmax import softmax
from ..validation import check_bool, check_ids, check_int

__all__ = ["next_token_probs", "top_k_filter", "top_p_filter", "min_p_filter", "sample_from", "generate"]


def top_k_filter(probs: np.ndarray, k: int) -> np.ndarray:
    """Keep the ``k`` largest probabilities (ties at the k-th broken by lower id), renormalised.

    probs: (V,) summing to 1 -> (V,) with at most k non-zeros, summing to 1.
    """
    if k >= probs.size:
        return probs
    keep = np.argsort(-probs, kind="stable")[:k]
    out = np.zeros_like(probs)
    out[keep] = probs[keep]
    return out / out.sum()


def top_p_filter(probs: np.ndarray, p: float) -> np.ndarray:
    """Keep the smallest set of most likely tokens whose total probability is at least ``p``.

    A token is kept when the probability of the tokens ranked above it is still below
    ``p``, so the most likely token is always kept. probs: (V,) -> (V,), renormalised.
    """
    order = np.argsort(-probs, kind="stable")
    before = np.cumsum(probs[order]) - probs[order]  # mass ranked above each token
    keep = order[before < p]
    out = np.zeros_like(probs)
    out[keep] = probs[keep]
    return out / out.sum()


def min_p_filter(probs: np.ndarray, p: float) -> np.ndarray:
    """Keep the tokens whose probability is at least ``p`` times the largest (min-p sampling,
    Nguyen et al., 2024), renormalised:

    .. math:: q_i \\propto p_i \\, [\\, p_i \\ge p \\cdot \\max_j p_j \\,]

    Where top-p keeps a fixed mass, min-p's threshold scales with the model's confidence: a
    confident step keeps few tokens, a flat one many. The most likely token is always kept. A
    sibling of lesson 12 §6's top-k filter (:func:`top_k_filter`; and of :func:`top_p_filter`).

    Parameters
    ----------
    probs : (V,) float, summing to 1
    p : float in [0, 1]
        0 keeps every token; 1 keeps the most likely ones only.

    Returns
    -------
    (V,) float, summing to 1: zero below the threshold.
    """
    ### BEGIN SOLUTION 12.1: the threshold p times the largest probability, the probabilities below it set to 0, the rest renormalised
    keep = probs >= p * probs.max()  # (V,)
    out = np.where(keep, probs, 0.0)
    return out / out.sum()
    ### END SOLUTION


def next_token_probs(logits: np.ndarray, temperature: float = 1.0, top_k: Optional[int] = None,
                     top_p: Optional[float] = None, min_p: Optional[float] = None) -> np.ndarray:
    """The distribution a sampling step draws from, for one row of logits (V,).

    Computed in float64. ``temperature == 0`` puts all the mass on the argmax (greedy). The
    filters apply in this order: top-k, top-p, then min-p (:func:`min_p_filter`, a number in
    [0, 1] or None).
    """
    _check_settings(0, temperature, top_k, top_p, min_p)
    z = np.asarray(logits, dtype=np.float64)
    if z.ndim != 1 or not z.size or np.isnan(z).any() or not (z < np.inf).all() or not (z > -np.inf).any():
        raise NumpyTransformerError(f"logits must be one non-empty row without NaN or +inf and with a finite "
                                    f"value, got shape {z.shape}")
    return _probs(z, temperature, top_k, top_p, min_p)


def _probs(z: np.ndarray, temperature: float, top_k: Optional[int], top_p: Optional[float],
           min_p: Optional[float] = None) -> np.ndarray:
    """:func:`next_token_probs` of checked settings and float64 logits (generate's own, per token)."""
    if temperature == 0:
        probs = np.zeros_like(z)
        probs[int(np.argmax(z))] = 1.0
        return probs
    with np.errstate(over="ignore"):  # a tiny temperature sends the others to -inf: probability 0
        probs = softmax((z - z.max()) / temperature)  # the max taken first: z / tau could overflow to inf
    if top_k is not None:
        probs = top_k_filter(probs, top_k)
    if top_p is not None:
        probs = top_p_filter(probs, top_p)
    if min_p is not None:
        probs = min_p_filter(probs, min_p)
    return probs


def sample_from(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one id: the first whose cumulative probability exceeds a uniform number."""
    u = rng.random()
    cdf = np.cumsum(probs)
    # u * cdf[-1]: the sum may miss 1 by a rounding error; min(): never past the last id
    return int(min(np.searchsorted(cdf, u * cdf[-1], side="right"), probs.size - 1))


def _check_settings(tokens, temperature, top_k, top_p, min_p=None):
    if isinstance(tokens, bool) or not isinstance(tokens, (int, np.integer)) or tokens < 0:
        raise NumpyTransformerError(f"tokens must be a whole number >= 0, got {tokens!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real) or not 0 <= temperature < np.inf:
        raise NumpyTransformerError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1):
        raise NumpyTransformerError(f"top_k must be a whole number >= 1 or None, got {top_k!r}")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, numbers.Real) or not 0 < top_p <= 1):
        raise NumpyTransformerError(f"top_p must be a number in (0, 1] or None, got {top_p!r}")
    if min_p is not None and (isinstance(min_p, bool) or not isinstance(min_p, numbers.Real) or not 0 <= min_p <= 1):
        raise NumpyTransformerError(f"min_p must be a number in [0, 1] or None, got {min_p!r}")


def generate(model, prompt: Sequence[int], tokens: int, temperature: float = 1.0, top_k: Optional[int] = None,
             top_p: Optional[float] = None, seed: int = 0, use_cache: bool = True,
             min_p: Optional[float] = None) -> List[int]:
    """Sample ``tokens`` new ids after ``prompt`` from a :class:`~numpytransformer.nn.gpt.TransformerLM`.

    The model sees at most its context of ``max_len`` ids. When the context is full it
    keeps the last ``max_len // 2`` ids and goes on from there: the positions restart,
    so the cache is refilled from those ids (one forward), and later steps are cached
    again. The uncached path (``use_cache=False``) applies the same rule, recomputing
    the whole kept context at every step, so both give the same ids.

    Parameters
    ----------
    model : TransformerLM
        Put in eval mode here (no dropout).
    prompt : sequence of int
        At least one id.
    tokens : int
        How many ids to generate.
    temperature, top_k, top_p, min_p : see :func:`next_token_probs`
    seed : int
        Seeds the draws: the same arguments give the same ids.
    use_cache : bool
        Use the KV cache (fast) or rerun the context at every step (the reference).

    Returns
    -------
    list of int : the new ids (the prompt not included).
    """
    _check_settings(tokens, temperature, top_k, top_p, min_p)
    seed, use_cache = check_int(seed, "seed", 0), check_bool(use_cache, "use_cache")
    if not hasattr(model, "new_kv_caches"):
        raise NumpyTransformerError(f"model must be a TransformerLM, got {type(model).__name__}")
    ids = check_ids(prompt, "prompt", model.cfg.src_vocab_size, ndim=1).tolist()
    max_len = model.cfg.max_len
    model.eval()
    rng = np.random.default_rng(seed)
    keep = max(max_len // 2, 1)
    start = 0  # the context is ids[start:]
    caches, cached = None, 0  # cached: how many ids of the context are in the caches
    out: List[int] = []
    for _ in range(tokens):
        if len(ids) - start > max_len:  # the context is full: keep its last half
            start, caches, cached = len(ids) - keep, None, 0
        context = np.array([ids[start:]], dtype=np.int64)  # (1, T)
        if use_cache:
            if caches is None:
                caches = model.new_kv_caches()
            logits = model.forward_cached(context[:, cached:], caches, cached)[0, -1]
            cached = context.shape[1]
        else:
            logits = model.forward(context)[0, -1]
        nxt = sample_from(_probs(logits.astype(np.float64), temperature, top_k, top_p, min_p), rng)
        ids.append(nxt)
        out.append(nxt)
    return out
