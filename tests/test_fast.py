"""The fast forms (numpytransformer/core/fast.py) against the textbook pairs they stand in for.

1. Each fast form gives its pair's values, and a cache from which the pair's backward gives
   the same gradients (or, for a fast backward, the same gradients from the same cache):
   float64 to :data:`TOL64` relative, float32 to :data:`TOL32` relative (a few ulps: float32's
   machine epsilon is 1.2e-7), each measured against the largest value of the array.
2. The switch: ``use_fast``, ``textbook()`` and ``NUMPYTRANSFORMER_FAST`` decide what the
   Modules run (the functions bound in ``core.kernels``), and a few Adam steps of a small Transformer and a small GPT (float64,
   dropout off) give the same losses on both paths.
3. Where PyTorch is installed, the same short trajectory of the Transformer and of the GPT
   (Noam schedule, label smoothing, clipping, Adam) matches PyTorch's step by step, losses and
   final weights, as llm.c's test_gpt2 does.
"""
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from numpytransformer import Adam, NoamSchedule, Transformer, TransformerConfig, TransformerLM, clip_grad_norm
from numpytransformer.core import fast
from numpytransformer.core.attention import attention_backward, attention_forward, causal_mask, padding_mask
from numpytransformer.errors import NumpyTransformerError
from numpytransformer.nn.modules import LayerNorm
from numpytransformer.core.layernorm import layernorm_backward, layernorm_forward
from numpytransformer.core.linear import linear_backward, linear_forward
from numpytransformer.core.losses import (
    cross_entropy,
    softmax_cross_entropy_backward,
    softmax_cross_entropy_forward,
)
from numpytransformer.core.kernels import kernels
from numpytransformer.core.multihead import (
    append_positions,
    multihead_attention_backward,
    multihead_attention_forward,
)
from numpytransformer.core.softmax import softmax

