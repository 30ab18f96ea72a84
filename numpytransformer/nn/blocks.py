"""Encoder and decoder layers: attention and FFN sublayers joined by residual connections.

Derived in lesson 6 (LayerNorm, the FFN and residual connections), §4, and lesson 7 (Encoder layer,
decoder layer and the full Transformer), §1-2.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from ..errors import NumpyTransformerError
from .modules import Dropout
from .modules import make_ffn, make_norm
from .module import Module
from .modules import GroupedQueryAttention, MultiHeadAttention

__all__ = ["Residual", "EncoderLayer", "ParallelBlock", "DecoderLayer"]


def _with_memory(grads):
    """``(dx, dmemory)`` from a sublayer's backward: ``dmemory`` is None unless it returned a pair."""
    return grads if isinstance(grads, tuple) else (grads, None)


def _attention(d_model: int, n_heads: int, init_rng, dtype, attention_dropout: float, drop_rng,
               n_kv_heads: Optional[int] = None, positions: Optional[str] = None):
    """A layer's attention: a :class:`GroupedQueryAttention` with fewer key and value heads
    (``n_kv_heads``) or with positions inside it (``positions``: "rotary" or "alibi"); else the paper's
    :class:`MultiHeadAttention`, which drops attention weights while training if ``attention_dropout`` > 0."""
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    if n_kv_heads != n_heads or positions is not None:
        if attention_dropout:
            raise NumpyTransformerError("attention_dropout drops the weights of the paper's multi-head attention: "
                                        "leave it 0 with n_kv_heads < n_heads or rotary or alibi positions")
        return GroupedQueryAttention(d_model, n_heads, n_kv_heads, init_rng, dtype, positions)
    return MultiHeadAttention(d_model, n_heads, init_rng, dtype, attention_dropout, drop_rng)


