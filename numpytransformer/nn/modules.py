"""The thin modules around the pure pairs of :mod:`numpytransformer.core`.

Each module holds its parameters and gradients, keeps the cache of its forward and
accumulates (``+=``) its parameter gradients in ``backward``; the math lives in the pair.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..core.dropout import dropout_backward, dropout_forward
from ..core.embedding import (embedding_backward, embedding_forward, region_embedding_backward,
                              region_embedding_forward)
from ..core.feedforward import ffn_backward, ffn_forward, gelu_ffn_backward
from ..core.kernels import kernels
from ..core.layernorm import layernorm_backward
from ..core.linear import linear_backward, xavier_uniform
from ..core.multihead import PARAM_NAMES, merge_heads, split_heads
from ..core.positional import (_check_input, learned_positional_backward, learned_positional_forward,
                               positional_backward, positional_forward, sinusoidal_encoding)
from ..core.gqa import gqa_backward, gqa_forward, repeat_kv
from ..core.alibi import alibi_attention_forward, alibi_slopes
from ..core.relu import relu_backward, relu_forward
from ..core.rmsnorm import rmsnorm_backward, rmsnorm_forward
from ..core.rotary import rotary_forward
from ..core.swiglu import swiglu_backward, swiglu_forward
from ..errors import NumpyTransformerError
from ..validation import (check_float, check_ids, check_int, check_mask, check_positive_int, check_real,
                          check_same_batch, needs_checks)
from .module import Module

__all__ = ['Linear', 'ReLU', 'Dropout', 'LayerNorm', 'RMSNorm', 'make_norm', 'Embedding', 'SharedEmbedding', 'RegionEmbedding', 'PositionalEncoding', 'LearnedPositionalEmbedding', 'FeedForward', 'SwiGLU', 'make_ffn', 'MultiHeadAttention', 'GroupedQueryAttention']


class Linear(Module):
    """``out = x W + b`` with ``W`` of shape (D_in, D_out), Xavier-initialised."""

    def __init__(self, d_in: int, d_out: int, rng: np.random.Generator, dtype=np.float64, bias: bool = True):
        super().__init__()
        d_in, d_out = check_positive_int(d_in, "d_in"), check_positive_int(d_out, "d_out")
        self.add_param("W", xavier_uniform(rng, d_in, d_out, dtype))
        if bias:
            self.add_param("b", np.zeros(d_out, dtype=dtype))

    def forward(self, x: np.ndarray) -> np.ndarray:
        """x (..., D_in) of the weights' dtype, finite -> (..., D_out)."""
        if needs_checks():  # False inside a model, which has checked its own inputs
            check_float(x, "x", self.params["W"].dtype, last_dim=self.params["W"].shape[0])
        out, self._cache = kernels.linear_forward(x, self.params["W"], self.params.get("b"))
        return out

    def backward(self, dout: np.ndarray) -> np.ndarray:
        dx, dW, db = linear_backward(dout, self._pop_cache())
        self.grads["W"] += dW
        if "b" in self.grads:
            self.grads["b"] += db
        return dx


class ReLU(Module):
    def forward(self, x):
        if needs_checks():  # False inside a model, which has checked its own inputs
            check_float(x, "x", min_ndim=0)
        out, self._cache = relu_forward(x)
        return out

    def backward(self, dout):
        return relu_backward(dout, self._pop_cache())


class Dropout(Module):
    """Dropout drawing masks from a shared, seeded generator ``rng``."""

    def __init__(self, p: float, rng: np.random.Generator):
        super().__init__()
        self.p = check_real(p, "dropout p", 0.0, 1.0, high_open=True)
        self.rng = rng

    def forward(self, x):
        if needs_checks():  # False inside a model, which has checked its own inputs
            check_float(x, "x", min_ndim=0)
        out, self._cache = dropout_forward(x, self.p, self.rng, self.training)
        return out

    def backward(self, dout):
        return dropout_backward(dout, self._pop_cache())


