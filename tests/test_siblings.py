"""The siblings of the lessons' components, each a real option of the models.

RMSNorm beside LayerNorm, SwiGLU beside the FFN, rotary positions beside the sinusoidal table,
ALiBi beside the attention mask, grouped-query beside multi-head attention: each pair is checked
by finite differences (and against PyTorch or an independent formula where one exists), each
option by a whole-model gradient check, its cached decoding, and a short training run.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from numpytransformer.core.alibi import alibi_attention_backward, alibi_attention_forward, alibi_slopes
from numpytransformer.core.attention import attention_forward, causal_mask
from numpytransformer.core.gqa import gqa_backward, gqa_forward
from numpytransformer.core.gradcheck import SMOOTH_TOL, WHOLE_MODEL_TOL, check_module, check_pair, rel_error
from numpytransformer.core.multihead import multihead_attention_backward, multihead_attention_forward
from numpytransformer.core.rmsnorm import rmsnorm_backward, rmsnorm_forward
from numpytransformer.core.rotary import rotary_backward, rotary_forward
from numpytransformer.core.swiglu import swiglu_backward, swiglu_forward
from numpytransformer.errors import NumpyTransformerError
from numpytransformer.nn.bert import EncoderModel
from numpytransformer.nn.config import TransformerConfig
from numpytransformer.nn.gpt import TransformerLM
from numpytransformer.nn.models import Transformer, TransformerClassifier, TransformerTagger
from numpytransformer.nn.modules import GroupedQueryAttention, RMSNorm, SwiGLU
from numpytransformer.tasks.base import task_from_dict
from numpytransformer.tasks.lm import LanguageModelTask, LMData
from numpytransformer.training.checkpoint import load_checkpoint, save_checkpoint
from numpytransformer.training.settings import ModelSettings
from helpers import train_briefly

RNG = np.random.default_rng(0)
IDS = np.array([[1, 4, 0, 6, 2], [3, 3, 5, 0, 1]])  # (B, T); id 0 is an ordinary token in the language model
TOKENS = np.array([[1, 4, 2, 6, 2], [3, 3, 5, 6, 1]])  # no pad id: every position of an encoder is real


def normal(*shape):
    return RNG.standard_normal(shape)


def gqa_params(D=8, H=4, H_kv=2):
    d_kv = H_kv * D // H
    return dict(W_q=normal(D, D), b_q=normal(D), W_k=normal(D, d_kv), b_k=normal(d_kv), W_v=normal(D, d_kv),
                b_v=normal(d_kv), W_o=normal(D, D), b_o=normal(D))


# ---- the pairs, by finite differences ----------------------------------------------------------------
def test_rmsnorm_pair():
    errors = check_pair(rmsnorm_forward, rmsnorm_backward, dict(x=normal(2, 3, 6), gamma=normal(6)), ["x", "gamma"],
                        eps=1e-5)
    assert max(errors.values()) < SMOOTH_TOL, errors


def test_swiglu_pair():
    inputs = dict(x=normal(2, 3, 4), W1=normal(4, 6), V=normal(4, 6), W2=normal(6, 4))
    errors = check_pair(swiglu_forward, swiglu_backward, inputs, ["x", "W1", "V", "W2"])
    assert max(errors.values()) < SMOOTH_TOL, errors


@pytest.mark.parametrize("start", [0, 5])
def test_rotary_pair(start):
    errors = check_pair(rotary_forward, rotary_backward, dict(x=normal(2, 3, 4, 6)), ["x"],
                        positions=np.arange(start, start + 4))
    assert errors["x"] < SMOOTH_TOL, errors


def test_alibi_pair():
    qkv = dict(q=normal(2, 4, 5, 3), k=normal(2, 4, 5, 3), v=normal(2, 4, 5, 3))
    errors = check_pair(alibi_attention_forward, alibi_attention_backward, qkv, ["q", "k", "v"],
                        slopes=alibi_slopes(4), mask=causal_mask(5))
    assert max(errors.values()) < SMOOTH_TOL, errors


@pytest.mark.parametrize("H_kv", [1, 2, 4])
@pytest.mark.parametrize("positions", [None, "rotary", "alibi"])
def test_gqa_pair(H_kv, positions):
    inputs = dict(x=normal(2, 5, 8), **gqa_params(8, 4, H_kv))
    errors = check_pair(gqa_forward, gqa_backward, inputs, list(inputs), n_heads=4, n_kv_heads=H_kv,
                        mask=causal_mask(5), positions=positions)
    assert max(errors.values()) < SMOOTH_TOL, errors


# ---- the pairs against independent computations ------------------------------------------------------
def test_rmsnorm_equals_torch():
    torch = pytest.importorskip("torch")
    x, gamma, dout = normal(3, 4, 7), normal(7), normal(3, 4, 7)
    out, cache = rmsnorm_forward(x, gamma, 1e-6)
    dx, dgamma = rmsnorm_backward(dout, cache)
    norm = torch.nn.RMSNorm(7, eps=1e-6, dtype=torch.float64)
    with torch.no_grad():
        norm.weight.copy_(torch.from_numpy(gamma))
    tx = torch.from_numpy(x).requires_grad_(True)
    ty = norm(tx)
    ty.backward(torch.from_numpy(dout))
    assert rel_error(out, ty.detach().numpy()) < 1e-13
    assert rel_error(dx, tx.grad.numpy()) < 1e-13 and rel_error(dgamma, norm.weight.grad.numpy()) < 1e-13


def test_swiglu_equals_torch():
    torch = pytest.importorskip("torch")
    x, W1, V, W2, dout = normal(2, 3, 4), normal(4, 6), normal(4, 6), normal(6, 4), normal(2, 3, 4)
    out, cache = swiglu_forward(x, W1, V, W2)
    grads = swiglu_backward(dout, cache)
    t = [torch.from_numpy(a).requires_grad_(True) for a in (x, W1, V, W2)]
    ty = (torch.nn.functional.silu(t[0] @ t[1]) * (t[0] @ t[2])) @ t[3]
    ty.backward(torch.from_numpy(dout))
    assert rel_error(out, ty.detach().numpy()) < 1e-13
    for ours, theirs in zip(grads, t):
        assert rel_error(ours, theirs.grad.numpy()) < 1e-13


def test_rotary_is_a_complex_rotation_and_sees_distance_only():
    x, positions = normal(2, 5, 8), np.array([0, 1, 2, 7, 30])
    out, cache = rotary_forward(x, positions)
    theta = 10000.0 ** (-np.arange(0, 8, 2) / 8)
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * positions[:, None] * theta)  # pair i as a complex number
    assert rel_error(out[..., 0::2], z.real) < 1e-14 and rel_error(out[..., 1::2], z.imag) < 1e-14
    assert rel_error(rotary_backward(out, cache), x) < 1e-14  # the backward is the inverse rotation
    q, k = normal(1, 8), normal(1, 8)

    def score(p, s):
        return (rotary_forward(q, np.array([p]))[0] @ rotary_forward(k, np.array([s]))[0].T).item()

    assert score(3, 7) == pytest.approx(score(10, 14), rel=1e-12) and score(3, 7) != pytest.approx(score(3, 8))


def test_alibi_bias_and_slopes():
    assert np.allclose(alibi_slopes(8), 0.5 ** np.arange(1, 9))
    q, k, v = np.zeros((1, 2, 4, 3)), normal(1, 2, 4, 3), normal(1, 2, 4, 3)
    _, cache = alibi_attention_forward(q, k, v, alibi_slopes(2), causal_mask(4))
    i, j = np.arange(4)[:, None], np.arange(4)[None, :]
    for h, m in enumerate(alibi_slopes(2)):  # q = 0: the scores are the bias alone
        want = np.where(j <= i, np.exp(-m * (i - j)), 0.0)
        assert rel_error(cache.weights[0, h], want / want.sum(-1, keepdims=True)) < 1e-14
    q = normal(1, 2, 4, 3)
    plain, _ = attention_forward(q, k, v, causal_mask(4))
    assert rel_error(alibi_attention_forward(q, k, v, np.zeros(2), causal_mask(4))[0], plain) < 1e-15


def test_gqa_with_as_many_kv_heads_is_multihead_attention():
    x, p, dout = normal(2, 5, 8), gqa_params(8, 4, 4), normal(2, 5, 8)
    mask = causal_mask(5)
    out, cache = gqa_forward(x, **p, n_heads=4, n_kv_heads=4, mask=mask)
    ref, ref_cache = multihead_attention_forward(x, None, **p, n_heads=4, mask=mask)
    assert rel_error(out, ref) < 1e-14
    grads = gqa_backward(dout, cache)
    dx, _, *dparams = multihead_attention_backward(dout, ref_cache)
    for ours, theirs in zip(grads, [dx, *dparams]):
        assert rel_error(ours, theirs) < 1e-13


def test_gqa_is_multihead_attention_with_each_kv_head_copied_for_its_group():
    """H = 4 query heads, 2 key and value heads of width 2: MHA whose k and v weights repeat each
    head's columns for the two query heads of its group gives the same output."""
    x, p = normal(2, 5, 8), gqa_params(8, 4, 2)
    out, _ = gqa_forward(x, **p, n_heads=4, n_kv_heads=2)

    def widen(a):  # (..., 2 heads * 2) -> (..., 4 heads * 2): head g serves query heads 2g and 2g + 1
        heads = a.reshape(*a.shape[:-1], 2, 2)
        return np.repeat(heads, 2, axis=-2).reshape(*a.shape[:-1], 8)

    wide = dict(p, W_k=widen(p["W_k"]), b_k=widen(p["b_k"]), W_v=widen(p["W_v"]), b_v=widen(p["b_v"]))
    assert rel_error(out, multihead_attention_forward(x, None, **wide, n_heads=4)[0]) < 1e-14


