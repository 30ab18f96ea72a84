"""Bad input gets an error that names the argument and says what was expected.

Each ``match`` names the argument, so a message that loses it fails the test.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from numpytransformer import (Adam, NoamSchedule, Transformer, TransformerClassifier, TransformerConfig,
                              TransformerTagger, clip_grad_norm)
from numpytransformer.nn.modules import Dropout
from numpytransformer.core.dropout import dropout_forward
from numpytransformer.errors import NumpyTransformerError
from numpytransformer.nn.modules import LayerNorm
from numpytransformer.nn.modules import Linear
from numpytransformer.core.losses import cross_entropy
from numpytransformer.nn.modules import MultiHeadAttention
from numpytransformer.nn.ensemble import Ensemble
from numpytransformer.nn.modules import (Embedding, FeedForward, LearnedPositionalEmbedding, PositionalEncoding,
                                         RegionEmbedding)

PAD = 0
SRC = np.array([[3, 4, 5, PAD], [2, 6, PAD, PAD]])  # (B=2, S=4)
TGT_IN = np.array([[1, 2, 3], [1, 4, PAD]])  # (B=2, T=3)


def cfg(**overrides) -> TransformerConfig:
    base = dict(src_vocab_size=7, tgt_vocab_size=9, d_model=8, n_heads=2, n_layers=1, d_ff=12, max_len=5,
                dropout=0.1, pad_id=PAD, dtype="float64", seed=0)
    base.update(overrides)
    return TransformerConfig(**base)


@pytest.fixture
def model():
    return Transformer(cfg())


@pytest.fixture
def tagger():
    return TransformerTagger(cfg())


# ---- token ids ----------------------------------------------------------------------------
@pytest.mark.parametrize("bad_id", [-1, 7, 100], ids=["negative", "vocab", "far-above"])
def test_src_id_out_of_range(model, bad_id):
    src = SRC.copy()
    src[0, 1] = bad_id
    with pytest.raises(NumpyTransformerError, match=rf"src holds id {bad_id}, outside the vocabulary \[0, 7\)"):
        model.forward(src, TGT_IN)


@pytest.mark.parametrize("bad_id", [-2, 9], ids=["negative", "vocab"])
def test_tgt_in_id_out_of_range(model, bad_id):
    tgt = TGT_IN.copy()
    tgt[1, 0] = bad_id
    with pytest.raises(NumpyTransformerError, match=rf"tgt_in holds id {bad_id}, outside the vocabulary \[0, 9\)"):
        model.forward(SRC, tgt)


@pytest.mark.parametrize("bad_id", [-1, 7], ids=["negative", "vocab"])
def test_tagger_x_id_out_of_range(tagger, bad_id):
    x = SRC.copy()
    x[0, 0] = bad_id
    with pytest.raises(NumpyTransformerError, match=rf"x holds id {bad_id}, outside the vocabulary"):
        tagger.forward(x)


def test_classifier_x_id_out_of_range():
    with pytest.raises(NumpyTransformerError, match=r"x holds id 7, outside the vocabulary"):
        TransformerClassifier(cfg()).forward(np.array([[1, 7]]))


def test_float_ids(model, tagger):
    with pytest.raises(NumpyTransformerError, match=r"src must be an array of integer token ids, got dtype float64 "
                                        r"\(it holds whole numbers: convert with \.astype"):
        model.forward(SRC.astype(np.float64), TGT_IN)
    with pytest.raises(NumpyTransformerError, match=r"tgt_in must be an array of integer token ids, got dtype float32"):
        model.forward(SRC, TGT_IN.astype(np.float32))
    with pytest.raises(NumpyTransformerError, match=r"x must be an array of integer token ids, got dtype float64$"):
        tagger.forward(np.array([[1.5, 2.0]]))


def test_ids_must_be_two_dimensional(model):
    with pytest.raises(NumpyTransformerError, match=r"src must have 2 dimensions \(batch, length\), got shape \(4,\)"):
        model.forward(SRC[0], TGT_IN)


@pytest.mark.parametrize("which", ["src", "tgt_in"])
def test_sequence_longer_than_max_len(model, which):
    long = np.ones((2, 6), dtype=np.int64)
    args = (long, TGT_IN) if which == "src" else (SRC, long)
    with pytest.raises(NumpyTransformerError, match=rf"{which} has length 6, longer than max_len=5"):
        model.forward(*args)


def test_tagger_sequence_longer_than_max_len(tagger):
    with pytest.raises(NumpyTransformerError, match=r"x has length 6, longer than max_len=5"):
        tagger.forward(np.ones((1, 6), dtype=np.int64))


def test_mismatched_batch_sizes(model):
    with pytest.raises(NumpyTransformerError, match=r"batch sizes differ: src has 2 rows but tgt_in has 1"):
        model.forward(SRC, TGT_IN[:1])


# ---- configuration ----------------------------------------------------------------------------
def test_d_model_not_divisible_by_n_heads():
    with pytest.raises(NumpyTransformerError, match=r"d_model=10 must be divisible by n_heads=3"):
        cfg(d_model=10, n_heads=3)
    with pytest.raises(NumpyTransformerError, match=r"d_model=10 must be divisible by n_heads=4"):
        MultiHeadAttention(10, 4, np.random.default_rng(0))


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5, float("nan")])
def test_invalid_dropout(p):
    with pytest.raises(NumpyTransformerError, match=r"TransformerConfig\.dropout must be a finite number in \[0, 0\.99\]"):
        cfg(dropout=p)  # the command line's limit (config.DROPOUT_MAX)
    with pytest.raises(NumpyTransformerError, match=r"dropout p must be a finite number in \[0, 1\)"):
        Dropout(p, np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"dropout p must be in \[0, 1\)"):
        dropout_forward(np.ones(3), p, np.random.default_rng(0))


def test_dropout_of_the_wrong_type_is_named():
    with pytest.raises(NumpyTransformerError, match=r"TransformerConfig\.dropout must be a real number, got '0\.1'"):
        cfg(dropout="0.1")


@pytest.mark.parametrize("dtype", ["float16", "int64", "double"])
def test_invalid_dtype_string(dtype):
    with pytest.raises(NumpyTransformerError,
                       match=rf"TransformerConfig\.dtype must be 'float32' or 'float64' \(or that np\.dtype\), got '{dtype}'"):
        cfg(dtype=dtype)


def test_invalid_pooling():
    with pytest.raises(NumpyTransformerError, match=r"TransformerConfig\.pooling must be 'mean' or 'first', got 'max'"):
        cfg(pooling="max")


@pytest.mark.parametrize("field", ["d_model", "n_heads", "n_layers", "d_ff", "max_len", "src_vocab_size"])
@pytest.mark.parametrize("value", [0, -1, 2.0, True], ids=["zero", "negative", "float", "bool"])
def test_sizes_must_be_positive_integers(field, value):
    with pytest.raises(NumpyTransformerError, match=rf"TransformerConfig\.{field} must be an integer"):
        cfg(**{field: value})


def test_pad_id_outside_vocabularies():
    with pytest.raises(NumpyTransformerError, match=r"TransformerConfig\.pad_id must be an integer in \[0, 6\], got 7"):
        cfg(pad_id=7)


def test_model_needs_a_config():
    with pytest.raises(NumpyTransformerError, match=r"cfg must be a TransformerConfig, got dict"):
        Transformer({"src_vocab_size": 7})


# ---- backward bookkeeping ------------------------------------------------------------------------
def _forward(model):
    return model.forward(SRC, TGT_IN) if isinstance(model, Transformer) else model.forward(SRC)


@pytest.mark.parametrize("cls", [Transformer, TransformerTagger, TransformerClassifier])
def test_model_backward_before_forward(cls):
    model = cls(cfg())
    with pytest.raises(RuntimeError, match=rf"{cls.__name__}\.backward was called before forward"):
        model.backward(np.zeros((2, 3, 9)))


@pytest.mark.parametrize("cls", [Transformer, TransformerTagger, TransformerClassifier])
def test_model_backward_twice_for_one_forward(cls):
    model = cls(cfg())
    logits = _forward(model)
    model.backward(np.ones_like(logits))
    with pytest.raises(RuntimeError, match=rf"{cls.__name__}\.backward was called before forward"):
        model.backward(np.ones_like(logits))


def test_model_backward_twice_message_says_twice(model):
    logits = _forward(model)
    model.backward(np.ones_like(logits))
    with pytest.raises(RuntimeError) as info:
        model.backward(np.ones_like(logits))
    assert "twice" in str(info.value)


def _modules():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4))
    return [
        pytest.param(LayerNorm(4), x, id="LayerNorm"),
        pytest.param(Linear(4, 4, rng), x, id="Linear"),
        pytest.param(MultiHeadAttention(4, 2, rng), x, id="MultiHeadAttention"),
    ]


@pytest.mark.parametrize("module, x", _modules())
def test_module_backward_before_forward_and_twice(module, x):
    name = type(module).__name__
    message = rf"{name}\.backward was called before forward \(or twice for one forward\)"
    with pytest.raises(RuntimeError, match=message):
        module.backward(np.ones_like(x))
    out = module.forward(x)
    module.backward(np.ones_like(out))
    with pytest.raises(RuntimeError, match=message):
        module.backward(np.ones_like(out))


@pytest.mark.parametrize("cls", [Transformer, TransformerTagger, TransformerClassifier])
def test_dlogits_of_the_wrong_shape(cls):
    model = cls(cfg())
    logits = _forward(model)
    wrong = np.zeros(logits.shape[:-1] + (logits.shape[-1] + 1,))
    expected = f"dlogits must have the shape of the last forward's output {logits.shape}, got {wrong.shape}"
    with pytest.raises(NumpyTransformerError, match=re.escape(expected)):
        model.backward(wrong)
    with pytest.raises(NumpyTransformerError, match=r"dlogits must have the shape .*got list"):
        model.backward(np.zeros(logits.shape).tolist())
    model.backward(np.zeros_like(logits))  # the failed calls did not spend the forward


@pytest.mark.parametrize("bad_dtype", [np.float32, np.int64])
def test_dlogits_of_the_wrong_dtype(model, bad_dtype):
    logits = _forward(model)
    with pytest.raises(NumpyTransformerError,
                       match=rf"dlogits must be float64 like the model, got {np.dtype(bad_dtype).name}"):
        model.backward(np.zeros(logits.shape, dtype=bad_dtype))


def test_dlogits_with_nan_are_rejected(model):
    logits = _forward(model)
    with pytest.raises(NumpyTransformerError, match="dlogits"):
        model.backward(np.full_like(logits, np.nan))


# ---- loss -------------------------------------------------------------------------------------------
LOGITS = np.zeros((2, 3, 5))


def test_cross_entropy_targets_of_the_wrong_shape():
    with pytest.raises(NumpyTransformerError, match=r"targets must have shape \(2, 3\) to match logits \(2, 3, 5\), "
                                         r"got \(2, 4\)"):
        cross_entropy(LOGITS, np.ones((2, 4), dtype=np.int64))


@pytest.mark.parametrize("bad", [-1, 5], ids=["negative", "num-classes"])
def test_cross_entropy_targets_out_of_range(bad):
    targets = np.ones((2, 3), dtype=np.int64)
    targets[1, 2] = bad
    with pytest.raises(NumpyTransformerError, match=r"targets must lie in \[0, 5\)"):
        cross_entropy(LOGITS, targets)


def test_cross_entropy_float_targets():
    with pytest.raises(NumpyTransformerError, match=r"targets must be integer class ids, got dtype float64"):
        cross_entropy(LOGITS, np.ones((2, 3)))


@pytest.mark.parametrize("eps", [-0.1, 1.0, 1.5, float("nan")])
def test_cross_entropy_label_smoothing_range(eps):
    with pytest.raises(NumpyTransformerError, match=r"label_smoothing must be a finite number in \[0, 1\)"):
        cross_entropy(LOGITS, np.ones((2, 3), dtype=np.int64), label_smoothing=eps)


# ---- optimiser --------------------------------------------------------------------------------------
@pytest.mark.parametrize("grads, differing", [
    ({"a": np.zeros(3)}, "'b'"),
    ({"a": np.zeros(3), "b": np.zeros(2), "c": np.zeros(1)}, "'c'"),
    ({"a": np.zeros(3), "B": np.zeros(2)}, r"'B', 'b'"),
], ids=["missing", "extra", "renamed"])
def test_adam_with_mismatched_grads_keys(grads, differing):
    params = {"a": np.ones(3), "b": np.ones(2)}
    opt = Adam(params)
    with pytest.raises(ValueError, match=rf"grads and params must have the same keys; these differ: \[{differing}\]"):
        opt.step(grads)
    assert opt.t == 0
    np.testing.assert_array_equal(params["a"], 1.0)


def test_adam_with_mismatched_grad_shape():
    opt = Adam({"a": np.ones(3)})
    with pytest.raises(ValueError, match="shape"):
        opt.step({"a": np.ones(1)})


def test_noam_warmup_must_be_positive():
    with pytest.raises(ValueError, match=r"warmup must be an integer >= 1, got 0"):
        NoamSchedule(8, warmup=0)


@pytest.mark.parametrize("make, message", [
    (lambda: NoamSchedule(0, 10), "d_model must be an integer >= 1, got 0"),
    (lambda: NoamSchedule(8, "4000"), "warmup must be an integer, got '4000'"),
    (lambda: Adam({"a": np.ones(3)}, lr=-1.0), r"lr must be a finite number in \[0, inf\), got -1.0"),
    (lambda: Adam({"a": np.ones(3)}, lr="0.1"), "lr must be a real number, got '0.1'"),
    (lambda: Adam({"a": np.ones(3)}, betas=(0.9, 1.0)), r"betas\[1\] must be a finite number in \[0, 1\), got 1.0"),
    (lambda: Adam({"a": np.ones(3)}, eps=0.0), r"eps must be a finite number in \(0, inf\), got 0.0"),
    (lambda: Adam({"a": np.ones(3)}, weight_decay=-0.1),
     r"weight_decay must be a finite number in \[0, inf\), got -0.1"),
    (lambda: clip_grad_norm({"a": np.ones(3)}, "1"), "max_norm must be a real number, got '1'"),
])
def test_optimiser_settings_are_checked_where_they_are_given(make, message):
    with pytest.raises(NumpyTransformerError, match=message):
        make()


@pytest.mark.parametrize("call, message", [
    (lambda m, x, mem: m(x, mem[:1]), "batch sizes differ: x has 2 rows but x_kv has 1"),
    (lambda m, x, mem: m(x[..., :4]), r"x must have shape \(\?, \?, 8\), got \(2, 3, 4\)"),
    (lambda m, x, mem: m(x[0]), r"x must have shape \(\?, \?, 8\), got \(3, 8\)"),
    (lambda m, x, mem: m(x.astype(np.float32)), "x must be a float64 ndarray like the model's weights, got float32"),
    (lambda m, x, mem: m(np.where(x > 0, np.inf, x)), "x holds infinite values"),
    (lambda m, x, mem: m(x, mem, mask=np.ones((2, 1, 1, 5))), "mask must be a bool array"),
    (lambda m, x, mem: m(x, mem, mask=np.ones((2, 1, 1, 4), dtype=bool)), r"mask must broadcast to \(2, 2, 3, 5\)"),
])
def test_the_attention_module_checks_its_inputs(call, message):
    from numpytransformer.nn.modules import MultiHeadAttention

    rng = np.random.default_rng(0)
    m = MultiHeadAttention(8, 2, rng, np.float64)
    x, mem = rng.standard_normal((2, 3, 8)), rng.standard_normal((2, 5, 8))
    with pytest.raises(NumpyTransformerError, match=message):
        call(m, x, mem)


@pytest.mark.parametrize("model", [Transformer, TransformerTagger])
def test_learned_positions_are_refused_where_they_would_be_ignored(model):
    cfg = TransformerConfig(src_vocab_size=7, tgt_vocab_size=7, d_model=8, n_heads=2, n_layers=1, d_ff=8,
                            positions="learned")
    with pytest.raises(NumpyTransformerError, match=f"positions='learned' is the language model's .TransformerLM.; "
                                                    f"a {model.__name__} adds the paper's sinusoids"):
        model(cfg)


def _rng():
    return np.random.default_rng(0)


@pytest.mark.parametrize("make, message", [
    (lambda: Linear(-1, 4, _rng()), "d_in must be an integer >= 1, got -1"),
    (lambda: Linear(4, 2.5, _rng()), r"d_out must be an integer, got 2.5 \(float\)"),
    (lambda: MultiHeadAttention(4, 0, _rng()), "n_heads must be an integer >= 1, got 0"),
    (lambda: MultiHeadAttention(0, 2, _rng()), "d_model must be an integer >= 1, got 0"),
    (lambda: Embedding(0, 4, _rng()), "vocab_size must be an integer >= 1, got 0"),
    (lambda: Embedding(5, 4, _rng(), pad_id=5), r"pad_id must be an integer in \[0, 4\], got 5"),
    (lambda: Embedding(5, 4, _rng(), pad_id=-1), r"pad_id must be an integer in \[0, 4\], got -1"),
    (lambda: RegionEmbedding(5, 4, 0, _rng()), "k must be an integer >= 1, got 0"),
    (lambda: RegionEmbedding(5, 4, 1, _rng(), pad_id=7), r"pad_id must be an integer in \[0, 4\], got 7"),
    (lambda: LayerNorm(0), "d_model must be an integer >= 1, got 0"),
    (lambda: FeedForward(4, 0, _rng()), "d_ff must be an integer >= 1, got 0"),
    (lambda: PositionalEncoding(0, 4), "max_len must be an integer >= 1, got 0"),
    (lambda: LearnedPositionalEmbedding(5, 4, _rng(), std=float("nan")), r"std must be a finite number in \[0, inf\)"),
    (lambda: LearnedPositionalEmbedding(5, 4, _rng(), std=-0.02), r"std must be a finite number in \[0, inf\)"),
    (lambda: Ensemble([None]), r"models\[0\]: expected a Transformer or a TransformerClassifier, got NoneType"),
], ids=["Linear-d_in", "Linear-d_out", "MHA-n_heads", "MHA-d_model", "Embedding-vocab_size", "Embedding-pad_id-high",
        "Embedding-pad_id-low", "RegionEmbedding-k", "RegionEmbedding-pad_id", "LayerNorm-d_model", "FeedForward-d_ff",
        "PositionalEncoding-max_len", "LearnedPositionalEmbedding-std-nan", "LearnedPositionalEmbedding-std-negative",
        "Ensemble-None"])
def test_module_sizes_are_checked_where_they_are_given(make, message):
    """A size, an id or a scale that would fail later (in NumPy, in forward, or silently as NaN
    weights) is refused by the constructor, naming it."""
    with pytest.raises(NumpyTransformerError, match=message):
        make()
