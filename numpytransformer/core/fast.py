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
- **Adam in one reused scratch array** (:func:`adam_step`) instead of six temporaries of each
  parameter's size.
- **The KV cache grown in a buffer with room** (:func:`append_positions`) instead of copied
  at every decoding step.

Multi-head attention (:func:`multihead_attention_forward`, :func:`multihead_attention_backward`)
is written out again here, line for line the pair of ``multihead.py`` with the fast linear and
attention forms inside, rather than the pair taking its inner functions as arguments. The pair
is what a student reads and, in exercise 5.2, writes: its body calls the linear and attention
pairs by their plain names, and the grader puts its reference code in place of exactly those
names (``exercises/probe.swap_in``) so that 5.2 is graded on its own. Inner functions passed
in, or bound as defaults at import, would add an indirection to the student's function and
escape that swap. ``tests/test_fast.py`` keeps the two equal.

The switch: the Modules look their functions up in :data:`~numpytransformer.nn.module.FAST_FORMS`,
which :func:`use_fast` fills or empties. ``use_fast(False)`` (or ``with textbook():``) makes
the whole model, the loss and Adam run on the textbook pairs; the environment variable
``NUMPYTRANSFORMER_FAST=0``, read at import, does the same for a whole process
(``NUMPYTRANSFORMER_FAST=0 python -m numpytransformer train reverse``). The student
edition sets :data:`ON_BY_DEFAULT` to False, so it trains on the student's own pairs.
"""
from __future__ import annotations

import math
import os
import sys
import threading
from contextlib import contextmanager
from typing import Dict, Iterator, List, Optional

import numpy as np

from . import attention, layernorm, linear, losses, multihead
from ..errors import NumpyTransformerError
from ..nn.module import FAST_FORMS

__all__ = ["use_fast", "textbook", "enabled", "ON_BY_DEFAULT"]


# ---- BEGIN FAST FORMS (the student edition's fast.py has none: its Modules run the student's pairs) ----
__all__ += ["row_sums", "softmax", "empty_reusable", "REUSE_BYTES", "linear_forward", "attention_forward",
            "attention_backward", "multihead_attention_forward", "multihead_attention_backward", "layernorm_forward",
            "softmax_cross_entropy_forward", "softmax_cross_entropy_backward", "adam_step", "append_positions"]


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


def attention_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: Optional[np.ndarray] = None):
    """:func:`attention.attention_forward`, the scores turned into weights in their own array."""
    scale = q.shape[-1] ** -0.5
    scores = q @ k.swapaxes(-1, -2)  # (..., T, S)
    scores *= q.dtype.type(scale)
    if mask is not None:
        np.copyto(scores, q.dtype.type(attention.MASK_VALUE), where=~mask)
    weights = softmax(scores, out=scores)
    if mask is not None:
        has_key = mask.any(axis=-1, keepdims=True)
        if not has_key.all():
            weights *= has_key  # fully masked rows: no weight at all
    out = weights @ v  # (..., T, d_v)
    return out, attention.AttentionCache(q, k, v, weights, mask, scale)


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
                                mask: Optional[np.ndarray] = None):
    """:func:`multihead.multihead_attention_forward` (fused), on the fast linear and attention forms."""
    H, split = n_heads, multihead.split_heads
    if x_kv is None:
        W = np.concatenate([W_q, W_k, W_v], axis=1)  # (D, 3D)
        qkv, in_cache = linear_forward(x_q, W, np.concatenate([b_q, b_k, b_v]))  # (B, T, 3D)
        q, k, v = (split(a, H) for a in np.split(qkv, 3, axis=-1))  # 3 x (B, H, T, D/H)
        q_cache = None
    else:
        q_lin, q_cache = linear_forward(x_q, W_q, b_q)  # (B, T, D)
        q = split(q_lin, H)
        kv, in_cache = linear_forward(x_kv, np.concatenate([W_k, W_v], axis=1), np.concatenate([b_k, b_v]))
        k, v = (split(a, H) for a in np.split(kv, 2, axis=-1))  # 2 x (B, H, S, D/H)
    att, att_cache = attention_forward(q, k, v, mask)  # (B, H, T, D/H)
    out, out_cache = linear_forward(multihead.merge_heads(att), W_o, b_o)  # (B, T, D)
    return out, multihead.MHACache(in_cache, q_cache, att_cache, out_cache, H)


def multihead_attention_backward(dout: np.ndarray, cache):
    """:func:`multihead.multihead_attention_backward`, on the fast attention backward."""
    in_cache, q_cache, att_cache, out_cache, H = cache
    merge, linear_backward = multihead.merge_heads, linear.linear_backward
    dmerged, dW_o, db_o = linear_backward(dout, out_cache)
    dq, dk, dv = attention_backward(multihead.split_heads(dmerged, H), att_cache)  # 3 x (B, H, T or S, D/H)
    if q_cache is None:
        dx_q, dW, db = linear_backward(np.concatenate([merge(dq), merge(dk), merge(dv)], axis=-1), in_cache)
        dx_kv = None
        dW_q, dW_k, dW_v = np.split(dW, 3, axis=1)
        db_q, db_k, db_v = np.split(db, 3)
    else:
        dx_q, dW_q, db_q = linear_backward(merge(dq), q_cache)
        dx_kv, dW, db = linear_backward(np.concatenate([merge(dk), merge(dv)], axis=-1), in_cache)
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
    d, t, valid, n_valid, eps, shape = cache
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


# ---- the KV cache --------------------------------------------------------------------------------
#: Positions a KV cache's buffer holds at first when the decoder names no room.
DEFAULT_ROOM = 16


def append_positions(cached: np.ndarray, new: np.ndarray, room: int = 0) -> np.ndarray:
    """:func:`multihead.append_positions` (``np.concatenate([cached, new], axis=2)``), without
    copying the cache at each step.

    The cached keys (B, H, T, D/H) are a view of a buffer with room for more positions.
    When nothing but the cache holds that view, and no other view of the buffer exists
    (reference counts: a cache copied or branched by someone keeps its positions), the new
    positions are written after the old ones and a longer view is returned. Otherwise (the
    first append, a shared cache) the positions go into a new buffer with ``room`` positions
    (:data:`DEFAULT_ROOM` if 0), or twice the length if that is more. A decoder that knows
    how long its outputs can be passes that as ``room``, so the cache is never copied.
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
    buf = np.empty((B, H, max(room or DEFAULT_ROOM, 2 * (T + n)), dk), dtype=np.result_type(cached, new))
    buf[:, :, :T] = cached
    buf[:, :, T:T + n] = new
    return buf[:, :, :T + n]