class LayerNorm(Module):
    """LayerNorm with ``gamma`` (ones) and ``beta`` (zeros) of shape (D,)."""

    def __init__(self, d_model: int, eps: float = 1e-5, dtype=np.float64):
        super().__init__()
        self.eps = check_real(eps, "eps", 0.0, low_open=True)
        d_model = check_positive_int(d_model, "d_model")
        self.add_param("gamma", np.ones(d_model, dtype=dtype))
        self.add_param("beta", np.zeros(d_model, dtype=dtype))

    def forward(self, x: np.ndarray) -> np.ndarray:
        """x (..., D) of the parameters' dtype, finite -> (..., D)."""
        if needs_checks():  # False inside a model, which has checked its own inputs
            check_float(x, "x", self.params["gamma"].dtype, last_dim=self.params["gamma"].shape[0])
        out, self._cache = kernels.layernorm_forward(x, self.params["gamma"], self.params["beta"], self.eps)
        return out

    def backward(self, dout: np.ndarray) -> np.ndarray:
        dx, dgamma, dbeta = layernorm_backward(dout, self._pop_cache())
        self.grads["gamma"] += dgamma
        self.grads["beta"] += dbeta
        return dx


class RMSNorm(Module):
    """RMSNorm with ``gamma`` (ones) of shape (D,): LayerNorm without the centring and ``beta``."""

    def __init__(self, d_model: int, eps: float = 1e-5, dtype=np.float64):
        super().__init__()
        self.eps = check_real(eps, "eps", 0.0, low_open=True)
        d_model = check_positive_int(d_model, "d_model")
        self.add_param("gamma", np.ones(d_model, dtype=dtype))

    def forward(self, x: np.ndarray) -> np.ndarray:
        """x (..., D) of the parameters' dtype, finite -> (..., D)."""
        if needs_checks():  # False inside a model, which has checked its own inputs
            check_float(x, "x", self.params["gamma"].dtype, last_dim=self.params["gamma"].shape[0])
        out, self._cache = rmsnorm_forward(x, self.params["gamma"], self.eps)
        return out

    def backward(self, dout: np.ndarray) -> np.ndarray:
        dx, dgamma = rmsnorm_backward(dout, self._pop_cache())
        self.grads["gamma"] += dgamma
        return dx


#: The normalisations a model can use (``TransformerConfig.norm``), by name.
NORMS = {"layernorm": LayerNorm, "rmsnorm": RMSNorm}


def make_norm(kind: str, d_model: int, eps: float, dtype) -> Module:
    """A :class:`LayerNorm` (``kind="layernorm"``) or an :class:`RMSNorm` (``"rmsnorm"``)."""
    if kind not in NORMS:
        raise NumpyTransformerError(f"norm must be one of {tuple(NORMS)}, got {kind!r}")
    return NORMS[kind](d_model, eps, dtype)


class Embedding(Module):
    """Embedding table ``W`` (V, D), initialised N(0, 1/D) so that ``sqrt(D) * W`` has unit scale.

    The pad row starts at zero and receives no gradient from the lookup, so it stays
    zero, unless the matrix is tied to the output projection, whose pad logit does
    give it a gradient.
    """

    def __init__(self, vocab_size: int, d_model: int, rng: np.random.Generator, dtype=np.float64,
                 scale: bool = True, pad_id: Optional[int] = 0):
        super().__init__()
        vocab_size, d_model = check_positive_int(vocab_size, "vocab_size"), check_positive_int(d_model, "d_model")
        pad_id = None if pad_id is None else check_int(pad_id, "pad_id", 0, vocab_size - 1)
        W = (rng.standard_normal((vocab_size, d_model)) * d_model ** -0.5).astype(dtype)
        if pad_id is not None:
            W[pad_id] = 0
        self.add_param("W", W)
        self.scale = float(np.sqrt(d_model)) if scale else 1.0
        self.pad_id = pad_id

    def forward(self, ids: np.ndarray) -> np.ndarray:
        """ids: ints in [0, V), any shape (...) -> (..., D)."""
        if needs_checks():  # False inside a model, which has checked its own inputs
            ids = check_ids(ids, "ids", self.params["W"].shape[0], ndim=None)
        out, self._cache = embedding_forward(ids, self.params["W"], self.scale, self.pad_id)
        return out

    def backward(self, dout: np.ndarray) -> None:
        """Accumulates ``dW``; ids have no gradient, so nothing is returned."""
        self.grads["W"] += embedding_backward(dout, self._pop_cache())
        return None


