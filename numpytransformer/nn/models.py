"""The full encoder-decoder Transformer and two encoder-only models."""
from __future__ import annotations

from typing import ClassVar, Dict, List, Optional

import numpy as np

from ..core.attention import causal_mask, padding_mask
from .config import TransformerConfig
from .modules import Dropout
from .modules import Embedding, RegionEmbedding, SharedEmbedding
from ..errors import NumpyTransformerError
from .modules import LayerNorm
from .blocks import DecoderLayer, EncoderLayer
from .modules import Linear
from ..core.kernels import kernels
from ..core.linear import linear_backward
from .module import Module, ModuleList
from .modules import GroupedQueryAttention, MultiHeadAttention, make_norm
from ..core.pooling import first_token_backward, first_token_forward, mean_pool_backward, mean_pool_forward
from .modules import LearnedPositionalEmbedding, PositionalEncoding
from ..validation import (
    check_float,
    check_ids,
    check_int,
    check_mask,
    check_same_batch,
    inputs_checked,
    needs_checks,
)

__all__ = ["Embedder", "Encoder", "Decoder", "OutputProjection", "Transformer",
           "TransformerTagger", "TransformerClassifier", "make_rngs"]


def make_rngs(seed: int):
    """Two independent generators from one seed: one for initial weights, one for dropout masks."""
    init_ss, drop_ss = np.random.SeedSequence(seed).spawn(2)
    return np.random.default_rng(init_ss), np.random.default_rng(drop_ss)


class Embedder(Module):
    """Token embedding (scaled by sqrt(d_model)) plus positional encoding, then dropout.

    With ``shared`` (an :class:`Embedding`), the tokens are looked up in that matrix instead of one of
    their own: the source and target of a joint vocabulary share it. With ``region`` k > 0, each
    token's vector also adds the embeddings of its k neighbours on each side
    (:class:`~numpytransformer.nn.modules.RegionEmbedding`): an encoder's choice, as it reads later tokens.

    BERT's front end is three options: ``learned`` positions (a table, not sinusoids), ``types``
    > 0 token-type (segment) vectors added to each token's, and ``norm``, a LayerNorm over the
    sum before the dropout: :math:`\text{Dropout}(\text{LN}(E[x] + P + E_{type}[s]))`.
    ``table=False``: no position table at all (rotary positions live in the attention).
    """

    def __init__(self, vocab_size: int, cfg: TransformerConfig, init_rng, drop_rng, shared: Optional[Embedding] = None,
                 region: int = 0, learned: bool = False, types: int = 0, norm: bool = False, table: bool = True):
        super().__init__()
        dt = cfg.np_dtype
        self.embed = (SharedEmbedding(shared) if shared is not None else
                      Embedding(vocab_size, cfg.d_model, init_rng, dt, cfg.scale_embeddings, cfg.pad_id))
        self.region = (RegionEmbedding(vocab_size, cfg.d_model, region, init_rng, dt, cfg.scale_embeddings, cfg.pad_id)
                       if region else None)
        self.pos = (None if not table else LearnedPositionalEmbedding(cfg.max_len, cfg.d_model, init_rng, dt)
                    if learned else PositionalEncoding(cfg.max_len, cfg.d_model, dt))
        self.types = Embedding(types, cfg.d_model, init_rng, dt, scale=False, pad_id=None) if types else None
        self.norm = LayerNorm(cfg.d_model, cfg.layernorm_eps, dt) if norm else None
        self.drop = Dropout(cfg.dropout, drop_rng)

    def forward(self, ids: np.ndarray, offset: int = 0, token_types: Optional[np.ndarray] = None) -> np.ndarray:
        """ids (B, T) -> (B, T, D); ``offset`` is the position of ``ids[:, 0]`` (incremental decoding);
        ``token_types`` (B, T) ids of the type table, all 0 if None (read only with ``types``)."""
        x = self.embed(ids)
        if self.region is not None:
            x = x + self.region(ids)
        if self.types is not None:
            x = x + self.types(np.zeros_like(ids) if token_types is None else token_types)
        if self.pos is not None:
            x = self.pos(x, offset)
        if self.norm is not None:
            x = self.norm(x)
        return self.drop(x)

    def backward(self, dout: np.ndarray) -> None:
        d = self.drop.backward(dout)
        if self.norm is not None:
            d = self.norm.backward(d)
        dx = self.pos.backward(d) if self.pos is not None else d
        self.embed.backward(dx)
        if self.region is not None:
            self.region.backward(dx)
        if self.types is not None:
            self.types.backward(dx)


