"""Fuzzing the public boundary: every bad input gets one NumpyTransformerError naming the argument.

Entry points: the config, the loss, the three models' public methods, the two
searches, the modules' forward, and the models' backward. Each case passes only if
the call raises :class:`NumpyTransformerError` whose one-line message names the bad
argument; another exception (a raw NumPy traceback), or a call that returns
(accepted bad input), fails it. Good inputs at the edges (0/1 masks, ``-inf`` logits,
``np.int64`` sizes) must be accepted and give finite results.

Two parts: a table of hand-written cases, then hypothesis strategies
(``tests/strategies.py``) drawing bad ids, shapes, dtypes, non-finite values and
scalars. The models are tiny and every bad call fails before any arithmetic, so the
file runs in seconds. Run with ``-s`` to see the number of cases per entry point.
"""
from __future__ import annotations

import json
import math
import re
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

from numpytransformer import Transformer, TransformerClassifier, TransformerConfig, TransformerTagger
from numpytransformer.nn.config import DROPOUT_MAX, SEED_MAX, SIZE_LIMITS
from numpytransformer.nn.decoding import beam_search, greedy_decode
from numpytransformer.nn.modules import Dropout
from numpytransformer.nn.modules import Embedding
from numpytransformer.errors import NumpyTransformerError
from numpytransformer.nn.modules import FeedForward
from numpytransformer.nn.modules import LayerNorm
from numpytransformer.nn.modules import Linear
from numpytransformer.core.losses import cross_entropy
from numpytransformer.nn.modules import LearnedPositionalEmbedding, PositionalEncoding
from numpytransformer.nn.modules import ReLU
from strategies import bad_bools, bad_ids, bad_ints, bad_reals, float_arrays, non_finite_arrays

PAD, BOS, EOS = 0, 1, 2
BASE = dict(src_vocab_size=7, tgt_vocab_size=9, d_model=8, n_heads=2, n_layers=1, d_ff=8, max_len=6,
            dropout=0.0, pad_id=PAD, dtype="float64", seed=0)
MODEL = Transformer(TransformerConfig(**BASE))
TAGGER = TransformerTagger(TransformerConfig(**BASE))
CLASSIFIER = TransformerClassifier(TransformerConfig(**BASE))
SRC = np.array([[3, 4, 5, PAD], [2, 6, PAD, PAD]])  # (B=2, S=4)
TGT = np.array([[1, 2, 3], [1, 4, PAD]])  # (B=2, T=3)
B, S, T, D, MAX_LEN = 2, 4, 3, 8, 6
MEMORY, SRC_MASK = MODEL.encode(SRC)  # (2, 4, 8), (2, 1, 1, 4)
RNG = np.random.default_rng(0)

#: Cases run per entry point, and how each ended; printed at the end of the module.
CASES: Counter = Counter()
FUZZ = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module", autouse=True)
def report_counts():
    yield
    total = sum(CASES.values())
    print(f"\nfuzz_api: {total} bad-input cases run (each must end in a one-line NumpyTransformerError naming "
          "its argument):")
    for entry, n in sorted(CASES.items()):
        print(f"  {entry:38s} {n:5d}")


def refused(entry: str, name: str, call) -> None:
    """``call()`` must raise NumpyTransformerError with a one-line message naming ``name``."""
    CASES[entry] += 1
    try:
        result = call()
    except NumpyTransformerError as e:
        message = str(e)
        assert "\n" not in message, f"{entry}: the message is not one line: {message!r}"
        assert re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", message), \
            f"{entry}: the message does not name {name!r}: {message!r}"
        return
    except Exception as e:  # a raw traceback: the boundary missed this input
        raise AssertionError(f"{entry}: {type(e).__name__} instead of NumpyTransformerError "
                             f"(argument {name}): {e}") from e
    shown = np.asarray(result).shape if isinstance(result, np.ndarray) else type(result).__name__
    raise AssertionError(f"{entry}: accepted bad {name} (returned {shown})")


def fresh_caches(n: int = 1) -> list:
    return [{} for _ in range(n)]


def filled_caches() -> list:
    """Caches after one decode step, holding position 0."""
    caches = fresh_caches()
    MODEL.decode_step(TGT[:, :1], MEMORY, SRC_MASK, caches, 0)
    return caches


def cfg(**overrides) -> TransformerConfig:
    return TransformerConfig(**{**BASE, **overrides})


def with_nan(x: np.ndarray, value=np.nan) -> np.ndarray:
    x = x.copy()
    x.reshape(-1)[1] = value
    return x


