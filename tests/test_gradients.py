"""Finite-difference proofs of every backward pass, from one operation to the whole model.

Each case is a function returning ``{gradient name: error}`` (relative error, or the
absolute error for a gradient that is zero, see ``numpytransformer.core.gradcheck``). The
cases live in dicts keyed by an informative name that doubles as the pytest id, so a
failure reads ``test_pair_gradients[4.2-attention_forward-causal mask, ...]`` and a script
can import the dicts to report the largest error of each component. The pairs that an
exercise grades (the siblings) are checked on the exercises' own cases (``course/trusted.py``),
so the tests and the grader share one set; the pairs the lessons derive on theirs
(``tests/lesson_cases.py``); the tolerances are ``numpytransformer.core.gradcheck``'s.

All checks run in float64 with ``h = 1e-5``.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from numpytransformer import Transformer, TransformerClassifier, TransformerConfig, TransformerTagger
from numpytransformer.core.attention import attention_backward, attention_forward, causal_mask, padding_mask
from numpytransformer.nn.modules import Dropout
from numpytransformer.core.dropout import dropout_backward, dropout_forward
from numpytransformer.nn.modules import RegionEmbedding
from numpytransformer.core.embedding import (
    embedding_backward,
    embedding_forward,
    neighbour_ids,
    region_embedding_backward,
    region_embedding_forward,
)
from numpytransformer.errors import NumpyTransformerError
from numpytransformer.nn.modules import FeedForward
from numpytransformer.core.feedforward import ffn_backward, ffn_forward
from course import trusted
from lesson_cases import LESSON_PAIRS, pair_cases as lesson_pair_cases
from numpytransformer.core.gradcheck import (
    KINK_TOL,
    SMOOTH_TOL,
    WHOLE_MODEL_TOL,
    ZERO_ATOL,
    check_module,
    check_pair,
    numerical_gradient,
    numerical_gradient_entries,
    rel_error,
)
from numpytransformer.nn.modules import LayerNorm
from numpytransformer.core.layernorm import layernorm_backward, layernorm_forward
from numpytransformer.nn.blocks import DecoderLayer, EncoderLayer, Residual
from numpytransformer.nn.modules import Linear
from numpytransformer.core.linear import linear_backward, linear_forward
from numpytransformer.core.losses import (
    cross_entropy,
    softmax_cross_entropy_backward,
    softmax_cross_entropy_forward,
)
from numpytransformer.nn.models import make_rngs
from numpytransformer.core.multihead import (
    PARAM_NAMES,
    multihead_attention_backward,
    multihead_attention_forward,
)
from numpytransformer.nn.modules import MultiHeadAttention
from numpytransformer.core.pooling import (
    first_token_backward,
    first_token_forward,
    mean_pool_backward,
    mean_pool_forward,
)
from numpytransformer.core.positional import positional_backward, positional_forward, sinusoidal_encoding
from numpytransformer.core.relu import relu_backward, relu_forward

PAD = 0


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _mha_params(D: int, seed: int) -> dict:
    """Random weights *and* biases, so that no term of the backward hides behind a zero."""
    r = _rng(seed)
    return {name: r.standard_normal((D, D) if name.startswith("W") else D) * 0.5 for name in PARAM_NAMES}


# ---- masks shared by the attention cases (B=2, T=S=4) ----------------------------------
_IDS = np.array([[1, 2, 3, PAD], [4, 5, PAD, PAD]])
_PAD_MASK = padding_mask(_IDS, PAD)  # (2, 1, 1, 4)
_CAUSAL = causal_mask(4)  # (1, 1, 4, 4)


def _fully_masked_row_mask() -> np.ndarray:
    """Causal and padding mask, plus query 1 of batch 0 with every key masked."""
    mask = np.broadcast_to(_CAUSAL & _PAD_MASK, (2, 1, 4, 4)).copy()
    mask[0, 0, 1, :] = False
    return mask


ATTENTION_MASKS = {
    "none": None,
    "padding": _PAD_MASK,
    "causal": _CAUSAL,
    "padding+causal": _CAUSAL & _PAD_MASK,
    "fully-masked-row": _fully_masked_row_mask(),
}


# ---- functional pairs -------------------------------------------------------------------
def dropout_case():
    r = _rng(3)
    p = 0.5
    mask = (r.random((2, 3, 4)) >= p) / (1 - p)  # fixed, so the map is linear in x
    return check_pair(dropout_forward, dropout_backward, {"x": r.standard_normal((2, 3, 4))}, ["x"],
                      p=p, mask=mask)


def positional_case():
    r = _rng(5)
    return check_pair(positional_forward, positional_backward, {"x": r.standard_normal((2, 3, 6))}, ["x"],
                      pe=sinusoidal_encoding(8, 6), offset=2)


def mean_pool_case():
    r = _rng(14)
    valid = np.array([[True, True, True, False], [True, False, False, False]])
    return check_pair(mean_pool_forward, mean_pool_backward, {"h": r.standard_normal((2, 4, 3))}, ["h"],
                      valid=valid)


def first_token_case():
    return check_pair(first_token_forward, first_token_backward, {"h": _rng(15).standard_normal((2, 4, 3))},
                      ["h"])


def region_embedding_case():
    """Two neighbours on each side: four tables, the pad rows (read beyond both ends) included."""
    W = _rng(16).standard_normal((4, 7, 3))
    return check_pair(region_embedding_forward, region_embedding_backward, {"W": W}, ["W"],
                      ids=np.array([[1, 2, 3, 4, 5], [6, 1, PAD, PAD, PAD]]), scale=2.0, pad_id=PAD)


def _lesson_case(key: str, case):
    """A gradient-check case of a pair a lesson derives (``tests/lesson_cases.py``), run by the public check."""
    module, forward, backward = LESSON_PAIRS[key]
    lib = __import__(f"numpytransformer.{module}", fromlist=["_"])
    return lambda: check_pair(getattr(lib, forward), getattr(lib, backward), {k: v.copy() for k, v in case.inputs.items()},
                              list(case.wrt), seed=case.seed, **case.static)


def _exercise_case(exercise_id: str, j: int, case: trusted.Case):
    """A gradient-check case of the exercises (``trusted.pair_cases``, the one set), run by the public check."""
    _, module, names = trusted.PROBES[exercise_id]
    lib = __import__(f"numpytransformer.{module}", fromlist=["_"])
    forward, backward = getattr(lib, names[2 * j]), getattr(lib, names[2 * j + 1])
    return lambda: check_pair(forward, backward, {k: v.copy() for k, v in case.inputs.items()}, list(case.wrt),
                              seed=case.seed, **case.static)


#: The pairs an exercise grades are checked on the exercises' cases (``course/trusted.py``; those whose
#: gradient is exactly 0, ``tol`` 0, the grader compares with the library's), the others on their own here.
PAIR_CASES = {
    **{f"{exercise_id}-{names[2 * j]}-{case.name}": (_exercise_case(exercise_id, j, case), SMOOTH_TOL)
       for exercise_id, (kind, _, names) in trusted.PROBES.items() if kind == "pair"
       for j in range(len(names) // 2)
       for case in trusted.pair_cases(exercise_id) if case.tol},
    **{f"lesson-{LESSON_PAIRS[key][1]}-{case.name}": (_lesson_case(key, case), case.tol)
       for key in LESSON_PAIRS for case in lesson_pair_cases(key) if case.reference == "numeric"},
    "dropout-fixed-mask": (dropout_case, SMOOTH_TOL),
    "positional": (positional_case, SMOOTH_TOL),
    "mean-pool": (mean_pool_case, SMOOTH_TOL),
    "first-token-pool": (first_token_case, SMOOTH_TOL),
    "region-embedding": (region_embedding_case, SMOOTH_TOL),
}


def _assert_within(errors: dict, tol: float, expected_keys=None) -> None:
    assert errors, "the check compared nothing"
    if expected_keys is not None:
        assert set(errors) == set(expected_keys), f"unchecked: {set(expected_keys) - set(errors)}"
    bad = {name: err for name, err in errors.items() if not err < tol}
    assert not bad, f"errors above {tol:g}: {bad}"


@pytest.mark.parametrize("name", list(PAIR_CASES))
def test_pair_gradients(name):
    case, tol = PAIR_CASES[name]
    _assert_within(case(), tol)


# ---- what the finite differences alone do not say -----------------------------------------
def test_embedding_pad_row_gets_zero_gradient():
    """With ``pad_id`` the pad row's gradient is zeroed (a convention, like torch's padding_idx);
    every other row equals the plain scatter-add."""
    r = _rng(4)
    W = r.standard_normal((5, 3))
    ids = np.array([[1, 2, 2, PAD], [3, 1, PAD, PAD]])
    dout = r.standard_normal((2, 4, 3))
    _, cache = embedding_forward(ids, W, 2.0, pad_id=PAD)
    dW = embedding_backward(dout, cache)
    _, plain = embedding_forward(ids, W, 2.0, pad_id=None)
    dW_plain = embedding_backward(dout, plain)
    assert np.all(dW[PAD] == 0)
    assert np.any(dW_plain[PAD] != 0), "the test needs a pad position with gradient"
    np.testing.assert_array_equal(dW[1:], dW_plain[1:])


def test_region_embedding_adds_each_offsets_table_at_its_neighbour():
    """Position t adds W_o[ids[t + o]] for o in -2, -1, 1, 2; beyond either end it reads the pad row."""
    W = _rng(17).standard_normal((4, 7, 3))
    ids = np.array([[1, 2, 3], [4, 5, PAD]])
    out, _ = region_embedding_forward(ids, W, 1.0, PAD)
    np.testing.assert_array_equal(neighbour_ids(ids, -1, PAD), [[PAD, 1, 2], [PAD, 4, 5]])
    np.testing.assert_array_equal(neighbour_ids(ids, 2, PAD), [[3, PAD, PAD], [PAD, PAD, PAD]])
    expected = W[0][PAD] + W[1][1] + W[2][3] + W[3][PAD]  # ids[0, 1] = 2: neighbours -, 1 | 3, -
    np.testing.assert_allclose(out[0, 1], expected, rtol=1e-14)


def test_dropout_backward_zero_where_dropped():
    r = _rng(3)
    mask = (r.random((3, 4)) >= 0.5) * 2.0
    _, cache = dropout_forward(r.standard_normal((3, 4)), 0.5, mask=mask)
    dx = dropout_backward(np.ones((3, 4)), cache)
    np.testing.assert_array_equal(dx, mask)


def test_attention_fully_masked_row_is_zero():
    r = _rng(6)
    q, k, v = (r.standard_normal((2, 2, 4, 3)) for _ in range(3))
    mask = _fully_masked_row_mask()
    out, cache = attention_forward(q, k, v, mask)
    assert np.all(np.isfinite(out))
    assert np.all(out[0, :, 1] == 0)
    assert np.all(cache.weights[0, :, 1] == 0)
    dq, dk, dv = attention_backward(r.standard_normal(out.shape), cache)
    assert all(np.all(np.isfinite(g)) for g in (dq, dk, dv))
    # Nothing flows through a row with no weights: its query gets no gradient.
    assert np.all(dq[0, :, 1] == 0)


@pytest.mark.parametrize("mask_name", ["none", "padding+causal"])
@pytest.mark.parametrize("kind", ["self", "cross"])
def test_key_bias_gradient_is_zero(kind, mask_name):
    """Adding ``b_k`` adds ``q . b_k`` to every score of a row, and softmax is shift-invariant
    per row: ``dL/db_k`` is exactly zero. gradcheck then reports an absolute error."""
    r = _rng(16)
    D, H = 6, 2
    x = r.standard_normal((2, 4, D))
    x_kv = None if kind == "self" else r.standard_normal((2, 4, D))
    out, cache = multihead_attention_forward(x, x_kv, **_mha_params(D, 17), n_heads=H,
                                             mask=ATTENTION_MASKS[mask_name])
    grads = dict(zip(PARAM_NAMES, multihead_attention_backward(r.standard_normal(out.shape), cache)[2:]))
    assert np.max(np.abs(grads["b_k"])) < 1e-12
    assert np.max(np.abs(grads["b_q"])) > 1e-3, "b_q, unlike b_k, does shift the scores"


def test_cross_entropy_pad_rows_have_zero_gradient():
    r = _rng(13)
    targets = np.array([[1, 4, 2], [3, PAD, PAD]])
    _, dlogits = cross_entropy(r.standard_normal((2, 3, 5)), targets, pad_id=PAD, label_smoothing=0.1)
    assert np.all(dlogits[targets == PAD] == 0)
    assert np.all(dlogits[targets != PAD] != 0)


# ---- modules -------------------------------------------------------------------------------
def _randomise(module, seed: int, scale: float = 0.5):
    """Non-trivial parameters (LayerNorm starts at gamma=1, beta=0; biases at 0)."""
    r = _rng(seed)
    for p in module.parameters().values():
        p += r.standard_normal(p.shape) * scale
    return module


def linear_module_case():
    return check_module(_randomise(Linear(4, 3, _rng(20)), 21), [_rng(22).standard_normal((2, 3, 4))], ["x"])


def layernorm_module_case():
    return check_module(_randomise(LayerNorm(5), 23), [_rng(24).standard_normal((2, 3, 5))], ["x"])


def mha_self_module_case():
    mha = _randomise(MultiHeadAttention(6, 2, _rng(25)), 26)
    return check_module(mha, [_rng(27).standard_normal((2, 4, 6)), None, _CAUSAL & _PAD_MASK],
                        ["x", None, None])


def mha_cross_module_case():
    mha = _randomise(MultiHeadAttention(6, 2, _rng(28)), 29)
    r = _rng(30)
    return check_module(mha, [r.standard_normal((2, 3, 6)), r.standard_normal((2, 4, 6)), _PAD_MASK],
                        ["x", "memory", None])


def ffn_module_case():
    return check_module(_randomise(FeedForward(4, 6, _rng(31)), 32), [_rng(33).standard_normal((2, 3, 4))],
                        ["x"])


def dropout_module_case():
    drop = Dropout(0.3, _rng(34)).train()
    return check_module(drop, [_rng(35).standard_normal((2, 3, 4))], ["x"])


def _encoder_layer_case(norm_first: bool):
    def case():
        init_rng, drop_rng = make_rngs(36)
        layer = EncoderLayer(6, 2, 10, 0.2, init_rng, drop_rng, norm_first=norm_first)
        layer = _randomise(layer.train(), 37, 0.1)
        return check_module(layer, [_rng(38).standard_normal((2, 4, 6)), _PAD_MASK], ["x", None])
    return case


def _decoder_layer_case(norm_first: bool):
    def case():
        init_rng, drop_rng = make_rngs(39)
        layer = DecoderLayer(6, 2, 10, 0.2, init_rng, drop_rng, norm_first=norm_first)
        layer = _randomise(layer.train(), 40, 0.1)
        r = _rng(41)
        x, memory = r.standard_normal((2, 4, 6)), r.standard_normal((2, 4, 6))
        return check_module(layer, [x, memory, _CAUSAL & _PAD_MASK, _PAD_MASK], ["x", "memory", None, None])
    return case


MODULE_CASES = {
    "Linear": (linear_module_case, SMOOTH_TOL),
    "LayerNorm": (layernorm_module_case, SMOOTH_TOL),
    "MultiHeadAttention-self-masked": (mha_self_module_case, KINK_TOL),
    "MultiHeadAttention-cross-masked": (mha_cross_module_case, KINK_TOL),
    "FeedForward": (ffn_module_case, KINK_TOL),
    "Dropout-train": (dropout_module_case, SMOOTH_TOL),
    "RegionEmbedding": (lambda: check_module(RegionEmbedding(7, 4, 1, _rng(18), np.float64), [_IDS], [None]),
                        SMOOTH_TOL),
    "EncoderLayer-postLN-dropout": (_encoder_layer_case(False), KINK_TOL),
    "EncoderLayer-preLN-dropout": (_encoder_layer_case(True), KINK_TOL),
    "DecoderLayer-postLN-dropout": (_decoder_layer_case(False), KINK_TOL),
    "DecoderLayer-preLN-dropout": (_decoder_layer_case(True), KINK_TOL),
}


@pytest.mark.parametrize("name", list(MODULE_CASES))
def test_module_gradients(name):
    case, tol = MODULE_CASES[name]
    _assert_within(case(), tol)


def test_check_module_fixes_dropout_of_a_layer_by_itself():
    init_rng, drop_rng = make_rngs(36)
    layer = EncoderLayer(6, 2, 10, 0.2, init_rng, drop_rng).train()
    _assert_within(check_module(layer, [_rng(38).standard_normal((2, 4, 6)), None], ["x", None]), KINK_TOL)


# ---- whole models --------------------------------------------------------------------------
#: Right-padded batches; every tgt_in pad lines up with a tgt_out pad, as after shifting.
SRC = np.array([[3, 4, 5, 6, PAD], [2, 6, 1, PAD, PAD]])  # (B, S)
TGT_IN = np.array([[1, 2, 3, 4], [1, 5, PAD, PAD]])  # (B, T)
TGT_OUT = np.array([[2, 3, 4, 8], [5, 8, PAD, PAD]])
ENTRIES = 6  # random entries checked in every parameter tensor


def tiny_config(**overrides) -> TransformerConfig:
    cfg = dict(src_vocab_size=7, tgt_vocab_size=9, d_model=8, n_heads=2, n_layers=2, d_ff=12, max_len=8,
               dropout=0.1, pad_id=PAD, dtype="float64", seed=0, n_classes=3)
    cfg.update(overrides)
    return TransformerConfig(**cfg)


def _not_pad(targets: np.ndarray) -> np.ndarray:
    return (targets != PAD)[..., None]


def build_model(kind: str, norm_first: bool, tie: bool = False, pooling: str = "mean", causal: bool = False,
                share: bool = False, region: int = 0):
    """(model in train mode, forward inputs, dout zero at pad targets as the loss's is).
    ``share``: one joint vocabulary of 9, its matrix read by the encoder and the decoder."""
    joint = {"src_vocab_size": 9, "share_embeddings": True} if share else {}
    cfg = tiny_config(norm_first=norm_first, tie_embeddings=tie, pooling=pooling, causal=causal, region=region,
                      **joint)
    r = _rng(42)
    if kind == "transformer":
        model, inputs = Transformer(cfg), [SRC, TGT_IN]
        dout = r.standard_normal((2, 4, 9)) * _not_pad(TGT_OUT)
    elif kind == "tagger":
        model, inputs = TransformerTagger(cfg), [SRC]
        dout = r.standard_normal((2, 5, 9)) * _not_pad(SRC)
    else:
        model, inputs = TransformerClassifier(cfg), [SRC]
        dout = r.standard_normal((2, 3))
    return model.train(), inputs, dout


def _model_case(kind: str, norm_first: bool, tie: bool = False, pooling: str = "mean", causal: bool = False,
                share: bool = False, region: int = 0):
    def case():
        model, inputs, dout = build_model(kind, norm_first, tie, pooling, causal, share, region)
        errors = check_module(model, inputs, [None] * len(inputs), max_entries=ENTRIES, dout=dout)
        return errors, set(model.parameters())
    return case


MODEL_CASES = {}
for _ln, _nf in (("postLN", False), ("preLN", True)):
    for _tie in (False, True):
        MODEL_CASES[f"Transformer-{_ln}-{'tied' if _tie else 'untied'}"] = _model_case("transformer", _nf, _tie)
    MODEL_CASES[f"TransformerTagger-{_ln}"] = _model_case("tagger", _nf)
    for _pool in ("mean", "first"):
        MODEL_CASES[f"TransformerClassifier-{_ln}-{_pool}"] = _model_case("classifier", _nf, pooling=_pool)
# A joint vocabulary: one matrix for the source, the target and the output (three uses, one gradient).
MODEL_CASES["Transformer-postLN-shared-tied"] = _model_case("transformer", False, tie=True, share=True)
MODEL_CASES["Transformer-preLN-shared-untied"] = _model_case("transformer", True, share=True)
# The encoder of a pretrained language model: causal and padding masks together.
MODEL_CASES["TransformerClassifier-preLN-mean-causal"] = _model_case("classifier", True, causal=True)
# Region embeddings in the encoder: the classifier's, and the encoder of a translator.
MODEL_CASES["TransformerClassifier-postLN-mean-region1"] = _model_case("classifier", False, region=1)
MODEL_CASES["Transformer-postLN-tied-region2"] = _model_case("transformer", False, tie=True, region=2)


@pytest.mark.parametrize("name", list(MODEL_CASES))
def test_whole_model_gradients(name):
    """Dropout on (train mode, masks replayed through ``model.rng``), padding in src and tgt."""
    errors, param_names = MODEL_CASES[name]()
    _assert_within(errors, WHOLE_MODEL_TOL, expected_keys=param_names)


def test_tied_model_shares_one_matrix():
    model, _, _ = build_model("transformer", False, tie=True)
    params = model.parameters()
    assert "out.linear.W" not in params and "out.b" in params
    assert model.out.tied is model.decoder.embedder.embed


def test_shared_model_has_one_embedding_matrix():
    model, inputs, _ = build_model("transformer", False, tie=True, share=True)
    assert [k for k in model.parameters() if k.endswith(".W") and "embed" in k] == ["encoder.embedder.embed.W"]
    assert model.decoder.embedder.embed.owner is model.encoder.embedder.embed is model.out.tied
    # Reading the matrix twice equals two models that each hold a copy of it.
    twin = Transformer(dataclasses.replace(model.cfg, share_embeddings=False))
    for k, v in model.parameters().items():
        twin.parameters()[k][...] = v
    twin.parameters()["decoder.embedder.embed.W"][...] = model.parameters()["encoder.embedder.embed.W"]
    model.eval(), twin.eval()
    np.testing.assert_array_equal(model.forward(*inputs), twin.forward(*inputs))


def test_shared_embeddings_are_refused_without_one_vocabulary():
    with pytest.raises(NumpyTransformerError, match="share_embeddings needs one vocabulary.*src_vocab_size is 7"):
        tiny_config(share_embeddings=True)
    with pytest.raises(NumpyTransformerError, match="TransformerClassifier has one embedding"):
        TransformerClassifier(tiny_config(src_vocab_size=9, share_embeddings=True))


def test_region_embedding_is_blind_to_padding_and_refused_where_it_cannot_be():
    """A review alone and the same review padded in a batch get the same logits; a model without an
    encoder, or a causal one, refuses a region embedding in one line; a translator's decoder has none
    (it must not read the next target token)."""
    from numpytransformer.nn.gpt import TransformerLM
    translator, _, _ = build_model("transformer", False, region=2)
    assert translator.encoder.embedder.region is not None and translator.decoder.embedder.region is None
    model = TransformerClassifier(tiny_config(region=2, dropout=0.0)).eval()
    batch = model.forward(SRC)
    np.testing.assert_allclose(model.forward(SRC[1:, :3]), batch[1:], rtol=1e-12)
    with pytest.raises(NumpyTransformerError, match=r"region=1 is a region embedding in an encoder; a TransformerLM"):
        TransformerLM(tiny_config(region=1))
    with pytest.raises(NumpyTransformerError, match=r"TransformerConfig.region=1 embeds the next tokens too"):
        tiny_config(region=1, causal=True)
    with pytest.raises(NumpyTransformerError, match=r"TransformerConfig.region must be an integer in \[0, 16\], got 17"):
        tiny_config(region=17)


def _entry_error(analytic: np.ndarray, numeric: np.ndarray) -> float:
    """Relative error, or absolute where the true gradient is zero (as gradcheck does)."""
    if np.max(np.abs(numeric)) < ZERO_ATOL:
        return float(np.max(np.abs(analytic - numeric)))
    return rel_error(analytic, numeric)


def loss_case(norm_first: bool, tie: bool):
    """Parameter gradients of ``cross_entropy(model(src, tgt_in), tgt_out)`` through ``model.backward``."""
    def case():
        model, _, _ = build_model("transformer", norm_first, tie)
        state = model.rng.bit_generator.state

        def loss(_=None):
            model.rng.bit_generator.state = state  # the same dropout masks every time
            return cross_entropy(model.forward(SRC, TGT_IN), TGT_OUT, pad_id=PAD, label_smoothing=0.1)

        _, dlogits = loss()
        model.zero_grad()
        model.backward(dlogits)
        grads = {k: g.copy() for k, g in model.gradients().items()}
        r = _rng(43)
        errors = {}
        for name, p in model.parameters().items():
            idx = [np.unravel_index(i, p.shape) for i in r.choice(p.size, min(4, p.size), replace=False)]
            if name.endswith("embed.W"):
                idx += [(PAD, 0), (PAD, 1)]  # the pad row: zero gradient, unless tied to the output
            numeric = numerical_gradient_entries(lambda _: loss()[0], p, 1.0, idx)
            errors[name] = _entry_error(np.array([grads[name][i] for i in idx]), numeric)
        return errors, set(model.parameters())
    return case


LOSS_CASES = {
    "Transformer-postLN-untied-loss": loss_case(False, False),
    "Transformer-preLN-tied-loss": loss_case(True, True),
}


@pytest.mark.parametrize("name", list(LOSS_CASES))
def test_end_to_end_through_loss(name):
    errors, param_names = LOSS_CASES[name]()
    _assert_within(errors, WHOLE_MODEL_TOL, expected_keys=param_names)


def test_source_pad_row_gets_zero_gradient_through_loss():
    model, _, _ = build_model("transformer", False)
    _, dlogits = cross_entropy(model.forward(SRC, TGT_IN), TGT_OUT, pad_id=PAD, label_smoothing=0.1)
    model.zero_grad()
    model.backward(dlogits)
    grads = model.gradients()
    assert np.all(grads["encoder.embedder.embed.W"][PAD] == 0)
    assert np.all(grads["decoder.embedder.embed.W"][PAD] == 0)
    assert np.any(grads["encoder.embedder.embed.W"][1:] != 0)


def test_self_attention_equals_cross_attention_over_the_same_x():
    """Self-attention (``x_kv=None``) and cross-attention given the same x twice agree, and the
    self-attention's dx is the sum of the cross-attention's dx_q and dx_kv."""
    r = _rng(40)
    x = r.standard_normal((2, 5, 8))
    params = _mha_params(8, 41)
    mask = causal_mask(5)
    fused, fc = multihead_attention_forward(x, None, **params, n_heads=2, mask=mask)
    plain, pc = multihead_attention_forward(x, x, **params, n_heads=2, mask=mask)
    np.testing.assert_allclose(fused, plain, rtol=0, atol=1e-13)
    dout = r.standard_normal(fused.shape)
    gf = multihead_attention_backward(dout, fc)
    gp = multihead_attention_backward(dout, pc)
    np.testing.assert_allclose(gf[0], gp[0] + gp[1], rtol=0, atol=1e-13)  # dx = dx_q + dx_kv
    for a, b in zip(gf[2:], gp[2:]):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-13)


@pytest.mark.parametrize("norm_first", [False, True])
def test_residual_returns_the_memory_gradient_beside_dx(norm_first):
    """Around cross-attention, ``Residual.backward`` returns ``(dx, dmemory)`` (no side channel);
    both are checked against finite differences."""
    r = _rng(50)
    D, H = 6, 2
    res = Residual(D, 0.0, r, norm_first, 1e-5, np.float64)
    attn = MultiHeadAttention(D, H, r)
    for name in PARAM_NAMES:
        attn.params[name][...] = _mha_params(D, 51)[name]
    x, memory = r.standard_normal((2, 3, D)), r.standard_normal((2, 4, D))
    dout = r.standard_normal((2, 3, D))

    def f(_):
        return res(x, lambda h: attn(h, memory))

    f(None)
    dx, dmemory = res.backward(dout, attn.backward)
    assert rel_error(dx, numerical_gradient(f, x, dout)) < SMOOTH_TOL
    assert rel_error(dmemory, numerical_gradient(f, memory, dout)) < SMOOTH_TOL