#: textbook pair -> its fast form above, for each function a Module or the loss looks up
#: (:func:`~numpytransformer.nn.module.fast_or_textbook`); what :func:`use_fast` puts into
#: ``module.FAST_FORMS``. The fast :func:`attention_backward` is not here: no Module runs the
#: attention pair alone, only inside :func:`multihead_attention_backward`, which calls it directly.
PAIRS = {
    linear.linear_forward: linear_forward,
    attention.attention_forward: attention_forward,
    multihead.multihead_attention_forward: multihead_attention_forward,
    multihead.multihead_attention_backward: multihead_attention_backward,
    multihead.append_positions: append_positions,
    layernorm.layernorm_forward: layernorm_forward,
    losses.softmax_cross_entropy_forward: softmax_cross_entropy_forward,
    losses.softmax_cross_entropy_backward: softmax_cross_entropy_backward,
}
# ---- END FAST FORMS ----


# ---- the switch -------------------------------------------------------------------------------------
def use_fast(on: bool = True) -> None:
    """Run the Modules, the loss and Adam on the fast forms (``True``) or on the textbook pairs (``False``)."""
    if not isinstance(on, bool):
        raise NumpyTransformerError(f"use_fast takes True or False, got {on!r}")
    FAST_FORMS.clear()
    if on:
        FAST_FORMS.update(PAIRS)


def enabled() -> bool:
    """Whether the fast forms run (the default) rather than the textbook pairs."""
    return bool(FAST_FORMS)


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
#: environment turns them off. The student edition writes False here (exercises/fences.py).
ON_BY_DEFAULT = _from_environment()
use_fast(ON_BY_DEFAULT)