# ---- the modules -------------------------------------------------------------------------------------
def test_modules_check_their_gradients():
    for module, x in ((RMSNorm(6), normal(2, 3, 6)), (SwiGLU(6, 10, RNG), normal(2, 3, 6)),
                      (GroupedQueryAttention(8, 4, 2, RNG, positions="rotary"), normal(2, 5, 8))):
        errors = check_module(module, [x], ["x"])
        assert max(errors.values()) < SMOOTH_TOL, (type(module).__name__, errors)


@pytest.mark.parametrize("kw, message", [
    (dict(n_kv_heads=3), "n_kv_heads"), (dict(positions="rotary", d_model=12, n_heads=4), "even"),
    (dict(positions="mystery"), "positions")])
def test_the_attention_module_refuses_bad_settings(kw, message):
    args = dict(d_model=8, n_heads=4, n_kv_heads=2, positions=None) | kw
    with pytest.raises(NumpyTransformerError, match=message):
        GroupedQueryAttention(args["d_model"], args["n_heads"], args["n_kv_heads"], RNG, positions=args["positions"])


# ---- the options of the models ------------------------------------------------------------------------
OPTIONS = {"rmsnorm": dict(norm="rmsnorm"), "swiglu": dict(activation="swiglu"), "rotary": dict(positions="rotary"),
           "alibi": dict(positions="alibi"), "gqa": dict(n_kv_heads=2),
           "llama": dict(norm="rmsnorm", activation="swiglu", positions="rotary", n_kv_heads=1)}