class SharedEmbedding(Module):
    """A second reader of another :class:`Embedding`'s matrix: the decoder's, in a model whose source
    and target share one vocabulary, where section 3.4 shares one weight matrix between the two
    embedding layers (the encoder's :class:`Embedding` owns it).

    It looks ids up with the same pair, and its backward adds ``dW`` to the owner's gradient,
    so the shared matrix receives the sum of both uses, as a tied output projection does.
    """

    def __init__(self, owner: Embedding):
        super().__init__()
        object.__setattr__(self, "owner", owner)  # not a child: the matrix is named under its owner
        self.scale, self.pad_id = owner.scale, owner.pad_id

    def forward(self, ids: np.ndarray) -> np.ndarray:
        """ids: ints in [0, V), any shape (...) -> (..., D)."""
        if needs_checks():
            ids = check_ids(ids, "ids", self.owner.params["W"].shape[0], ndim=None)
        out, self._cache = embedding_forward(ids, self.owner.params["W"], self.scale, self.pad_id)
        return out

    def backward(self, dout: np.ndarray) -> None:
        """Adds ``dW`` to the owner's gradient; ids have no gradient, so nothing is returned."""
        self.owner.grads["W"] += embedding_backward(dout, self._pop_cache())
        return None


class RegionEmbedding(Module):
    """The tables ``W`` (2k, V, D) of a token's ``k`` neighbours on each side
    (:func:`region_embedding_forward`), initialised as :class:`Embedding` is; the pad rows start at zero."""

    def __init__(self, vocab_size: int, d_model: int, k: int, rng: np.random.Generator, dtype=np.float64,
                 scale: bool = True, pad_id: int = 0):
        super().__init__()
        vocab_size, d_model = check_positive_int(vocab_size, "vocab_size"), check_positive_int(d_model, "d_model")
        k, pad_id = check_positive_int(k, "k"), check_int(pad_id, "pad_id", 0, vocab_size - 1)
        W = (rng.standard_normal((2 * k, vocab_size, d_model)) * d_model ** -0.5).astype(dtype)
        W[:, pad_id] = 0
        self.add_param("W", W)
        self.scale = float(np.sqrt(d_model)) if scale else 1.0
        self.pad_id = pad_id

    def forward(self, ids: np.ndarray) -> np.ndarray:
        """ids (B, T) in [0, V) -> (B, T, D)."""
        if needs_checks():
            ids = check_ids(ids, "ids", self.params["W"].shape[1])
        out, self._cache = region_embedding_forward(ids, self.params["W"], self.scale, self.pad_id)
        return out

    def backward(self, dout: np.ndarray) -> None:
        """Accumulates ``dW``; ids have no gradient, so nothing is returned."""
        self.grads["W"] += region_embedding_backward(dout, self._pop_cache())
        return None


class PositionalEncoding(Module):
    """Adds the fixed sinusoidal table; it has no parameters."""

    def __init__(self, max_len: int, d_model: int, dtype=np.float64):
        super().__init__()
        max_len, d_model = check_positive_int(max_len, "max_len"), check_positive_int(d_model, "d_model")
        self.pe = sinusoidal_encoding(max_len, d_model, dtype)

    def forward(self, x: np.ndarray, offset: int = 0) -> np.ndarray:
        """x (B, T, D) -> x + PE[offset:offset + T]."""
        _check_input(x, offset, self.pe)
        out, _ = positional_forward(x, self.pe, offset)
        self._cache = True
        return out

    def backward(self, dout: np.ndarray) -> np.ndarray:
        self._pop_cache()
        return positional_backward(dout)