# ============================================================================================
# The table: hand-written cases, one row each
# ============================================================================================
BAD_CONFIG = {
    "src_vocab_size": [0, -1, 7.0, True, "7", None, SIZE_LIMITS["src_vocab_size"] + 1, 10 ** 12],
    "tgt_vocab_size": [0, 9.5, False, "9", 10 ** 8],
    "d_model": [0, 8.0, True, "8", SIZE_LIMITS["d_model"] + 2, 10 ** 6],
    "n_heads": [0, -2, 2.0, True, "2"],
    "n_layers": [0, 1.0, True, "1", 1001],
    "n_decoder_layers": [0, 1.0, True, 1001],
    "d_ff": [0, 8.0, None, 2 ** 21],
    "max_len": [0, -1, 6.0, True, "6", 100_001, 10 ** 12, 10 ** 13],
    "dropout": [-0.1, DROPOUT_MAX + 1e-9, 1.0, 1.5, math.nan, math.inf, "0.1", None, True, [0.1]],
    "pad_id": [-1, 7, 1.0, True, "0", None],
    "dtype": ["float16", "int64", "double", "f8", np.float16, np.int64, np.dtype("int32"), float, None, 64],
    "seed": [-1, 1.5, True, "0", None, SEED_MAX + 1, 2 ** 63],
    "norm_first": ["no", "false", "True", 1, 0, 2, None, 1.0],
    "tie_embeddings": ["false", 1, None],
    "scale_embeddings": [2, "yes", 0.0],
    "layernorm_eps": [0, -1e-5, math.inf, math.nan, True, "1e-5", None, 2.0],
    "n_classes": [0, 2.0, True, 10 ** 8],
    "pooling": ["max", None, ["mean"], 1],
    "positions": ["spiral", None, 0],
}


def _config_rows():
    for field, values in BAD_CONFIG.items():
        for v in values:
            yield pytest.param("TransformerConfig", f"TransformerConfig.{field}", lambda f=field, v=v: cfg(**{f: v}),
                               id=f"config-{field}-{v!r}")
    yield pytest.param("TransformerConfig", "n_heads", lambda: cfg(n_heads=3), id="config-n_heads-not-a-divisor")
    yield pytest.param("TransformerConfig", "d_model", lambda: cfg(d_model=4096, n_heads=8, d_ff=65536),
                       id="config-too-many-weights")
    yield pytest.param("TransformerConfig", "max_len", lambda: cfg(max_len=100_000, d_model=4096, n_heads=8),
                       id="config-position-tables-too-large")
    yield pytest.param("TransformerConfig.from_dict", "dict", lambda: TransformerConfig.from_dict([]), id="from_dict-list")
    yield pytest.param("TransformerConfig.from_dict", "dict", lambda: TransformerConfig.from_dict(None), id="from_dict-None")
    yield pytest.param("TransformerConfig.from_dict", "src_vocab_size", lambda: TransformerConfig.from_dict({}),
                       id="from_dict-missing")
    yield pytest.param("TransformerConfig.from_dict", "colour", lambda: TransformerConfig.from_dict({**BASE, "colour": 1}),
                       id="from_dict-unknown")
    yield pytest.param("TransformerConfig.from_dict", "TransformerConfig.d_model",
                       lambda: TransformerConfig.from_dict({**BASE, "d_model": "8"}), id="from_dict-d_model-str")


LOGITS = RNG.standard_normal((2, 3, 5))
TARGETS = np.array([[1, 2, 0], [4, 3, 1]])


def _ce(**kw):
    args = dict(logits=LOGITS, targets=TARGETS, pad_id=PAD, label_smoothing=0.1)
    args.update(kw)
    return lambda: cross_entropy(**args)


def _minus_inf(where, eps=0.0, pad_id=None):
    z = np.zeros((2, 3))
    z[where] = -np.inf
    return lambda: cross_entropy(z, np.array([1, 2]), pad_id=pad_id, label_smoothing=eps)


def _loss_rows():
    rows = [
        ("logits", _ce(logits=LOGITS.tolist()), "list"),
        ("logits", _ce(logits=np.array(1.0), targets=np.array(0)), "0-d"),
        ("logits", _ce(logits=np.zeros((2, 3, 0)), targets=TARGETS), "no-classes"),
        ("logits", _ce(logits=LOGITS.astype(np.int64)), "int"),
        ("logits", _ce(logits=LOGITS.astype(str)), "str"),
        ("logits", _ce(logits=LOGITS.astype(complex)), "complex"),
        ("logits", _ce(logits=with_nan(LOGITS)), "NaN"),
        ("logits", _ce(logits=with_nan(LOGITS, np.inf)), "+inf"),
        ("logits", _ce(logits=None), "None"),
        ("logits", _minus_inf((1, 2)), "-inf-at-target"),
        ("logits", _minus_inf((0, slice(None))), "-inf-row"),
        ("logits", _minus_inf((0, 0), eps=0.1), "-inf-with-smoothing"),
        ("targets", _ce(targets=TARGETS.astype(float)), "float"),
        ("targets", _ce(targets=TARGETS[:, :2]), "shape"),
        ("targets", _ce(targets=TARGETS.T), "transposed"),
        ("targets", _ce(targets=np.where(TARGETS == 4, -1, TARGETS)), "negative"),
        ("targets", _ce(targets=np.where(TARGETS == 4, 5, TARGETS)), "num-classes"),
        ("targets", _ce(targets=[[1, 2, 0], [4, 3]]), "ragged"),
        ("targets", _ce(targets=TARGETS > 1), "bool"),
        ("targets", _ce(targets=None), "None"),
        ("pad_id", _ce(pad_id=-1), "negative"),
        ("pad_id", _ce(pad_id=5), "num-classes"),
        ("pad_id", _ce(pad_id=1.5), "float"),
        ("pad_id", _ce(pad_id="0"), "str"),
        ("pad_id", _ce(pad_id=True), "bool"),
    ] + [("label_smoothing", _ce(label_smoothing=v), repr(v))
         for v in (-0.1, 1.0, 1.5, math.nan, math.inf, "0.1", None, True, [0.1], np.array([0.1]))]
    for name, call, what in rows:
        yield pytest.param("cross_entropy", name, call, id=f"cross_entropy-{name}-{what}")