def tiny_config(dropout=0.1, **kw) -> TransformerConfig:
    base = dict(src_vocab_size=7, d_model=8, n_heads=4, n_layers=2, d_ff=12, max_len=8, dropout=dropout,
                dtype="float64", norm_first=True, tie_embeddings=True)
    return TransformerConfig(**(base | kw))


@pytest.mark.parametrize("option", OPTIONS)
@pytest.mark.parametrize("norm_first", [True, False], ids=["preLN", "postLN"])
def test_lm_whole_model_gradients(option, norm_first):
    model = TransformerLM(tiny_config(norm_first=norm_first, **OPTIONS[option])).train()
    errors = check_module(model, [IDS], [None], max_entries=8)
    assert set(errors) == set(model.parameters())
    assert max(errors.values()) < WHOLE_MODEL_TOL, errors


def test_options_change_the_parameters_as_promised():
    names = set(TransformerLM(tiny_config(**OPTIONS["llama"])).parameters())
    assert "layers.0.ffn.V" in names and "layers.0.ffn.b1" not in names  # SwiGLU: no biases
    assert "final_norm.gamma" in names and "final_norm.beta" not in names  # RMSNorm: no beta
    assert "pos.P" not in names  # rotary: no table
    model = TransformerLM(tiny_config(**OPTIONS["llama"]))
    assert model.parameters()["layers.0.self_attn.W_k"].shape == (8, 2)  # one key head of width 2
    default = set(TransformerLM(tiny_config()).parameters())
    assert "layers.0.ffn.b1" in default and "final_norm.beta" in default