class Residual(Module):
    """A sublayer connection: residual, dropout and LayerNorm around a sublayer.

    ``norm``: "layernorm", or "rmsnorm" (:class:`~numpytransformer.nn.modules.RMSNorm`) in its place.
    Post-LN (the paper, section 5.4): :math:`\\text{LayerNorm}(x + \\text{Dropout}(\\text{Sublayer}(x)))`.
    Pre-LN (``norm_first``): :math:`x + \\text{Dropout}(\\text{Sublayer}(\\text{LayerNorm}(x)))`,
    which keeps an identity path from the output to the input and trains deep stacks
    without warm-up tricks.

    The sublayer is passed in as a function (forward) and its backward as a function,
    because sublayers differ: cross-attention also reads the encoder's memory, and its
    backward returns ``(dx, dmemory)``.
    """

    def __init__(self, d_model: int, dropout: float, rng: np.random.Generator, norm_first: bool,
                 eps: float, dtype, norm: str = "layernorm"):
        super().__init__()
        self.norm = make_norm(norm, d_model, eps, dtype)
        self.drop = Dropout(dropout, rng)
        self.norm_first = norm_first

    def forward(self, x: np.ndarray, sublayer: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        if self.norm_first:
            return x + self.drop(sublayer(self.norm(x)))
        return self.norm(x + self.drop(sublayer(x)))

    def backward(self, dout: np.ndarray, sublayer_backward: Callable):
        """The gradient of a sublayer connection.

        The residual branch and the sublayer branch each carry gradient; they add.

        Returns ``dx``, or ``(dx, dmemory)`` when ``sublayer_backward`` returns
        ``(dx, dmemory)`` (cross-attention): the memory is not on the residual path,
        so its gradient is handed back as it is. Derived in lesson 6 (LayerNorm, the FFN and
        residuals), §4.
        """
        if self.norm_first:  # out = x + drop(F(norm(x)))
            dsub, dmemory = _with_memory(sublayer_backward(self.drop.backward(dout)))
            dx = dout + self.norm.backward(dsub)
        else:  # out = norm(x + drop(F(x)))
            d = self.norm.backward(dout)
            dsub, dmemory = _with_memory(sublayer_backward(self.drop.backward(d)))
            dx = d + dsub
        return dx if dmemory is None else (dx, dmemory)


class EncoderLayer(Module):
    """Self-attention, then the FFN, each inside a :class:`Residual`.

    ``activation``: the FFN's (:class:`~numpytransformer.nn.modules.FeedForward`, or
    :class:`~numpytransformer.nn.modules.SwiGLU` for ``"swiglu"``); ``norm``: "layernorm" or "rmsnorm",
    in every :class:`Residual`; ``attention_dropout`` > 0: the attention drops weights while training
    (:class:`~numpytransformer.nn.modules.MultiHeadAttention`'s option). So in :class:`DecoderLayer`.
    ``n_kv_heads`` (fewer key and value heads) and ``positions`` ("rotary" or "alibi" inside the
    attention) make the self-attention a :class:`~numpytransformer.nn.modules.GroupedQueryAttention`.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float, init_rng: np.random.Generator,
                 drop_rng: np.random.Generator, norm_first: bool = False, eps: float = 1e-5, dtype=np.float64,
                 activation: str = "relu", attention_dropout: float = 0.0, norm: str = "layernorm",
                 n_kv_heads: Optional[int] = None, positions: Optional[str] = None):
        super().__init__()
        self.self_attn = _attention(d_model, n_heads, init_rng, dtype, attention_dropout, drop_rng, n_kv_heads,
                                    positions)
        self.ffn = make_ffn(d_model, d_ff, init_rng, dtype, activation)
        self.self_attn_sublayer = Residual(d_model, dropout, drop_rng, norm_first, eps, dtype, norm)
        self.ffn_sublayer = Residual(d_model, dropout, drop_rng, norm_first, eps, dtype, norm)

    def forward(self, x: np.ndarray, mask: Optional[np.ndarray] = None) -> np.ndarray:
        """x: (B, S, D); mask: bool, broadcastable to (B, H, S, S)."""
        x = self.self_attn_sublayer(x, lambda h: self.self_attn(h, mask=mask))
        return self.ffn_sublayer(x, self.ffn)

    def backward(self, dout: np.ndarray) -> np.ndarray:
        d = self.ffn_sublayer.backward(dout, self.ffn.backward)
        return self.self_attn_sublayer.backward(d, self.self_attn.backward)


class ParallelBlock(Module):
    """A pre-norm block whose attention and FFN read the same normalised input, side by side
    (GPT-J, Wang & Komatsuzaki 2021; PaLM, Chowdhery et al. 2022):

    .. math:: \\text{out} = x + \\text{Dropout}(\\text{Attn}(\\text{LN}(x))) + \\text{Dropout}(\\text{FFN}(\\text{LN}(x)))

    with ONE norm, shared, where the sequential pre-LN block (:class:`EncoderLayer` with
    ``norm_first``) has two and feeds the FFN the attention's output. The two sublayers no longer
    wait for each other, which lets large models run them at once. A sibling of lesson 7 §1's
    :class:`EncoderLayer` (and of lesson 6 §4's pre-LN :class:`Residual`). The self-attention takes
    the same options as there (``n_kv_heads``, ``positions``, ``attention_dropout``), the FFN its
    ``activation``, the norm its kind ``norm``; the language model builds it for ``block="parallel"``.

    Parameters
    ----------
    x : (B, T, D) in :meth:`forward`; ``mask`` broadcastable to (B, H, T, S); ``kv_cache`` a dict
        (inference), as in :class:`~numpytransformer.nn.gpt.GPTBlock`.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float, init_rng: np.random.Generator,
                 drop_rng: np.random.Generator, eps: float = 1e-5, dtype=np.float64, activation: str = "relu",
                 attention_dropout: float = 0.0, norm: str = "layernorm", n_kv_heads: Optional[int] = None,
                 positions: Optional[str] = None):
        super().__init__()
        self.self_attn = _attention(d_model, n_heads, init_rng, dtype, attention_dropout, drop_rng, n_kv_heads,
                                    positions)
        self.ffn = make_ffn(d_model, d_ff, init_rng, dtype, activation)
        self.norm = make_norm(norm, d_model, eps, dtype)
        self.attn_drop = Dropout(dropout, drop_rng)
        self.ffn_drop = Dropout(dropout, drop_rng)

    def forward(self, x: np.ndarray, mask: Optional[np.ndarray] = None, kv_cache: Optional[dict] = None) -> np.ndarray:
        """x: (B, T, D) -> (B, T, D)."""
        ### BEGIN SOLUTION 7.2: one shared norm of x, the attention and the FFN on it, their dropped outputs added to x
        h = self.norm(x)  # (B, T, D), read by both sublayers
        return x + self.attn_drop(self.self_attn(h, mask=mask, kv_cache=kv_cache)) + self.ffn_drop(self.ffn(h))
        ### END SOLUTION

    def backward(self, dout: np.ndarray) -> np.ndarray:
        """dx (B, T, D), accumulating the parameters' gradients (the sublayers', the norm's).

        .. solution-only::

            x reaches the output by three paths: the residual (gradient ``dout``) and the two
            sublayers through the shared norm. The sublayers' input gradients add at ``h = norm(x)``
            (h feeds both), and one norm backward carries their sum to x:
            ``dx = dout + norm.backward(attn.backward(dout) + ffn.backward(dout))``, each sublayer's
            ``dout`` first through its dropout.
        """
        ### BEGIN SOLUTION 7.1: dx, with the gradients of the sublayers' and the norm's parameters accumulated
        dh = self.self_attn.backward(self.attn_drop.backward(dout)) + self.ffn.backward(self.ffn_drop.backward(dout))
        return dout + self.norm.backward(dh)
        ### END SOLUTION


class DecoderLayer(Module):
    """Masked self-attention, cross-attention over the encoder's memory, then the FFN."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float, init_rng: np.random.Generator,
                 drop_rng: np.random.Generator, norm_first: bool = False, eps: float = 1e-5, dtype=np.float64,
                 activation: str = "relu", attention_dropout: float = 0.0, norm: str = "layernorm"):
        super().__init__()
        self.self_attn = _attention(d_model, n_heads, init_rng, dtype, attention_dropout, drop_rng)
        self.cross_attn = _attention(d_model, n_heads, init_rng, dtype, attention_dropout, drop_rng)
        self.ffn = make_ffn(d_model, d_ff, init_rng, dtype, activation)
        self.self_attn_sublayer = Residual(d_model, dropout, drop_rng, norm_first, eps, dtype, norm)
        self.cross_attn_sublayer = Residual(d_model, dropout, drop_rng, norm_first, eps, dtype, norm)
        self.ffn_sublayer = Residual(d_model, dropout, drop_rng, norm_first, eps, dtype, norm)

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
        d = self.ffn_sublayer.backward(dout, self.ffn.backward)
        d, dmemory = self.cross_attn_sublayer.backward(d, self.cross_attn.backward)
        dx = self.self_attn_sublayer.backward(d, self.self_attn.backward)
        return dx, dmemory