def _bad_memory_rows(entry, call):
    """``call(memory, src_mask)`` with a bad memory or a bad mask."""
    bad_memory = [
        (MEMORY.astype(np.float32), "float32"), (MEMORY[..., :5], "width"), (with_nan(MEMORY), "NaN"),
        (with_nan(MEMORY, np.inf), "inf"), (with_nan(MEMORY, -np.inf), "-inf"), (MEMORY.tolist(), "list"),
        (MEMORY[0], "2-d"), (np.concatenate([MEMORY, MEMORY[:1]]), "batch"), (MEMORY[:, :0], "no-positions"),
        (MEMORY.astype(np.int64), "int"), (None, "None"),
    ]
    for memory, what in bad_memory:
        yield pytest.param(entry, "memory", lambda m=memory: call(m, SRC_MASK), id=f"{entry}-memory-{what}")
    bad_mask = [
        (SRC_MASK.astype(np.float64), "float"), (SRC_MASK * 2, "int-2"), (SRC_MASK.astype(np.int64) - 1, "int-neg"),
        (np.ones((B, 1, 1, S + 1), bool), "shape"), (SRC_MASK[:, 0], "3-d"), (np.ones((3, 1, 1, S), bool), "batch"),
        ([[True, False], [True]], "ragged"), ("yes", "str"),
    ]
    for mask, what in bad_mask:
        yield pytest.param(entry, "src_mask", lambda k=mask: call(MEMORY, k), id=f"{entry}-src_mask-{what}")


def _bad_id_list(B_, T_, V):
    base = np.ones((B_, T_), dtype=np.int64)
    neg, big, flt = base.copy(), base.copy(), base.astype(np.float64)
    neg[0, -1], big[-1, 0], flt[0, 0] = -1, V, 1.5
    return [(neg, "-1"), (big, "vocab"), (flt, "float"), (base.astype(np.float32), "whole-float32"),
            (base > 0, "bool"), ([[1] * T_, [1] * (T_ + 1)], "ragged"), (base[0], "1-d"), (base[:, :, None], "3-d"),
            (base[:, :0], "empty"), ([[3, 10 ** 20]], "huge-int"), (base.astype(str), "str"), (None, "None")]