@pytest.mark.parametrize("model_cls, kw", [
    (EncoderModel, dict(positions="rotary", norm="rmsnorm", n_kv_heads=2, tie_embeddings=False)),
    (TransformerClassifier, dict(norm="rmsnorm", activation="swiglu", n_kv_heads=1, tie_embeddings=False)),
    (Transformer, dict(norm="rmsnorm", activation="swiglu"))])
def test_other_models_whole_model_gradients(model_cls, kw):
    model = model_cls(tiny_config(**kw)).train()
    inputs = [TOKENS, TOKENS[:, :4]] if model_cls is Transformer else [TOKENS]
    out = model.forward(*inputs)
    dout = normal(*out.shape)
    errors = check_module(model, inputs, [None] * len(inputs), max_entries=6, dout=dout)
    assert max(errors.values()) < WHOLE_MODEL_TOL, errors


def test_rotary_encoder_reads_no_table_and_sees_order():
    model = EncoderModel(tiny_config(positions="rotary", tie_embeddings=False, dropout=0.0))
    assert not any(name.startswith("encoder.embedder.pos") for name in model.parameters())
    h = model.forward(IDS)
    swapped = model.forward(IDS[:, [1, 0, 2, 3, 4]])
    assert not np.allclose(h[:, 2:], swapped[:, 2:])  # the order of the first two tokens reaches the others


@pytest.mark.parametrize("option", ["rotary", "alibi", "gqa", "llama"])
def test_cached_decoding_equals_the_full_forward(option):
    """The cache keeps the rotated keys at their positions and ALiBi measures distance from the new
    queries' positions: pieces of 2, 1 and 4 tokens give the full forward's logits."""
    model = TransformerLM(tiny_config(**OPTIONS[option])).eval()
    ids = np.array([[1, 4, 0, 6, 2, 5, 3], [3, 3, 5, 0, 1, 2, 6]])
    full = model.forward(ids)
    caches = model.new_kv_caches()
    parts = [model.forward_cached(ids[:, :2], caches, 0), model.forward_cached(ids[:, 2:3], caches, 2),
             model.forward_cached(ids[:, 3:], caches, 3)]
    assert np.abs(np.concatenate(parts, axis=1) - full).max() < 1e-12
    if option in ("gqa", "llama"):
        assert caches[0]["k"].shape[1] == model.cfg.n_kv_heads  # the cache holds the shared heads only


@pytest.mark.parametrize("kw, message", [
    (dict(norm="batchnorm"), "TransformerConfig.norm must be"),
    (dict(activation="swish"), "TransformerConfig.activation must be"),
    (dict(positions="relative"), "TransformerConfig.positions must be"),
    (dict(n_kv_heads=3), "n_kv_heads=3 must divide n_heads=4"),
    (dict(n_kv_heads=8), "TransformerConfig.n_kv_heads"),
    (dict(n_kv_heads=True), "TransformerConfig.n_kv_heads"),
    (dict(positions="rotary", d_model=12, n_heads=4), "must be even"),
    (dict(positions="alibi", attention_dropout=0.1), "attention_dropout"),
])
def test_the_config_refuses_bad_values_in_one_line(kw, message):
    with pytest.raises(NumpyTransformerError, match=message) as e:
        tiny_config(**kw)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("model_cls, kw, message", [
    (TransformerClassifier, dict(positions="alibi"), "alibi"),
    (EncoderModel, dict(positions="alibi"), "alibi"),
    (TransformerTagger, dict(positions="rotary"), "positions='rotary'"),
    (Transformer, dict(n_kv_heads=2), "cross-attention")])
