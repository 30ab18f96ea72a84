"""Model configuration, validated when it is made."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

import numpy as np

__all__ = ["TransformerConfig"]


@dataclass
class TransformerConfig:
    """Hyper-parameters of the encoder-decoder model and of the encoder-only models.

    The defaults are small; the paper's base model is ``d_model=512, n_heads=8,
    n_layers=6, d_ff=2048, dropout=0.1``.

    Parameters
    ----------
    src_vocab_size : int
        Input vocabulary (the encoder's).
    tgt_vocab_size : int, optional
        Output vocabulary: the decoder's, or the tagger's output classes. Defaults to
        ``src_vocab_size``.
    d_model, n_heads, n_layers, d_ff : int
        Width, heads (``d_model % n_heads == 0``), layers in the encoder and in the
        decoder, and the FFN's hidden width.
    n_decoder_layers : int, optional
        Decoder depth if it differs from ``n_layers``.
    max_len : int
        Longest sequence the positional table covers.
    dropout : float
        The paper's P_drop, on embeddings+positions and on every sublayer's output.
    pad_id : int
        The padding token id of both vocabularies.
    dtype : "float32" or "float64"
    seed : int
        Seeds the initial weights and the dropout masks.
    norm_first : bool
        False: post-LN, ``LayerNorm(x + Sublayer(x))`` as in the paper. True: pre-LN,
        ``x + Sublayer(LayerNorm(x))`` with a final LayerNorm after each stack.
    tie_embeddings : bool
        Share the target embedding matrix with the output projection (section 3.4).
    scale_embeddings : bool
        Multiply embeddings by ``sqrt(d_model)`` (section 3.4).
    layernorm_eps : float
    n_classes : int
        Classes of :class:`~numpytransformer.models.TransformerClassifier`.
    pooling : "mean" or "first"
        How the classifier summarises a sequence.
    positions : "sinusoidal" or "learned"
        The paper's fixed table, or a learned table of ``max_len`` vectors (GPT's choice;
        used by :class:`~numpytransformer.lm.TransformerLM`).
    """

    src_vocab_size: int
    tgt_vocab_size: Optional[int] = None
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 256
    max_len: int = 128
    dropout: float = 0.1
    pad_id: int = 0
    dtype: str = "float32"
    seed: int = 0
    n_decoder_layers: Optional[int] = None
    norm_first: bool = False
    tie_embeddings: bool = False
    scale_embeddings: bool = True
    layernorm_eps: float = 1e-5
    n_classes: int = 2
    pooling: str = "mean"
    positions: str = "sinusoidal"

    def __post_init__(self) -> None:
        if self.tgt_vocab_size is None:
            self.tgt_vocab_size = self.src_vocab_size
        if self.n_decoder_layers is None:
            self.n_decoder_layers = self.n_layers
        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "n_layers",
                     "d_ff", "max_len", "n_decoder_layers", "n_classes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
                raise ValueError(f"TransformerConfig.{name} must be a positive integer, got {value!r}")
        if self.d_model % self.n_heads != 0:
            raise ValueError(
                f"TransformerConfig.d_model={self.d_model} must be divisible by n_heads={self.n_heads}"
            )
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) \
                or not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"TransformerConfig.dropout must be a number in [0, 1), got {self.dropout!r}")
        if not isinstance(self.layernorm_eps, (int, float)) or not self.layernorm_eps > 0:
            raise ValueError(f"TransformerConfig.layernorm_eps must be a positive number, got {self.layernorm_eps!r}")
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"TransformerConfig.dtype must be 'float32' or 'float64', got {self.dtype!r}")
        if isinstance(self.pad_id, bool) or not isinstance(self.pad_id, (int, np.integer)) \
                or not 0 <= self.pad_id < min(self.src_vocab_size, self.tgt_vocab_size):
            raise ValueError(f"TransformerConfig.pad_id={self.pad_id!r} must be an id of both vocabularies, "
                             f"in [0, {min(self.src_vocab_size, self.tgt_vocab_size)})")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise ValueError(f"TransformerConfig.seed must be a non-negative integer, got {self.seed!r}")
        if self.pooling not in ("mean", "first"):
            raise ValueError(f"TransformerConfig.pooling must be 'mean' or 'first', got {self.pooling!r}")
        if self.positions not in ("sinusoidal", "learned"):
            raise ValueError(f"TransformerConfig.positions must be 'sinusoidal' or 'learned', got {self.positions!r}")

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TransformerConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown TransformerConfig fields: {sorted(unknown)}")
        return cls(**d)