class Encoder(Module):
    """Embedder, then ``n_layers`` encoder layers (and a final LayerNorm in pre-LN); with rotary
    positions the embedder adds no table and each self-attention rotates its queries and keys."""

    def __init__(self, cfg: TransformerConfig, init_rng, drop_rng, vocab_size: Optional[int] = None):
        super().__init__()
        dt = cfg.np_dtype
        self.embedder = Embedder(vocab_size or cfg.src_vocab_size, cfg, init_rng, drop_rng, region=cfg.region,
                                 learned=cfg.positions == "learned", types=cfg.type_vocab_size,
                                 norm=cfg.embedding_norm, table=cfg.positions != "rotary")
        self.layers = ModuleList([
            EncoderLayer(cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.dropout, init_rng, drop_rng,
                         cfg.norm_first, cfg.layernorm_eps, dt, cfg.activation, cfg.attention_dropout, cfg.norm,
                         cfg.n_kv_heads, "rotary" if cfg.positions == "rotary" else None)
            for _ in range(cfg.n_layers)
        ])
        self.final_norm = make_norm(cfg.norm, cfg.d_model, cfg.layernorm_eps, dt) if cfg.norm_first else None

    def forward(self, src: np.ndarray, src_mask: Optional[np.ndarray],
                token_types: Optional[np.ndarray] = None) -> np.ndarray:
        """src (B, S) ids, src_mask (B, 1, 1, S) -> memory (B, S, D); ``token_types`` (B, S), with
        ``cfg.type_vocab_size``."""
        x = self.embedder(src, token_types=token_types)
        for layer in self.layers:
            x = layer(x, src_mask)
        return self.final_norm(x) if self.final_norm is not None else x

    def backward(self, dout: np.ndarray) -> None:
        d = self.final_norm.backward(dout) if self.final_norm is not None else dout
        for layer in reversed(self.layers):
            d = layer.backward(d)
        self.embedder.backward(d)


