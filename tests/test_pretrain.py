"""GPT-1's pretraining: the causal classifier, the id stream, the language model trained by the
trainer on it, and the copy of a language model into a classifier (the same hidden states to
float64 precision)."""
import dataclasses

import numpy as np
import pytest

from numpytransformer import TransformerClassifier, TransformerConfig
from numpytransformer.core.attention import causal_mask
from numpytransformer.errors import NumpyTransformerError
from numpytransformer.nn.gpt import TransformerLM
from numpytransformer.nn.models import Transformer, TransformerTagger
from numpytransformer.nn.transfer import lm_into_classifier
from numpytransformer.tasks.sentiment import ReviewText, id_stream, lm_loss_of_stream
from numpytransformer.training.trainer import TrainConfig, Trainer

V, T = 11, 7
LM_CFG = TransformerConfig(src_vocab_size=V, d_model=8, n_heads=2, n_layers=2, d_ff=12, max_len=10, dropout=0.1,
                           dtype="float64", seed=1, norm_first=True, tie_embeddings=True, causal=True)


def classifier_cfg(**kw) -> TransformerConfig:
    return dataclasses.replace(LM_CFG, tie_embeddings=False, seed=2, **kw)


def hidden_states(model: TransformerClassifier, x: np.ndarray) -> np.ndarray:
    """The encoder's output (B, T, D) in the classifier's forward of ``x``, with the mask the classifier made."""
    seen = []
    encoder_forward = model.encoder.forward
    model.encoder.forward = lambda ids, mask: seen.append(encoder_forward(ids, mask)) or seen[-1]
    try:
        model.forward(x)
    finally:
        del model.encoder.forward  # the class's method again
    return seen[0]


def ids(seed: int, shape) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, V, size=shape)  # no pad


# ---- the causal classifier ---------------------------------------------------------------------
@pytest.mark.parametrize("norm_first", [False, True])
def test_a_causal_classifiers_state_at_t_ignores_the_tokens_after_t(norm_first):
    model = TransformerClassifier(classifier_cfg(norm_first=norm_first)).eval()
    x = ids(0, (2, T))
    h = hidden_states(model, x)
    for t in range(T - 1):
        changed = x.copy()
        changed[:, t + 1:] = ids(t + 1, (2, T - t - 1))
        assert np.abs(hidden_states(model, changed)[:, :t + 1] - h[:, :t + 1]).max() < 1e-12
    longer = np.concatenate([x, ids(9, (2, 3))], axis=1)  # tokens appended
    assert np.abs(hidden_states(model, longer)[:, :T] - h).max() < 1e-12
    # Without causal=True, the first position reads the last token: the check above can fail.
    full = TransformerClassifier(classifier_cfg(norm_first=norm_first, causal=False)).eval()
    assert np.abs(hidden_states(full, longer)[:, 0] - hidden_states(full, x)[:, 0]).max() > 1e-3


def test_a_causal_padded_review_is_classified_as_the_review_alone():
    """Mean pooling over the real positions stays: padding changes nothing."""
    model = TransformerClassifier(classifier_cfg()).eval()
    x = ids(3, (1, 4))
    padded = np.concatenate([x, np.zeros((1, 3), dtype=x.dtype)], axis=1)
    assert np.abs(model.forward(padded) - model.forward(x)).max() < 1e-12


@pytest.mark.parametrize("cls", [Transformer, TransformerTagger])
def test_models_without_a_causal_encoder_refuse_causal(cls):
    with pytest.raises(NumpyTransformerError, match=f"causal=True masks the classifier's encoder .*; a {cls.__name__} "
                                                    "does not read it"):
        cls(classifier_cfg())


def test_causal_must_be_a_bool():
    with pytest.raises(NumpyTransformerError, match=r"TransformerConfig.causal must be True or False, got 1 \(int\)"):
        classifier_cfg(causal=1)


# ---- the copy --------------------------------------------------------------------------------
def perturbed_lm() -> TransformerLM:
    """A language model whose every parameter is away from its initial value (LayerNorm's ones
    and zeros included), so that a parameter left uncopied shows."""
    lm = TransformerLM(LM_CFG)
    r = np.random.default_rng(5)
    for p in lm.parameters().values():
        p += 0.3 * r.standard_normal(p.shape)
    return lm.eval()


