"""hypothesis properties: what must hold for every input, not just the ones we thought of."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numpytransformer import (Adam, NoamSchedule, Transformer, TransformerClassifier, TransformerConfig,
                              TransformerTagger, clip_grad_norm)
from numpytransformer.core.attention import attention_forward
from numpytransformer.core.layernorm import layernorm_forward
from numpytransformer.core.losses import cross_entropy
from numpytransformer.training.optim import global_norm
from strategies import PAD_ID, attention_masks, float_arrays, id_arrays, model_dims

FAST = settings(max_examples=25, deadline=None)
SLOW = settings(max_examples=20, deadline=None)  # each example builds and runs a model

SRC_V, TGT_V, MAX_LEN = 7, 9, 6


def tiny_config(**overrides) -> TransformerConfig:
    cfg = dict(src_vocab_size=SRC_V, tgt_vocab_size=TGT_V, d_model=8, n_heads=2, n_layers=2, d_ff=12,
               max_len=MAX_LEN, dropout=0.1, pad_id=PAD_ID, dtype="float64", seed=0, n_classes=3)
    cfg.update(overrides)
    return TransformerConfig(**cfg)


# ---- attention ---------------------------------------------------------------------------
@st.composite
def attention_inputs(draw, fully_masked_rows: bool):
    d = draw(model_dims())
    Dh = d["D"] // d["H"]
    q = draw(float_arrays((d["B"], d["H"], d["T"], Dh)))
    k = draw(float_arrays((d["B"], d["H"], d["S"], Dh)))
    v = draw(float_arrays((d["B"], d["H"], d["S"], Dh)))
    mask = draw(attention_masks(d["B"], d["T"], d["S"], fully_masked_rows))
    return q, k, v, mask


@FAST
@given(attention_inputs(fully_masked_rows=False))
def test_attention_rows_sum_to_one_and_respect_mask(args):
    q, k, v, mask = args
    out, cache = attention_forward(q, k, v, mask)
    w = cache.weights  # (B, H, T, S)
    np.testing.assert_allclose(w.sum(axis=-1), 1.0, rtol=0, atol=1e-12)
    assert np.all(w >= 0)
    assert np.all(w[np.broadcast_to(~mask, w.shape)] == 0)
    assert np.all(np.isfinite(out))


@FAST
@given(attention_inputs(fully_masked_rows=True))
def test_attention_fully_masked_rows_are_zero(args):
    """Rows with an allowed key sum to 1; rows with none get zero weights and output 0."""
    q, k, v, mask = args
    out, cache = attention_forward(q, k, v, mask)
    w = cache.weights
    dead = np.broadcast_to(~mask.any(axis=-1), w.shape[:-1])  # (B, H, T)
    np.testing.assert_allclose(w.sum(axis=-1)[~dead], 1.0, rtol=0, atol=1e-12)
    assert np.all(w[dead] == 0)
    assert np.all(out[dead] == 0)
    assert np.all(np.isfinite(out))


# ---- padding and causality in the models ---------------------------------------------------
@st.composite
def translation_batch(draw, min_src_real: int = 1):
    B = draw(st.integers(1, 3))
    S, T = draw(st.integers(1, MAX_LEN - 2)), draw(st.integers(1, MAX_LEN))
    src = draw(id_arrays(B, S, SRC_V, min_real=min_src_real))
    # Right-padded with a real first token (BOS in practice).
    tgt = draw(id_arrays(B, T, TGT_V, min_real=1))
    return src, tgt


@SLOW
@given(translation_batch(), st.booleans(), st.integers(0, 2**16))
def test_source_padding_content_changes_no_logit(batch, norm_first, seed):
    """What sits at source pad positions is invisible: neither another pad embedding nor
    extra trailing pad columns change any logit."""
    src, tgt = batch
    model = Transformer(tiny_config(norm_first=norm_first)).eval()
    logits = model.forward(src, tgt)
    W = model.encoder.embedder.embed.params["W"]
    W[PAD_ID] = np.random.default_rng(seed).standard_normal(W.shape[1])
    np.testing.assert_allclose(model.forward(src, tgt), logits, rtol=0, atol=1e-12)
    longer = np.concatenate([src, np.full((src.shape[0], 2), PAD_ID)], axis=1)
    np.testing.assert_allclose(model.forward(longer, tgt), logits, rtol=0, atol=1e-12)


@SLOW
@given(translation_batch(), st.data())
def test_decoder_is_causal(batch, data):
    src, tgt = batch
    T = tgt.shape[1]
    t = data.draw(st.integers(0, T - 1), label="t")
    new_id = data.draw(st.sampled_from([v for v in range(TGT_V) if v != tgt[0, t]]), label="new id")
    model = Transformer(tiny_config()).eval()
    logits = model.forward(src, tgt)
    changed = tgt.copy()
    changed[0, t] = new_id
    after = model.forward(src, changed)
    np.testing.assert_allclose(after[:, :t], logits[:, :t], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(after[1:], logits[1:])  # other rows of the batch are independent


@pytest.mark.parametrize("model_name", ["Transformer", "TransformerTagger", "Classifier-mean",
                                        "Classifier-first"])
@SLOW
@given(batch=translation_batch(min_src_real=0))
def test_fully_padded_source_row_gives_finite_output(model_name, batch):
    src, tgt = batch
    src[0] = PAD_ID
    if model_name == "Transformer":
        out = Transformer(tiny_config()).forward(src, tgt)
    elif model_name == "TransformerTagger":
        out = TransformerTagger(tiny_config()).forward(src)
    else:
        out = TransformerClassifier(tiny_config(pooling=model_name.split("-")[1])).forward(src)
    assert np.all(np.isfinite(out))


# ---- dtypes -----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("model_name", ["Transformer", "TransformerTagger", "TransformerClassifier"])
def test_dtype_is_preserved_end_to_end(model_name, dtype):
    """No silent upcasting: logits, the loss gradient, every gradient and every parameter
    after an Adam step keep the config's dtype."""
    cfg = tiny_config(dtype=dtype, tie_embeddings=model_name == "Transformer")  # the others have nothing to tie
    src = np.array([[3, 4, 5, PAD_ID], [2, PAD_ID, PAD_ID, PAD_ID]])
    tgt_in, tgt_out = np.array([[1, 2, 3], [1, 4, PAD_ID]]), np.array([[2, 3, 8], [4, 8, PAD_ID]])
    if model_name == "Transformer":
        model = Transformer(cfg)
        logits = model.forward(src, tgt_in)
        targets = tgt_out
    elif model_name == "TransformerTagger":
        model = TransformerTagger(cfg)
        logits = model.forward(src)
        targets = src
    else:
        model = TransformerClassifier(cfg)
        logits = model.forward(src)
        targets = np.array([1, 2])
    assert logits.dtype == dtype
    _, dlogits = cross_entropy(logits, targets, pad_id=PAD_ID, label_smoothing=0.1)
    assert dlogits.dtype == dtype
    model.zero_grad()
    model.backward(dlogits)
    assert {k: g.dtype for k, g in model.gradients().items() if g.dtype != dtype} == {}
    opt = Adam(model.parameters(), lr=NoamSchedule(cfg.d_model, warmup=4))
    clip_grad_norm(model.gradients(), 1.0)
    opt.step(model.gradients())
    assert {k: p.dtype for k, p in model.parameters().items() if p.dtype != dtype} == {}
    assert {k: m.dtype for k, m in opt.m.items() if m.dtype != dtype} == {}


