"""Multi-head attention that drops attention weights while training (BERT's and GPT-2's ``attn_pdrop``)."""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from ..core.attention_dropout import AttentionDropoutCache, attention_dropout_backward, attention_dropout_forward
from ..core.kernels import kernels
from ..core.linear import LinearCache, linear_backward
from ..core.multihead import merge_heads, split_heads
from ..validation import check_real, needs_checks
from .modules import MultiHeadAttention

__all__ = ["DropoutAttention"]


class _DroppedCache(NamedTuple):
    q: LinearCache
    k: LinearCache
    v: LinearCache
    att: AttentionDropoutCache
    out: LinearCache
    self_attention: bool


class DropoutAttention(MultiHeadAttention):
    """:class:`~numpytransformer.nn.modules.MultiHeadAttention` with dropout of rate ``p`` on the
    attention weights while training (:mod:`~numpytransformer.core.attention_dropout`).

    Same parameters; in evaluation (and with a KV cache, which is for inference) it is its parent.
    While training, the steps of the multi-head pair run here with the dropped attention inside:
    projections, split into heads, attention with dropout, merge, output projection.
    """

    def __init__(self, d_model: int, n_heads: int, rng: np.random.Generator, dtype=np.float64, p: float = 0.0,
                 drop_rng: Optional[np.random.Generator] = None):
        super().__init__(d_model, n_heads, rng, dtype)
        self.p = check_real(p, "attention dropout p", 0.0, 1.0, high_open=True)
        self.rng = drop_rng if drop_rng is not None else np.random.default_rng()

    def forward(self, x: np.ndarray, x_kv: Optional[np.ndarray] = None, mask: Optional[np.ndarray] = None,
                kv_cache: Optional[dict] = None):
        """As :meth:`MultiHeadAttention.forward`; while training, attention weights are dropped."""
        if not self.training or self.p == 0.0 or kv_cache is not None:
            return super().forward(x, x_kv, mask, kv_cache)
        if needs_checks():  # False inside a model, which has checked its own inputs
            mask = self._check_inputs(x, x_kv, mask, True)
        prm, H = self.params, self.n_heads
        source = x if x_kv is None else x_kv
        q, cq = kernels.linear_forward(x, prm["W_q"], prm["b_q"])  # (B, T, D)
        k, ck = kernels.linear_forward(source, prm["W_k"], prm["b_k"])  # (B, S, D)
        v, cv = kernels.linear_forward(source, prm["W_v"], prm["b_v"])  # (B, S, D)
        att, ca = attention_dropout_forward(split_heads(q, H), split_heads(k, H), split_heads(v, H), mask,
                                            self.p, self.rng)  # (B, H, T, D/H)
        out, co = kernels.linear_forward(merge_heads(att), prm["W_o"], prm["b_o"])  # (B, T, D)
        self._cache = _DroppedCache(cq, ck, cv, ca, co, x_kv is None)
        self.attention_weights = ca.weights
        return out

    def backward(self, dout: np.ndarray):
        """Returns ``dx`` for self-attention, ``(dx, dx_kv)`` for cross-attention."""
        if not isinstance(self._cache, _DroppedCache):
            return super().backward(dout)
        cq, ck, cv, ca, co, self_attention = self._pop_cache()
        H = self.n_heads
        dmerged, dW_o, db_o = linear_backward(dout, co)
        dq, dk, dv = attention_dropout_backward(split_heads(dmerged, H), ca)  # 3 x (B, H, T or S, D/H)
        dx_q, dW_q, db_q = linear_backward(merge_heads(dq), cq)
        dx_k, dW_k, db_k = linear_backward(merge_heads(dk), ck)
        dx_v, dW_v, db_v = linear_backward(merge_heads(dv), cv)
        for name, g in zip(("W_q", "b_q", "W_k", "b_k", "W_v", "b_v", "W_o", "b_o"),
                           (dW_q, db_q, dW_k, db_k, dW_v, db_v, dW_o, db_o)):
            self.grads[name] += g
        dx_kv = dx_k + dx_v  # keys and values read the same input
        return dx_q + dx_kv if self_attention else (dx_q, dx_kv)