def test_after_the_copy_the_classifiers_states_are_the_language_models():
    lm = perturbed_lm()
    model = TransformerClassifier(classifier_cfg())
    head = {k: p.copy() for k, p in model.out.parameters().items()}
    arrays = dict(model.parameters())
    lm_into_classifier(lm, model)
    model.eval()
    x = ids(4, (3, T))
    expected = lm._hidden(x, causal_mask(T), None, 0)  # before the output projection
    assert np.abs(hidden_states(model, x) - expected).max() < 1e-12
    # In place (an optimiser holds these arrays), the pad row kept at zero, the head untouched.
    assert all(model.parameters()[k] is p for k, p in arrays.items())
    assert not model.encoder.embedder.embed.params["W"][LM_CFG.pad_id].any()
    assert lm.embed.params["W"][LM_CFG.pad_id].any()  # it was not zero in the language model
    assert all(np.array_equal(model.out.parameters()[k], p) for k, p in head.items())


@pytest.mark.parametrize("change, message", [
    (dict(d_model=12, n_heads=2), "the language model's d_model is 8 but the classifier's is 12"),
    (dict(n_layers=1), "the language model's n_layers is 2 but the classifier's is 1"),
    (dict(src_vocab_size=12), "the language model's src_vocab_size is 11 but the classifier's is 12"),
    (dict(norm_first=False), "the language model's norm_first is True but the classifier's is False"),
    (dict(n_heads=4), "the language model's n_heads is 2 but the classifier's is 4"),
    (dict(scale_embeddings=False), "the language model's scale_embeddings is True but the classifier's is False"),
])
def test_the_copy_refuses_models_that_do_not_match(change, message):
    model = TransformerClassifier(classifier_cfg(**change))
    before = {k: p.copy() for k, p in model.parameters().items()}
    with pytest.raises(NumpyTransformerError, match=f"^{message}: they must match to copy the weights$"):
        lm_into_classifier(perturbed_lm(), model)
    assert all(np.array_equal(model.parameters()[k], p) for k, p in before.items())  # nothing copied


def test_the_copy_refuses_learned_positions_and_other_models():
    lm = TransformerLM(dataclasses.replace(LM_CFG, positions="learned"))
    with pytest.raises(NumpyTransformerError, match="the language model's positions is 'learned' but the "
                                                    "classifier's is 'sinusoidal'"):
        lm_into_classifier(lm, TransformerClassifier(classifier_cfg()))
    with pytest.raises(NumpyTransformerError, match="lm must be a TransformerLM, got TransformerClassifier"):
        lm_into_classifier(TransformerClassifier(classifier_cfg()), TransformerClassifier(classifier_cfg()))
    with pytest.raises(NumpyTransformerError, match="classifier must be a TransformerClassifier, got TransformerLM"):
        lm_into_classifier(lm, lm)
    with pytest.raises(NumpyTransformerError, match=r"the classifier must be causal \(causal=True\)"):
        lm_into_classifier(perturbed_lm(), TransformerClassifier(classifier_cfg(causal=False)))


# ---- the stream and the training loop -------------------------------------------------------------
def test_the_stream_puts_the_separator_in_front_of_every_document():
    assert id_stream([[5, 6], [], [7]], 1).tolist() == [1, 5, 6, 1, 1, 7]
    assert id_stream([[5, 6], [7]], 1).dtype == np.int64


def test_pretraining_lowers_the_loss_of_a_repeating_text():
    lm = TransformerLM(dataclasses.replace(LM_CFG, dropout=0.0))
    stream = np.tile(np.arange(1, 6), 60)  # 1 2 3 4 5 1 2 3 ...: each token says which comes next
    before = lm_loss_of_stream(lm, stream, 8)
    lines = []
    text = ReviewText(stream, stream, block=8, batch=8, updates=100, seed=0)
    cfg = TrainConfig(epochs=1, lr_factor=1.0, warmup=20, label_smoothing=0.0, clip_norm=1.0, log_every=100)
    metrics = Trainer(lm, text, cfg, out_dir=None, log=lines.append).fit()  # writes nothing
    after = lm_loss_of_stream(lm, stream, 8)
    assert before > 1.5 and after < 0.2 * before and metrics["lm_loss"] == after
    assert lines[0].startswith("epoch 1/1 update 100 loss ") and " tok/s " in lines[0]
    assert lines[1].startswith("epoch 1 done: ") and lines[2].startswith("throughput: 100 updates")
    assert not lm.training  # lm_loss_of_stream put it in eval mode


def test_pretraining_refuses_a_text_shorter_than_a_window():
    with pytest.raises(NumpyTransformerError, match="the pretraining text holds 5 tokens, fewer than one window "
                                                    "of 9: lower --pretrain-block"):
        ReviewText(np.arange(1, 6), np.arange(1, 6), block=8, batch=2, updates=1, seed=0)