class LearnedPositionalEmbedding(Module):
    """GPT's position table ``P`` (max_len, D), a parameter initialised N(0, 0.02^2) as in GPT-2."""

    def __init__(self, max_len: int, d_model: int, rng: np.random.Generator, dtype=np.float64, std: float = 0.02):
        super().__init__()
        max_len, d_model = check_positive_int(max_len, "max_len"), check_positive_int(d_model, "d_model")
        std = check_real(std, "std", 0.0)
        self.add_param("P", (rng.standard_normal((max_len, d_model)) * std).astype(dtype))

    def forward(self, x: np.ndarray, offset: int = 0) -> np.ndarray:
        """x (B, T, D) -> x + P[offset:offset + T]."""
        _check_input(x, offset, self.params["P"])
        out, self._cache = learned_positional_forward(x, self.params["P"], offset)
        return out

    def backward(self, dout: np.ndarray) -> np.ndarray:
        dx, dP = learned_positional_backward(dout, self._pop_cache())
        self.grads["P"] += dP
        return dx


class FeedForward(Module):
    """Position-wise FFN with parameters ``W1, b1, W2, b2``.

    ``activation``: ``"relu"`` (the paper's), ``"gelu"`` (BERT's) or ``"gelu_tanh"`` (GPT-2's tanh form).
    """

    ACTIVATIONS = ("relu", "gelu", "gelu_tanh")

    def __init__(self, d_model: int, d_ff: int, rng: np.random.Generator, dtype=np.float64,
                 activation: str = "relu"):
        super().__init__()
        d_model, d_ff = check_positive_int(d_model, "d_model"), check_positive_int(d_ff, "d_ff")
        if activation not in self.ACTIVATIONS:
            raise NumpyTransformerError(f"activation must be one of {self.ACTIVATIONS}, got {activation!r}")
        self.activation = activation
        self.add_param("W1", xavier_uniform(rng, d_model, d_ff, dtype))
        self.add_param("b1", np.zeros(d_ff, dtype=dtype))
        self.add_param("W2", xavier_uniform(rng, d_ff, d_model, dtype))
        self.add_param("b2", np.zeros(d_model, dtype=dtype))

    def forward(self, x: np.ndarray) -> np.ndarray:
        """x (..., D) of the weights' dtype, finite -> (..., D)."""
        if needs_checks():  # False inside a model, which has checked its own inputs
            check_float(x, "x", self.params["W1"].dtype, last_dim=self.params["W1"].shape[0])
        if self.activation == "relu":
            out, self._cache = ffn_forward(x, **self.params)
        else:
            out, self._cache = kernels.gelu_ffn_forward(x, **self.params, approximate=self.activation == "gelu_tanh")
        return out

    def backward(self, dout: np.ndarray) -> np.ndarray:
        backward = ffn_backward if self.activation == "relu" else gelu_ffn_backward
        dx, *dparams = backward(dout, self._pop_cache())
        for name, g in zip(("W1", "b1", "W2", "b2"), dparams):
            self.grads[name] += g
        return dx


class SwiGLU(Module):
    """The gated FFN of :mod:`~numpytransformer.core.swiglu` with weights ``W1, V`` (D, D_ff) and ``W2``
    (D_ff, D), Xavier-initialised, and no biases (as in LLaMA)."""

    def __init__(self, d_model: int, d_ff: int, rng: np.random.Generator, dtype=np.float64):
        super().__init__()
        d_model, d_ff = check_positive_int(d_model, "d_model"), check_positive_int(d_ff, "d_ff")
        self.add_param("W1", xavier_uniform(rng, d_model, d_ff, dtype))
        self.add_param("V", xavier_uniform(rng, d_model, d_ff, dtype))
        self.add_param("W2", xavier_uniform(rng, d_ff, d_model, dtype))

    def forward(self, x: np.ndarray) -> np.ndarray:
        """x (..., D) of the weights' dtype, finite -> (..., D)."""
        if needs_checks():  # False inside a model, which has checked its own inputs
            check_float(x, "x", self.params["W1"].dtype, last_dim=self.params["W1"].shape[0])
        out, self._cache = swiglu_forward(x, **self.params)
        return out

    def backward(self, dout: np.ndarray) -> np.ndarray:
        dx, *dparams = swiglu_backward(dout, self._pop_cache())
        for name, g in zip(("W1", "V", "W2"), dparams):
            self.grads[name] += g
        return dx