# ---- LayerNorm ----------------------------------------------------------------------------------
@FAST
@given(st.integers(1, 4), st.integers(2, 8), st.data())
def test_layernorm_standardises_each_row(N, D, data):
    x = data.draw(float_arrays((N, D)), label="x")
    eps = 1e-5
    out, _ = layernorm_forward(x.copy(), np.ones(D), np.zeros(D), eps)
    var = x.var(axis=-1)
    np.testing.assert_allclose(out.mean(axis=-1), 0.0, rtol=0, atol=1e-12)
    # Exactly var / (var + eps): ~1 for any row that is not (nearly) constant.
    np.testing.assert_allclose(out.var(axis=-1), var / (var + eps), rtol=1e-9, atol=1e-12)
    spread = var > 1e-2
    np.testing.assert_allclose(out.var(axis=-1)[spread], 1.0, rtol=0, atol=1e-3)


# ---- optimiser ----------------------------------------------------------------------------------
@FAST
@given(st.sampled_from([8, 64, 512]), st.integers(1, 5000), st.floats(0.1, 10.0), st.integers(1, 20000))
def test_noam_schedule_formula_and_peak(d_model, warmup, factor, step):
    sched = NoamSchedule(d_model, warmup=warmup, factor=factor)
    expected = factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
    assert sched(step) == pytest.approx(expected, rel=1e-12)
    peak = sched(warmup)
    assert peak == pytest.approx(factor * (d_model * warmup) ** -0.5, rel=1e-12)
    assert sched(step) <= peak * (1 + 1e-12)
    if step < warmup:
        assert sched(step) < sched(step + 1)
    elif step > warmup:
        assert sched(step) < sched(step - 1)


@st.composite
def gradient_dicts(draw):
    n = draw(st.integers(1, 3))
    scale = draw(st.sampled_from([1e-3, 1.0, 1e3]))
    return {f"g{i}": draw(float_arrays((draw(st.integers(1, 4)), draw(st.integers(1, 3))))) * scale
            for i in range(n)}


@FAST
@given(gradient_dicts(), st.floats(1e-3, 1e3))
def test_clip_grad_norm_bounds_the_global_norm(grads, max_norm):
    before = {k: g.copy() for k, g in grads.items()}
    norm = clip_grad_norm(grads, max_norm)
    assert norm == pytest.approx(global_norm(before), rel=1e-12)
    assert global_norm(grads) <= max_norm
    if norm <= max_norm:
        for k in grads:
            np.testing.assert_array_equal(grads[k], before[k])
    else:  # one common factor, so the direction is kept
        for k in grads:
            np.testing.assert_allclose(grads[k], before[k] * (global_norm(grads) / norm), rtol=1e-9, atol=0)


# ---- loss ---------------------------------------------------------------------------------------
@FAST
@given(st.integers(1, 3), st.integers(1, 4), st.integers(2, 6), st.data())
def test_cross_entropy_without_smoothing_is_nll_of_softmax(B, T, V, data):
    logits = data.draw(float_arrays((B, T, V), -10.0, 10.0), label="logits")
    targets = data.draw(id_arrays(B, T, V, min_real=0), label="targets")
    loss, dlogits = cross_entropy(logits, targets, pad_id=PAD_ID, label_smoothing=0.0)
    z = logits - logits.max(axis=-1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    nll = -np.take_along_axis(log_p, targets[..., None], axis=-1)[..., 0]
    valid = targets != PAD_ID
    expected = nll[valid].mean() if valid.any() else 0.0
    assert loss == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert np.all(dlogits[~valid] == 0)