TOL64 = 1e-12  # float64: the forms differ only in the order of their sums
TOL32 = 2e-6  # float32: about 16 ulps
TOLS = [(np.float64, TOL64), (np.float32, TOL32)]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def assert_close(got, want, tol, what=""):
    """|got - want| <= tol * max|want|, elementwise; shapes and dtypes equal."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, what
    scale = max(float(np.abs(want).max(initial=0.0)), np.finfo(want.dtype).tiny)
    err = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max(initial=0.0)) / scale
    assert err <= tol, f"{what}: relative error {err:.2e} > {tol:.0e}"


def assert_all_close(got, want, tol, what=""):
    assert len(got) == len(want), what
    for i, (a, b) in enumerate(zip(got, want)):
        if b is None:
            assert a is None, f"{what}[{i}]"
        else:
            assert_close(a, b, tol, f"{what}[{i}]")


def normal(rng, shape, dtype, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


# ---- 1. each fast form against its pair ------------------------------------------------------------
def test_every_fast_form_is_registered_for_its_pair():
    """What use_fast(True) binds: every kernel to its fast form, named as the textbook function it replaces
    (the fast attention_backward runs inside the fast multi-head backward, not through the switch)."""
    assert fast.enabled() and set(fast.PAIRS) == set(fast.TEXTBOOK) == set(vars(kernels))
    for name, form in fast.PAIRS.items():
        assert getattr(kernels, name) is form
        assert form.__name__ == name and form.__module__ == "numpytransformer.core.fast"
        module = fast.TEXTBOOK[name]
        if module is not None:  # Adam's update: its textbook lines are Adam.step's own
            assert module.__name__.startswith("numpytransformer.core.") and callable(getattr(module, name))
    with fast.textbook():
        for name, module in fast.TEXTBOOK.items():
            assert getattr(kernels, name) is (None if module is None else getattr(module, name))


@pytest.mark.parametrize("dtype, tol", TOLS)
@pytest.mark.parametrize("shape", [(7,), (3, 20), (2, 4, 5, 20), (6, 8000)])
def test_softmax_and_row_sums(shape, dtype, tol):
    x = normal(np.random.default_rng(0), shape, dtype, 4.0)
    assert_close(fast.row_sums(x), x.sum(axis=-1, keepdims=True), tol, "row_sums")
    assert_close(fast.softmax(x), softmax(x), tol, "softmax")
    y = x.copy()
    out = fast.softmax(y, out=y)  # in place, as attention uses it
    assert out is y
    assert_close(out, softmax(x), tol, "softmax in place")


@pytest.mark.parametrize("dtype, tol", TOLS)
@pytest.mark.parametrize("bias", [True, False])
def test_linear(dtype, tol, bias):
    rng = np.random.default_rng(1)
    x, W, dout = normal(rng, (3, 4, 6), dtype), normal(rng, (6, 5), dtype), normal(rng, (3, 4, 5), dtype)
    b = normal(rng, (5,), dtype) if bias else None
    out, cache = fast.linear_forward(x, W, b)
    ref, ref_cache = linear_forward(x, W, b)
    assert_close(out, ref, tol, "out")
    assert_all_close(linear_backward(dout, cache), linear_backward(dout, ref_cache), tol, "grads")


def test_linear_pooled_outputs_held_at_once_stay_distinct():
    """Large outputs (pooled) held at the same time are independent arrays, with the right values."""
    rng = np.random.default_rng(6)
    V = fast.REUSE_BYTES // 4 // 64 + 1  # 64 rows of V float32 logits: pooled
    W = normal(rng, (8, V), np.float32)
    x1, x2 = normal(rng, (4, 16, 8), np.float32), normal(rng, (4, 16, 8), np.float32)
    out1, _ = fast.linear_forward(x1, W, None)
    out2, _ = fast.linear_forward(x2, W, None)
    assert not np.shares_memory(out1, out2)
    assert_close(out1, linear_forward(x1, W, None)[0], TOL32, "out1")
    assert_close(out2, linear_forward(x2, W, None)[0], TOL32, "out2")


def test_reused_large_arrays_are_never_ones_a_caller_holds():
    """empty_reusable: a held result (or a view of it) keeps its memory; a dropped one is reused."""
    n = fast.REUSE_BYTES // 4 // 100 + 1  # rows of 100 float32: just above the pooling threshold
    a = fast.empty_reusable((n, 100), np.float32)
    a[:] = 1.0
    b = fast.empty_reusable((n, 100), np.float32)  # a is held: b must be elsewhere
    assert not np.shares_memory(a, b)
    b[:] = 2.0
    assert (a == 1.0).all()
    view = a[:3].T
    del a
    c = fast.empty_reusable((n, 100), np.float32)  # a's memory is still held through the view
    assert not np.shares_memory(view, c)
    del b
    d = fast.empty_reusable((n - 7, 100), np.float32)  # b dropped: a smaller array reuses its memory
    assert d.shape == (n - 7, 100) and d.dtype == np.float32 and d.flags.c_contiguous
    small = fast.empty_reusable((3, 4), np.float64)
    assert small.shape == (3, 4) and small.flags.owndata


def attention_inputs(rng, dtype, mask_kind):
    B, H, T, S, dk = 2, 3, 4, 5, 6
    q, k, v = normal(rng, (B, H, T, dk), dtype), normal(rng, (B, H, S, dk), dtype), normal(rng, (B, H, S, dk), dtype)
    ids = np.array([[5, 3, 1, 0, 0], [0, 0, 0, 0, 0]])  # the second sequence is all pad: fully masked rows
    mask = {"none": None, "padding": padding_mask(ids, 0),
            "causal": causal_mask(5)[:, :, :T, :] & padding_mask(ids[:1], 0)}[mask_kind]
    return q, k, v, mask, normal(rng, (B, H, T, dk), dtype)


@pytest.mark.parametrize("dtype, tol", TOLS)
@pytest.mark.parametrize("mask_kind", ["none", "padding", "causal"])
def test_attention(dtype, tol, mask_kind):
    q, k, v, mask, dout = attention_inputs(np.random.default_rng(2), dtype, mask_kind)
    out, cache = fast.attention_forward(q, k, v, mask)
    ref, ref_cache = attention_forward(q, k, v, mask)
    assert_close(out, ref, tol, "out")
    assert_close(cache.weights, ref_cache.weights, tol, "weights")
    want = attention_backward(dout, ref_cache)
    assert_all_close(attention_backward(dout, cache), want, tol, "textbook backward of the fast cache")
    assert_all_close(fast.attention_backward(dout, ref_cache), want, tol, "fast backward")
    np.testing.assert_array_equal(ref_cache.weights, attention_forward(q, k, v, mask)[1].weights)  # cache intact


@pytest.mark.parametrize("dtype, tol", TOLS)
@pytest.mark.parametrize("chunk", [1, 1 << 16], ids=["a head a block", "all heads in one block"])
@pytest.mark.parametrize("case", ["padding", "causal", "full mask", "heads only", "one matrix"])
def test_attention_in_blocks(dtype, tol, chunk, case, monkeypatch):
    """The blocks of heads cover every stack once, whatever the shapes of q, k, v and the mask."""
    monkeypatch.setattr(fast, "ATTENTION_CHUNK", chunk)
    monkeypatch.setattr(fast, "ATTENTION_WHOLE", 0)  # these small stacks would otherwise be one block
    rng = np.random.default_rng(9)
    T, S, dk = 4, 5, 6
    lead = {"padding": (2, 3), "causal": (2, 3), "full mask": (2, 3), "heads only": (3,), "one matrix": ()}[case]
    q, k, v = (normal(rng, lead + (n, dk), dtype, 2.0) for n in (T, S, S))
    ids = np.array([[5, 3, 1, 0, 0], [0, 0, 0, 0, 0]])  # the second sequence is all pad: fully masked rows
    mask = {"padding": padding_mask(ids, 0), "causal": causal_mask(S)[:, :, :T, :],
            "full mask": rng.random((2, 3, T, S)) < 0.6, "heads only": causal_mask(S)[0, 0, :T, :],
            "one matrix": None}[case]
    out, cache = fast.attention_forward(q, k, v, mask)
    ref, ref_cache = attention_forward(q, k, v, mask)
    assert_close(out, ref, tol, "out")
    assert_close(cache.weights, ref_cache.weights, tol, "weights")
    assert cache.mask is mask and cache.scale == ref_cache.scale
    dout = normal(rng, ref.shape, dtype)
    assert_all_close(attention_backward(dout, cache), attention_backward(dout, ref_cache), tol, "backward")


@pytest.mark.parametrize("dtype, tol", [(np.float64, TOL64), (np.float32, 1e-6)])
def test_gelu(dtype, tol, monkeypatch):
    """The chunked exact GELU and its gate (the backward's), at both signs of 0 and far in the tails."""
    from numpytransformer.core.gelu import gelu_backward, gelu_forward

    monkeypatch.setattr(fast, "GELU_CHUNK", 128)  # several chunks, the last one partial
    x = normal(np.random.default_rng(10), (7, 61), dtype, 3.0)
    x.reshape(-1)[:6] = [0.0, -0.0, 20.0, -20.0, 8.0, -8.0]
    out, cache = fast.gelu_forward(x)
    ref, ref_cache = gelu_forward(x)
    assert_close(out, ref, tol, "out")
    assert_close(cache.gate, ref_cache.gate, tol, "gate")
    dout = normal(np.random.default_rng(11), x.shape, dtype)
    assert_close(gelu_backward(dout, cache), gelu_backward(dout, ref_cache), tol, "backward")


@pytest.mark.parametrize("dtype, tol", TOLS)
@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
@pytest.mark.parametrize("dropout_p", [0.0, 0.3], ids=["plain", "attention-dropout"])
def test_multihead_attention(dtype, tol, cross, dropout_p):
    rng = np.random.default_rng(3)
    B, T, S, D, H = 2, 4, 5, 8, 2
    params = {name: normal(rng, (D, D) if name.startswith("W") else (D,), dtype)
              for name in ("W_q", "b_q", "W_k", "b_k", "W_v", "b_v", "W_o", "b_o")}
    x = normal(rng, (B, T, D), dtype)
    x_kv = normal(rng, (B, S, D), dtype) if cross else None
    mask = padding_mask(np.array([[1, 2, 3, 0, 0], [4, 5, 6, 7, 1]]), 0) if cross else causal_mask(T)
    dout = normal(rng, (B, T, D), dtype)
    out, cache = fast.multihead_attention_forward(x, x_kv, **params, n_heads=H, mask=mask, dropout_p=dropout_p,
                                                  rng=np.random.default_rng(5))
    ref, ref_cache = multihead_attention_forward(x, x_kv, **params, n_heads=H, mask=mask, dropout_p=dropout_p,
                                                 rng=np.random.default_rng(5))  # the same dropped weights
    assert_close(out, ref, tol, "out")
    want = multihead_attention_backward(dout, ref_cache)
    for what, got in (("fast pair", fast.multihead_attention_backward(dout, cache)),
                      ("textbook backward of the fast cache", multihead_attention_backward(dout, cache))):
        # db_k (index 5) is 0 in exact arithmetic (softmax ignores a shift shared by a row of scores):
        # both sides are rounding noise, measured against the size of db_v (index 7)
        assert np.abs(got[5] - want[5]).max() <= tol * np.abs(want[7]).max(), what
        assert_all_close(got[:5] + got[6:], want[:5] + want[6:], tol, what)


@pytest.mark.parametrize("dtype, tol", TOLS)
def test_layernorm(dtype, tol):
    rng = np.random.default_rng(4)
    x = normal(rng, (3, 5, 16), dtype, 3.0) + dtype(2.0)
    gamma, beta, dout = normal(rng, (16,), dtype), normal(rng, (16,), dtype), normal(rng, (3, 5, 16), dtype)
    out, cache = fast.layernorm_forward(x, gamma, beta)
    ref, ref_cache = layernorm_forward(x, gamma, beta)
    assert_close(out, ref, tol, "out")
    assert_close(cache.xhat, ref_cache.xhat, tol, "xhat")
    assert_close(cache.rstd, ref_cache.rstd, tol, "rstd")
    assert_all_close(layernorm_backward(dout, cache), layernorm_backward(dout, ref_cache), tol, "grads")


def loss_inputs(rng, dtype, ruled_out):
    logits = normal(rng, (3, 4, 11), dtype, 5.0)
    targets = rng.integers(1, 11, (3, 4))
    targets[0, 0] = targets[2, 3] = 0  # pad targets
    if ruled_out:
        logits[..., 7] = -np.inf  # a class ruled out everywhere
        targets[targets == 7] = 1
    return logits, targets


@pytest.mark.parametrize("dtype, tol", TOLS)
@pytest.mark.parametrize("eps, ruled_out", [(0.0, False), (0.1, False), (0.0, True)])
def test_softmax_cross_entropy(dtype, tol, eps, ruled_out):
    logits, targets = loss_inputs(np.random.default_rng(5), dtype, ruled_out)
    loss, cache = fast.softmax_cross_entropy_forward(logits, targets, 0, eps)
    ref, ref_cache = softmax_cross_entropy_forward(logits, targets, 0, eps)
    assert abs(loss - ref) <= tol * abs(ref)
    assert_close(cache.probs, ref_cache.probs, tol, "probs")
    want = softmax_cross_entropy_backward(0.7, ref_cache)
    assert_close(fast.softmax_cross_entropy_backward(0.7, cache), want, tol, "dlogits")
    np.testing.assert_array_equal(ref_cache.probs, softmax_cross_entropy_forward(logits, targets, 0, eps)[1].probs)


def test_softmax_cross_entropy_all_pad_and_underflow():
    logits = np.array([[0.0, -200.0, 1.0]], dtype=np.float32)  # p underflows to 0 in float32; log p must not
    for forward in (fast.softmax_cross_entropy_forward, softmax_cross_entropy_forward):
        loss, _ = forward(logits, np.array([1]), None)
        assert np.isfinite(loss) and abs(loss - (200 + np.log(1 + np.exp(1.0)))) < 1e-3
    for forward, backward in ((fast.softmax_cross_entropy_forward, fast.softmax_cross_entropy_backward),
                              (softmax_cross_entropy_forward, softmax_cross_entropy_backward)):
        loss, cache = forward(np.ones((2, 3)), np.zeros(2, dtype=int), 0, 0.1)
        assert loss == 0.0 and not backward(1.0, cache).any()


def textbook_adam(params, grads_seq, lr, b1=0.9, b2=0.98, eps=1e-9, wd=0.0):
    """Kingma & Ba's algorithm 1, written out here independently of optim.py; with ``wd``,
    Loshchilov & Hutter's decoupled decay (AdamW) of the matrices."""
    p = {k: v.copy() for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(x) for k, x in p.items()}
    for t, grads in enumerate(grads_seq, start=1):
        for k in p:
            if p[k].ndim >= 2:
                p[k] = p[k] * (1 - lr(t) * wd)
            g = grads[k]
            m[k] = b1 * m[k] + (1 - b1) * g
            v[k] = b2 * v[k] + (1 - b2) * g * g
            p[k] = p[k] - lr(t) * (m[k] / (1 - b1 ** t)) / (np.sqrt(v[k] / (1 - b2 ** t)) + eps)
    return p, m, v


def adam_on_path(params, grads_seq, lr, wd, on):
    """Our Adam over ``grads_seq`` on the fast (``on``) or the textbook path: (the parameters, a dict
    of the arrays they started as, the optimiser)."""
    live = {k: v.copy() for k, v in params.items()}
    held = dict(live)
    opt = Adam(live, lr=lr, weight_decay=wd)
    fast.use_fast(on)
    try:
        for grads in grads_seq:
            opt.step(grads)
    finally:
        fast.use_fast(True)
    return live, held, opt


@pytest.mark.parametrize("wd", [0.0, 0.5])
@pytest.mark.parametrize("dtype, tol", TOLS)
def test_adam_step(dtype, tol, wd):
    rng = np.random.default_rng(7)
    params = {"a": normal(rng, (4, 7), dtype), "b": normal(rng, (3,), dtype), "c": normal(rng, (2, 2, 5), dtype)}
    grads_seq = [{k: normal(rng, v.shape, dtype) for k, v in params.items()} for _ in range(5)]
    lr = NoamSchedule(16, warmup=3)
    expected = textbook_adam({k: v.astype(np.float64) for k, v in params.items()},
                             [{k: g.astype(np.float64) for k, g in gs.items()} for gs in grads_seq], lr, wd=wd)
    for on in (True, False):
        live, held, opt = adam_on_path(params, grads_seq, lr, wd, on)
        for k in params:
            assert live[k] is held[k], "parameters are updated in place"
            # float32 against the float64 reference: the step, lr ~ 0.1, sits on |p| ~ 1
            assert_close(live[k], expected[0][k].astype(dtype), tol if dtype == np.float64 else 1e-6, k)
            assert_close(opt.m[k], expected[1][k].astype(dtype), tol * 10, "m")
            assert_close(opt.v[k], expected[2][k].astype(dtype), tol * 10, "v")


def test_kv_cache_append_equals_concatenate_and_never_writes_into_a_shared_cache():
    """fast.append_positions: equal to the pair's np.concatenate; a branched cache stays intact."""
    rng = np.random.default_rng(8)
    cache = {"k": rng.standard_normal((2, 3, 1, 4))}
    ref = cache["k"].copy()
    for _ in range(300):  # far past the first buffer's room: the cache grows several times
        new = rng.standard_normal((2, 3, 1, 4))
        cache["k"] = fast.append_positions(cache["k"], new)
        ref = append_positions(ref, new)
        np.testing.assert_array_equal(cache["k"], ref)
    a, b = cache, dict(cache)  # two decodings continuing from the same cache
    del cache
    a["k"] = fast.append_positions(a["k"], np.ones((2, 3, 1, 4)))
    b["k"] = fast.append_positions(b["k"], np.zeros((2, 3, 1, 4)))
    assert (a["k"][:, :, -1] == 1).all() and (b["k"][:, :, -1] == 0).all()
    np.testing.assert_array_equal(a["k"][:, :, :-1], ref)
    np.testing.assert_array_equal(b["k"][:, :, :-1], ref)
    held = a["k"]  # someone keeps the keys of step t: extending the cache must not change them
    snapshot = held.copy()
    a["k"] = fast.append_positions(a["k"], np.full((2, 3, 1, 4), 5.0))
    np.testing.assert_array_equal(held, snapshot)


def test_decoders_keep_their_kv_cache_buffers(monkeypatch):
    """The cache grows in buffers that double and beam search reorders it in place, so each layer's keys
    and values get at most two buffers for 30 steps (fast.DEFAULT_ROOM positions, then 34): a reordered
    copy, or a name still holding the cache, would force a new one a step."""
    from numpytransformer.nn.decoding import beam_search, greedy_decode

    class CountingNumpy:  # numpy, with its np.empty calls of a cache buffer's shape (B, H, room, D/H) counted
        buffers = 0

        def __getattr__(self, name):
            return getattr(np, name)

        def empty(self, shape, *args, **kwargs):  # attention's weights and output have one position a step
            CountingNumpy.buffers += len(shape) == 4 and shape[2] >= fast.DEFAULT_ROOM
            return np.empty(shape, *args, **kwargs)

    cfg = TransformerConfig(src_vocab_size=13, tgt_vocab_size=11, d_model=16, n_heads=4, n_layers=2, d_ff=32,
                            max_len=40, dropout=0.0, pad_id=0, dtype="float64", seed=0)
    model = Transformer(cfg)
    src = np.random.default_rng(9).integers(1, 13, (3, 6))
    searches = (("beam", beam_search), ("greedy", greedy_decode))
    with fast.textbook():
        expected = {kind: search(model, src, 30, bos_id=1, eos_id=2) for kind, search in searches}
    monkeypatch.setattr(fast, "np", CountingNumpy())
    for kind, search in searches:
        CountingNumpy.buffers = 0
        assert search(model, src, 30, bos_id=1, eos_id=2) == expected[kind]
        assert 2 * cfg.n_decoder_layers <= CountingNumpy.buffers <= 2 * 2 * cfg.n_decoder_layers, kind


# ---- 2. the switch, and a short training run on both paths ------------------------------------------
def test_the_switch_decides_what_the_modules_run(monkeypatch):
    calls = []
    monkeypatch.setitem(fast.PAIRS, "layernorm_forward", lambda *a: calls.append("fast") or fast.layernorm_forward(*a))
    monkeypatch.setattr(fast.layernorm, "layernorm_forward", lambda *a: calls.append("textbook") or layernorm_forward(*a))
    norm, x = LayerNorm(4), np.random.default_rng(0).standard_normal((2, 4))  # built while the fast forms run
    try:
        fast.use_fast(True)  # binds the recording forms above
        norm(x)
        assert calls == ["fast"]
        with fast.textbook():
            assert not fast.enabled()
            norm(x)  # the same module, now on the textbook pair
            assert calls == ["fast", "textbook"]
        assert fast.enabled()
        norm(x)
        assert calls == ["fast", "textbook", "fast"]
    finally:
        monkeypatch.undo()
        fast.use_fast(True)
    assert kernels.layernorm_forward is fast.layernorm_forward
    with pytest.raises(NumpyTransformerError, match="use_fast takes True or False"):
        fast.use_fast("no")


def test_every_kernel_is_called(monkeypatch):
    """Each kernel of fast.PAIRS is called by a training step (forward, loss, backward, Adam) of a
    Transformer with the ReLU FFN and one with GELU's, and a greedy decoding with the KV cache:
    a kernel nothing calls is dead."""
    from numpytransformer.nn.decoding import greedy_decode

    called = set()

    def recording(name, form):
        return lambda *a, **k: called.add(name) or form(*a, **k)

    for name, form in fast.PAIRS.items():
        monkeypatch.setattr(kernels, name, recording(name, form))
    (src, tgt_in), tgt_out = seq2seq_batch()
    for activation in ("relu", "gelu"):
        model = small_transformer(activation)
        loss, dlogits = cross_entropy(model.forward(src, tgt_in), tgt_out, pad_id=PAD)
        model.backward(dlogits)
        Adam(model.parameters()).step(model.gradients())
        greedy_decode(model, src, 5, bos_id=1, eos_id=2)
    assert sorted(set(fast.PAIRS) - called) == []


@pytest.mark.parametrize("value, on", [("0", False), ("1", True), ("", True)])
def test_the_environment_variable_sets_the_default(value, on):
    code = "from numpytransformer import fast; print(fast.enabled(), fast.ON_BY_DEFAULT)"
    env = dict(os.environ, NUMPYTRANSFORMER_FAST=value, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(on), str(on)]


def test_a_bad_environment_variable_is_refused():
    env = dict(os.environ, NUMPYTRANSFORMER_FAST="fast", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", "import numpytransformer"], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode != 0 and "NUMPYTRANSFORMER_FAST must be 0" in out.stderr


D, H, FF, V, PAD = 8, 2, 16, 11, 0
STEPS, EPS, CLIP, WARMUP = 5, 0.1, 1.0, 3


def small_transformer(activation: str = "relu") -> Transformer:
    return Transformer(TransformerConfig(src_vocab_size=V, tgt_vocab_size=V, d_model=D, n_heads=H, n_layers=2,
                                         d_ff=FF, max_len=12, dropout=0.0, pad_id=PAD, dtype="float64", seed=3,
                                         norm_first=True, activation=activation))


def small_gpt() -> TransformerLM:
    return TransformerLM(TransformerConfig(src_vocab_size=V, d_model=D, n_heads=H, n_layers=2, d_ff=FF, max_len=12,
                                           dropout=0.0, dtype="float64", seed=4, norm_first=True,
                                           tie_embeddings=True, positions="learned"))


def seq2seq_batch():
    rng = np.random.default_rng(10)
    src = rng.integers(1, V, (4, 7))
    src[1, 5:] = PAD
    tgt = rng.integers(1, V, (4, 6))
    tgt[:, 0] = 1  # BOS
    tgt[2, 4:] = PAD
    return (src, tgt[:, :-1]), tgt[:, 1:]


def lm_batch():
    ids = np.random.default_rng(11).integers(0, V, (4, 8))
    return (ids[:, :-1],), ids[:, 1:]


def numpy_trajectory(model, batch, pad_id):
    """STEPS updates: forward, loss (label smoothing), backward, clipping, Adam with the Noam schedule."""
    inputs, targets = batch
    opt = Adam(model.parameters(), lr=NoamSchedule(D, warmup=WARMUP))
    losses = []
    for _ in range(STEPS):
        model.zero_grad()
        loss, dlogits = cross_entropy(model.forward(*inputs), targets, pad_id=pad_id, label_smoothing=EPS)
        model.backward(dlogits)
        clip_grad_norm(model.gradients(), CLIP)
        opt.step(model.gradients())
        losses.append(loss)
    return np.array(losses), {k: p.copy() for k, p in model.parameters().items()}


def free_weights(params):
    """Every parameter but the key biases: a key bias adds the same amount to every score of a row,
    which the softmax cancels, so its gradient is rounding noise that Adam scales up to a full step
    of either sign. The losses cannot see it."""
    return {k: v for k, v in params.items() if not k.endswith(".b_k")}


@pytest.mark.parametrize("make, batch, pad_id", [(small_transformer, seq2seq_batch, PAD), (small_gpt, lm_batch, None)],
                         ids=["transformer", "gpt"])
def test_training_is_the_same_on_both_paths(make, batch, pad_id):
    fast_losses, fast_weights = numpy_trajectory(make(), batch(), pad_id)
    with fast.textbook():
        textbook_losses, textbook_weights = numpy_trajectory(make(), batch(), pad_id)
    assert fast_losses[-1] < fast_losses[0]  # it learns
    assert_close(textbook_losses, fast_losses, 1e-12, "losses")
    for k, w in free_weights(fast_weights).items():
        assert_close(textbook_weights[k], w, 1e-10, k)


# ---- 3. the same trajectory in PyTorch ---------------------------------------------------------------------
def layer_links(prefix, layer, sublayers):
    """The links (test_parity_torch.Link) of one of our encoder or decoder layers to torch's layer."""
    from test_parity_torch import Link, mha_links, norm_links

    links = mha_links(prefix + "self_attn.", layer.self_attn, prefix + "self_attn")
    if hasattr(layer, "cross_attn"):
        links += mha_links(prefix + "multihead_attn.", layer.cross_attn, prefix + "cross_attn")
    for ours, theirs in sublayers:
        links += norm_links(f"{prefix}{theirs}.", getattr(layer, ours).norm, prefix + ours)
    for n in "12":
        links += [Link(f"{prefix}linear{n}.weight", slice(None), layer.ffn, "W" + n, f"{prefix}ffn.W{n}", True),
                  Link(f"{prefix}linear{n}.bias", slice(None), layer.ffn, "b" + n, f"{prefix}ffn.b{n}", False)]
    return links


ENCODER_NORMS = [("self_attn_sublayer", "norm1"), ("ffn_sublayer", "norm2")]
DECODER_NORMS = [("self_attn_sublayer", "norm1"), ("cross_attn_sublayer", "norm2"), ("ffn_sublayer", "norm3")]


def torch_transformer(model, torch):
    """torch.nn.Transformer (pre-LN, with final norms) holding the numpy model's weights; the embeddings
    and the output projection as tensors. Returns (module, {our name: tensor}, links), all float64."""
    from test_parity_torch import load_into_torch, norm_links

    with warnings.catch_warnings():  # that pre-LN layers take no nested tensors: none are used here
        warnings.simplefilter("ignore")
        t = torch.nn.Transformer(D, H, 2, 2, FF, dropout=0.0, batch_first=True, norm_first=True,
                                 dtype=torch.float64)
    links = []
    for side, norms in (("encoder", ENCODER_NORMS), ("decoder", DECODER_NORMS)):
        for i, layer in enumerate(getattr(model, side).layers):
            links += layer_links(f"{side}.layers.{i}.", layer, norms)
        links += norm_links(f"{side}.norm.", getattr(model, side).final_norm, side + ".final_norm")
    load_into_torch(links, t)
    extra = {k: torch.tensor(v, requires_grad=True) for k, v in model.parameters().items()
             if k.endswith("embed.W") or k.startswith("out.")}
    return t, extra, links


def torch_transformer_loss(t, extra, model, batch, torch):
    (src, tgt_in), tgt_out = batch
    F = torch.nn.functional
    pe = torch.tensor(model.encoder.embedder.pos.pe)

    def embed(ids, W):  # padding_idx: the pad row gets no gradient, as in ours
        return F.embedding(torch.tensor(ids), W, padding_idx=PAD) * D ** 0.5 + pe[:ids.shape[1]]

    T = tgt_in.shape[1]
    h = t(embed(src, extra["encoder.embedder.embed.W"]), embed(tgt_in, extra["decoder.embedder.embed.W"]),
          tgt_mask=torch.ones(T, T, dtype=torch.bool).triu(1),  # True: may not attend
          src_key_padding_mask=torch.tensor(src == PAD), memory_key_padding_mask=torch.tensor(src == PAD),
          tgt_key_padding_mask=torch.tensor(tgt_in == PAD))
    logits = h @ extra["out.linear.W"] + extra["out.linear.b"]
    return F.cross_entropy(logits.reshape(-1, V), torch.tensor(tgt_out).reshape(-1), ignore_index=PAD,
                           label_smoothing=EPS)


def torch_gpt(model, torch):
    """GPT's blocks as torch.nn.TransformerEncoderLayer (pre-LN) and a final LayerNorm holding the numpy
    model's weights; the tied embedding, the positions and the output bias as tensors."""
    from test_parity_torch import load_into_torch, norm_links

    nn = torch.nn
    t = nn.ModuleDict({"layers": nn.ModuleList(nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True,
                                                                          norm_first=True, dtype=torch.float64)
                                               for _ in model.layers),
                       "final_norm": nn.LayerNorm(D, dtype=torch.float64)})
    links = [link for i, layer in enumerate(model.layers) for link in layer_links(f"layers.{i}.", layer, ENCODER_NORMS)]
    links += norm_links("final_norm.", model.final_norm, "final_norm")
    load_into_torch(links, t)
    extra = {k: torch.tensor(model.parameters()[k], requires_grad=True) for k in ("embed.W", "pos.P", "out.b")}
    return t, extra, links


def torch_gpt_loss(t, extra, model, batch, torch):
    (ids,), targets = batch
    T = ids.shape[1]
    x = extra["embed.W"][torch.tensor(ids)] * D ** 0.5 + extra["pos.P"][:T]
    for layer in t["layers"]:
        x = layer(x, src_mask=torch.ones(T, T, dtype=torch.bool).triu(1))
    logits = t["final_norm"](x) @ extra["embed.W"].T + extra["out.b"]  # the tied output projection
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V), torch.tensor(targets).reshape(-1),
                                             label_smoothing=EPS)


