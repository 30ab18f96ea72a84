"""The full encoder-decoder Transformer and two encoder-only models."""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np

from .attention import causal_mask, padding_mask
from .config import TransformerConfig
from .dropout import Dropout
from .embedding import Embedding
from .layernorm import LayerNorm
from .layers import DecoderLayer, EncoderLayer
from .linear import Linear, linear_backward, linear_forward
from .module import Module, ModuleList
from .multihead import MultiHeadAttention
from .pooling import first_token_backward, first_token_forward, mean_pool_backward, mean_pool_forward
from .positional import PositionalEncoding
from .validation import check_ids, check_same_batch

__all__ = ["Embedder", "Encoder", "Decoder", "OutputProjection", "Transformer",
           "TransformerTagger", "TransformerClassifier", "make_rngs"]


def make_rngs(seed: int):
    """Two independent generators from one seed: one for initial weights, one for dropout masks."""
    init_ss, drop_ss = np.random.SeedSequence(seed).spawn(2)
    return np.random.default_rng(init_ss), np.random.default_rng(drop_ss)


class Embedder(Module):
    """Token embedding (scaled by sqrt(d_model)) plus positional encoding, then dropout."""

    def __init__(self, vocab_size: int, cfg: TransformerConfig, init_rng, drop_rng):
        super().__init__()
        dt = cfg.np_dtype
        self.embed = Embedding(vocab_size, cfg.d_model, init_rng, dt, cfg.scale_embeddings, cfg.pad_id)
        self.pos = PositionalEncoding(cfg.max_len, cfg.d_model, dt)
        self.drop = Dropout(cfg.dropout, drop_rng)

    def forward(self, ids: np.ndarray, offset: int = 0) -> np.ndarray:
        """ids (B, T) -> (B, T, D); ``offset`` is the position of ``ids[:, 0]`` (incremental decoding)."""
        return self.drop(self.pos(self.embed(ids), offset))

    def backward(self, dout: np.ndarray) -> None:
        self.embed.backward(self.pos.backward(self.drop.backward(dout)))


class Encoder(Module):
    """Embedder, then ``n_layers`` encoder layers (and a final LayerNorm in pre-LN)."""

    def __init__(self, cfg: TransformerConfig, init_rng, drop_rng, vocab_size: Optional[int] = None):
        super().__init__()
        dt = cfg.np_dtype
        self.embedder = Embedder(vocab_size or cfg.src_vocab_size, cfg, init_rng, drop_rng)
        self.layers = ModuleList([
            EncoderLayer(cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.dropout, init_rng, drop_rng,
                         cfg.norm_first, cfg.layernorm_eps, dt)
            for _ in range(cfg.n_layers)
        ])
        self.final_norm = LayerNorm(cfg.d_model, cfg.layernorm_eps, dt) if cfg.norm_first else None

    def forward(self, src: np.ndarray, src_mask: Optional[np.ndarray]) -> np.ndarray:
        """src (B, S) ids, src_mask (B, 1, 1, S) -> memory (B, S, D)."""
        x = self.embedder(src)
        for layer in self.layers:
            x = layer(x, src_mask)
        return self.final_norm(x) if self.final_norm is not None else x

    def backward(self, dout: np.ndarray) -> None:
        d = self.final_norm.backward(dout) if self.final_norm is not None else dout
        for layer in reversed(self.layers):
            d = layer.backward(d)
        self.embedder.backward(d)


class Decoder(Module):
    """Embedder, then decoder layers (and a final LayerNorm in pre-LN); returns hidden states."""

    def __init__(self, cfg: TransformerConfig, init_rng, drop_rng):
        super().__init__()
        dt = cfg.np_dtype
        self.embedder = Embedder(cfg.tgt_vocab_size, cfg, init_rng, drop_rng)
        self.layers = ModuleList([
            DecoderLayer(cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.dropout, init_rng, drop_rng,
                         cfg.norm_first, cfg.layernorm_eps, dt)
            for _ in range(cfg.n_decoder_layers)
        ])
        self.final_norm = LayerNorm(cfg.d_model, cfg.layernorm_eps, dt) if cfg.norm_first else None

    def forward(self, tgt: np.ndarray, memory: np.ndarray, memory_mask: Optional[np.ndarray],
                self_mask: Optional[np.ndarray], kv_caches: Optional[List[dict]] = None,
                offset: int = 0) -> np.ndarray:
        """tgt (B, T) ids -> hidden states (B, T, D).

        ``kv_caches`` (inference): one dict per layer, filled step by step; ``offset``
        is then the position of ``tgt[:, 0]``.
        """
        x = self.embedder(tgt, offset)
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, self_mask, memory_mask, None if kv_caches is None else kv_caches[i])
        return self.final_norm(x) if self.final_norm is not None else x

    def backward(self, dout: np.ndarray) -> np.ndarray:
        """Returns the gradient of the memory, summed over the layers that read it."""
        d = self.final_norm.backward(dout) if self.final_norm is not None else dout
        dmemory = None
        for layer in reversed(self.layers):
            d, dm = layer.backward(d)
            dmemory = dm if dmemory is None else dmemory + dm
        self.embedder.backward(d)
        return dmemory


