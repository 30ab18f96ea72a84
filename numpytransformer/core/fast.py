"""The fast forms: the functions the Modules run by default, each equal to a textbook pair.

Every pure pair in this package (``layernorm_forward``, ``attention_backward``, ...) is
written as a student derives it: one line per step of the equation. A few of those lines
cost more in NumPy than the arithmetic they do. This module keeps the forms written for
speed, in one place behind the pairs, the way llm.c keeps ``matmul_forward_naive``
beside its tuned matmul and CS231n keeps ``fast_layers.py`` beside ``layers.py``.
``tests/test_fast.py`` proves each one equal to its pair (values and gradients) and a
short training run equal on both paths. What they do differently:

- **Row sums as an einsum** (:func:`row_sums`). NumPy's reduction over the last axis pays
  a call per row, which dominates when rows are short (attention weights over 20 keys).
  The einsum adds without NumPy's pairwise summation, so a long float32 row sums a little
  less exactly: still within the float32 tolerance of ``tests/test_fast.py``.
- **Results written where their inputs were** (``out=``, in place): each fresh temporary of
  an activation's size costs a pass over memory.
- **Large arrays from a pool** (:func:`empty_reusable`): a fresh array larger than glibc's
  mmap threshold is mapped from the operating system at every call, and every page of it
  faults before any arithmetic; the logits and their softmax are that large.
- **Attention a block of heads at a time** (:func:`attention_forward`): a few heads' scores are
  scaled (through q), masked (by adding a bias), softmaxed and multiplied by v while they sit in
  the CPU's cache, instead of the whole (B, H, T, S) array going through memory at every step.
- **Selections by arithmetic**: a masked copy (``np.copyto(..., where=)``) runs element by
  element; GELU's gate takes its side of 0 by a multiplication with the sign instead.
- **Adam in one reused scratch array** (:func:`adam_step`) instead of six temporaries of each
  parameter's size.
- **The KV cache grown in a buffer with room** (:func:`append_positions`) instead of copied
  at every decoding step.
- **The three projections of multi-head attention fused** into one matrix product with
  ``[W_q W_k W_v]`` (:func:`multihead_attention_forward`): one larger call to the matrix
  library instead of three; the pair of ``multihead.py`` is the paper's three products.

The switch: the Modules, the loss and Adam call the functions of
:data:`~numpytransformer.core.kernels.kernels`, which :func:`use_fast` binds, once, to the
fast forms of :data:`PAIRS` or to the textbook functions :data:`TEXTBOOK` names.
``use_fast(False)`` (or ``with textbook():``) makes the whole model, the loss and Adam run on
the textbook pairs; the environment variable ``NUMPYTRANSFORMER_FAST=0``, read at import,
does the same for a whole process (``NUMPYTRANSFORMER_FAST=0 python -m numpytransformer train
reverse``). The textbook functions are looked up in their modules when the switch is set, so
a function put in a module's place (the grader's reference code) runs once the switch is set
again. The student edition has no fast forms (an empty :data:`PAIRS`) and sets
:data:`ON_BY_DEFAULT` to False, so it trains on the student's own pairs.
"""
from __future__ import annotations

import math
import os
import sys
import threading
from contextlib import contextmanager
from typing import Dict, Iterator, List, Optional

import numpy as np

from . import attention, attention_dropout, feedforward, gelu, layernorm, linear, losses, multihead
from ..errors import NumpyTransformerError
from .kernels import kernels

__all__ = ["use_fast", "textbook", "enabled", "kernels", "PAIRS", "TEXTBOOK", "ON_BY_DEFAULT"]


# ---- BEGIN FAST FORMS (the student edition's fast.py has none: its Modules run the student's pairs) ----
__all__ += ["row_sums", "softmax", "empty_reusable", "REUSE_BYTES", "linear_forward", "attention_forward",
            "attention_backward", "ATTENTION_CHUNK", "ATTENTION_WHOLE", "multihead_attention_forward", "multihead_attention_backward", "layernorm_forward",
            "softmax_cross_entropy_forward", "softmax_cross_entropy_backward", "adam_step", "append_positions",
            "DEFAULT_ROOM"]