def test_adam_weight_decay_matches_pytorch_adamw():
    """Eight steps of our Adam with ``weight_decay`` against ``torch.optim.AdamW`` with the decay on
    the matrices' group alone, under the Noam schedule, float64, both paths: to 1e-12, relative."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    params = {"w": rng.normal(size=(4, 7)), "bias": rng.normal(size=(3,)), "w3": rng.normal(size=(2, 2, 5))}
    grads_seq = [{k: rng.normal(size=v.shape) for k, v in params.items()} for _ in range(8)]
    noam, wd = NoamSchedule(16, warmup=3), 0.3
    theirs = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    groups = [{"params": [theirs["w"], theirs["w3"]], "weight_decay": wd},
              {"params": [theirs["bias"]], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda done: noam(done + 1))
    for grads in grads_seq:
        for k, tensor in theirs.items():
            tensor.grad = torch.tensor(grads[k])
        opt.step()
        sched.step()
    for on in (True, False):
        live = adam_on_path(params, grads_seq, noam, wd, on)[0]
        for k in params:
            assert_close(live[k], theirs[k].detach().numpy(), 1e-12, k)
    assert not np.allclose(live["w"], textbook_adam(params, grads_seq, noam)[0]["w"], rtol=1e-3)  # it decayed


TORCH_CASES = {"transformer": (small_transformer, torch_transformer, torch_transformer_loss, seq2seq_batch, PAD),
               "gpt": (small_gpt, torch_gpt, torch_gpt_loss, lm_batch, None)}


@pytest.mark.parametrize("path", ["fast", "textbook"])
@pytest.mark.parametrize("case", list(TORCH_CASES))
def test_training_matches_pytorch(case, path):
    """Five steps (pre-LN, label smoothing 0.1, clipping at 1, Adam with the Noam schedule; the
    Transformer with padding) in float64: per-step losses to 1e-10, final weights to 1e-8, relative."""
    torch = pytest.importorskip("torch")
    from test_parity_torch import to_numpy

    make, build, torch_loss, batch, pad_id = TORCH_CASES[case]
    model = make()
    t, extra, links = build(model, torch)
    t.train()  # dropout is 0; train mode keeps torch off its fused inference path
    params = list(t.parameters()) + list(extra.values())
    opt = torch.optim.Adam(params, lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    noam = NoamSchedule(D, warmup=WARMUP)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda done: noam(done + 1))
    theirs = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch_loss(t, extra, model, batch(), torch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, CLIP)
        opt.step()
        sched.step()
        theirs.append(loss.item())
    if path == "fast":
        ours, weights = numpy_trajectory(model, batch(), pad_id)
    else:
        with fast.textbook():
            ours, weights = numpy_trajectory(model, batch(), pad_id)
    assert ours[-1] < ours[0] - 0.1  # a trajectory, not five times the same point
    assert_close(ours, np.array(theirs), 1e-10, "losses")
    tparams = dict(t.named_parameters())
    for link in links:  # each link: one of our (now trained) parameters and where torch keeps it
        if link.our_name != "b_k":  # see free_weights
            theirs = to_numpy(tparams[link.torch_name][link.rows])
            assert_close(link.ours.params[link.our_name], theirs.T if link.transpose else theirs, 1e-8, link.label)
    for k, tensor in extra.items():
        assert_close(weights[k], to_numpy(tensor), 1e-8, k)