def _model_rows():
    for ids, what in _bad_id_list(B, S, 7):
        yield pytest.param("Transformer.forward", "src", lambda i=ids: MODEL.forward(i, TGT), id=f"forward-src-{what}")
        yield pytest.param("Transformer.encode", "src", lambda i=ids: MODEL.encode(i), id=f"encode-src-{what}")
        yield pytest.param("TransformerTagger.forward", "x", lambda i=ids: TAGGER.forward(i), id=f"tagger-x-{what}")
        yield pytest.param("TransformerClassifier.forward", "x", lambda i=ids: CLASSIFIER.forward(i),
                           id=f"classifier-x-{what}")
        yield pytest.param("greedy_decode", "src", lambda i=ids: greedy_decode(MODEL, i, 4), id=f"greedy-src-{what}")
        yield pytest.param("beam_search", "src", lambda i=ids: beam_search(MODEL, i, 4, 2), id=f"beam-src-{what}")
    for ids, what in _bad_id_list(B, T, 9):
        yield pytest.param("Transformer.forward", "tgt_in", lambda i=ids: MODEL.forward(SRC, i), id=f"forward-tgt_in-{what}")
        yield pytest.param("Transformer.decode", "tgt_in", lambda i=ids: MODEL.decode(i, MEMORY, SRC_MASK),
                           id=f"decode-tgt_in-{what}")
    for ids, what in _bad_id_list(B, 1, 9) + [(TGT[:, :2], "two-tokens")]:
        yield pytest.param("Transformer.decode_step", "tokens",
                           lambda i=ids: MODEL.decode_step(i, MEMORY, SRC_MASK, fresh_caches(), 0),
                           id=f"decode_step-tokens-{what}")
    long = np.ones((B, MAX_LEN + 1), dtype=np.int64)
    yield pytest.param("Transformer.forward", "src", lambda: MODEL.forward(long, TGT), id="forward-src-too-long")
    yield pytest.param("Transformer.forward", "tgt_in", lambda: MODEL.forward(SRC, long), id="forward-tgt_in-too-long")
    yield pytest.param("Transformer.forward", "tgt_in", lambda: MODEL.forward(SRC, TGT[:1]), id="forward-batch")
    yield pytest.param("Transformer.decode", "tgt_in", lambda: MODEL.decode(long, MEMORY, SRC_MASK), id="decode-too-long")
    yield pytest.param("TransformerTagger.forward", "x", lambda: TAGGER.forward(long), id="tagger-x-too-long")
    yield from _bad_memory_rows("Transformer.decode", lambda m, k: MODEL.decode(TGT, m, k))
    yield from _bad_memory_rows("Transformer.decode_step",
                                lambda m, k: MODEL.decode_step(TGT[:, :1], m, k, fresh_caches(), 0))

    def step(position=0, caches="fresh", tokens=TGT[:, :1], memory=MEMORY, mask=SRC_MASK):
        caches = fresh_caches() if isinstance(caches, str) and caches == "fresh" else caches
        return lambda: MODEL.decode_step(tokens, memory, mask, caches, position)

    for position, what in [(-1, "-1"), (1.5, "1.5"), (True, "bool"), ("0", "str"), (None, "None"),
                           (MAX_LEN, "max_len"), (10 ** 12, "huge"), (1, "past-empty-caches"), (np.float64(0), "np-float")]:
        yield pytest.param("Transformer.decode_step", "position", step(position), id=f"decode_step-position-{what}")
    yield pytest.param("Transformer.decode_step", "position", lambda: step(0, filled_caches())(),
                       id="decode_step-position-behind-caches")
    yield pytest.param("Transformer.decode_step", "position", lambda: step(2, filled_caches())(),
                       id="decode_step-position-ahead-of-caches")
    for caches, what in [([], "empty-list"), (fresh_caches(2), "too-long"), (None, "None"), ({}, "dict"),
                         ([None], "list-of-None"), ([{"self": 3}], "garbage-self"), ([{"self": {"k": "x"}}], "garbage-k"),
                         ((), "empty-tuple")]:
        yield pytest.param("Transformer.decode_step", "kv_caches", step(0, caches), id=f"decode_step-kv_caches-{what}")
    yield pytest.param("Transformer.decode_step", "kv_caches",
                       lambda: step(1, filled_caches(), np.ones((3, 1), np.int64), np.concatenate([MEMORY, MEMORY[:1]]),
                                    None)(), id="decode_step-kv_caches-other-batch")
    yield pytest.param("Transformer.decode_step", "kv_caches",
                       lambda: step(1, filled_caches(), memory=MEMORY[:, :3], mask=None)(),
                       id="decode_step-kv_caches-other-memory")

    bad_search = [
        ("model", lambda: greedy_decode(None, SRC, 4)), ("model", lambda: greedy_decode(TAGGER, SRC, 4)),
        ("model", lambda: beam_search("model", SRC, 4)),
    ]
    for name, values in [("max_len", [0, -1, 1.5, True, "5", None]), ("bos_id", [-1, 9, 1.5, None]),
                         ("eos_id", [9, -1, 2.0])]:
        for v in values:
            bad_search.append((name, lambda n=name, v=v: greedy_decode(MODEL, SRC, **{"max_len": 4, n: v})))
            bad_search.append((name, lambda n=name, v=v: beam_search(MODEL, SRC, **{"max_len": 4, n: v})))
    bad_search += [("eos_id", lambda: greedy_decode(MODEL, SRC, 4, bos_id=1, eos_id=1)),
                   ("eos_id", lambda: beam_search(MODEL, SRC, 4, eos_id=PAD))]
    bad_search += [("use_cache", lambda v=v: greedy_decode(MODEL, SRC, 4, use_cache=v)) for v in ("yes", 1, None)]
    bad_search += [("beam_size", lambda v=v: beam_search(MODEL, SRC, 4, beam_size=v)) for v in (0, -1, 1.5, True, 1001, "4")]
    bad_search += [("length_penalty", lambda v=v: beam_search(MODEL, SRC, 4, length_penalty=v))
                   for v in (math.nan, math.inf, -0.1, "0.6", None)]
    for i, (name, call) in enumerate(bad_search):
        entry = "beam_search" if "beam_search" in call.__code__.co_names else "greedy_decode"
        yield pytest.param(entry, name, call, id=f"search-{name}-{i}")

    def backward(dlogits):
        def run():
            MODEL.forward(SRC, TGT)
            return MODEL.backward(dlogits)
        return run

    logits_shape = (B, T, 9)
    for dl, what in [(np.zeros((B, T, 8)), "shape"), (np.zeros(logits_shape, np.float32), "float32"),
                     (np.zeros(logits_shape, np.int64), "int"), (with_nan(np.zeros(logits_shape)), "NaN"),
                     (with_nan(np.zeros(logits_shape), np.inf), "inf"), (np.zeros(logits_shape).tolist(), "list")]:
        yield pytest.param("Transformer.backward", "dlogits", backward(dl), id=f"backward-dlogits-{what}")


X = RNG.standard_normal((2, 3, 4))
MODULES = {
    "Linear.forward": Linear(4, 5, RNG), "LayerNorm.forward": LayerNorm(4), "FeedForward.forward": FeedForward(4, 6, RNG),
    "ReLU.forward": ReLU(), "Dropout.forward": Dropout(0.5, RNG),
}