class OutputProjection(Module):
    """Hidden states to vocabulary logits, ``h W + b``.

    With ``tied`` (an :class:`Embedding`), ``W`` is the embedding matrix transposed
    (section 3.4 of the paper): the weight lives in the embedding and its gradient
    is accumulated there, so the shared matrix receives the sum of both uses.
    """

    def __init__(self, d_model: int, vocab_size: int, init_rng, dtype, tied: Optional[Embedding] = None):
        super().__init__()
        # Not registered as a child: the shared matrix is already named under the embedding.
        object.__setattr__(self, "tied", tied)
        if tied is None:
            self.linear = Linear(d_model, vocab_size, init_rng, dtype)
        else:
            self.add_param("b", np.zeros(vocab_size, dtype=dtype))

    def forward(self, h: np.ndarray) -> np.ndarray:
        if self.tied is None:
            return self.linear(h)
        logits, self._cache = linear_forward(h, self.tied.params["W"].T, self.params["b"])
        return logits

    def backward(self, dlogits: np.ndarray) -> np.ndarray:
        if self.tied is None:
            return self.linear.backward(dlogits)
        dh, dWt, db = linear_backward(dlogits, self._pop_cache())
        self.tied.grads["W"] += dWt.T
        self.grads["b"] += db
        return dh


class _Model(Module):
    """What the three models share: config, generators, checks of ``dlogits``."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        if not isinstance(cfg, TransformerConfig):
            raise TypeError(f"cfg must be a TransformerConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        self.init_rng, self.rng = make_rngs(cfg.seed)
        self._out_shape = None

    def _check_dout(self, dout: np.ndarray, name: str = "dlogits") -> None:
        if self._out_shape is None:
            raise RuntimeError(f"{type(self).__name__}.backward was called before forward "
                               "(or twice for one forward): run forward first")
        if not isinstance(dout, np.ndarray) or dout.shape != self._out_shape:
            shape = getattr(dout, "shape", type(dout).__name__)
            raise ValueError(f"{name} must have the shape of the last forward's output {self._out_shape}, got {shape}")
        if dout.dtype != self.cfg.np_dtype:
            raise TypeError(f"{name} must be {self.cfg.dtype} like the model, got {dout.dtype}")
        if not np.isfinite(dout).all():
            raise ValueError(f"{name} holds NaN or infinite values (did the loss overflow?)")
        self._out_shape = None

    def attention_maps(self) -> Dict[str, np.ndarray]:
        """Attention weights (B, H, T, S) of the last forward, by module name."""
        return {name: m.attention_weights for name, m in self.named_modules()
                if isinstance(m, MultiHeadAttention) and m.attention_weights is not None}


class Transformer(_Model):
    """The encoder-decoder Transformer of "Attention Is All You Need".

    >>> cfg = TransformerConfig(src_vocab_size=50, tgt_vocab_size=60, d_model=32, n_heads=4,
    ...                         n_layers=2, d_ff=64, max_len=40, dropout=0.1, pad_id=0,
    ...                         dtype="float64", seed=0)
    >>> model = Transformer(cfg)
    >>> logits = model.forward(src, tgt_in)   # (B, S), (B, T) ids -> (B, T, V)
    """

    def __init__(self, cfg: TransformerConfig):
        super().__init__(cfg)
        self.encoder = Encoder(cfg, self.init_rng, self.rng)
        self.decoder = Decoder(cfg, self.init_rng, self.rng)
        tied = self.decoder.embedder.embed if cfg.tie_embeddings else None
        self.out = OutputProjection(cfg.d_model, cfg.tgt_vocab_size, self.init_rng, cfg.np_dtype, tied)

    def encode(self, src) -> tuple:
        """src ids (B, S) -> (memory (B, S, D), src_mask (B, 1, 1, S))."""
        src = check_ids(src, "src", self.cfg.src_vocab_size, self.cfg.max_len)
        src_mask = padding_mask(src, self.cfg.pad_id)
        self._out_shape = None  # the caches now belong to this call: no backward for an earlier forward
        return self.encoder(src, src_mask), src_mask

    def decode(self, tgt_in, memory: np.ndarray, src_mask: np.ndarray) -> np.ndarray:
        """tgt_in ids (B, T) and the encoder's memory -> logits (B, T, V)."""
        tgt_in = check_ids(tgt_in, "tgt_in", self.cfg.tgt_vocab_size, self.cfg.max_len)
        check_same_batch(memory, "src", tgt_in, "tgt_in")
        T = tgt_in.shape[1]
        self_mask = causal_mask(T) & padding_mask(tgt_in, self.cfg.pad_id)  # (B, 1, T, T)
        self._out_shape = None
        return self.out(self.decoder(tgt_in, memory, src_mask, self_mask))

    def decode_step(self, tokens, memory: np.ndarray, src_mask: np.ndarray, kv_caches: List[dict],
                    position: int) -> np.ndarray:
        """Inference: logits (B, 1, V) for the tokens (B, 1) at ``position``, reusing cached keys and values.

        ``kv_caches`` starts as ``[{} for _ in range(n_decoder_layers)]`` and is filled as
        decoding proceeds. Equals ``decode`` of the whole prefix at that position.
        """
        tokens = check_ids(tokens, "tokens", self.cfg.tgt_vocab_size)
        if position + tokens.shape[1] > self.cfg.max_len:
            raise ValueError(f"position {position} is past max_len={self.cfg.max_len} of the model's config")
        self._out_shape = None
        return self.out(self.decoder(tokens, memory, src_mask, None, kv_caches, position))

    def forward(self, src, tgt_in) -> np.ndarray:
        """Teacher-forced forward: src (B, S), tgt_in (B, T) int ids -> logits (B, T, V)."""
        memory, src_mask = self.encode(src)  # encode and decode check the ids and batch sizes
        logits = self.decode(tgt_in, memory, src_mask)
        self._out_shape = logits.shape  # backward may now run
        return logits

    def backward(self, dlogits: np.ndarray) -> None:
        """Backpropagate ``dL/dlogits`` through the whole model, accumulating every gradient."""
        self._check_dout(dlogits)
        dh = self.out.backward(dlogits)
        dmemory = self.decoder.backward(dh)
        self.encoder.backward(dmemory)


