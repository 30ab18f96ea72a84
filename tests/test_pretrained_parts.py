"""The parts a pretrained BERT or GPT-2 needs, each proven on its own: GELU (both forms) and its
fast form, the FFN with GELU, dropout on the attention weights, and the model options (token
types, an embedding LayerNorm, learned positions in an encoder, an output projection without a bias).

Gradients by float64 finite differences (``numpytransformer.core.gradcheck``); values against
``torch`` where it is installed.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from numpytransformer.core import fast
from numpytransformer.core.attention import attention_forward
from numpytransformer.core.attention_dropout import attention_dropout_backward, attention_dropout_forward
from numpytransformer.core.feedforward import gelu_ffn_backward, gelu_ffn_forward
from numpytransformer.core.gelu import gelu_backward, gelu_forward
from numpytransformer.core.gradcheck import SMOOTH_TOL, WHOLE_MODEL_TOL, check_module, check_pair
from numpytransformer.errors import NumpyTransformerError
from numpytransformer.nn.bert import EncoderModel
from numpytransformer.nn.config import TransformerConfig
from numpytransformer.nn.gpt import TransformerLM
from numpytransformer.nn.modules import FeedForward, MultiHeadAttention


@pytest.mark.parametrize("approximate", [False, True])
def test_gelu_pair_gradients(approximate):
    x = np.random.default_rng(0).standard_normal((3, 7)) * 3
    errors = check_pair(gelu_forward, gelu_backward, {"x": x}, ["x"], approximate=approximate)
    assert max(errors.values()) < SMOOTH_TOL, errors


@pytest.mark.parametrize("approximate", [False, True])
def test_gelu_ffn_pair_gradients(approximate):
    rng = np.random.default_rng(1)
    inputs = {"x": rng.standard_normal((2, 3, 4)), "W1": rng.standard_normal((4, 6)), "b1": rng.standard_normal(6),
              "W2": rng.standard_normal((6, 4)), "b2": rng.standard_normal(4)}
    errors = check_pair(gelu_ffn_forward, gelu_ffn_backward, inputs, ["x", "W1", "b1", "W2", "b2"],
                        approximate=approximate)
    assert max(errors.values()) < SMOOTH_TOL, errors


@pytest.mark.parametrize("approximate", [False, True])
def test_gelu_equals_torch_in_float64(approximate):
    torch = pytest.importorskip("torch")
    x = np.concatenate([np.linspace(-12, 12, 2001), np.random.default_rng(2).standard_normal(1000)])
    t = torch.from_numpy(x).requires_grad_()
    ref = torch.nn.functional.gelu(t, approximate="tanh" if approximate else "none")
    ref.sum().backward()
    for forward in (gelu_forward, fast.gelu_forward):
        out, cache = forward(x, approximate)
        assert np.abs(out - ref.detach().numpy()).max() < 1e-12
        assert np.abs(gelu_backward(np.ones_like(x), cache) - t.grad.numpy()).max() < 1e-12


def test_fast_erfc_is_math_erfc():
    z = np.linspace(0, 9, 20001)
    ref = np.array([math.erfc(v) for v in z])
    assert np.abs(fast.erfc(z) - ref).max() < 1e-14
    assert np.abs(fast.erfc(z.astype(np.float32)) - ref).max() < 5e-7  # float32: its own short fit


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-14), (np.float32, 1e-6)])
def test_fast_gelu_equals_the_pair(dtype, tol, monkeypatch):
    monkeypatch.setattr(fast, "GELU_CHUNK", 128)  # several chunks, the last one partial
    x = (np.random.default_rng(3).standard_normal((50, 41)) * 4).astype(dtype)
    out, cache = gelu_forward(x)
    fast_out, fast_cache = fast.gelu_forward(x)
    assert fast_out.dtype == out.dtype == dtype and fast_cache.gate.dtype == dtype
    assert np.abs(fast_out - out).max() < tol * 4  # |x| up to about 16: GELU's error is |x| times Phi's
    dout = np.ones_like(x)
    assert np.abs(gelu_backward(dout, fast_cache) - gelu_backward(dout, cache)).max() < tol * 4


def test_feedforward_activation_is_checked_and_gelu_is_its_pair():
    rng = np.random.default_rng(4)
    with pytest.raises(NumpyTransformerError, match="activation"):
        FeedForward(4, 8, rng, activation="swish")
    ffn = FeedForward(4, 8, rng, activation="gelu_tanh")
    x = rng.standard_normal((2, 3, 4))
    assert np.allclose(ffn(x), gelu_ffn_forward(x, **ffn.params, approximate=True)[0], atol=1e-14)
    errors = check_module(ffn, [x], ["x"])
    assert max(errors.values()) < SMOOTH_TOL, errors


def _bert_config(**kw):
    base = dict(src_vocab_size=20, d_model=8, n_heads=2, n_layers=2, d_ff=16, max_len=10, dropout=0.0,
                dtype="float64", positions="learned", scale_embeddings=False, type_vocab_size=2,
                embedding_norm=True, activation="gelu", layernorm_eps=1e-12)
    base.update(kw)
    return TransformerConfig(**base)


def test_encoder_model_gradients_with_types_mask_and_embedding_norm():
    model = EncoderModel(_bert_config())
    rng = np.random.default_rng(5)
    ids = rng.integers(1, 20, (2, 5))
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    types = np.array([[0, 0, 1, 1, 1], [0, 1, 1, 0, 0]])
    model.forward = (lambda f: lambda i: f(i, mask, types))(model.forward)
    errors = check_module(model, [ids])
    assert max(errors.values()) < WHOLE_MODEL_TOL, errors
    assert set(model.parameters()) >= {"encoder.embedder.types.W", "encoder.embedder.norm.gamma",
                                       "encoder.embedder.pos.P"}


def test_encoder_model_refuses_bad_masks_and_types():
    model = EncoderModel(_bert_config())
    ids = np.ones((2, 3), dtype=int)
    with pytest.raises(NumpyTransformerError, match="attention_mask"):
        model.forward(ids, np.ones((2, 4), dtype=int))
    with pytest.raises(NumpyTransformerError, match="token_types"):
        model.forward(ids, None, np.full((2, 3), 2))
    with pytest.raises(NumpyTransformerError, match="type_vocab_size"):
        TransformerLM(TransformerConfig(src_vocab_size=20, type_vocab_size=2))


def test_lm_without_output_bias_and_with_padding_mask():
    cfg = TransformerConfig(src_vocab_size=20, d_model=8, n_heads=2, n_layers=1, d_ff=16, max_len=10, dropout=0.0,
                            dtype="float64", norm_first=True, positions="learned", scale_embeddings=False,
                            tie_embeddings=True, output_bias=False, activation="gelu_tanh")
    model = TransformerLM(cfg)
    assert not any(name.startswith("out.") for name in model.parameters())
    ids = np.random.default_rng(6).integers(0, 20, (2, 6))
    errors = check_module(model, [ids])
    assert max(errors.values()) < WHOLE_MODEL_TOL, errors
    # a key masked at position 2 changes what it and the later positions see, and nothing before it
    mask = np.array([[1] * 6, [1, 1, 0, 1, 1, 1]])
    masked, plain = model.forward(ids, mask), model.forward(ids)
    assert np.allclose(masked[0], plain[0], atol=1e-14) and np.allclose(masked[1, :2], plain[1, :2], atol=1e-14)
    assert not np.allclose(masked[1, 2:], plain[1, 2:])


@pytest.mark.parametrize("masked", [False, True])
def test_attention_dropout_pair_gradients(masked):
    rng = np.random.default_rng(7)
    inputs = {"q": rng.standard_normal((2, 2, 3, 4)), "k": rng.standard_normal((2, 2, 5, 4)),
              "v": rng.standard_normal((2, 2, 5, 4))}
    keep = (rng.random((2, 2, 3, 5)) >= 0.3) / 0.7
    mask = (np.arange(5) < np.array([5, 3])[:, None])[:, None, None, :] if masked else None
    errors = check_pair(attention_dropout_forward, attention_dropout_backward, inputs, ["q", "k", "v"],
                        mask=mask, p=0.3, drop_mask=keep)
    assert max(errors.values()) < SMOOTH_TOL, errors


def test_attention_dropout_is_attention_in_eval_and_drops_weights_in_training():
    rng = np.random.default_rng(8)
    q, k, v = rng.standard_normal((3, 2, 4, 8))
    plain, _ = attention_forward(q, k, v)
    same, _ = attention_dropout_forward(q, k, v, p=0.5, rng=rng, training=False)
    assert np.allclose(same, plain, atol=1e-15)
    _, cache = attention_dropout_forward(q, k, v, p=0.5, rng=rng)
    assert np.array_equal(cache.dropped == 0, cache.drop.mask == 0) and (cache.dropped == 0).any()


def test_attention_dropout_module_gradients_while_training():
    init, drop = np.random.default_rng(9), np.random.default_rng(10)
    att = MultiHeadAttention(8, 2, init, np.float64, attention_dropout=0.25, drop_rng=drop)
    x, memory = np.random.default_rng(11).standard_normal((2, 2, 3, 8))
    for inputs, names in (([x], ["x"]), ([x, memory], ["x", "memory"])):
        errors = check_module(att, inputs, names)
        assert max(errors.values()) < SMOOTH_TOL, errors
    assert not np.allclose(att(x), att.eval()(x))  # training drops weights
    # eval: no dropout, the same weights: equal to the attention without the option
    plain = MultiHeadAttention(8, 2, np.random.default_rng(9), np.float64)
    assert np.allclose(att.eval()(x), plain.eval()(x), atol=1e-14)


def test_models_build_attention_dropout_from_the_config():
    model = EncoderModel(_bert_config(attention_dropout=0.1, dropout=0.1))
    assert model.encoder.layers[0].self_attn.attention_dropout == 0.1
    assert model.encoder.layers[0].self_attn.rng is model.rng  # the model's dropout generator
    assert EncoderModel(_bert_config()).encoder.layers[0].self_attn.attention_dropout == 0.0
    with pytest.raises(NumpyTransformerError, match="attention_dropout"):
        _bert_config(attention_dropout=1.0)