class Decoder(Module):
    """Embedder, then decoder layers (and a final LayerNorm in pre-LN); returns hidden states.
    ``shared``: the encoder's :class:`Embedding`, read for the target ids too (a joint vocabulary)."""

    def __init__(self, cfg: TransformerConfig, init_rng, drop_rng, shared: Optional[Embedding] = None):
        super().__init__()
        dt = cfg.np_dtype
        self.embedder = Embedder(cfg.tgt_vocab_size, cfg, init_rng, drop_rng, shared)
        self.layers = ModuleList([
            DecoderLayer(cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.dropout, init_rng, drop_rng,
                         cfg.norm_first, cfg.layernorm_eps, dt, cfg.activation, cfg.attention_dropout, cfg.norm)
            for _ in range(cfg.n_decoder_layers)
        ])
        self.final_norm = make_norm(cfg.norm, cfg.d_model, cfg.layernorm_eps, dt) if cfg.norm_first else None

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
    ``bias=False``: logits ``h W`` without ``b``, as GPT-2's.
    """

    def __init__(self, d_model: int, vocab_size: int, init_rng, dtype, tied: Optional[Embedding] = None,
                 bias: bool = True):
        super().__init__()
        # Not registered as a child: the shared matrix is already named under the embedding.
        object.__setattr__(self, "tied", tied)
        if tied is None:
            self.linear = Linear(d_model, vocab_size, init_rng, dtype, bias=bias)
        elif bias:
            self.add_param("b", np.zeros(vocab_size, dtype=dtype))

    def forward(self, h: np.ndarray) -> np.ndarray:
        """h (..., D) -> logits (..., V)."""
        if self.tied is None:
            return self.linear(h)  # Linear checks h
        if needs_checks():  # False inside a model, which has checked its own inputs
            check_float(h, "h", self.tied.params["W"].dtype, last_dim=self.tied.params["W"].shape[1])
        logits, self._cache = kernels.linear_forward(h, self.tied.params["W"].T, self.params.get("b"))
        return logits

    def backward(self, dlogits: np.ndarray) -> np.ndarray:
        if self.tied is None:
            return self.linear.backward(dlogits)
        dh, dWt, db = linear_backward(dlogits, self._pop_cache())
        self.tied.grads["W"] += dWt.T
        if "b" in self.grads:
            self.grads["b"] += db
        return dh


def _cached_keys(cache: dict, part: Optional[str], i: int) -> Optional[np.ndarray]:
    """The keys (B, H, L, D/H) that layer ``i``'s ``part`` ("self" or "cross") attention has cached,
    or None; ``part`` None: ``cache`` is the attention's own cache (the GPT's layers have one)."""
    sub = cache if part is None else cache.get(part)
    if sub is None:
        return None
    keys = sub.get("k") if isinstance(sub, dict) else None
    if not isinstance(sub, dict) or (keys is not None and (not isinstance(keys, np.ndarray) or keys.ndim != 4)):
        where = f"kv_caches[{i}]" + (f"[{part!r}]" if part else "")
        raise NumpyTransformerError(f"{where} is not a cache this model filled: start from empty caches and let "
                                    "the model fill them")
    return keys


def check_kv_caches(kv_caches, n: int, position, max_len: int, B: int, part: Optional[str], start: str) -> int:
    """``position`` as an int, after checking that ``kv_caches`` is one dict per layer (``n``), each
    holding ``position`` positions of a batch of ``B`` in its ``part`` (see :func:`_cached_keys`);
    ``start``: how to make empty ones, for the message."""
    if not isinstance(kv_caches, (list, tuple)) or len(kv_caches) != n \
            or not all(isinstance(c, dict) for c in kv_caches):
        got = f"{len(kv_caches)} items" if isinstance(kv_caches, (list, tuple)) else type(kv_caches).__name__
        raise NumpyTransformerError(f"kv_caches must be a list of {n} dicts, one per layer (start with {start}), "
                                    f"got {got}")
    position = check_int(position, "position", 0, max_len - 1)
    for i, cache in enumerate(kv_caches):
        keys = _cached_keys(cache, part, i)
        held = 0 if keys is None else keys.shape[2]
        if held != position:
            raise NumpyTransformerError(f"position must be {held}, the number of positions already in "
                                        f"kv_caches[{i}], got {position}")
        if keys is not None and keys.shape[0] != B:
            raise NumpyTransformerError(f"kv_caches[{i}] holds a batch of {keys.shape[0]}, but the new ids have "
                                        f"{B} rows")
    return position


class _Model(Module):
    """What the models share: config, generators, checks of ``dlogits``."""

    #: Whether the model has a target embedding to tie to its output projection (``tie_embeddings``),
    #: learned positions (``positions="learned"``), a causal encoder (``causal``), and a source and a
    #: target embedding to share (``share_embeddings``), and an encoder whose embedding can read
    #: regions (``region``), self-attention with grouped key and value heads only (``n_kv_heads``), and
    #: causal attention that ALiBi can bias (``positions="alibi"``), and parallel blocks
    #: (``block="parallel"``): a config asking for what a model lacks is refused.
    ties_embeddings: ClassVar[bool] = False
    has_encoder: ClassVar[bool] = False
    shares_embeddings: ClassVar[bool] = False
    learns_positions: ClassVar[bool] = False
    can_be_causal: ClassVar[bool] = False
    groups_queries: ClassVar[bool] = True
    biases_distance: ClassVar[bool] = False
    parallel_blocks: ClassVar[bool] = False

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        if not isinstance(cfg, TransformerConfig):
            raise NumpyTransformerError(f"cfg must be a TransformerConfig, got {type(cfg).__name__}")
        name = type(self).__name__
        if cfg.tie_embeddings and not self.ties_embeddings:
            raise NumpyTransformerError(f"tie_embeddings (--tie) shares the target embedding with the output "
                                        f"projection; a {name} has no target embedding: leave it False")
        if cfg.share_embeddings and not self.shares_embeddings:
            raise NumpyTransformerError(f"share_embeddings shares the source embedding with the target's; a {name} "
                                        "has one embedding: leave it False")
        if cfg.positions == "alibi" and not self.biases_distance:
            raise NumpyTransformerError(f"positions='alibi' biases causal attention by distance, as in the language "
                                        f"model (TransformerLM); a {name} does not: use another positions")
        if cfg.n_kv_heads != cfg.n_heads and not self.groups_queries:
            raise NumpyTransformerError(f"n_kv_heads={cfg.n_kv_heads} groups the heads of self-attention only; a {name} "
                                        "also has cross-attention: leave it equal to n_heads")
        if cfg.positions != "sinusoidal" and not self.learns_positions:
            raise NumpyTransformerError(f"positions={cfg.positions!r} is the language model's (TransformerLM); a "
                                        f"{name} adds the paper's sinusoids: leave it 'sinusoidal'")
        if cfg.region and not self.has_encoder:
            raise NumpyTransformerError(f"region={cfg.region} is a region embedding in an encoder; a {name} has no "
                                        "encoder: leave it 0")
        if (cfg.type_vocab_size or cfg.embedding_norm) and not self.has_encoder:
            raise NumpyTransformerError(f"type_vocab_size and embedding_norm are options of an encoder's input; a "
                                        f"{name} has no encoder: leave them 0 and False")
        if cfg.block == "parallel" and not self.parallel_blocks:
            raise NumpyTransformerError(f"block='parallel' is the language model's (TransformerLM); a {name} has "
                                        "sequential layers: leave it 'sequential'")
        if cfg.causal and not self.can_be_causal:
            raise NumpyTransformerError(f"causal=True masks the classifier's encoder (TransformerClassifier); a "
                                        f"{name} does not read it: leave it False")
        self.cfg = cfg
        self.init_rng, self.rng = make_rngs(cfg.seed)
        self._out_shape = None

    def _check_dout(self, dout: np.ndarray, name: str = "dlogits") -> None:
        if self._out_shape is None:
            raise RuntimeError(f"{type(self).__name__}.backward was called before forward "
                               "(or twice for one forward): run forward first")
        if not isinstance(dout, np.ndarray) or dout.shape != self._out_shape:
            shape = getattr(dout, "shape", type(dout).__name__)
            raise NumpyTransformerError(f"{name} must have the shape of the last forward's output {self._out_shape}, "
                                        f"got {shape}")
        if dout.dtype != self.cfg.np_dtype:
            raise NumpyTransformerError(f"{name} must be {self.cfg.dtype} like the model, got {dout.dtype}")
        if not (np.isfinite(dout.max()) and np.isfinite(dout.min())):  # NaN or inf reach max/min: no (N, V) temporary
            raise NumpyTransformerError(f"{name} holds NaN or infinite values (did the loss overflow?)")
        self._out_shape = None

    def attention_maps(self) -> Dict[str, np.ndarray]:
        """Attention weights (B, H, T, S) of the last forward, by module name."""
        return {name: m.attention_weights for name, m in self.named_modules()
                if isinstance(m, (MultiHeadAttention, GroupedQueryAttention)) and m.attention_weights is not None}


class Transformer(_Model):
    """The encoder-decoder Transformer of "Attention Is All You Need".

    >>> cfg = TransformerConfig(src_vocab_size=50, tgt_vocab_size=60, d_model=32, n_heads=4,
    ...                         n_layers=2, d_ff=64, max_len=40, dropout=0.1, pad_id=0,
    ...                         dtype="float64", seed=0)
    >>> model = Transformer(cfg)
    >>> logits = model.forward(src, tgt_in)   # (B, S), (B, T) ids -> (B, T, V)
    """

    ties_embeddings = shares_embeddings = has_encoder = True
    groups_queries = False  # its decoder's cross-attention has as many key heads as query heads

    def __init__(self, cfg: TransformerConfig):
        super().__init__(cfg)
        self.encoder = Encoder(cfg, self.init_rng, self.rng)
        source = self.encoder.embedder.embed
        self.decoder = Decoder(cfg, self.init_rng, self.rng, source if cfg.share_embeddings else None)
        target = source if cfg.share_embeddings else self.decoder.embedder.embed
        tied = target if cfg.tie_embeddings else None
        self.out = OutputProjection(cfg.d_model, cfg.tgt_vocab_size, self.init_rng, cfg.np_dtype, tied, cfg.output_bias)

    # Each public method checks its arguments once (NumpyTransformerError naming the bad
    # one), then runs the unchecked private method inside inputs_checked(), where the
    # modules skip their own checks.
    def encode(self, src) -> tuple:
        """src ids (B, S) -> (memory (B, S, D), src_mask (B, 1, 1, S))."""
        src = self._check_src(src)
        with inputs_checked():
            return self._encode(src)

    def decode(self, tgt_in, memory: np.ndarray, src_mask: Optional[np.ndarray]) -> np.ndarray:
        """tgt_in ids (B, T) and the encoder's memory (B, S, D) and src_mask -> logits (B, T, V).

        ``src_mask`` is :meth:`encode`'s (B, 1, 1, S) bool mask, or any bool or 0/1 mask that
        broadcasts to (B, H, T, S), or None (every source position visible).
        """
        tgt_in = check_ids(tgt_in, "tgt_in", self.cfg.tgt_vocab_size, self.cfg.max_len)
        src_mask = self._check_memory(memory, src_mask, tgt_in, "tgt_in")
        with inputs_checked():
            return self._decode(tgt_in, memory, src_mask)

    def decode_step(self, tokens, memory: np.ndarray, src_mask: Optional[np.ndarray], kv_caches: List[dict],
                    position: int) -> np.ndarray:
        """Inference: logits (B, 1, V) for the tokens (B, 1) at ``position``, reusing cached keys and values.

        ``kv_caches`` starts as ``[{} for _ in range(n_decoder_layers)]`` and is filled as
        decoding proceeds; ``position`` is the number of positions already in it (0 at the
        first step). Equals ``decode`` of the whole prefix at that position.
        """
        tokens = check_ids(tokens, "tokens", self.cfg.tgt_vocab_size, length=1)
        src_mask = self._check_memory(memory, src_mask, tokens, "tokens")
        position = self._check_kv_caches(kv_caches, position, tokens.shape[0], memory.shape[1])
        with inputs_checked():
            return self._decode_step(tokens, memory, src_mask, kv_caches, position)

    def forward(self, src, tgt_in) -> np.ndarray:
        """Teacher-forced forward: src (B, S), tgt_in (B, T) int ids -> logits (B, T, V)."""
        src = self._check_src(src)
        tgt_in = check_ids(tgt_in, "tgt_in", self.cfg.tgt_vocab_size, self.cfg.max_len)
        check_same_batch(src, "src", tgt_in, "tgt_in")
        with inputs_checked():
            logits = self._decode(tgt_in, *self._encode(src))
        self._out_shape = logits.shape  # backward may now run
        return logits

    def _encode(self, src: np.ndarray) -> tuple:
        src_mask = padding_mask(src, self.cfg.pad_id)
        self._out_shape = None  # the caches now belong to this call: no backward for an earlier forward
        return self.encoder(src, src_mask), src_mask

    def _decode(self, tgt_in: np.ndarray, memory: np.ndarray, src_mask: Optional[np.ndarray]) -> np.ndarray:
        T = tgt_in.shape[1]
        self_mask = causal_mask(T) & padding_mask(tgt_in, self.cfg.pad_id)  # (B, 1, T, T)
        self._out_shape = None
        return self.out(self.decoder(tgt_in, memory, src_mask, self_mask))

    def _decode_step(self, tokens, memory, src_mask, kv_caches, position: int) -> np.ndarray:
        self._out_shape = None
        return self.out(self.decoder(tokens, memory, src_mask, None, kv_caches, position))

    # ---- the checks of the public methods ----------------------------------------------------
    def _check_src(self, src) -> np.ndarray:
        return check_ids(src, "src", self.cfg.src_vocab_size, self.cfg.max_len)

    def _check_memory(self, memory, src_mask, ids: np.ndarray, ids_name: str) -> Optional[np.ndarray]:
        """memory (B, S, D) of the model's dtype, finite; src_mask broadcastable to (B, H, T, S), as bool."""
        check_float(memory, "memory", self.cfg.np_dtype, shape=(None, None, self.cfg.d_model))
        check_same_batch(memory, "memory", ids, ids_name)
        B, S, _ = memory.shape
        if S == 0:
            raise NumpyTransformerError(f"memory must hold at least one source position, got shape {memory.shape}")
        if src_mask is None:
            return None
        return check_mask(src_mask, "src_mask", (B, self.cfg.n_heads, ids.shape[1], S))

    def _check_kv_caches(self, kv_caches, position, B: int, S: int) -> int:
        """One dict per decoder layer, holding as many positions as ``position`` says, for this batch
        and this memory."""
        n = self.cfg.n_decoder_layers
        position = check_kv_caches(kv_caches, n, position, self.cfg.max_len, B, "self", f"[{{}} for _ in range({n})]")
        for i, cache in enumerate(kv_caches):
            cross = _cached_keys(cache, "cross", i)
            if cross is not None and (cross.shape[0], cross.shape[2]) != (B, S):
                raise NumpyTransformerError(f"kv_caches[{i}] holds the keys of a memory with {cross.shape[0]} rows and "
                                            f"{cross.shape[2]} positions, not of this memory ({B}, {S})")
        return position

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

    has_encoder = True

    def __init__(self, cfg: TransformerConfig):
        super().__init__(cfg)
        self.encoder = Encoder(cfg, self.init_rng, self.rng)
        self.out = Linear(cfg.d_model, cfg.tgt_vocab_size, self.init_rng, cfg.np_dtype, bias=cfg.output_bias)

    def forward(self, x) -> np.ndarray:
        """x: ids (B, T) -> logits (B, T, tgt_vocab_size)."""
        x = check_ids(x, "x", self.cfg.src_vocab_size, self.cfg.max_len)
        with inputs_checked():
            logits = self.out(self.encoder(x, padding_mask(x, self.cfg.pad_id)))
        self._out_shape = logits.shape
        return logits

    def backward(self, dlogits: np.ndarray) -> None:
        self._check_dout(dlogits)
        self.encoder.backward(self.out.backward(dlogits))