# ---- pooled large arrays ---------------------------------------------------------------------
#: Arrays at least this large are pooled (glibc's largest mmap threshold, 32 MiB).
REUSE_BYTES = 32 * 2**20
_MAX_KEPT = 4  # buffers kept at once (a training step needs two); the oldest goes first
_pool: List[np.ndarray] = []  # flat uint8 buffers; what is handed out are views of them
_lock = threading.Lock()  # between the check that a buffer is free and the view that takes it


def empty_reusable(shape: tuple, dtype) -> np.ndarray:
    """Like ``np.empty(shape, dtype)``, but in the memory of an earlier large array nobody holds.

    A buffer is handed out again only when nothing else refers to it any more (its
    reference count is the pool's own), so an array a caller still holds, or holds a view
    of, is never overwritten. The result is a C-contiguous view of a pooled buffer at least
    as large, so batches of varying shapes reuse the buffer of the largest one. Small
    arrays come straight from :func:`numpy.empty`: malloc already recycles them. The
    contents are undefined, as with ``np.empty``: callers write the whole array.
    """
    dtype = np.dtype(dtype)
    shape = tuple(int(n) for n in shape)
    nbytes = math.prod(shape) * dtype.itemsize  # math.prod, not np.prod: every linear layer calls this
    if nbytes < REUSE_BYTES:
        return np.empty(shape, dtype)
    with _lock:
        for buf in _pool:
            # Free means 3 references: the pool's, the loop name ``buf`` and getrefcount's own
            # argument. Every array handed out is a view holding its buffer, so as long as a
            # caller keeps one (or any view of one) its buffer is not handed out again.
            if buf.nbytes >= nbytes and sys.getrefcount(buf) <= 3:
                break
        else:
            buf = np.empty(nbytes, dtype=np.uint8)
            _pool.append(buf)
            if len(_pool) > _MAX_KEPT:
                del _pool[0]
        return buf[:nbytes].view(dtype).reshape(shape)


# ---- softmax -----------------------------------------------------------------------------------
def row_sums(x: np.ndarray) -> np.ndarray:
    """``x.sum(axis=-1, keepdims=True)`` of a float array, as an einsum (no call per row)."""
    return np.einsum("...j->...", x)[..., None]


