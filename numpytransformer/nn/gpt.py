"""A decoder-only Transformer language model (GPT), built from the encoder-decoder's parts.

GPT (Radford et al., 2018) keeps the decoder of "Attention Is All You Need" and drops
what a decoder needs a source for: there is no encoder, so there is no cross-attention.
What is left of a decoder layer is masked self-attention and the FFN, which is exactly an
:class:`~numpytransformer.nn.blocks.EncoderLayer` run with a causal mask. GPT-2 (Radford et
al., 2019) moved the LayerNorm in front of each sublayer (pre-LN) and added one after the
last layer; the output projection is the token embedding, transposed (tied weights).

.. math:: p(x_{t+1} \\mid x_{\\le t}) = \\text{softmax}\\big(\\text{LN}(h^{(N)}_t)\\, E^T + b\\big)

where :math:`h^{(0)} = E[x] + P` and each of the N blocks is
:math:`h \\leftarrow h + \\text{MHA}(\\text{LN}(h))`, :math:`h \\leftarrow h + \\text{FFN}(\\text{LN}(h))`.
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from ..core.attention import causal_mask
from .config import TransformerConfig
from .modules import Dropout
from .modules import Embedding
from ..errors import NumpyTransformerError
from .modules import make_norm
from .blocks import EncoderLayer, ParallelBlock
from .models import OutputProjection, _Model, check_kv_caches
from .module import ModuleList
from .modules import LearnedPositionalEmbedding, PositionalEncoding
from ..core.losses import softmax_cross_entropy_forward
from ..validation import check_ids, check_mask, inputs_checked

__all__ = ["GPTBlock", "TransformerLM", "prefix_mask", "next_token_nats"]


def prefix_mask(T: int, offset: int) -> np.ndarray:
    """Causal mask (1, 1, T, offset + T) for T new queries at positions ``offset .. offset+T-1``
    over every key so far: query ``t`` sees keys ``s <= offset + t``."""
    s = np.arange(offset + T)[None, :]
    t = np.arange(T)[:, None] + offset
    return (s <= t)[None, None]


def next_token_nats(model, x: np.ndarray, y: np.ndarray, vocab_size: int, budget: int = 2 ** 22) -> float:
    """The summed next-token loss in nats of windows ``x`` (N, T) whose next ids are ``y`` (N, T),
    in the model's current mode: the training loss in float64 (the pair of
    :func:`~numpytransformer.core.losses.cross_entropy`, no smoothing, no padding) times the number of
    targets. A few windows at a time, so that their float64 probabilities hold at most about
    ``budget`` numbers (32 MB) whatever the vocabulary."""
    rows = max(1, budget // (x.shape[1] * vocab_size))
    nats = 0.0
    for i in range(0, len(x), rows):
        targets = y[i:i + rows]  # (rows, T)
        mean, _ = softmax_cross_entropy_forward(model.forward(x[i:i + rows]).astype(np.float64), targets)
        nats += mean * targets.size
    return nats


class GPTBlock(EncoderLayer):
    """One decoder-only block: causal self-attention, then the FFN, each in a residual.

    It is an :class:`~numpytransformer.nn.blocks.EncoderLayer` (same parameters, same
    backward); only the forward differs, to pass the KV cache of incremental decoding to
    the self-attention.
    """

    def forward(self, x: np.ndarray, mask: Optional[np.ndarray] = None, kv_cache: Optional[dict] = None):
        """x: (B, T, D); mask: causal, broadcastable to (B, H, T, S); ``kv_cache`` (inference): a dict."""
        x = self.self_attn_sublayer(x, lambda h: self.self_attn(h, mask=mask, kv_cache=kv_cache))
        return self.ffn_sublayer(x, self.ffn)


class TransformerLM(_Model):
    """Decoder-only language model: ids (B, T) -> next-token logits (B, T, V).

    Uses ``cfg.src_vocab_size`` (V), ``d_model``, ``n_heads``, ``n_layers``, ``d_ff``,
    ``max_len`` (the context, GPT's ``block_size``), ``dropout`` (on embeddings plus
    positions and on every sublayer's output), ``norm_first`` (pre-LN with a final
    LayerNorm, GPT-2's placement; False: the paper's post-LN), ``tie_embeddings`` (output
    projection = embedding transposed), ``positions`` ("sinusoidal" or "learned" tables, or
    "rotary" or "alibi" inside the attention, with no table), ``scale_embeddings``, ``norm``
    ("layernorm" or "rmsnorm"), ``activation`` (``"swiglu"`` too), ``n_kv_heads`` (grouped-query
    attention), ``block`` ("parallel": :class:`~numpytransformer.nn.blocks.ParallelBlock`), ``dtype`` and
    ``seed``. Every id is a real token: there is no
    padding, so ``pad_id`` is not used and every embedding row is trained.

    >>> cfg = TransformerConfig(src_vocab_size=65, d_model=32, n_heads=4, n_layers=2, d_ff=128,
    ...                         max_len=64, norm_first=True, tie_embeddings=True, positions="learned")
    >>> model = TransformerLM(cfg)
    >>> logits = model.forward(ids)   # (B, T) ids -> (B, T, 65)
    """

    ties_embeddings = learns_positions = can_be_causal = biases_distance = parallel_blocks = True  # causal whatever cfg.causal says

    def __init__(self, cfg: TransformerConfig):
        super().__init__(cfg)
        dt, D = cfg.np_dtype, cfg.d_model
        self.embed = Embedding(cfg.src_vocab_size, D, self.init_rng, dt, cfg.scale_embeddings, pad_id=None)
        if cfg.positions == "learned":
            self.pos = LearnedPositionalEmbedding(cfg.max_len, D, self.init_rng, dt)
        elif cfg.positions == "sinusoidal":
            self.pos = PositionalEncoding(cfg.max_len, D, dt)
        else:  # rotary or alibi: the attention places the tokens, nothing is added to them
            self.pos = None
        inner = cfg.positions if cfg.positions in ("rotary", "alibi") else None
        self.drop = Dropout(cfg.dropout, self.rng)
        if cfg.block == "parallel":
            self.layers = ModuleList([
                ParallelBlock(D, cfg.n_heads, cfg.d_ff, cfg.dropout, self.init_rng, self.rng, cfg.layernorm_eps, dt,
                              cfg.activation, cfg.attention_dropout, cfg.norm, cfg.n_kv_heads, inner)
                for _ in range(cfg.n_layers)
            ])
        else:
            self.layers = ModuleList([
                GPTBlock(D, cfg.n_heads, cfg.d_ff, cfg.dropout, self.init_rng, self.rng, cfg.norm_first,
                         cfg.layernorm_eps, dt, cfg.activation, cfg.attention_dropout, cfg.norm, cfg.n_kv_heads, inner)
                for _ in range(cfg.n_layers)
            ])
        self.final_norm = make_norm(cfg.norm, D, cfg.layernorm_eps, dt) if cfg.norm_first else None
        self.out = OutputProjection(D, cfg.src_vocab_size, self.init_rng, dt,
                                    self.embed if cfg.tie_embeddings else None, cfg.output_bias)

    @property
    def vocab_size(self) -> int:
        return self.cfg.src_vocab_size

    def _hidden(self, ids: np.ndarray, mask: np.ndarray, kv_caches: Optional[List[dict]], offset: int):
        x = self.embed(ids)  # (B, T, D)
        x = self.drop(self.pos(x, offset) if self.pos is not None else x)
        for i, layer in enumerate(self.layers):
            x = layer(x, mask, None if kv_caches is None else kv_caches[i])
        return self.final_norm(x) if self.final_norm is not None else x

    def forward(self, ids, attention_mask=None) -> np.ndarray:
        """ids: int (B, T) with T <= max_len -> logits (B, T, V); position t sees ids[:, :t+1] only.

        ``attention_mask`` (B, T) bool or 0/1, optional: 0 at padding, whose keys no position
        attends to (Hugging Face's argument of that name).
        """
        ids = check_ids(ids, "ids", self.cfg.src_vocab_size, self.cfg.max_len)
        mask = causal_mask(ids.shape[1])  # (1, 1, T, T)
        if attention_mask is not None:
            mask = mask & check_mask(attention_mask, "attention_mask", ids.shape)[:, None, None, :]  # (B, 1, T, T)
        self._out_shape = None
        with inputs_checked():  # checked once here: the modules skip their own checks
            logits = self.out(self._hidden(ids, mask, None, 0))
        self._out_shape = logits.shape  # backward may now run
        return logits

    def backward(self, dlogits: np.ndarray) -> None:
        """Backpropagate ``dL/dlogits`` (B, T, V), accumulating every parameter's gradient.

        With tied weights the embedding matrix gets two contributions that add: the
        scatter-add of the lookup and ``dlogits^T h`` of the output projection.
        """
        self._check_dout(dlogits)
        d = self.out.backward(dlogits)
        if self.final_norm is not None:
            d = self.final_norm.backward(d)
        for layer in reversed(self.layers):
            d = layer.backward(d)
        d = self.drop.backward(d)
        self.embed.backward(self.pos.backward(d) if self.pos is not None else d)

    def new_kv_caches(self) -> List[dict]:
        """Empty caches for :meth:`forward_cached`, one per layer."""
        return [{} for _ in self.layers]

    def forward_cached(self, ids, kv_caches: List[dict], position: int) -> np.ndarray:
        """Inference: logits (B, T, V) of the new ids (B, T) at ``position, ..., position+T-1``.

        The keys and values of earlier positions come from ``kv_caches`` (see
        :meth:`new_kv_caches`), which this call extends. Equals the last T rows of
        ``forward`` on the whole sequence so far, in eval mode (no dropout).
        """
        ids = check_ids(ids, "ids", self.cfg.src_vocab_size, None)
        position = check_kv_caches(kv_caches, len(self.layers), position, self.cfg.max_len, ids.shape[0], None,
                                   "model.new_kv_caches()")
        if position + ids.shape[1] > self.cfg.max_len:
            raise NumpyTransformerError(f"position {position} + {ids.shape[1]} new ids is past the context "
                                        f"max_len={self.cfg.max_len}")
        if self.training:
            raise NumpyTransformerError("forward_cached is for inference: call model.eval() first")
        self._out_shape = None  # no backward for a cached forward
        with inputs_checked():
            return self.out(self._hidden(ids, prefix_mask(ids.shape[1], position), kv_caches, position))