def _module_rows():
    for entry, module in MODULES.items():
        cases = [(X.tolist(), "list"), (X.astype(np.int64), "int"), (with_nan(X), "NaN"), (with_nan(X, np.inf), "inf"),
                 (None, "None")]
        if entry not in ("ReLU.forward", "Dropout.forward"):
            cases += [(X.astype(np.float32), "float32"), (X[..., :3], "width"), (np.float64(1.0), "0-d")]
        for x, what in cases:
            yield pytest.param(entry, "x", lambda m=module, x=x: m.forward(x), id=f"{entry}-x-{what}")
    emb = Embedding(7, 4, RNG)
    for ids, what in _bad_id_list(B, S, 7):
        if what not in ("1-d", "3-d"):  # any number of dimensions is fine for a lookup
            yield pytest.param("Embedding.forward", "ids", lambda i=ids: emb.forward(i), id=f"Embedding-ids-{what}")
    for cls in (PositionalEncoding, lambda n, d: LearnedPositionalEmbedding(n, d, RNG)):
        pos = cls(5, 4)
        entry = f"{type(pos).__name__}.forward"
        for x, what in [(X.astype(np.float32), "float32"), (X[..., :3], "width"), (X[0], "2-d"), (with_nan(X), "NaN"),
                        (X.tolist(), "list")]:
            yield pytest.param(entry, "x", lambda p=pos, x=x: p.forward(x), id=f"{entry}-x-{what}")
        for offset, what in [(-1, "-1"), (1.5, "1.5"), (None, "None"), (3, "past-max_len"), ("0", "str")]:
            yield pytest.param(entry, "offset" if what != "past-max_len" else "max_len",
                               lambda p=pos, o=offset: p.forward(X, o), id=f"{entry}-offset-{what}")
    for eps in (0, -1.0, math.nan, "1e-5", None):
        yield pytest.param("LayerNorm()", "eps", lambda e=eps: LayerNorm(4, e), id=f"LayerNorm-eps-{eps!r}")
    for p in (1.0, -0.1, math.nan, "0.1", None, True):
        yield pytest.param("Dropout()", "p", lambda p=p: Dropout(p, RNG), id=f"Dropout-p-{p!r}")
    for mode in ("no", 0, 1, None):
        yield pytest.param("Module.train", "mode", lambda m=mode: Linear(2, 2, RNG).train(m), id=f"train-mode-{mode!r}")


TABLE = list(_config_rows()) + list(_loss_rows()) + list(_model_rows()) + list(_module_rows())


@pytest.mark.parametrize("entry, name, call", TABLE)
def test_table_of_bad_inputs(entry, name, call):
    refused(entry, name, call)


# ---- good inputs at the edges: accepted, finite ----------------------------------------------
def test_config_normalises_numpy_values_and_saves_as_json():
    c = cfg(src_vocab_size=np.int64(7), d_model=np.int32(8), dtype=np.dtype("float64"), dropout=np.float32(0.25),
            norm_first=np.bool_(True))
    assert c.dtype == "float64" and type(c.src_vocab_size) is int and type(c.dropout) is float
    assert type(c.norm_first) is bool
    assert TransformerConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    assert cfg(dtype=np.float32).dtype == "float32"


def test_integer_masks_are_converted_to_bool():
    expected = MODEL.decode(TGT, MEMORY, SRC_MASK)
    for mask in (SRC_MASK.astype(np.int64), SRC_MASK.astype(np.uint8), SRC_MASK.tolist()):
        np.testing.assert_array_equal(MODEL.decode(TGT, MEMORY, mask), expected)
    assert np.isfinite(MODEL.decode(TGT, MEMORY, None)).all()


def test_ids_as_lists_and_other_integer_dtypes():
    expected = MODEL.forward(SRC, TGT)
    for src in (SRC.tolist(), SRC.astype(np.int32), SRC.astype(np.uint8)):
        np.testing.assert_array_equal(MODEL.forward(src, TGT), expected)


def test_minus_inf_logit_is_a_ruled_out_class():
    """A -inf logit: PyTorch 2.13 gives 0.31326168751822286 and gradient [0.2689, -0.2689, 0]."""
    loss, d = cross_entropy(np.array([[0.0, 1.0, -np.inf]]), np.array([1]))
    assert loss == pytest.approx(0.31326168751822286, rel=1e-15)
    np.testing.assert_allclose(d, [[0.2689414213699951, -0.2689414213699951, 0.0]], rtol=1e-12)
    # -inf in a pad row is harmless even with smoothing (PyTorch: 1.4076059644443804).
    loss, d = cross_entropy(np.array([[0.0, 1.0, -np.inf], [0.0, 1.0, 2.0]]), np.array([0, 1]), pad_id=0,
                            label_smoothing=0.1)
    assert loss == pytest.approx(1.4076059644443804, rel=1e-14)
    assert np.all(d[0] == 0) and np.isfinite(d).all()


