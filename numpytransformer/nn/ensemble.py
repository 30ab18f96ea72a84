"""Several trained models that predict as one.

An ensemble's distribution is the mean of its members' distributions; for a translator's next token

    p(y_t | y_<t, x) = (1 / M) * sum_m p_m(y_t | y_<t, x),

so the members must share their vocabularies (the same ids for the same tokens); their widths and
depths may differ. Where a model returns logits, :class:`Ensemble` returns the log of the mean
probability: a softmax of it gives the mean back, an argmax picks the same token, and a
log-softmax leaves it as it is. So a classifiers' ensemble scores as one classifier (``forward``),
and an encoder-decoder ensemble offers what :func:`~numpytransformer.nn.decoding.greedy_decode` and
:func:`~numpytransformer.nn.decoding.beam_search` call on a model (``encode``, ``_decode``,
``_decode_step``, ``cfg``). The members' memories travel side by side in one array (concatenated
along the feature axis), so the beam search repeats and reorders them as it does one model's, and
each member keeps its own slice of the layer caches.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import List, Sequence

import numpy as np

from ..errors import NumpyTransformerError
from ..core.softmax import log_softmax
from .models import Transformer, TransformerClassifier

__all__ = ["Ensemble"]


class Ensemble:
    """Models of one task (classifiers, or encoder-decoder models) whose averaged probabilities are
    read as one model's."""

    def __init__(self, models: Sequence):
        self.models = list(models)
        if not self.models:
            raise NumpyTransformerError("models: expected at least one trained model, got none")
        for i, m in enumerate(self.models):
            if not isinstance(m, (Transformer, TransformerClassifier)):
                raise NumpyTransformerError(f"models[{i}]: expected a Transformer or a TransformerClassifier, "
                                            f"got {type(m).__name__}")
        first = self.models[0].cfg
        for i, m in enumerate(self.models[1:], 1):
            if type(m) is not type(self.models[0]):
                raise NumpyTransformerError(f"models[{i}]: a {type(m).__name__}, but models[0] is a "
                                            f"{type(self.models[0]).__name__}; an ensemble's members are of one kind")
            for field in ("src_vocab_size", "tgt_vocab_size", "n_classes", "pad_id", "dtype"):
                mine, theirs = getattr(m.cfg, field), getattr(first, field)
                if mine != theirs:
                    raise NumpyTransformerError(f"models[{i}]: {field} {mine} differs from models[0]'s {theirs}; an "
                                                "ensemble's members share their vocabularies and dtype")
        # what the decoders read of a model's config; one layer cache per layer of every member
        self.cfg = SimpleNamespace(src_vocab_size=first.src_vocab_size, tgt_vocab_size=first.tgt_vocab_size,
                                   pad_id=first.pad_id, max_len=min(m.cfg.max_len for m in self.models),
                                   n_decoder_layers=sum(m.cfg.n_decoder_layers for m in self.models))
        self.training = False
        self._widths = [m.cfg.d_model for m in self.models]

    def eval(self):
        for m in self.models:
            m.eval()
        self.training = False
        return self

    def train(self, mode: bool = True):
        for m in self.models:
            m.train(mode)
        self.training = mode
        return self

    def forward(self, *inputs) -> np.ndarray:
        """log of the mean of the members' softmax over the last axis of their ``forward(*inputs)``."""
        return self._mean_log_prob([m.forward(*inputs) for m in self.models])

    def encode(self, src) -> tuple:
        """src ids (B, S) -> (the members' memories side by side (B, S, sum of d_model), src_mask)."""
        outs = [m.encode(src) for m in self.models]
        return np.concatenate([memory for memory, _ in outs], axis=-1), outs[0][1]

    def _members(self, memory):
        """Each member with its own part of ``memory``."""
        if memory.shape[-1] != sum(self._widths):
            raise NumpyTransformerError(f"memory: expected the members' memories side by side, {sum(self._widths)} "
                                        f"features (from encode), got {memory.shape[-1]}")
        return zip(self.models, np.split(memory, np.cumsum(self._widths)[:-1], axis=-1))

    @staticmethod
    def _mean_log_prob(logits: List[np.ndarray]) -> np.ndarray:
        """log of the mean of the members' softmax probabilities, in float64."""
        logp = np.stack([log_softmax(x.astype(np.float64)) for x in logits])
        top = logp.max(axis=0)
        return top + np.log(np.mean(np.exp(logp - top), axis=0))

    def _decode(self, tgt_in, memory, src_mask) -> np.ndarray:
        return self._mean_log_prob([m._decode(tgt_in, part, src_mask) for m, part in self._members(memory)])

    def _decode_step(self, tokens, memory, src_mask, kv_caches, position: int) -> np.ndarray:
        logits, start = [], 0
        for m, part in self._members(memory):  # each member fills its own slice of the layer caches
            n = m.cfg.n_decoder_layers
            logits.append(m._decode_step(tokens, part, src_mask, kv_caches[start:start + n], position))
            start += n
        return self._mean_log_prob(logits)
