"""GPT-1's second stage (Radford et al., 2018): a pretrained language model becomes a classifier.

:func:`lm_into_classifier` copies what reads the text (the token embedding, the blocks and the
final LayerNorm) of a :class:`~numpytransformer.nn.gpt.TransformerLM` into the encoder of a
:class:`~numpytransformer.nn.models.TransformerClassifier`, which is then trained on the labels;
only the classification head starts from scratch. The two models compute the same hidden states
when the classifier is causal (``causal=True``: each position sees itself and earlier tokens, as
in the language model), pre-LN like GPT-2, with the sinusoidal positions of the classifier's
embedder. The sentiment task's ``--pretrain-updates`` trains the language model first.
"""
from __future__ import annotations

from ..errors import NumpyTransformerError
from .gpt import TransformerLM
from .models import TransformerClassifier

__all__ = ["MATCHED", "lm_into_classifier"]

#: The configuration fields that must agree for the copy: the parameters' shapes, and how they are used.
MATCHED = ("src_vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "norm_first", "scale_embeddings",
           "positions", "layernorm_eps", "dtype", "norm", "activation", "n_kv_heads")


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