class TransformerTagger(_Model):
    """Encoder-only model that predicts one output token per input position.

    ``forward(x)`` maps ids (B, T) to logits (B, T, tgt_vocab_size); the reversal
    task's encoder-only formulation uses it.
    """

    def __init__(self, cfg: TransformerConfig):
        super().__init__(cfg)
        self.encoder = Encoder(cfg, self.init_rng, self.rng)
        self.out = Linear(cfg.d_model, cfg.tgt_vocab_size, self.init_rng, cfg.np_dtype)

    def forward(self, x) -> np.ndarray:
        x = check_ids(x, "x", self.cfg.src_vocab_size, self.cfg.max_len)
        logits = self.out(self.encoder(x, padding_mask(x, self.cfg.pad_id)))
        self._out_shape = logits.shape
        return logits

    def backward(self, dlogits: np.ndarray) -> None:
        self._check_dout(dlogits)
        self.encoder.backward(self.out.backward(dlogits))


class TransformerClassifier(_Model):
    """Encoder-only sequence classifier: encoder, pooling (mean of real positions, or
    the first position), then a linear layer to ``cfg.n_classes`` logits."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__(cfg)
        self.encoder = Encoder(cfg, self.init_rng, self.rng)
        self.out = Linear(cfg.d_model, cfg.n_classes, self.init_rng, cfg.np_dtype)
        self._pool_cache = None

    def forward(self, x) -> np.ndarray:
        """x: ids (B, T) -> logits (B, n_classes)."""
        x = check_ids(x, "x", self.cfg.src_vocab_size, self.cfg.max_len)
        h = self.encoder(x, padding_mask(x, self.cfg.pad_id))  # (B, T, D)
        if self.cfg.pooling == "mean":
            pooled, self._pool_cache = mean_pool_forward(h, x != self.cfg.pad_id)
        else:
            pooled, self._pool_cache = first_token_forward(h)
        logits = self.out(pooled)
        self._out_shape = logits.shape
        return logits

    def backward(self, dlogits: np.ndarray) -> None:
        self._check_dout(dlogits)
        dpooled = self.out.backward(dlogits)
        if self.cfg.pooling == "mean":
            dh = mean_pool_backward(dpooled, self._pool_cache)
        else:
            dh = first_token_backward(dpooled, self._pool_cache)
        self.encoder.backward(dh)