@FUZZ
@given(st.data())
def test_minus_inf_logits_match_torch(data):
    torch = pytest.importorskip("torch")
    N, V = data.draw(st.integers(1, 4)), data.draw(st.integers(2, 6))
    z = data.draw(float_arrays((N, V)))
    targets = np.array([data.draw(st.integers(0, V - 1)) for _ in range(N)])
    for n in range(N):  # rule out some classes, never the target
        for v in range(V):
            if v != targets[n] and data.draw(st.booleans()):
                z[n, v] = -np.inf
    loss, d = cross_entropy(z, targets)
    zt = torch.tensor(z, requires_grad=True)
    ref = torch.nn.functional.cross_entropy(zt, torch.tensor(targets))
    ref.backward()
    assert np.isfinite(loss) and np.isfinite(d).all()
    assert abs(loss - ref.item()) < 1e-12
    np.testing.assert_allclose(d, zt.grad.numpy(), atol=1e-14)
    assert np.all(d[z == -np.inf] == 0)


# ============================================================================================
# hypothesis: drawn bad inputs at every entry point
# ============================================================================================
@FUZZ
@given(st.data())
def test_fuzz_config_fields(data):
    field = data.draw(st.sampled_from(sorted(BAD_CONFIG)))
    if field in SIZE_LIMITS:
        value = data.draw(bad_ints(1, SIZE_LIMITS[field]))
    elif field == "pad_id":
        value = data.draw(bad_ints(0, 6))
    elif field == "seed":
        value = data.draw(bad_ints(0, SEED_MAX))
    elif field == "dropout":
        value = data.draw(bad_reals(0.0, DROPOUT_MAX))
    elif field == "layernorm_eps":
        value = data.draw(bad_reals(0.0, 1.0, low_open=True))
    elif field in ("norm_first", "tie_embeddings", "scale_embeddings"):
        value = data.draw(bad_bools())
    else:  # dtype, pooling, positions: strings from a short list
        value = data.draw(st.one_of(st.text(max_size=8), st.integers(), st.none(), st.just(np.int8)))
        allowed = {"dtype": ("float32", "float64"), "pooling": ("mean", "first"), "positions": ("sinusoidal", "learned")}
        if value in allowed[field]:
            return
    if field in ("tgt_vocab_size", "n_decoder_layers") and value is None:
        return  # None means "like src_vocab_size / n_layers"
    refused("TransformerConfig", f"TransformerConfig.{field}", lambda: cfg(**{field: value}))


@FUZZ
@given(bad=bad_ids(B, S, 7))
def test_fuzz_src_ids(bad):
    ids, _ = bad
    refused("Transformer.forward", "src", lambda: MODEL.forward(ids, TGT))
    refused("Transformer.encode", "src", lambda: MODEL.encode(ids))
    refused("TransformerTagger.forward", "x", lambda: TAGGER.forward(ids))
    refused("TransformerClassifier.forward", "x", lambda: CLASSIFIER.forward(ids))
    refused("greedy_decode", "src", lambda: greedy_decode(MODEL, ids, 4))
    refused("beam_search", "src", lambda: beam_search(MODEL, ids, 4, beam_size=2))


@FUZZ
@given(bad=bad_ids(B, T, 9))
def test_fuzz_tgt_ids(bad):
    ids, _ = bad
    refused("Transformer.forward", "tgt_in", lambda: MODEL.forward(SRC, ids))
    refused("Transformer.decode", "tgt_in", lambda: MODEL.decode(ids, MEMORY, SRC_MASK))


@FUZZ
@given(bad=bad_ids(B, 1, 9))
def test_fuzz_decode_step_tokens(bad):
    ids, _ = bad
    refused("Transformer.decode_step", "tokens", lambda: MODEL.decode_step(ids, MEMORY, SRC_MASK, fresh_caches(), 0))


@st.composite
def bad_memories(draw):
    """Memory of a wrong shape, dtype, or with non-finite values."""
    kind = draw(st.sampled_from(["shape", "dtype", "non_finite", "not_array"]))
    if kind == "shape":
        shape = draw(array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=9)
                     .filter(lambda s: not (len(s) == 3 and s[0] == B and s[1] > 0 and s[2] == D)))
        return draw(float_arrays(shape))
    if kind == "dtype":
        dtype = draw(st.sampled_from([np.float32, np.float16, np.int64, np.int8, np.bool_, np.complex128]))
        return draw(arrays(dtype, (B, S, D)))
    if kind == "non_finite":
        return draw(non_finite_arrays((B, S, D)))
    return draw(st.one_of(st.none(), st.just(MEMORY.tolist()), st.text(max_size=3), st.floats()))


@FUZZ
@given(memory=bad_memories())
def test_fuzz_memory(memory):
    refused("Transformer.decode", "memory", lambda: MODEL.decode(TGT, memory, SRC_MASK))
    refused("Transformer.decode_step", "memory",
            lambda: MODEL.decode_step(TGT[:, :1], memory, SRC_MASK, fresh_caches(), 0))