def softmax(x: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """:func:`numpytransformer.core.softmax.softmax` over the last axis, written into ``out`` (``out=x`` works)."""
    out = np.subtract(x, x.max(axis=-1, keepdims=True), out=out)
    np.exp(out, out=out)
    out /= row_sums(out)
    return out


# ---- the pairs' fast forms -------------------------------------------------------------------
def linear_forward(x: np.ndarray, W: np.ndarray, b: Optional[np.ndarray]):
    """:func:`linear.linear_forward`; a large result (the logits) goes into pooled memory."""
    x2 = x.reshape(-1, x.shape[-1])  # (N, D_in)
    out = np.matmul(x2, W, out=empty_reusable((x2.shape[0], W.shape[1]), np.result_type(x2, W)))
    out = out.reshape(*x.shape[:-1], W.shape[1])  # (..., D_out)
    if b is not None:
        out += b
    return out, linear.LinearCache(x, W)


#: Elements of the scores :func:`attention_forward` turns into weights at a time: a block this
#: size and its softmax stay in the CPU's cache, where the whole (B, H, T, S) scores would be
#: streamed through memory at each of the softmax's passes.
ATTENTION_CHUNK = 1 << 16
#: Scores up to this many elements in all are computed at once (:func:`_attention_at_once`): a loop
#: over blocks costs more in Python than the cache saves.
ATTENTION_WHOLE = 1 << 20


def _attention_at_once(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: Optional[np.ndarray] = None):
    """:func:`attention.attention_forward` for scores small enough to stay in the cache whole: the
    scores turned into weights in their own array."""
    scale = q.shape[-1] ** -0.5
    scores = q @ k.swapaxes(-1, -2)  # (..., T, S)
    scores *= q.dtype.type(scale)
    if mask is not None:
        np.copyto(scores, q.dtype.type(attention.MASK_VALUE), where=~mask)
    weights = np.subtract(scores, scores.max(axis=-1, keepdims=True), out=scores)
    np.exp(weights, out=weights)
    weights /= row_sums(weights)
    if mask is not None:
        has_key = mask.any(axis=-1, keepdims=True)
        if not has_key.all():
            weights *= has_key  # fully masked rows: no weight at all
    out = weights @ v  # (..., T, d_v)
    return out, attention.AttentionCache(q, k, v, weights, mask, scale)


def attention_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: Optional[np.ndarray] = None):
    """:func:`attention.attention_forward`, a block of heads at a time.

    Each block's scores are computed with the scale already in q (a (T, d_k) product instead of
    a (T, S) one), the mask added as a bias of 0 or :data:`attention.MASK_VALUE` (a masked score
    becomes MASK_VALUE give or take the rounding of the sum; its exp is 0 either way, and a
    fully masked row is zeroed as in the pair), and softmaxed in place before its weights are
    written out and multiplied by v while still in the cache.
    """
    dt = q.dtype.type
    scale = q.shape[-1] ** -0.5
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]) or (1,)  # (..., ) of the stacks
    T, S = q.shape[-2], k.shape[-2]
    if int(np.prod(lead)) * T * S <= ATTENTION_WHOLE:
        return _attention_at_once(q, k, v, mask)
    dtype = np.result_type(q, k, v)
    weights = np.empty(lead + (T, S), dtype)  # (..., T, S)
    out = np.empty(lead + (T, v.shape[-1]), dtype)  # (..., T, d_v)

    def stacked(a):  # a view with the stacks' leading shape
        return np.broadcast_to(a, lead + a.shape[-2:])

    q_all, k_all, v_all = stacked(q), stacked(k), stacked(v)
    bias = has_key = None
    if mask is not None:
        full = mask.reshape((1,) * (len(lead) + 2 - mask.ndim) + mask.shape)  # with the stacks' axes
        bias = stacked(np.where(full, dt(0), dt(attention.MASK_VALUE)).astype(dtype, copy=False))
        has_key = full.any(axis=-1, keepdims=True)
        has_key = None if has_key.all() else np.broadcast_to(has_key, lead + (T, 1))
    width = max(1, min(lead[-1], ATTENTION_CHUNK // (T * S)))  # heads (the last stacked axis) a block
    blocks = [outer + (slice(h, h + width),) for outer in np.ndindex(*lead[:-1]) for h in range(0, lead[-1], width)]
    for at in blocks:
        scores = np.matmul(q_all[at] * dt(scale), k_all[at].swapaxes(-1, -2))  # (width, T, S)
        if bias is not None:
            scores += bias[at]
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        block = np.divide(scores, row_sums(scores), out=weights[at])
        if has_key is not None:
            block *= has_key[at]  # fully masked rows: no weight at all
        np.matmul(block, v_all[at], out=out[at])
    shape = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    cache = attention.AttentionCache(q, k, v, weights.reshape(shape + (T, S)), mask, scale)
    return out.reshape(shape + out.shape[-2:]), cache


def attention_backward(dout: np.ndarray, cache):
    """:func:`attention.attention_backward`: dS built in dP's array, its row sum an einsum."""
    q, k, v, P, mask, scale = cache
    dv = P.swapaxes(-1, -2) @ dout  # (..., S, d_v)
    dS = dout @ v.swapaxes(-1, -2)  # dP, (..., T, S)
    dS -= np.einsum("...ts,...ts->...t", dS, P)[..., None]  # rowsum(dP * P), without the product's array
    dS *= P
    dS *= q.dtype.type(scale)
    dq = dS @ k
    dk = dS.swapaxes(-1, -2) @ q
    return dq, dk, dv


def multihead_attention_forward(x_q, x_kv, W_q, b_q, W_k, b_k, W_v, b_v, W_o, b_o, n_heads: int,
                                mask: Optional[np.ndarray] = None, dropout_p: float = 0.0,
                                rng: Optional[np.random.Generator] = None, drop_mask: Optional[np.ndarray] = None):
    """:func:`multihead.multihead_attention_forward` with the projections fused: one product with
    ``[W_q W_k W_v]`` (self-attention) or ``[W_k W_v]`` (over the memory), the fast linear and
    attention forms inside. The cache is the pair's, so either backward takes it. With ``dropout_p``
    the attention is the textbook :func:`~numpytransformer.core.attention_dropout.attention_dropout_forward`
    (only training drops weights; the projections stay fused)."""
    H, split, LinearCache = n_heads, multihead.split_heads, linear.LinearCache
    if x_kv is None:
        qkv, _ = linear_forward(x_q, np.concatenate([W_q, W_k, W_v], axis=1), np.concatenate([b_q, b_k, b_v]))
        q, k, v = (split(a, H) for a in np.split(qkv, 3, axis=-1))  # 3 x (B, H, T, D/H)
        keys_from = x_q
    else:
        q = split(linear_forward(x_q, W_q, b_q)[0], H)  # (B, H, T, D/H)
        kv, _ = linear_forward(x_kv, np.concatenate([W_k, W_v], axis=1), np.concatenate([b_k, b_v]))  # (B, S, 2D)
        k, v = (split(a, H) for a in np.split(kv, 2, axis=-1))  # 2 x (B, H, S, D/H)
        keys_from = x_kv
    if dropout_p:
        att, att_cache = attention_dropout.attention_dropout_forward(q, k, v, mask, dropout_p, rng, True, drop_mask)
    else:
        att, att_cache = attention_forward(q, k, v, mask)  # (B, H, T, D/H)
    out, out_cache = linear_forward(multihead.merge_heads(att), W_o, b_o)  # (B, T, D)
    return out, multihead.MHACache(LinearCache(x_q, W_q), LinearCache(keys_from, W_k), LinearCache(keys_from, W_v),
                                   att_cache, out_cache, H, x_kv is None)


def multihead_attention_backward(dout: np.ndarray, cache):
    """:func:`multihead.multihead_attention_backward` with the projections that read one input
    fused into one ``linear_backward`` (their input gradients add inside one product), on the
    fast attention backward."""
    q_cache, k_cache, v_cache, att_cache, out_cache, H, self_attention = cache
    merge, linear_backward, LinearCache = multihead.merge_heads, linear.linear_backward, linear.LinearCache
    dmerged, dW_o, db_o = linear_backward(dout, out_cache)
    dropped = isinstance(att_cache, attention_dropout.AttentionDropoutCache)
    attend_backward = attention_dropout.attention_dropout_backward if dropped else attention_backward
    dq, dk, dv = attend_backward(multihead.split_heads(dmerged, H), att_cache)  # 3 x (B, H, T or S, D/H)
    if self_attention:
        W = np.concatenate([q_cache.W, k_cache.W, v_cache.W], axis=1)  # (D, 3D)
        dqkv = np.concatenate([merge(dq), merge(dk), merge(dv)], axis=-1)  # (B, T, 3D)
        dx_q, dW, db = linear_backward(dqkv, LinearCache(q_cache.x, W))
        dx_kv = None
        dW_q, dW_k, dW_v = np.split(dW, 3, axis=1)
        db_q, db_k, db_v = np.split(db, 3)
    else:
        dx_q, dW_q, db_q = linear_backward(merge(dq), q_cache)
        W = np.concatenate([k_cache.W, v_cache.W], axis=1)  # (D, 2D)
        dkv = np.concatenate([merge(dk), merge(dv)], axis=-1)  # (B, S, 2D)
        dx_kv, dW, db = linear_backward(dkv, LinearCache(k_cache.x, W))
        dW_k, dW_v = np.split(dW, 2, axis=1)
        db_k, db_v = np.split(db, 2)
    return dx_q, dx_kv, dW_q, db_q, dW_k, db_k, dW_v, db_v, dW_o, db_o


def layernorm_forward(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-5):
    """:func:`layernorm.layernorm_forward`: both row means as einsum contractions, no (..., D)
    temporary for the squares, and x - mu normalised where it lies."""
    dt = x.dtype.type
    inv_d = dt(1.0 / x.shape[-1])
    mu = np.einsum("...d->...", x)[..., None] * inv_d  # (..., 1)
    xc = x - mu
    var = np.einsum("...d,...d->...", xc, xc)[..., None] * inv_d  # biased variance, (..., 1)
    rstd = 1.0 / np.sqrt(var + dt(eps))
    xhat = xc
    xhat *= rstd
    out = xhat * gamma
    out += beta
    return out, layernorm.LayerNormCache(xhat, rstd, gamma)


def softmax_cross_entropy_forward(logits: np.ndarray, targets: np.ndarray, pad_id: Optional[int] = None,
                                  label_smoothing: float = 0.0):
    """:func:`losses.softmax_cross_entropy_forward`: one new (N, V) array, the probabilities (pooled),
    with log p read off the softmax's own sum instead of a log-softmax and its temporaries."""
    V = logits.shape[-1]
    z = logits.reshape(-1, V)  # (N, V)
    t = np.asarray(targets).reshape(-1)
    valid = np.ones(t.shape, dtype=bool) if pad_id is None else t != pad_id
    n_valid = int(valid.sum())
    # log p_v = z_v - lse with lse = m + log sum_v e^{z_v - m}
    m = z.max(axis=1, keepdims=True)
    probs = np.subtract(z, m, out=empty_reusable(z.shape, z.dtype))  # (N, V); exp(z - m) <= 1 cannot overflow
    np.exp(probs, out=probs)
    total = row_sums(probs)  # >= 1
    probs /= total
    lse = (m + np.log(total))[:, 0]  # (N,)
    nll = lse - z[np.arange(len(t)), t]  # -log p_y
    eps = label_smoothing
    if eps:
        rows = (1.0 - eps) * nll + eps * (lse - row_sums(z)[:, 0] / V)  # -mean_v log p_v: the smoothing term
    else:
        rows = nll  # not 0 * (-mean log p): a -inf logit makes that mean -inf, and 0 * inf is NaN
    loss = float(np.sum(rows[valid], dtype=np.float64) / n_valid) if n_valid else 0.0
    return loss, losses.CrossEntropyCache(probs, t, valid, n_valid, eps, logits.shape)


def softmax_cross_entropy_backward(dloss: float, cache) -> np.ndarray:
    """:func:`losses.softmax_cross_entropy_backward`, written into the cached probabilities: the
    cache is spent (``cross_entropy`` takes one gradient per forward)."""
    d, t, valid, n_valid, eps, shape = cache[:6]  # no z-loss here: cross_entropy runs the textbook pair for one
    V = d.shape[1]
    if n_valid == 0:
        d.fill(0)
        return d.reshape(shape)
    d[np.arange(len(t)), t] -= d.dtype.type(1.0 - eps)
    if eps:
        d -= d.dtype.type(eps / V)
    d *= (valid * (dloss / n_valid)).astype(d.dtype)[:, None]
    return d.reshape(shape)


# ---- Adam ------------------------------------------------------------------------------------------
_adam_scratch: Dict[np.dtype, np.ndarray] = {}  # one array per dtype, of the largest parameter's size


def adam_step(opt, grads: Dict[str, np.ndarray], lr: float) -> None:
    """The update of :meth:`optim.Adam.step` (the moments and parameters, in place), every
    intermediate in one reused scratch array.

    Both bias corrections are folded into one step size and an adjusted epsilon, as the
    Adam paper's section 2 suggests; the result is the same update:
    ``lr * m_hat / (sqrt(v_hat) + eps) = step_size * m / (sqrt(v) + eps_hat)``.
    """
    b1, b2, t = opt.beta1, opt.beta2, opt.t
    step_size = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    eps_hat = opt.eps * np.sqrt(1 - b2 ** t)
    for k, p in opt.params.items():
        g, m, v = grads[k], opt.m[k], opt.v[k]
        dt = p.dtype.type
        work = _adam_scratch.get(p.dtype)
        if work is None or work.size < p.size:
            work = _adam_scratch[p.dtype] = np.empty(max(q.size for q in opt.params.values()), dtype=p.dtype)
        work = work[:p.size].reshape(p.shape)
        m *= dt(b1)
        m += np.multiply(g, dt(1 - b1), out=work)  # m = b1 m + (1 - b1) g
        v *= dt(b2)
        np.multiply(g, g, out=work)
        work *= dt(1 - b2)
        v += work  # v = b2 v + (1 - b2) g^2
        np.sqrt(v, out=work)
        work += dt(eps_hat)
        np.divide(m, work, out=work)
        work *= dt(step_size)
        p -= work  # p = p - step_size m / (sqrt(v) + eps_hat)


# ---- GELU's error function -----------------------------------------------------------------------
__all__ += ["erfc", "gelu_forward", "gelu_ffn_forward", "GELU_CHUNK"]

#: Past this z, erfc(z) < 3e-17: erf is 1 to double precision, so z is clipped there.
ERFC_Z_MAX = 6.0
_T_MIN = 2.0 / (2.0 + ERFC_Z_MAX)


def _erfc_chebyshev(degree: int = 24) -> np.ndarray:
    """Chebyshev coefficients of the smooth exponent ``P(t) = log(erfc(z) / t) + z^2``, ``t = 2 / (2 + z)``.

    The form is Numerical Recipes' ``erfccheb``: with the Gaussian factor taken out, what is
    left of erfc is smooth in ``t`` on ``z in [0, ERFC_Z_MAX]``, and its Chebyshev series
    converges geometrically. Interpolated here at Chebyshev points from :func:`math.erfc`
    rather than copied from a table; the coefficients past the 20th are rounding noise.
    """
    nodes = np.cos(np.pi * (np.arange(degree + 1) + 0.5) / (degree + 1))  # in (-1, 1)
    t = _T_MIN + (nodes + 1.0) * (1.0 - _T_MIN) / 2.0
    z = 2.0 / t - 2.0
    exponent = [math.log(math.erfc(zi) / ti) + zi * zi for zi, ti in zip(z, t)]
    return np.polynomial.chebyshev.chebfit(nodes, exponent, degree)


_ERFC_COEF = _erfc_chebyshev()
#: float32's form: ``erfc(z) ~ s Q(s) exp(-z^2)``, ``s = 1 / (1 + z / 2)``, Q of degree 6.
_ERFC32_DEGREE = 6


def _erfc_float32_fit() -> np.ndarray:
    """Coefficients of ``Q`` (lowest first), fitted here to :func:`math.erfc` by least squares on the
    absolute error of erfc at Chebyshev points of ``[0, ERFC_Z_MAX]``. Seven terms fit it to 5e-8, and
    float32's own rounding keeps the result within 5e-7: what a float32 GELU can use, at a third of the
    cost of float64's 24-term series."""
    z = ERFC_Z_MAX / 2 * (1 + np.cos(np.pi * (np.arange(400) + 0.5) / 400))
    s = 1.0 / (1.0 + 0.5 * z)
    weight = s * np.exp(-z * z)  # d erfc / d Q: the fit minimises erfc's own error
    target = np.array([math.erfc(v) for v in z]) / weight
    basis = np.vander(s, _ERFC32_DEGREE + 1, increasing=True)
    return np.linalg.lstsq(basis * weight[:, None], target * weight, rcond=None)[0]


_ERFC32_COEF = _erfc_float32_fit().astype(np.float32)


def erfc(z: np.ndarray, gauss: Optional[np.ndarray] = None) -> np.ndarray:
    """``math.erfc`` for ``z >= 0`` elementwise, vectorised: ``t exp(P(t)) exp(-z^2)`` (see :func:`_erfc_chebyshev`).

    Absolute error below 1e-14 in float64 and 1e-6 in float32 (``tests/test_pretrained_parts.py``);
    float32 takes the shorter form of :func:`_erfc_float32_fit`. ``gauss``: ``exp(-z^2)`` if the
    caller has it already (float32's form takes it as given: the caller clips z at ERFC_Z_MAX).
    """
    if z.dtype == np.float32:
        return _erfc_float32(z, np.exp(-z * z) if gauss is None else gauss)
    coef = _ERFC_COEF
    z = np.minimum(z, ERFC_Z_MAX)
    t = 2.0 / (2.0 + z)
    u2 = (4.0 * t - 2.0 * (1.0 + _T_MIN)) / (1.0 - _T_MIN)  # 2u, with u = t mapped onto [-1, 1]
    b1, b2, new = np.zeros_like(z), np.zeros_like(z), np.empty_like(z)
    for c in coef[:0:-1]:  # Clenshaw's recurrence b_k = c_k + 2u b_(k+1) - b_(k+2), in three buffers
        np.multiply(u2, b1, out=new)
        new -= b2
        new += c
        b1, b2, new = new, b1, b2
    exponent = np.multiply(u2, b1, out=u2)  # P = c_0 + u b_1 - b_2
    exponent *= 0.5
    exponent -= b2
    exponent += coef[0]
    np.exp(exponent, out=exponent)
    exponent *= t
    exponent *= np.exp(-z * z) if gauss is None else gauss
    return exponent


def _erfc_float32(z: np.ndarray, gauss: np.ndarray, coef: np.ndarray = _ERFC32_COEF) -> np.ndarray:
    """``s Q(s) exp(-z^2)`` with ``s = 1 / (1 + z / 2)``, by Horner's rule, in float32 (``coef``: Q's,
    or a multiple of them for a multiple of erfc)."""
    f = np.float32
    s = np.minimum(z, f(ERFC_Z_MAX))
    s *= f(0.5)
    s += f(1.0)
    np.reciprocal(s, out=s)
    acc = np.multiply(s, coef[-1])
    for c in coef[-2::-1]:
        acc += c
        acc *= s
    acc *= gauss
    return acc


#: Half of float32's Q: Horner's rule then gives erfc(z) / 2, the tail Phi(-|x|) of GELU's gate.
_HALF_ERFC32_COEF = _ERFC32_COEF * np.float32(0.5)

#: Elements of x per pass of :func:`gelu_forward`: the dozen temporaries of a pass stay in the
#: CPU's cache, where a pass over the whole activation would stream each through memory.
GELU_CHUNK = 1 << 15


def _gelu_chunk(x: np.ndarray, gate: np.ndarray, out: np.ndarray) -> None:
    """Write ``Phi(x)`` into ``gate`` and ``x Phi(x)`` into ``out`` (1-D, of x's size)."""
    dt = x.dtype.type
    z = np.abs(x)
    z *= dt(1.0 / math.sqrt(2.0))
    np.minimum(z, dt(ERFC_Z_MAX), out=z)  # past it Phi is 0 or 1 to double precision
    gauss = np.multiply(z, dt(-1.0))
    gauss *= z
    np.exp(gauss, out=gauss)  # exp(-x^2 / 2), or less than 1e-15 past the clip
    if x.dtype == np.float32:
        half_tail = _erfc_float32(z, gauss, _HALF_ERFC32_COEF)  # Phi(-|x|)
    else:
        half_tail = erfc(z, gauss)
        half_tail *= 0.5  # Phi(-|x|)
    # Phi(x) = [x >= 0] - sign(x) Phi(-|x|), exact on both sides; arithmetic, not a masked copy,
    # which NumPy does element by element
    negative = np.signbit(x)
    sign = np.multiply(negative, dt(-2.0))
    sign += dt(1.0)  # 1 or -1
    half_tail *= sign
    np.subtract(dt(1.0), negative, out=gate)
    gate -= half_tail
    np.multiply(x, gate, out=out)


def gelu_forward(x: np.ndarray, approximate: bool = False):
    """:func:`gelu.gelu_forward`; the exact form with the vectorised :func:`erfc` in place of ``math.erf``,
    a chunk of :data:`GELU_CHUNK` elements at a time, its output written while the chunk is in the cache.

    ``Phi(x) = erfc(-x / sqrt 2) / 2`` is computed as ``erfc(|x| / sqrt 2) / 2`` for ``x < 0``
    and one minus that for ``x >= 0``, so no large erfc is ever subtracted from 1.
    """
    if approximate:
        return gelu.gelu_forward(x, True)
    flat = x.reshape(-1)
    gate, out = np.empty_like(flat), np.empty_like(flat)
    for i in range(0, flat.size, GELU_CHUNK):
        part = slice(i, i + GELU_CHUNK)
        _gelu_chunk(flat[part], gate[part], out[part])
    return out.reshape(x.shape), gelu.GELUCache(x, False, gate.reshape(x.shape))


def gelu_ffn_forward(x, W1, b1, W2, b2, approximate: bool = False):
    """:func:`feedforward.gelu_ffn_forward` with the fast linear and GELU forms inside."""
    h, c1 = linear_forward(x, W1, b1)  # (..., D_ff)
    a, cg = gelu_forward(h, approximate)
    out, c2 = linear_forward(a, W2, b2)  # (..., D)
    return out, feedforward.GELUFFNCache(c1, cg, c2)


# ---- the KV cache --------------------------------------------------------------------------------
#: Positions a KV cache's first buffer holds; a full buffer is replaced by one twice as long.
DEFAULT_ROOM = 16


def append_positions(cached: np.ndarray, new: np.ndarray) -> np.ndarray:
    """:func:`multihead.append_positions` (``np.concatenate([cached, new], axis=2)``), without
    copying the cache at each step.

    The cached keys (B, H, T, D/H) are a view of a buffer with room for more positions.
    When nothing but the cache holds that view, and no other view of the buffer exists
    (reference counts: a cache copied or branched by someone keeps its positions), the new
    positions are written after the old ones and a longer view is returned. Otherwise (the
    first append, a full buffer, a shared cache) the positions go into a new buffer of
    :data:`DEFAULT_ROOM` positions or twice the length, whichever is more: a cache that
    grows to T positions is copied about log2(T / DEFAULT_ROOM) times, not T times.
    """
    B, H, T, dk = cached.shape
    n = new.shape[2]
    buf = cached.base
    # 3 references each: the cache's (or the view's base), this function's name, getrefcount's argument.
    if (isinstance(buf, np.ndarray) and buf.ndim == 4 and buf.dtype == cached.dtype
            and buf.shape[:2] == (B, H) and buf.shape[3] == dk and buf.shape[2] >= T + n
            and buf.strides == cached.strides and buf.ctypes.data == cached.ctypes.data
            and sys.getrefcount(cached) <= 3 and sys.getrefcount(buf) <= 3):
        buf[:, :, T:T + n] = new
        return buf[:, :, :T + n]
    buf = np.empty((B, H, max(DEFAULT_ROOM, 2 * (T + n)), dk), dtype=np.result_type(cached, new))
    buf[:, :, :T] = cached
    buf[:, :, T:T + n] = new
    return buf[:, :, :T + n]


#: The fast form of each kernel, by name (:data:`TEXTBOOK` says where the textbook function of that
#: name lives). The fast :func:`attention_backward` is not here: the Modules run the attention pair
#: only inside multi-head attention, whose fast backward calls it directly.
PAIRS = {
    "linear_forward": linear_forward,
    "attention_forward": attention_forward,
    "multihead_attention_forward": multihead_attention_forward,
    "multihead_attention_backward": multihead_attention_backward,
    "append_positions": append_positions,
    "layernorm_forward": layernorm_forward,
    "gelu_ffn_forward": gelu_ffn_forward,
    "softmax_cross_entropy_forward": softmax_cross_entropy_forward,
    "softmax_cross_entropy_backward": softmax_cross_entropy_backward,
    "adam_step": adam_step,
}
# ---- END FAST FORMS ----


# ---- the switch -------------------------------------------------------------------------------------
#: Each kernel by name, and the core module whose function of that name it runs on the textbook path.
#: Adam's update has no textbook function in core (the optimiser sits above it): on the textbook path
#: ``kernels.adam_step`` is None, and :meth:`~numpytransformer.training.optim.Adam.step` runs its own lines.
TEXTBOOK = {
    "linear_forward": linear,
    "attention_forward": attention,
    "multihead_attention_forward": multihead,
    "multihead_attention_backward": multihead,
    "append_positions": multihead,
    "layernorm_forward": layernorm,
    "gelu_ffn_forward": feedforward,
    "softmax_cross_entropy_forward": losses,
    "softmax_cross_entropy_backward": losses,
    "adam_step": None,
}


def use_fast(on: bool = True) -> None:
    """Bind every kernel (:data:`~numpytransformer.core.kernels.kernels`) to its fast form (``True``)
    or to its textbook function (``False``): the Modules, the loss and Adam run what is bound."""
    if not isinstance(on, bool):
        raise NumpyTransformerError(f"use_fast takes True or False, got {on!r}")
    for name, module in TEXTBOOK.items():
        textbook_form = None if module is None else getattr(module, name)
        setattr(kernels, name, PAIRS.get(name, textbook_form) if on else textbook_form)


def enabled() -> bool:
    """Whether the fast forms run (the default) rather than the textbook pairs."""
    return any(getattr(kernels, name) is form for name, form in PAIRS.items())


@contextmanager
def textbook() -> Iterator[None]:
    """``with fast.textbook():`` runs the block on the textbook pairs, then restores the switch."""
    was_on = enabled()
    use_fast(False)
    try:
        yield
    finally:
        use_fast(was_on)


def _from_environment() -> bool:
    value = os.environ.get("NUMPYTRANSFORMER_FAST", "").strip() or "1"
    if value not in ("0", "1"):
        raise NumpyTransformerError(f"NUMPYTRANSFORMER_FAST must be 0 (the textbook pairs) or 1 (the fast forms), "
                                    f"got {value!r}")
    return value == "1"


#: Whether the fast forms run when nothing says otherwise: ``NUMPYTRANSFORMER_FAST=0`` in the
#: environment turns them off. The student edition writes False here (course/fences.py).
ON_BY_DEFAULT = _from_environment()
use_fast(ON_BY_DEFAULT)
