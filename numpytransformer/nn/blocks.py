"""Encoder and decoder layers: attention and FFN sublayers joined by residual connections.

Derived in lesson 6 (LayerNorm, the FFN and residual connections), §4, and lesson 7 (Encoder layer,
decoder layer and the full Transformer), §1-2.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from .modules import Dropout
from .modules import FeedForward
from .modules import LayerNorm
from .module import Module
from .modules import MultiHeadAttention
from .attention_dropout import DropoutAttention

__all__ = ["Residual", "EncoderLayer", "DecoderLayer"]


def _with_memory(grads):
    """``(dx, dmemory)`` from a sublayer's backward: ``dmemory`` is None unless it returned a pair."""
    return grads if isinstance(grads, tuple) else (grads, None)


def _attention(d_model: int, n_heads: int, init_rng, dtype, attention_dropout: float, drop_rng) -> MultiHeadAttention:
    """A layer's attention: one that drops attention weights while training if ``attention_dropout`` > 0."""
    if attention_dropout:
        return DropoutAttention(d_model, n_heads, init_rng, dtype, attention_dropout, drop_rng)
    return MultiHeadAttention(d_model, n_heads, init_rng, dtype)


class Residual(Module):
    """A sublayer connection: residual, dropout and LayerNorm around a sublayer.

    Post-LN (the paper, section 5.4): :math:`\\text{LayerNorm}(x + \\text{Dropout}(\\text{Sublayer}(x)))`.
    Pre-LN (``norm_first``): :math:`x + \\text{Dropout}(\\text{Sublayer}(\\text{LayerNorm}(x)))`,
    which keeps an identity path from the output to the input and trains deep stacks
    without warm-up tricks.

    The sublayer is passed in as a function (forward) and its backward as a function,
    because sublayers differ: cross-attention also reads the encoder's memory, and its
    backward returns ``(dx, dmemory)``.
    """

    def __init__(self, d_model: int, dropout: float, rng: np.random.Generator, norm_first: bool,
                 eps: float, dtype):
        super().__init__()
        self.norm = LayerNorm(d_model, eps, dtype)
        self.drop = Dropout(dropout, rng)
        self.norm_first = norm_first

    def forward(self, x: np.ndarray, sublayer: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        if self.norm_first:
            return x + self.drop(sublayer(self.norm(x)))
        return self.norm(x + self.drop(sublayer(x)))

    def backward(self, dout: np.ndarray, sublayer_backward: Callable):
        """The gradient of a sublayer connection.

        .. solution-only::

            The residual branch and the sublayer branch each carry gradient; they add.

        Returns ``dx``, or ``(dx, dmemory)`` when ``sublayer_backward`` returns
        ``(dx, dmemory)`` (cross-attention): the memory is not on the residual path,
        so its gradient is handed back as it is. Derived in lesson 6 (LayerNorm, the FFN and
        residuals), §4.
        """
        ### BEGIN SOLUTION 7.2: dx (and dmemory) through a sublayer connection, pre- or post-LN, and back through the decoder's three sublayers
        if self.norm_first:  # out = x + drop(F(norm(x)))
            dsub, dmemory = _with_memory(sublayer_backward(self.drop.backward(dout)))
            dx = dout + self.norm.backward(dsub)
        else:  # out = norm(x + drop(F(x)))
            d = self.norm.backward(dout)
            dsub, dmemory = _with_memory(sublayer_backward(self.drop.backward(d)))
            dx = d + dsub
        ### END SOLUTION
        return dx if dmemory is None else (dx, dmemory)


class EncoderLayer(Module):
    """Self-attention, then the FFN, each inside a :class:`Residual`.

    ``activation``: the FFN's (:class:`~numpytransformer.nn.modules.FeedForward`);
    ``attention_dropout`` > 0: the attention drops weights while training
    (:class:`~numpytransformer.nn.attention_dropout.DropoutAttention`). So in :class:`DecoderLayer`.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float, init_rng: np.random.Generator,
                 drop_rng: np.random.Generator, norm_first: bool = False, eps: float = 1e-5, dtype=np.float64,
                 activation: str = "relu", attention_dropout: float = 0.0):
        super().__init__()
        self.self_attn = _attention(d_model, n_heads, init_rng, dtype, attention_dropout, drop_rng)
        self.ffn = FeedForward(d_model, d_ff, init_rng, dtype, activation)
        self.self_attn_sublayer = Residual(d_model, dropout, drop_rng, norm_first, eps, dtype)
        self.ffn_sublayer = Residual(d_model, dropout, drop_rng, norm_first, eps, dtype)

    def forward(self, x: np.ndarray, mask: Optional[np.ndarray] = None) -> np.ndarray:
        """x: (B, S, D); mask: bool, broadcastable to (B, H, S, S)."""
        x = self.self_attn_sublayer(x, lambda h: self.self_attn(h, mask=mask))
        return self.ffn_sublayer(x, self.ffn)

    def backward(self, dout: np.ndarray) -> np.ndarray:
        ### BEGIN SOLUTION 7.1: dx, back through the FFN sublayer, then the self-attention sublayer
        d = self.ffn_sublayer.backward(dout, self.ffn.backward)
        return self.self_attn_sublayer.backward(d, self.self_attn.backward)
        ### END SOLUTION


class DecoderLayer(Module):
    """Masked self-attention, cross-attention over the encoder's memory, then the FFN."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float, init_rng: np.random.Generator,
                 drop_rng: np.random.Generator, norm_first: bool = False, eps: float = 1e-5, dtype=np.float64,
                 activation: str = "relu", attention_dropout: float = 0.0):
        super().__init__()
        self.self_attn = _attention(d_model, n_heads, init_rng, dtype, attention_dropout, drop_rng)
        self.cross_attn = _attention(d_model, n_heads, init_rng, dtype, attention_dropout, drop_rng)
        self.ffn = FeedForward(d_model, d_ff, init_rng, dtype, activation)
        self.self_attn_sublayer = Residual(d_model, dropout, drop_rng, norm_first, eps, dtype)
        self.cross_attn_sublayer = Residual(d_model, dropout, drop_rng, norm_first, eps, dtype)
        self.ffn_sublayer = Residual(d_model, dropout, drop_rng, norm_first, eps, dtype)

    def forward(self, x: np.ndarray, memory: np.ndarray, self_mask: Optional[np.ndarray] = None,
                memory_mask: Optional[np.ndarray] = None, kv_cache: Optional[dict] = None) -> np.ndarray:
        """x: (B, T, D); memory: (B, S, D); self_mask: causal (and padding), memory_mask: source padding.

        ``kv_cache`` (inference): a dict this layer fills with its attention caches.
        """
        self_cache = cross_cache = None
        if kv_cache is not None:
            self_cache = kv_cache.setdefault("self", {})
            cross_cache = kv_cache.setdefault("cross", {})
        x = self.self_attn_sublayer(x, lambda h: self.self_attn(h, mask=self_mask, kv_cache=self_cache))
        x = self.cross_attn_sublayer(x, lambda h: self.cross_attn(h, memory, mask=memory_mask, kv_cache=cross_cache))
        return self.ffn_sublayer(x, self.ffn)

    def backward(self, dout: np.ndarray):
        """Returns ``(dx, dmemory)``: the memory feeds every decoder layer, so the
        caller sums the ``dmemory`` of all layers."""
        ### BEGIN SOLUTION 7.2: dx (and dmemory) through a sublayer connection, pre- or post-LN, and back through the decoder's three sublayers
        d = self.ffn_sublayer.backward(dout, self.ffn.backward)
        d, dmemory = self.cross_attn_sublayer.backward(d, self.cross_attn.backward)
        dx = self.self_attn_sublayer.backward(d, self.self_attn.backward)
        ### END SOLUTION
        return dx, dmemory