@st.composite
def bad_masks(draw):
    """A src_mask that is not bool or 0/1, or does not broadcast to (B, H, T, S)."""
    kind = draw(st.sampled_from(["values", "dtype", "shape"]))
    if kind == "values":
        m = SRC_MASK.astype(np.int64)
        m.reshape(-1)[draw(st.integers(0, m.size - 1))] = draw(st.one_of(st.integers(max_value=-1),
                                                                         st.integers(min_value=2)).filter(
            lambda v: abs(v) < 2 ** 62))
        return m
    if kind == "dtype":
        return draw(arrays(draw(st.sampled_from([np.float64, np.float32, np.complex64])), SRC_MASK.shape))
    shape = draw(array_shapes(min_dims=0, max_dims=5, min_side=0, max_side=6)
                 .filter(lambda s: not (len(s) == 4 and all(a in (1, b) for a, b in zip(s, (B, 2, 1, S))))))
    return draw(arrays(np.bool_, shape))


@FUZZ
@given(mask=bad_masks())
def test_fuzz_src_mask(mask):
    refused("Transformer.decode", "src_mask", lambda: MODEL.decode(TGT[:, :1], MEMORY, mask))
    refused("Transformer.decode_step", "src_mask",
            lambda: MODEL.decode_step(TGT[:, :1], MEMORY, mask, fresh_caches(), 0))


@FUZZ
@given(position=st.one_of(bad_ints(0, MAX_LEN - 1), st.integers(1, MAX_LEN - 1)), filled=st.booleans())
def test_fuzz_decode_step_position(position, filled):
    caches = filled_caches() if filled else fresh_caches()
    if filled and position == 1 and type(position) is int:
        return  # the one right answer
    refused("Transformer.decode_step", "position",
            lambda: MODEL.decode_step(TGT[:, :1], MEMORY, SRC_MASK, caches, position))


@FUZZ
@given(caches=st.one_of(
    st.lists(st.just({}), min_size=2, max_size=4), st.just([]), st.none(), st.dictionaries(st.text(max_size=2), st.none()),
    st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=2)), min_size=1, max_size=1),
    st.builds(lambda v: [{"self": v}], st.one_of(st.integers(), st.text(max_size=2), st.just({"k": np.zeros(3)}))),
    st.builds(lambda v: [{"cross": {"k": v}}], st.one_of(st.integers(), st.just(np.zeros((2, 2, 2)))))))
def test_fuzz_kv_caches(caches):
    refused("Transformer.decode_step", "kv_caches",
            lambda: MODEL.decode_step(TGT[:, :1], MEMORY, SRC_MASK, caches, 0))


@FUZZ
@given(st.data())
def test_fuzz_search_arguments(data):
    name = data.draw(st.sampled_from(["max_len", "bos_id", "eos_id", "use_cache", "beam_size", "length_penalty"]))
    value = data.draw({"max_len": bad_ints(1), "bos_id": bad_ints(0, 8), "eos_id": bad_ints(0, 8),
                       "use_cache": bad_bools(), "beam_size": bad_ints(1, 1000),
                       "length_penalty": bad_reals(0.0)}[name])
    kwargs = {"max_len": 4, name: value}
    if name in ("use_cache",):
        refused("greedy_decode", name, lambda: greedy_decode(MODEL, SRC, **kwargs))
    elif name in ("beam_size", "length_penalty"):
        refused("beam_search", name, lambda: beam_search(MODEL, SRC, **kwargs))
    else:
        refused("greedy_decode", name, lambda: greedy_decode(MODEL, SRC, **kwargs))
        refused("beam_search", name, lambda: beam_search(MODEL, SRC, **kwargs))


@st.composite
def bad_logits(draw):
    """Logits (2, 3, 5) the loss must refuse: NaN/+inf anywhere, a non-float dtype, 0-d, or not an array."""
    kind = draw(st.sampled_from(["nan_or_posinf", "dtype", "0d", "not_array", "minus_inf_at_target"]))
    if kind == "nan_or_posinf":
        z = draw(float_arrays((2, 3, 5)))
        for _ in range(draw(st.integers(1, 3))):
            z.reshape(-1)[draw(st.integers(0, z.size - 1))] = draw(st.sampled_from([np.nan, np.inf]))
        return z
    if kind == "dtype":
        return draw(arrays(draw(st.sampled_from([np.int64, np.int8, np.bool_, np.complex128])), (2, 3, 5)))
    if kind == "0d":
        return np.float64(draw(st.floats()))
    if kind == "not_array":
        return draw(st.one_of(st.none(), st.just(LOGITS.tolist()), st.floats(), st.text(max_size=3)))
    z = draw(float_arrays((2, 3, 5)))
    b, t = draw(st.integers(0, 1)), draw(st.integers(0, 2))
    z[b, t, TARGETS[b, t]] = -np.inf  # TARGETS has no pad at (b, t) when pad_id is None
    return z


@FUZZ
@given(logits=bad_logits())
def test_fuzz_cross_entropy_logits(logits):
    targets = TARGETS if np.ndim(logits) else np.array(1)
    refused("cross_entropy", "logits", lambda: cross_entropy(logits, targets))