class TransformerClassifier(_Model):
    """Encoder-only sequence classifier: encoder, pooling (mean of real positions, or
    the first position), then a linear layer to ``cfg.n_classes`` logits.

    With ``cfg.causal`` the encoder's self-attention is masked as a language model's is
    (padding and causal masks): the hidden state at position t depends on tokens 0..t
    only, so the encoder can start from a pretrained
    :class:`~numpytransformer.nn.gpt.TransformerLM` (see :mod:`numpytransformer.nn.transfer`).
    With BERT's input options (``positions="learned"``, ``type_vocab_size``, ``embedding_norm``) its
    encoder is a BERT's, with the same parameter names as :class:`~numpytransformer.nn.bert.EncoderModel`,
    so that it can start from a pretrained one (the sentiment task's ``--init``).
    """

    can_be_causal = has_encoder = learns_positions = True

    def __init__(self, cfg: TransformerConfig):
        super().__init__(cfg)
        self.encoder = Encoder(cfg, self.init_rng, self.rng)
        self.out = Linear(cfg.d_model, cfg.n_classes, self.init_rng, cfg.np_dtype, bias=cfg.output_bias)
        self._pool_cache = None

    def forward(self, x) -> np.ndarray:
        """x: ids (B, T) -> logits (B, n_classes)."""
        x = check_ids(x, "x", self.cfg.src_vocab_size, self.cfg.max_len)
        with inputs_checked():
            mask = padding_mask(x, self.cfg.pad_id)  # (B, 1, 1, T)
            if self.cfg.causal:
                mask = mask & causal_mask(x.shape[1])  # (B, 1, T, T)
            h = self.encoder(x, mask)  # (B, T, D)
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