def test_models_refuse_the_options_they_lack(model_cls, kw, message):
    with pytest.raises(NumpyTransformerError, match=message):
        model_cls(tiny_config(tie_embeddings=False, **kw))


def test_defaults_are_the_paper_models():
    cfg = tiny_config()
    assert (cfg.norm, cfg.activation, cfg.positions, cfg.n_kv_heads) == ("layernorm", "relu", "sinusoidal", 4)


# ---- the language-model task: flags, checkpoints, training --------------------------------------------
def lm_task(**data) -> LanguageModelTask:
    model = ModelSettings(d_model=16, n_heads=4, n_layers=1, d_ff=32, dropout=0.0, norm="pre",
                          tie_embeddings=True, dtype="float64")
    data = LMData(corpus="embedded", tokenization="char", block_size=16, batch_size=8, batches_per_epoch=5,
                  embedded_chars=20000, **data)
    return LanguageModelTask(data, model)


SETTINGS = {"rmsnorm": dict(normalization="rmsnorm"), "swiglu": dict(activation="swiglu"),
            "rotary": dict(positions="rotary"), "alibi": dict(positions="alibi"), "gqa": dict(kv_heads=2)}


@pytest.mark.parametrize("option", SETTINGS)
def test_the_gpt_trains_with_each_option(option):
    """60 updates on the embedded corpus: the validation loss falls by more than a nat per character."""
    task = lm_task(**SETTINGS[option])
    model = task.build_model()
    before, after = train_briefly(task, model)
    assert after < before - 1.0, (before, after)


def test_the_flags_reach_the_model_and_its_checkpoint(tmp_path):
    from numpytransformer.cli import build_parser

    args = build_parser().parse_args(["train", "lm", "--normalization", "rmsnorm", "--activation", "swiglu",
                                      "--positions", "rotary", "--kv-heads", "2"])
    given = {k.split(".", 1)[1]: v for k, v in vars(args).items() if k.startswith("LMData.")}
    assert given == {"normalization": "rmsnorm", "activation": "swiglu", "positions": "rotary", "kv_heads": 2}
    task = lm_task(**given)
    model = task.build_model()
    assert (model.cfg.norm, model.cfg.activation, model.cfg.positions, model.cfg.n_kv_heads) == \
        ("rmsnorm", "swiglu", "rotary", 2)
    save_checkpoint(tmp_path / "ck", model, {"task": task.to_dict(), "data": {}, "train": {}, "step": 0, "epoch": 0,
                                             "best_score": None, "history": {}})
    again = task_from_dict(json.loads((tmp_path / "ck" / "checkpoint.json").read_text())["task"]).build_model()
    load_checkpoint(tmp_path / "ck", again)
    assert again.cfg == model.cfg


@pytest.mark.parametrize("data, message", [(dict(kv_heads=3), "--kv-heads 3 must divide --heads 4"),
                                           (dict(kv_heads=0), "--kv-heads must be")])
def test_bad_flags_are_refused_naming_them(data, message):
    with pytest.raises(NumpyTransformerError, match=message):
        lm_task(**data)


def test_a_checkpoint_saved_before_the_options_loads_with_the_defaults(tmp_path):
    """A checkpoint whose config and task settings lack the new fields: the paper's model."""
    task = lm_task()
    model = task.build_model()
    save_checkpoint(tmp_path / "ck", model, {"task": task.to_dict(), "data": {}, "train": {}, "step": 0, "epoch": 0,
                                             "best_score": None, "history": {}})
    js = tmp_path / "ck" / "checkpoint.json"
    doc = json.loads(js.read_text())
    for field in ("norm", "n_kv_heads"):
        del doc["config"][field]
    for field in ("normalization", "activation", "kv_heads"):
        del doc["task"]["data"][field]
    js.write_text(json.dumps(doc))
    old = task_from_dict(doc["task"])
    rebuilt = old.build_model()
    load_checkpoint(tmp_path / "ck", rebuilt)
    assert rebuilt.cfg == model.cfg and rebuilt.cfg.norm == "layernorm"
    del doc["task"]["data"]["positions"]  # an older field is still required
    with pytest.raises(NumpyTransformerError, match="task.data.positions missing"):
        task_from_dict(doc["task"])
