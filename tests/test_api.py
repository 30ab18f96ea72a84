"""The public API as its usage example shows it, run exactly as written (the README's own example is run
by tests/test_docs.py)."""
from __future__ import annotations

import numpy as np
import pytest

B, S, T = 3, 7, 5


@pytest.fixture
def batch():
    rng = np.random.default_rng(123)
    src = rng.integers(0, 50, size=(B, S))
    tgt_in = rng.integers(0, 60, size=(B, T))
    tgt_out = rng.integers(0, 60, size=(B, T))
    return src, tgt_in, tgt_out


def run_snippet(src, tgt_in, tgt_out):
    # ---- the snippet, verbatim -------------------------------------------------------
    from numpytransformer import Transformer, TransformerConfig
    from numpytransformer.core.losses import cross_entropy
    cfg = TransformerConfig(src_vocab_size=50, tgt_vocab_size=60, d_model=32, n_heads=4,
                            n_layers=2, d_ff=64, max_len=40, dropout=0.1, pad_id=0,
                            dtype="float64", seed=0)
    model = Transformer(cfg)
    logits = model.forward(src, tgt_in)          # int arrays (B, S) and (B, T) -> (B, T, V)
    loss, dlogits = cross_entropy(logits, tgt_out, pad_id=0, label_smoothing=0.1)
    model.zero_grad(); model.backward(dlogits)
    params, grads = model.parameters(), model.gradients()   # dicts name -> array, same keys
    # ------------------------------------------------------------------------------------
    return model, logits, loss, dlogits, params, grads


def test_snippet_runs_as_written(batch):
    model, logits, loss, dlogits, params, grads = run_snippet(*batch)
    assert logits.shape == (B, T, 60) and logits.dtype == np.float64
    assert dlogits.shape == logits.shape
    assert np.isfinite(loss) and loss > 0
    assert params.keys() == grads.keys() and len(params) > 0
    for name in params:
        assert grads[name].shape == params[name].shape, name
        assert grads[name].dtype == params[name].dtype, name
    # Every tensor receives gradient; the all-zero b_k (shift invariance of softmax)
    # is the one exception the library documents.
    zero = sorted(name for name, g in grads.items() if not np.any(np.abs(g) > 1e-12))
    assert all(name.endswith(".b_k") for name in zero), zero
    assert len(zero) < len(grads)


def test_parameters_are_live_arrays(batch):
    model, *_ = run_snippet(*batch)
    W = model.parameters()["out.linear.W"]
    W[0, 0] = 123.0
    assert model.parameters()["out.linear.W"][0, 0] == 123.0


def test_train_and_eval_switch_dropout(batch):
    src, tgt_in, _ = batch
    model, *_ = run_snippet(*batch)
    model.eval()
    assert not any(m.training for _, m in model.named_modules())
    a, b = model.forward(src, tgt_in), model.forward(src, tgt_in)
    np.testing.assert_array_equal(a, b)
    model.train()
    assert all(m.training for _, m in model.named_modules())
    c, d = model.forward(src, tgt_in), model.forward(src, tgt_in)
    assert not np.allclose(c, d)
    assert not np.allclose(c, a)


def test_same_seed_gives_identical_weights():
    from numpytransformer import Transformer, TransformerConfig
    make = lambda seed: Transformer(TransformerConfig(src_vocab_size=50, tgt_vocab_size=60, d_model=32,
                                                      n_heads=4, n_layers=2, d_ff=64, max_len=40,
                                                      dtype="float64", seed=seed))
    p0, p1, p2 = (make(s).parameters() for s in (0, 0, 1))
    assert p0.keys() == p1.keys() == p2.keys()
    for name in p0:
        np.testing.assert_array_equal(p0[name], p1[name], err_msg=name)
    assert any(not np.array_equal(p0[n], p2[n]) for n in p0 if p0[n].any())


def test_same_seed_gives_identical_dropout_masks(batch):
    src, tgt_in, tgt_out = batch
    _, logits_a, *_ = run_snippet(src, tgt_in, tgt_out)
    _, logits_b, *_ = run_snippet(src, tgt_in, tgt_out)
    np.testing.assert_array_equal(logits_a, logits_b)


def test_two_backward_passes_without_zero_grad_accumulate(batch):
    from numpytransformer.core.losses import cross_entropy
    src, tgt_in, tgt_out = batch
    model, *_ = run_snippet(*batch)
    model.eval()  # the same forward twice
    _, dlogits = cross_entropy(model.forward(src, tgt_in), tgt_out, pad_id=0, label_smoothing=0.1)
    model.zero_grad()
    model.backward(dlogits)
    once = {k: g.copy() for k, g in model.gradients().items()}
    _, dlogits = cross_entropy(model.forward(src, tgt_in), tgt_out, pad_id=0, label_smoothing=0.1)
    model.backward(dlogits)
    for name, g in model.gradients().items():
        np.testing.assert_allclose(g, 2 * once[name], rtol=1e-12, atol=1e-15, err_msg=name)
    model.zero_grad()
    assert all(not g.any() for g in model.gradients().values())