@FUZZ
@given(st.data())
def test_fuzz_cross_entropy_other_arguments(data):
    name = data.draw(st.sampled_from(["targets", "pad_id", "label_smoothing"]))
    args = dict(logits=LOGITS, targets=TARGETS, pad_id=None, label_smoothing=0.0)
    if name == "targets":
        kind = data.draw(st.sampled_from(["range", "dtype", "shape"]))
        if kind == "range":
            t = TARGETS.copy()
            t[data.draw(st.integers(0, 1)), data.draw(st.integers(0, 2))] = data.draw(
                st.one_of(st.integers(-2 ** 62, -1), st.integers(5, 2 ** 62)))
        elif kind == "dtype":
            t = TARGETS.astype(data.draw(st.sampled_from([np.float64, np.float32, np.bool_, object, str])))
        else:
            t = data.draw(arrays(np.int64, array_shapes(min_dims=0, max_dims=3, max_side=4).filter(lambda s: s != (2, 3)),
                                 elements=st.integers(0, 4)))
        args["targets"] = t
    elif name == "pad_id":
        args["pad_id"] = data.draw(bad_ints(0, 4).filter(lambda v: v is not None))
    else:
        args["label_smoothing"] = data.draw(bad_reals(0.0, 1.0, high_open=True))
    refused("cross_entropy", name, lambda: cross_entropy(**args))


@FUZZ
@given(st.data())
def test_fuzz_module_inputs(data):
    entry = data.draw(st.sampled_from(sorted(MODULES)))
    module = MODULES[entry]
    kind = data.draw(st.sampled_from(["non_finite", "dtype", "not_array"] +
                                     ([] if entry in ("ReLU.forward", "Dropout.forward") else ["width"])))
    if kind == "non_finite":
        x = data.draw(non_finite_arrays(data.draw(st.sampled_from([(3, 4), (2, 3, 4), (1, 1, 1, 4)]))))
    elif kind == "dtype":
        dtypes = [np.int64, np.bool_, np.complex128] + ([] if entry in ("ReLU.forward", "Dropout.forward")
                                                         else [np.float32, np.float16])
        x = data.draw(arrays(data.draw(st.sampled_from(dtypes)), (2, 3, 4)))
    elif kind == "width":
        x = data.draw(float_arrays((2, data.draw(st.integers(1, 3)), data.draw(st.integers(1, 9).filter(lambda w: w != 4)))))
    else:
        x = data.draw(st.one_of(st.none(), st.just(X.tolist()), st.text(max_size=3)))
    refused(entry, "x", lambda: module.forward(x))


@FUZZ
@given(bad=bad_ids(B, S, 7))
def test_fuzz_embedding_ids(bad):
    ids, kind = bad
    if kind in ("ndim1", "ndim3"):
        return  # a lookup takes ids of any shape
    emb = Embedding(7, 4, np.random.default_rng(0))
    refused("Embedding.forward", "ids", lambda: emb.forward(ids))


@FUZZ
@given(x=st.one_of(non_finite_arrays((2, 3, 4)),
                   arrays(st.sampled_from([np.float32, np.int64]), (2, 3, 4)),
                   st.builds(lambda w: np.zeros((2, 3, w)), st.integers(1, 9).filter(lambda w: w != 4))),
       offset=st.one_of(st.just(0), bad_ints(0)))
def test_fuzz_positional(x, offset):
    for pos in (PositionalEncoding(5, 4), LearnedPositionalEmbedding(5, 4, np.random.default_rng(0))):
        entry = f"{type(pos).__name__}.forward"
        if type(offset) is int and offset == 0:  # a good offset: the bad x is what is refused
            refused(entry, "x", lambda: pos.forward(x))
        else:
            refused(entry, "offset", lambda: pos.forward(X, offset))


@FUZZ
@given(dlogits=st.one_of(non_finite_arrays((B, T, 9)),
                         arrays(st.sampled_from([np.float32, np.int64]), (B, T, 9)),
                         st.builds(np.zeros, array_shapes(max_dims=4, max_side=10).filter(lambda s: s != (B, T, 9)))))
def test_fuzz_backward_dlogits(dlogits):
    MODEL.forward(SRC, TGT)
    refused("Transformer.backward", "dlogits", lambda: MODEL.backward(dlogits))
    MODEL.backward(np.zeros((B, T, 9)))  # the refused call did not spend the forward


@FUZZ
@given(src=st.integers(1, 3).flatmap(lambda b: st.integers(1, MAX_LEN).flatmap(
    lambda s: arrays(np.int64, (b, s), elements=st.integers(0, 6)))))
def test_fuzz_good_ids_give_finite_outputs(src):
    """The other side: any in-range ids (all pad included) give finite logits and decode without error."""
    tgt = np.ones((src.shape[0], 2), dtype=np.int64)
    assert np.isfinite(MODEL.forward(src, tgt)).all()
    assert np.isfinite(TAGGER.forward(src)).all() and np.isfinite(CLASSIFIER.forward(src)).all()
    assert len(greedy_decode(MODEL, src, 3)) == src.shape[0]