def make_ffn(d_model: int, d_ff: int, rng: np.random.Generator, dtype, activation: str) -> Module:
    """The FFN sublayer for ``activation``: :class:`SwiGLU` for ``"swiglu"``, else a :class:`FeedForward`."""
    if activation == "swiglu":
        return SwiGLU(d_model, d_ff, rng, dtype)
    return FeedForward(d_model, d_ff, rng, dtype, activation)


class MultiHeadAttention(Module):
    """Multi-head attention with parameters ``W_q, b_q, W_k, b_k, W_v, b_v, W_o, b_o``.

    ``forward(x)`` is self-attention; ``forward(x, memory)`` is cross-attention. With
    ``attention_dropout`` > 0 (BERT's and GPT-2's ``attn_pdrop``) the attention weights are
    dropped while training, with masks drawn from ``drop_rng`` (the model's dropout generator).
    """

    def __init__(self, d_model: int, n_heads: int, rng: np.random.Generator, dtype=np.float64,
                 attention_dropout: float = 0.0, drop_rng: Optional[np.random.Generator] = None):
        super().__init__()
        d_model, n_heads = check_positive_int(d_model, "d_model"), check_positive_int(n_heads, "n_heads")
        if d_model % n_heads != 0:
            raise NumpyTransformerError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.attention_dropout = check_real(attention_dropout, "attention_dropout", 0.0, 1.0, high_open=True)
        self.rng = np.random.default_rng() if attention_dropout and drop_rng is None else drop_rng
        self.attention_weights: Optional[np.ndarray] = None  # (B, H, T, S) of the last forward
        for name in PARAM_NAMES:
            if name.startswith("W"):
                self.add_param(name, xavier_uniform(rng, d_model, d_model, dtype))
            else:
                self.add_param(name, np.zeros(d_model, dtype=dtype))

    def forward(self, x: np.ndarray, x_kv: Optional[np.ndarray] = None, mask: Optional[np.ndarray] = None,
                kv_cache: Optional[dict] = None):
        """Attention of ``x`` (B, T, D) over itself, or over ``x_kv`` (B, S, D): the pair
        :func:`~numpytransformer.core.multihead.multihead_attention_forward` (or its fast form).

        Notes
        -----
        **The KV cache.** ``kv_cache`` (a dict, inference only) turns this into the incremental
        variant of the pair that decoding runs, one position (or a few) at a time. It computes
        the queries, keys and values of the new positions only, with the pair's projections,
        then their attention over every key so far: in self-attention the new keys and values
        are appended to those cached by earlier calls (``append_positions``), in cross-attention
        the memory's are computed at the first call and reused. It keeps no cache for a backward.

        Why this equals the full forward on the prefix: each projection acts on each position
        alone, so the keys and values of earlier positions do not change when later ones arrive,
        and the cached ones are those the full forward computes; under the causal mask of the
        prefix (``nn.gpt.prefix_mask``), a new position attends to the earlier positions and
        itself, which are exactly the cached keys and the new ones; the merge and the output
        projection act on each position alone again. So its output is the last rows of the full
        forward over the whole prefix (``tests/test_multihead.py`` checks it).
        """
        if needs_checks():  # False inside a model, which has checked its own inputs
            mask = self._check_inputs(x, x_kv, mask, kv_cache is None)
        if kv_cache is not None:
            return self._forward_cached(x, x_kv, mask, kv_cache)
        dropout_p = self.attention_dropout if self.training else 0.0
        out, self._cache = kernels.multihead_attention_forward(x, x_kv, **self.params, n_heads=self.n_heads, mask=mask,
                                                               dropout_p=dropout_p, rng=self.rng)
        self.attention_weights = self._cache.att.weights  # before dropout
        return out

    def _check_inputs(self, x, x_kv, mask, whole: bool):
        """x (B, T, D) and x_kv (B, S, D) of the weights' dtype, finite; mask (checked when the keys
        are all given, ``whole``) broadcastable to (B, H, T, S), as bool."""
        W = self.params["W_q"]
        check_float(x, "x", W.dtype, shape=(None, None, W.shape[0]))
        if x_kv is not None:
            check_float(x_kv, "x_kv", W.dtype, shape=(None, None, W.shape[0]))
            check_same_batch(x, "x", x_kv, "x_kv")
        if mask is None or not whole:
            return mask
        keys = x if x_kv is None else x_kv
        return check_mask(mask, "mask", (x.shape[0], self.n_heads, x.shape[1], keys.shape[1]))

    def _forward_cached(self, x, x_kv, mask, kv_cache: dict) -> np.ndarray:
        """The KV-cache variant of :meth:`forward` (see its notes)."""
        p, H = self.params, self.n_heads

        def project(a, name):  # linear_forward: one (B*T, D) @ (D, D) product, not one per sentence
            return split_heads(kernels.linear_forward(a, p["W_" + name], p["b_" + name])[0], H)

        if x_kv is None:
            q, k, v = project(x, "q"), project(x, "k"), project(x, "v")  # (B, H, T_new, D/H)
            if "k" in kv_cache:
                k = kernels.append_positions(kv_cache["k"], k)  # (B, H, T_so_far, D/H)
                v = kernels.append_positions(kv_cache["v"], v)
            kv_cache["k"], kv_cache["v"] = k, v
        else:
            q = project(x, "q")
            if "k" not in kv_cache:
                kv_cache["k"], kv_cache["v"] = project(x_kv, "k"), project(x_kv, "v")  # (B, H, S, D/H)
            k, v = kv_cache["k"], kv_cache["v"]
        att, att_cache = kernels.attention_forward(q, k, v, mask)  # (B, H, T_new, D/H)
        self.attention_weights = att_cache.weights
        self._cache = None  # inference only: there is nothing to differentiate
        return kernels.linear_forward(merge_heads(att), p["W_o"], p["b_o"])[0]

    def backward(self, dout: np.ndarray):
        """Returns ``dx`` for self-attention, ``(dx, dx_kv)`` for cross-attention."""
        dx_q, dx_kv, *dparams = kernels.multihead_attention_backward(dout, self._pop_cache())
        for name, g in zip(PARAM_NAMES, dparams):
            self.grads[name] += g
        return dx_q if dx_kv is None else (dx_q, dx_kv)


