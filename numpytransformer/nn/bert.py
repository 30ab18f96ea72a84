"""An encoder that returns its hidden states: the shape of BERT (Devlin et al., 2019).

BERT is the encoder of "Attention Is All You Need" with three changes at its input and one
in its FFN: learned positions instead of sinusoids, a learned vector per token type
(segment A or B) added to each token's, a LayerNorm over that sum, and GELU in place of
ReLU. Its layers are post-LN, as the paper's:

.. math:: h^{(0)} = \\text{LN}(E[x] + P + E_{type}[s]),\\qquad
          h \\leftarrow \\text{LN}(h + \\text{MHA}(h)),\\quad h \\leftarrow \\text{LN}(h + \\text{FFN}(h))

:class:`EncoderModel` is :class:`~numpytransformer.nn.models.Encoder` with those options
(``positions="learned"``, ``type_vocab_size``, ``embedding_norm``, ``activation="gelu"``) and no
head: a task puts its own on the hidden states (a sentence embedding pools them).
"""
from __future__ import annotations

import numpy as np

from ..errors import NumpyTransformerError
from ..validation import check_ids, check_mask, inputs_checked
from .config import TransformerConfig
from .models import Encoder, _Model

__all__ = ["EncoderModel"]


class EncoderModel(_Model):
    """Encoder-only model: ids (B, T) -> hidden states (B, T, D).

    Padding is what ``attention_mask`` says (Hugging Face's convention), not ``pad_id``: keys
    where it is 0 are masked for every query. Uses ``cfg.src_vocab_size``, ``d_model``,
    ``n_heads``, ``n_layers``, ``d_ff``, ``max_len``, ``dropout``, ``norm_first``,
    ``layernorm_eps``, ``positions``, ``scale_embeddings``, ``type_vocab_size``,
    ``embedding_norm``, ``activation``, ``pad_id`` (its embedding row gets no gradient),
    ``dtype`` and ``seed``.
    """

    has_encoder = learns_positions = True

    def __init__(self, cfg: TransformerConfig):
        super().__init__(cfg)
        self.encoder = Encoder(cfg, self.init_rng, self.rng)

    def forward(self, ids, attention_mask=None, token_types=None) -> np.ndarray:
        """ids (B, T) -> hidden states (B, T, D).

        ``attention_mask`` (B, T) bool or 0/1, optional (all visible if None); ``token_types``
        (B, T) ids in ``[0, type_vocab_size)``, optional (all 0).
        """
        ids = check_ids(ids, "ids", self.cfg.src_vocab_size, self.cfg.max_len)
        mask = None
        if attention_mask is not None:
            mask = check_mask(attention_mask, "attention_mask", ids.shape)[:, None, None, :]  # (B, 1, 1, T)
        if token_types is not None:
            if not self.cfg.type_vocab_size:
                raise NumpyTransformerError("token_types needs a model with type_vocab_size > 0")
            token_types = check_ids(token_types, "token_types", self.cfg.type_vocab_size, self.cfg.max_len)
            if token_types.shape != ids.shape:
                raise NumpyTransformerError(f"token_types must have the shape of ids {ids.shape}, "
                                            f"got {token_types.shape}")
        self._out_shape = None
        with inputs_checked():
            h = self.encoder(ids, mask, token_types)
        self._out_shape = h.shape  # backward may now run
        return h

    def backward(self, dh: np.ndarray) -> None:
        """Backpropagate ``dL/dh`` (B, T, D) through the encoder, accumulating every gradient."""
        self._check_dout(dh, "dh")
        self.encoder.backward(dh)
