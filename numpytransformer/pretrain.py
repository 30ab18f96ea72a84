"""GPT-1's two stages (Radford et al., 2018): pretrain a language model, then fine-tune it as a classifier.

Stage one trains a :class:`~numpytransformer.nn.gpt.TransformerLM` on unlabelled text, predicting
each next token. Stage two copies what reads the text (the token embedding, the blocks and the
final LayerNorm) into the encoder of a :class:`~numpytransformer.nn.models.TransformerClassifier`
and trains it on the labels; only the classification head starts from scratch. The two models
compute the same hidden states when the classifier is causal (``causal=True``: each position
sees itself and earlier tokens, as in the language model), pre-LN like GPT-2, with the
sinusoidal positions of the classifier's embedder.

:func:`pretrain_lm` is the training loop of stage one, :func:`lm_into_classifier` the copy.
"""
from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from .datasets.batching import next_token_windows, random_windows
from .errors import NumpyTransformerError
from .nn.gpt import TransformerLM, lm_loss_backward, lm_loss_forward, next_token_nats
from .nn.models import TransformerClassifier
from .training.optim import Adam, NoamSchedule, clip_grad_norm

__all__ = ["id_stream", "pretrain_lm", "lm_loss_of_stream", "lm_into_classifier"]

#: The configuration fields that must agree for the copy: the parameters' shapes, and how they are used.
MATCHED = ("src_vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "norm_first", "scale_embeddings",
           "positions", "layernorm_eps", "dtype")


def id_stream(docs: Sequence[Sequence[int]], separator: int) -> np.ndarray:
    """One array of ids: every document with ``separator`` in front (GPT's stream of text)."""
    return np.concatenate([np.array([separator, *doc], dtype=np.int64) for doc in docs])


def lm_loss_of_stream(model: TransformerLM, ids: np.ndarray, block: int) -> float:
    """Mean next-token loss (nats per token) over ``ids`` cut into non-overlapping windows of
    ``block`` (shorter if ``ids`` is), in eval mode."""
    x, y = next_token_windows(ids, min(block, len(ids) - 1))  # (N, T) each
    model.eval()
    return next_token_nats(model, x, y, model.vocab_size) / y.size


def pretrain_lm(model: TransformerLM, ids: np.ndarray, updates: int, block: int, batch: int, lr_factor: float,
                warmup: int, clip: float, seed: int, log: Callable[[str], None] = print) -> None:
    """Train ``model`` for ``updates`` Adam steps on random windows of ``block + 1`` ids of the stream ``ids``.

    The update is nanoGPT's: a batch of ``batch`` windows, forward, next-token loss, backward,
    clip the global gradient norm to ``clip`` (0: off), Adam step with the Noam schedule
    (``lr_factor``, ``warmup``), zero the gradients. A progress line every 100 updates.
    """
    if len(ids) < block + 1:
        raise NumpyTransformerError(f"the pretraining text holds {len(ids)} tokens, fewer than one window of "
                                    f"{block + 1}: lower --pretrain-block or use more reviews")
    grads = model.gradients()
    optimizer = Adam(model.parameters(), lr=NoamSchedule(model.cfg.d_model, warmup, lr_factor))
    rng = np.random.default_rng([seed, 1])  # windows of their own, apart from the model's dropout generator
    model.train()
    start, tokens = time.perf_counter(), 0
    for step in range(1, updates + 1):
        (x,) = random_windows(ids, block + 1, batch, 1, rng)  # (batch, block + 1)
        loss, cache = lm_loss_forward(model.forward(x[:, :-1]), x)  # forward, loss
        if not np.isfinite(loss):
            raise FloatingPointError(f"the language model's loss became {loss}: pretraining diverged; lower "
                                     "--lr-factor or raise --warmup")
        model.backward(lm_loss_backward(1.0, cache))  # backward
        if clip:
            clip_grad_norm(grads, clip)  # clip
        lr = optimizer.step(grads)  # Adam step
        model.zero_grad()
        tokens += x[:, :-1].size
        if step % 100 == 0 or step == updates:
            log(f"pretrain update {step}/{updates} lm_loss {loss:.4f} lr {lr:.2e} "
                f"tok/s {tokens / (time.perf_counter() - start):,.0f}")


def lm_into_classifier(lm: TransformerLM, classifier: TransformerClassifier) -> None:
    """Copy ``lm``'s token embedding, blocks and final LayerNorm into ``classifier``'s encoder, in place.

    The classifier keeps its pad row at zero (its embedding gives that row no gradient and
    attention never reads a pad position), and its head (``classifier.out``). Refused unless
    the two configurations agree on every field of :data:`MATCHED`.
    """
    if not isinstance(lm, TransformerLM):
        raise NumpyTransformerError(f"lm must be a TransformerLM, got {type(lm).__name__}")
    if not isinstance(classifier, TransformerClassifier):
        raise NumpyTransformerError(f"classifier must be a TransformerClassifier, got {type(classifier).__name__}")
    if not classifier.cfg.causal:
        raise NumpyTransformerError("the classifier must be causal (causal=True) to take a language model's "
                                    "weights: its tokens would otherwise see later ones, which the model never learned")
    for name in MATCHED:
        ours, theirs = getattr(lm.cfg, name), getattr(classifier.cfg, name)
        if ours != theirs:
            raise NumpyTransformerError(f"the language model's {name} is {ours!r} but the classifier's is "
                                        f"{theirs!r}: they must match to copy the weights")
    enc = classifier.encoder
    pairs = [(lm.embed, enc.embedder.embed), *zip(lm.layers, enc.layers)]
    if lm.final_norm is not None:  # pre-LN: both have one (norm_first matches)
        pairs.append((lm.final_norm, enc.final_norm))
    for source, target in pairs:
        params = target.parameters()  # the same module class on both sides: the same names
        for name, p in source.parameters().items():
            params[name][...] = p  # in place: an optimiser already built on the classifier holds these arrays
    pad = enc.embedder.embed.pad_id
    if pad is not None:
        enc.embedder.embed.params["W"][pad] = 0
