"""Model configuration, validated when it is made."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..errors import NumpyTransformerError
from ..validation import check_bool, check_int, check_real

__all__ = ["TransformerConfig", "SIZE_LIMITS", "DROPOUT_MAX", "SEED_MAX", "MAX_VALUES", "with_later_defaults"]

# The one set of limits: TransformerConfig checks them here, and the command line's flags
# (settings.ModelSettings and the tasks' data settings) take their ranges from them, so the
# library and the command line accept the same models.

#: Upper bounds of the integer sizes (each at least 1), so that a typo (``max_len=10**12``) is
#: an error, not an attempt to allocate terabytes. Far above anything this library trains.
SIZE_LIMITS = {
    "src_vocab_size": 10_000_000, "tgt_vocab_size": 10_000_000, "n_classes": 10_000_000,
    "d_model": 4_096, "n_heads": 256, "d_ff": 65_536,
    "n_layers": 64, "n_decoder_layers": 64, "max_len": 100_000,
}
#: The most neighbours on each side that a region embedding reads (``TransformerConfig.region``).
REGION_MAX = 16
#: The highest dropout rate: a rate of 1 would drop everything.
DROPOUT_MAX = 0.99
#: The highest seed: 32 bits, a seed any generator takes.
SEED_MAX = 2 ** 32 - 1

#: At most this many numbers in a model (4 GB in float32); the paper's big model holds 213 million.
MAX_VALUES = 1_000_000_000


def _dtype_name(value) -> str:
    """"float32"/"float64", ``np.dtype`` or ``np.float32``/``np.float64`` -> the name, so the config saves as JSON."""
    if isinstance(value, str):
        name = value
    elif isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.floating)):
        name = np.dtype(value).name
    else:
        name = None
    if name not in ("float32", "float64"):
        raise NumpyTransformerError(f"TransformerConfig.dtype must be 'float32' or 'float64' (or that np.dtype), "
                                    f"got {value!r}")
    return name


@dataclass
class TransformerConfig:
    """Hyper-parameters of the encoder-decoder model and of the encoder-only models.

    The defaults are small; the paper's base model is ``d_model=512, n_heads=8,
    n_layers=6, d_ff=2048, dropout=0.1``.

    Every field is checked when the config is made, and a bad one is a
    :class:`~numpytransformer.errors.NumpyTransformerError` naming it: sizes are
    integers (not bools or floats) up to :data:`SIZE_LIMITS`, the whole model at most
    :data:`MAX_VALUES` numbers, the dropout rate at most :data:`DROPOUT_MAX`, the seed at
    most :data:`SEED_MAX`, flags are real bools (not ``"no"`` or ``1``), floats are finite
    and in range. The command line's flags have the same limits.

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
        ``np.dtype("float64")`` and ``np.float64`` are accepted and stored as the name.
    seed : int
        Seeds the initial weights and the dropout masks.
    norm_first : bool
        False: post-LN, ``LayerNorm(x + Sublayer(x))`` as in the paper. True: pre-LN,
        ``x + Sublayer(LayerNorm(x))`` with a final LayerNorm after each stack.
    tie_embeddings : bool
        Share the target embedding matrix with the output projection (section 3.4).
    share_embeddings : bool
        The encoder-decoder reads source and target ids through one embedding matrix
        (section 3.4's "same weight matrix between the two embedding layers"); needs one
        vocabulary for both sides, so ``src_vocab_size == tgt_vocab_size``.
    scale_embeddings : bool
        Multiply embeddings by ``sqrt(d_model)`` (section 3.4).
    layernorm_eps : float
        In (0, 1].
    n_classes : int
        Classes of :class:`~numpytransformer.nn.models.TransformerClassifier`.
    pooling : "mean" or "first"
        How the classifier summarises a sequence.
    positions : "sinusoidal", "learned", "rotary" or "alibi"
        The paper's fixed table, or a learned table of ``max_len`` vectors (GPT's choice;
        used by :class:`~numpytransformer.nn.gpt.TransformerLM`), or no table but positions inside
        self-attention: rotary queries and keys (:mod:`~numpytransformer.core.rotary`; the language
        model and :class:`~numpytransformer.nn.bert.EncoderModel`; an even ``d_model / n_heads``) or
        ALiBi's distance bias (:mod:`~numpytransformer.core.alibi`; the language model).
    causal : bool
        The classifier's encoder masks attention causally, as a language model does: each
        position sees only itself and earlier tokens (to fine-tune a pretrained
        :class:`~numpytransformer.nn.gpt.TransformerLM`, GPT-1's way). Used by
        :class:`~numpytransformer.nn.models.TransformerClassifier` only.
    region : int
        0, or k >= 1: the encoder's input vector of each token also adds the embeddings of its
        k neighbours on each side, one table for each offset (a region embedding: see
        :func:`~numpytransformer.core.embedding.region_embedding_forward`). At most :data:`REGION_MAX`;
        not with ``causal``, as it reads the next tokens. Read by the models with an encoder.
    activation : "relu", "gelu", "gelu_tanh" or "swiglu"
        The FFN's nonlinearity: the paper's ReLU, BERT's exact GELU or GPT-2's tanh form of it
        (:mod:`~numpytransformer.core.gelu`); or the gated FFN of LLaMA, SwiGLU
        (:mod:`~numpytransformer.core.swiglu`: three matrices, no biases).
    norm : "layernorm" or "rmsnorm"
        The normalisation of every sublayer connection and of the final norm: LayerNorm, or RMSNorm
        (:mod:`~numpytransformer.core.rmsnorm`). BERT's ``embedding_norm`` stays a LayerNorm.
    n_kv_heads : int, optional
        Key and value heads, each shared by ``n_heads / n_kv_heads`` query heads (grouped-query
        attention, :mod:`~numpytransformer.core.gqa`; not in the encoder-decoder). Defaults to
        ``n_heads``: the paper's multi-head attention.
    block : "sequential" or "parallel"
        The language model's blocks: attention then the FFN, each in its residual (the paper, GPT-2),
        or both read one shared norm of the input and add to it,
        ``x + attn(norm(x)) + ffn(norm(x))`` (GPT-J, PaLM; :class:`~numpytransformer.nn.blocks.ParallelBlock`),
        which needs ``norm_first``. Read by :class:`~numpytransformer.nn.gpt.TransformerLM` only.
    attention_dropout : float
        Dropout on the attention weights while training (BERT's ``attention_probs_dropout_prob``,
        GPT-2's ``attn_pdrop``; :mod:`~numpytransformer.core.attention_dropout`), at most :data:`DROPOUT_MAX`.
    output_bias : bool
        The output projection adds a bias ``b``; GPT-2's has none.
    type_vocab_size : int
        0, or the number of token types (segments) whose learned vectors BERT adds to the
        encoder's input (sentence A or B). Read by the models with an encoder.
    embedding_norm : bool
        A LayerNorm over the encoder's input vectors (token + position + type), before the
        dropout, as BERT has. Read by the models with an encoder.
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
    share_embeddings: bool = False
    scale_embeddings: bool = True
    layernorm_eps: float = 1e-5
    n_classes: int = 2
    pooling: str = "mean"
    positions: str = "sinusoidal"
    causal: bool = False
    region: int = 0
    activation: str = "relu"
    output_bias: bool = True
    type_vocab_size: int = 0
    embedding_norm: bool = False
    attention_dropout: float = 0.0
    norm: str = "layernorm"
    n_kv_heads: Optional[int] = None
    block: str = "sequential"

    def __post_init__(self) -> None:
        # Every field is checked and normalised to a plain Python value, so a config
        # that is accepted also saves as JSON and builds a model of a sane size.
        if self.tgt_vocab_size is None:
            self.tgt_vocab_size = self.src_vocab_size
        if self.n_decoder_layers is None:
            self.n_decoder_layers = self.n_layers
        for name, high in SIZE_LIMITS.items():
            setattr(self, name, check_int(getattr(self, name), f"TransformerConfig.{name}", 1, high))
        if self.d_model % self.n_heads != 0:
            raise NumpyTransformerError(
                f"TransformerConfig.d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        self.n_kv_heads = check_int(self.n_kv_heads, "TransformerConfig.n_kv_heads", 1, self.n_heads)
        if self.n_heads % self.n_kv_heads != 0:
            raise NumpyTransformerError(f"TransformerConfig.n_kv_heads={self.n_kv_heads} must divide n_heads="
                                        f"{self.n_heads}: each key and value head serves a group of query heads")
        self.dropout = check_real(self.dropout, "TransformerConfig.dropout", 0.0, DROPOUT_MAX)
        self.attention_dropout = check_real(self.attention_dropout, "TransformerConfig.attention_dropout", 0.0,
                                            DROPOUT_MAX)
        self.type_vocab_size = check_int(self.type_vocab_size, "TransformerConfig.type_vocab_size", 0,
                                         SIZE_LIMITS["src_vocab_size"])
        self.layernorm_eps = check_real(self.layernorm_eps, "TransformerConfig.layernorm_eps", 0.0, 1.0,
                                        low_open=True)
        for name in ("norm_first", "tie_embeddings", "share_embeddings", "scale_embeddings", "causal", "output_bias",
                     "embedding_norm"):
            setattr(self, name, check_bool(getattr(self, name), f"TransformerConfig.{name}"))
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise NumpyTransformerError(
                f"TransformerConfig.share_embeddings needs one vocabulary for both sides, but src_vocab_size is "
                f"{self.src_vocab_size} and tgt_vocab_size {self.tgt_vocab_size}")
        self.dtype = _dtype_name(self.dtype)
        self.pad_id = check_int(self.pad_id, "TransformerConfig.pad_id", 0,
                                min(self.src_vocab_size, self.tgt_vocab_size) - 1)
        self.seed = check_int(self.seed, "TransformerConfig.seed", 0, SEED_MAX)
        self.region = check_int(self.region, "TransformerConfig.region", 0, REGION_MAX)
        if self.region and self.causal:
            raise NumpyTransformerError(f"TransformerConfig.region={self.region} embeds the next tokens too, which a "
                                        "causal encoder must not see: use region=0 with causal=True")
        for name, allowed in (("pooling", ("mean", "first")),
                              ("positions", ("sinusoidal", "learned", "rotary", "alibi")),
                              ("activation", ("relu", "gelu", "gelu_tanh", "swiglu")),
                              ("norm", ("layernorm", "rmsnorm")),
                              ("block", ("sequential", "parallel"))):
            value = getattr(self, name)
            if not isinstance(value, str) or value not in allowed:
                raise NumpyTransformerError(
                    f"TransformerConfig.{name} must be {' or '.join(map(repr, allowed))}, got {value!r}")
        if self.block == "parallel" and not self.norm_first:
            raise NumpyTransformerError("TransformerConfig.block='parallel' shares one norm in front of both "
                                        "sublayers, a pre-LN block: it needs norm_first=True")
        if self.positions == "rotary" and (self.d_model // self.n_heads) % 2:
            raise NumpyTransformerError(f"TransformerConfig.positions='rotary' rotates pairs of features: "
                                        f"d_model / n_heads = {self.d_model // self.n_heads} must be even")
        if self.attention_dropout and (self.n_kv_heads != self.n_heads or self.positions in ("rotary", "alibi")):
            raise NumpyTransformerError("TransformerConfig.attention_dropout drops the weights of the paper's "
                                        "multi-head attention: leave it 0 with n_kv_heads < n_heads or rotary "
                                        "or alibi positions")
        n = self.num_values()
        if n > MAX_VALUES:
            raise NumpyTransformerError(
                f"TransformerConfig describes about {n:,} weights and table entries ({n * self.np_dtype.itemsize / 2**30:.1f} "
                f"GiB), more than the {MAX_VALUES:,} this library builds: check d_model, d_ff, the layer counts, "
                "the vocabulary sizes and max_len")

    def num_values(self) -> int:
        """About how many numbers the model holds: weights, and each stack's (max_len, d_model) position table.

        An estimate for the size check (biases and LayerNorm parameters are left out);
        ``model.num_parameters()`` counts exactly.
        """
        D = self.d_model
        embed = D * ((1 + 2 * self.region) * self.src_vocab_size + 2 * self.tgt_vocab_size + self.n_classes
                     + 2 * self.max_len + self.type_vocab_size)
        ffn_matrices = 3 if self.activation == "swiglu" else 2
        per_layer = 4 * D * D + ffn_matrices * D * self.d_ff  # attention (q, k, v, o) and the FFN
        return embed + self.n_layers * per_layer + self.n_decoder_layers * (per_layer + 4 * D * D)

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TransformerConfig":
        """The inverse of :meth:`to_dict`; unknown or missing fields are a NumpyTransformerError."""
        if not isinstance(d, dict):
            raise NumpyTransformerError(f"a TransformerConfig must be read from a dict, got {type(d).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise NumpyTransformerError(f"unknown TransformerConfig fields: {sorted(map(str, unknown))}")
        if "src_vocab_size" not in d:
            raise NumpyTransformerError("TransformerConfig field src_vocab_size is missing")
        return cls(**d)


def with_later_defaults(saved: dict) -> dict:
    """A saved config (:meth:`TransformerConfig.to_dict`) with the fields added since it was saved
    filled in as they were then: a ReLU FFN, an output bias, no token types, no embedding
    LayerNorm, no attention dropout, LayerNorm, one key and value head per query head and
    sequential blocks. A checkpoint saved before those fields existed holds exactly that model."""
    then = {"activation": "relu", "output_bias": True, "type_vocab_size": 0, "embedding_norm": False,
            "attention_dropout": 0.0, "norm": "layernorm", "n_kv_heads": saved.get("n_heads"),
            "block": "sequential"}
    return {**then, **saved}