class GroupedQueryAttention(Module):
    """Self-attention with ``n_kv_heads`` shared key and value heads, and positions inside it.

    The pair is :func:`~numpytransformer.core.gqa.gqa_forward`; parameters ``W_q, b_q, W_o, b_o`` of
    width D and ``W_k, b_k, W_v, b_v`` of width ``n_kv_heads * D / n_heads``. ``positions``:
    ``"rotary"`` rotates queries and keys by their positions, ``"alibi"`` biases the scores,
    None leaves positions to the input. ``forward(x, mask=..., kv_cache=...)`` as
    :class:`MultiHeadAttention`'s self-attention.
    """

    POSITIONS = (None, "rotary", "alibi")

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, rng: np.random.Generator, dtype=np.float64,
                 positions: Optional[str] = None):
        super().__init__()
        d_model, n_heads = check_positive_int(d_model, "d_model"), check_positive_int(n_heads, "n_heads")
        n_kv_heads = check_positive_int(n_kv_heads, "n_kv_heads")
        if d_model % n_heads != 0 or n_heads % n_kv_heads != 0:
            raise NumpyTransformerError(f"d_model={d_model} must be divisible by n_heads={n_heads}, and n_heads by "
                                        f"n_kv_heads={n_kv_heads}")
        if positions not in self.POSITIONS:
            raise NumpyTransformerError(f"positions must be one of {self.POSITIONS}, got {positions!r}")
        if positions == "rotary" and (d_model // n_heads) % 2:
            raise NumpyTransformerError(f"rotary positions rotate pairs of features: d_model / n_heads = "
                                        f"{d_model // n_heads} must be even")
        self.n_heads, self.n_kv_heads, self.positions = n_heads, n_kv_heads, positions
        self.attention_weights: Optional[np.ndarray] = None  # (B, H, T, S) of the last forward
        d_kv = n_kv_heads * (d_model // n_heads)
        for name, d_out in (("q", d_model), ("k", d_kv), ("v", d_kv), ("o", d_model)):
            self.add_param("W_" + name, xavier_uniform(rng, d_model, d_out, dtype))
            self.add_param("b_" + name, np.zeros(d_out, dtype=dtype))

    def forward(self, x: np.ndarray, mask: Optional[np.ndarray] = None, kv_cache: Optional[dict] = None):
        """x (B, T, D) -> (B, T, D). ``kv_cache`` (a dict, inference only): the incremental form, as
        :class:`MultiHeadAttention`'s, whose cache holds the ``n_kv_heads`` rotated keys and values
        of the earlier positions; the new positions follow them."""
        if needs_checks():  # False inside a model, which has checked its own inputs
            W = self.params["W_q"]
            check_float(x, "x", W.dtype, shape=(None, None, W.shape[0]))
            if mask is not None and kv_cache is None:
                mask = check_mask(mask, "mask", (x.shape[0], self.n_heads, x.shape[1], x.shape[1]))
        if kv_cache is not None:
            return self._forward_cached(x, mask, kv_cache)
        out, self._cache = gqa_forward(x, **self.params, n_heads=self.n_heads, n_kv_heads=self.n_kv_heads,
                                       mask=mask, positions=self.positions)
        self.attention_weights = self._cache.att.weights
        return out

    def _forward_cached(self, x: np.ndarray, mask, kv_cache: dict) -> np.ndarray:
        """The pair's steps for the new positions ``held .. held+T-1``, over the cached keys and values."""
        p, H, H_kv = self.params, self.n_heads, self.n_kv_heads
        held = kv_cache["k"].shape[2] if "k" in kv_cache else 0

        def project(name, heads):
            return split_heads(kernels.linear_forward(x, p["W_" + name], p["b_" + name])[0], heads)

        q, k, v = project("q", H), project("k", H_kv), project("v", H_kv)  # (B, H or H_kv, T_new, D/H)
        if self.positions == "rotary":
            ### BEGIN SOLUTION 12.2: the positions of the new tokens, after the held ones, and q and k rotated by them
            positions = np.arange(held, held + x.shape[1])  # the new tokens follow the cached ones
            q, k = rotary_forward(q, positions)[0], rotary_forward(k, positions)[0]
            ### END SOLUTION
        if "k" in kv_cache:
            k = kernels.append_positions(kv_cache["k"], k)  # (B, H_kv, T_so_far, D/H)
            v = kernels.append_positions(kv_cache["v"], v)
        kv_cache["k"], kv_cache["v"] = k, v
        k, v = repeat_kv(k, H // H_kv), repeat_kv(v, H // H_kv)  # (B, H, T_so_far, D/H)
        if self.positions == "alibi":
            att, att_cache = alibi_attention_forward(q, k, v, alibi_slopes(H), mask, held)
        else:
            att, att_cache = kernels.attention_forward(q, k, v, mask)
        self.attention_weights = att_cache.weights
        self._cache = None  # inference only: there is nothing to differentiate
        return kernels.linear_forward(merge_heads(att), p["W_o"], p["b_o"])[0]

    def backward(self, dout: np.ndarray) -> np.ndarray:
        dx, *dparams = gqa_backward(dout, self._pop_cache())
        for name, g in zip(PARAM_NAMES, dparams):
            self.grads[name] += g
        return dx
