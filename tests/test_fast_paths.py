"""The library's speed-minded forms against the textbook forms they replace (issue 21).

LayerNorm's row means by einsum, Adam's update in a reused work array and the loss's
log-probabilities read off the softmax's sum must give what the plain NumPy expressions
give: outputs and gradients, float64 to rounding, float32 to a few ulps.
"""
import numpy as np
import pytest

from numpytransformer.layernorm import layernorm_backward, layernorm_forward
from numpytransformer.losses import softmax_cross_entropy_backward, softmax_cross_entropy_forward
from numpytransformer.optim import Adam
from numpytransformer.softmax import log_softmax, softmax, sum_keepdims


def textbook_layernorm(x, gamma, beta, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return gamma * (x - mu) / np.sqrt(var + eps) + beta


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-13), (np.float32, 2e-6)])
def test_layernorm_forward_equals_textbook(dtype, tol):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, 5, 16)) * 3 + 2).astype(dtype)
    gamma, beta = rng.standard_normal(16).astype(dtype), rng.standard_normal(16).astype(dtype)
    out, cache = layernorm_forward(x, gamma, beta)
    assert out.dtype == dtype and cache.xhat.dtype == dtype and cache.rstd.dtype == dtype
    np.testing.assert_allclose(out, textbook_layernorm(x, gamma, beta), rtol=0, atol=tol * 10)
    # The backward reads the cache: its xhat and rstd must be the textbook ones too.
    mu = x.mean(axis=-1, keepdims=True)
    np.testing.assert_allclose(cache.rstd, 1 / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + 1e-5),
                               rtol=tol)


def test_layernorm_gradient_of_the_fast_forward_matches_finite_differences():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 8))
    gamma, beta = rng.standard_normal(8), rng.standard_normal(8)
    dout = rng.standard_normal((2, 3, 8))
    _, cache = layernorm_forward(x, gamma, beta)
    dx, _, _ = layernorm_backward(dout, cache)
    h = 1e-6
    num = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += h
        xm[i] -= h
        num[i] = np.sum(dout * (textbook_layernorm(xp, gamma, beta) - textbook_layernorm(xm, gamma, beta))) / (2 * h)
    assert np.max(np.abs(dx - num)) < 1e-7


def textbook_adam(params, grads_seq, lr, b1=0.9, b2=0.98, eps=1e-9):
    """Kingma & Ba's algorithm 1, with temporaries, bias corrections on m and v."""
    p = {k: v.copy() for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(x) for k, x in p.items()}
    for t, grads in enumerate(grads_seq, start=1):
        for k in p:
            g = grads[k]
            m[k] = b1 * m[k] + (1 - b1) * g
            v[k] = b2 * v[k] + (1 - b2) * g * g
            m_hat, v_hat = m[k] / (1 - b1 ** t), v[k] / (1 - b2 ** t)
            p[k] = p[k] - lr * m_hat / (np.sqrt(v_hat) + eps * 1.0)
    return p


def test_adam_work_array_update_equals_textbook_adam():
    rng = np.random.default_rng(2)
    params = {"a": rng.standard_normal((4, 7)), "b": rng.standard_normal(3), "c": rng.standard_normal((2, 2, 5))}
    grads_seq = [{k: rng.standard_normal(v.shape) for k, v in params.items()} for _ in range(5)]
    live = {k: v.copy() for k, v in params.items()}
    # eps small enough that folding it into eps_hat (Adam paper, section 2) changes nothing visible
    opt = Adam(live, lr=1e-2, eps=1e-12)
    for grads in grads_seq:
        opt.step(grads)
    expected = textbook_adam(params, grads_seq, 1e-2, eps=1e-12)
    for k in params:
        np.testing.assert_allclose(live[k], expected[k], rtol=1e-12, atol=1e-12)
        assert live[k].shape == params[k].shape


def textbook_cross_entropy(logits, targets, pad_id, eps):
    V = logits.shape[-1]
    logp = log_softmax(logits.reshape(-1, V), axis=1)
    t = targets.reshape(-1)
    valid = t != pad_id
    q = np.full(logp.shape, eps / V)
    q[np.arange(len(t)), t] += 1 - eps
    rows = -(q * logp).sum(axis=1)
    n = valid.sum()
    grad = (np.exp(logp) - q) * valid[:, None] / n
    return rows[valid].sum() / n, grad.reshape(logits.shape)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_loss_read_off_the_softmax_equals_log_softmax_form(eps):
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((3, 4, 11)) * 5
    targets = rng.integers(0, 11, (3, 4))
    targets[0, 0] = 0  # a pad target
    loss, cache = softmax_cross_entropy_forward(logits, targets, pad_id=0, label_smoothing=eps)
    dlogits = softmax_cross_entropy_backward(1.0, cache)
    ref_loss, ref_grad = textbook_cross_entropy(logits, targets, 0, eps)
    assert abs(loss - ref_loss) < 1e-13
    np.testing.assert_allclose(dlogits, ref_grad, rtol=0, atol=1e-15)


def test_loss_stays_finite_where_a_probability_underflows():
    """A logit 200 below the rest: p underflows to 0 in float32, log p must not be -inf."""
    logits = np.array([[0.0, -200.0, 1.0]], dtype=np.float32)
    loss, _ = softmax_cross_entropy_forward(logits, np.array([1]), pad_id=None)
    assert np.isfinite(loss) and abs(loss - (200 + np.log(1 + np.exp(1.0)))) < 1e-3


def test_beam_top_k_equals_the_stable_full_sort():
    """decoding._top_k picks what np.argsort(-cand, kind="stable")[:, :K] picks, ties and -inf included."""
    from numpytransformer.decoding import _top_k

    rng = np.random.default_rng(4)
    for _ in range(300):
        B, K, V = (int(n) for n in rng.integers(1, 6, size=3))
        cand = rng.integers(-3, 3, (B, K * V)).astype(float)  # few distinct values: many ties
        cand[rng.random(cand.shape) < 0.3] = -np.inf
        np.testing.assert_array_equal(_top_k(cand, K), np.argsort(-cand, axis=1, kind="stable")[:, :K])


def test_cached_decoder_step_equals_the_full_decode():
    """MultiHeadAttention's cached path (flattened projections) gives the full forward's logits."""
    from numpytransformer import Transformer, TransformerConfig

    cfg = TransformerConfig(src_vocab_size=13, tgt_vocab_size=11, d_model=16, n_heads=4, n_layers=2, d_ff=32,
                            max_len=12, dropout=0.0, pad_id=0, dtype="float64", seed=0)
    model = Transformer(cfg)
    rng = np.random.default_rng(5)
    src = rng.integers(1, 13, (3, 6))
    src[0, 4:] = 0
    tgt = rng.integers(1, 11, (3, 5))
    memory, mask = model.encode(src)
    full = model.decode(tgt, memory, mask)
    caches = [{} for _ in range(cfg.n_decoder_layers)]
    for t in range(tgt.shape[1]):
        step = model.decode_step(tgt[:, t:t + 1], memory, mask, caches, t)
        np.testing.assert_allclose(step[:, 0], full[:, t], rtol=0, atol=1e-12)


def test_reused_large_arrays_are_never_ones_a_caller_holds():
    """buffers.empty_reusable: a held result (or a view of it) keeps its memory; a dropped one is reused."""
    from numpytransformer.buffers import REUSE_BYTES, empty_reusable

    n = REUSE_BYTES // 4 // 100 + 1  # rows of 100 float32: just above the pooling threshold
    a = empty_reusable((n, 100), np.float32)
    a[:] = 1.0
    b = empty_reusable((n, 100), np.float32)  # a is held: b must be elsewhere
    assert not np.shares_memory(a, b)
    b[:] = 2.0
    assert (a == 1.0).all()
    view = a[:3].T
    del a
    c = empty_reusable((n, 100), np.float32)  # a's memory is still held through the view
    assert not np.shares_memory(view, c)
    del b
    d = empty_reusable((n - 7, 100), np.float32)  # b dropped: a smaller array reuses its memory
    assert d.shape == (n - 7, 100) and d.dtype == np.float32 and d.flags.c_contiguous
    small = empty_reusable((3, 4), np.float64)
    assert small.shape == (3, 4) and small.flags.owndata


def test_two_live_logits_of_the_same_shape_stay_distinct():
    """Large outputs of linear_forward (pooled) held at once are independent arrays."""
    from numpytransformer.buffers import REUSE_BYTES
    from numpytransformer.linear import linear_forward

    rng = np.random.default_rng(6)
    V = REUSE_BYTES // 4 // 64 + 1  # 64 rows of V float32 logits: pooled
    W = rng.standard_normal((8, V)).astype(np.float32)
    x1, x2 = (rng.standard_normal((4, 16, 8)).astype(np.float32) for _ in range(2))
    out1, _ = linear_forward(x1, W, None)
    out2, _ = linear_forward(x2, W, None)
    assert not np.shares_memory(out1, out2)
    np.testing.assert_allclose(out1, x1 @ W, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out2, x2 @ W, rtol=1e-5, atol=1e-5)


def test_kv_cache_append_equals_concatenate_and_never_writes_into_a_shared_cache():
    """multihead._append_positions: equal to np.concatenate along positions; a branched cache stays intact."""
    from numpytransformer.multihead import _append_positions

    rng = np.random.default_rng(7)
    cache = {"k": rng.standard_normal((2, 3, 1, 4))}
    ref = cache["k"].copy()
    for _ in range(300):  # far past the first buffer's room (16 positions): the cache grows several times
        new = rng.standard_normal((2, 3, 1, 4))
        cache["k"] = _append_positions(cache["k"], new)
        ref = np.concatenate([ref, new], axis=2)
        np.testing.assert_array_equal(cache["k"], ref)
    a, b = cache, dict(cache)  # two decodings continuing from the same cache
    del cache
    a["k"] = _append_positions(a["k"], np.ones((2, 3, 1, 4)))
    b["k"] = _append_positions(b["k"], np.zeros((2, 3, 1, 4)))
    assert (a["k"][:, :, -1] == 1).all() and (b["k"][:, :, -1] == 0).all()
    np.testing.assert_array_equal(a["k"][:, :, :-1], ref)
    np.testing.assert_array_equal(b["k"][:, :, :-1], ref)
    held = a["k"]  # someone keeps the keys of step t: extending the cache must not change them
    snapshot = held.copy()
    a["k"] = _append_positions(a["k"], np.full((2, 3, 1, 4), 5.0))
    np.testing.assert_array_equal(held, snapshot)


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.float32, 2e-5)])
@pytest.mark.parametrize("shape", [(7,), (3, 20), (2, 4, 5, 20), (6, 8000), (2, 3, 0)])
def test_einsum_sums_equal_numpy_sums(shape, dtype, tol):
    """sum_keepdims (an einsum over the last axis) gives x.sum(axis, keepdims=True), on every axis;
    softmax and log_softmax built on it equal the plain expressions."""
    rng = np.random.default_rng(8)
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    for axis in range(-1, -len(shape) - 1, -1):
        got, want = sum_keepdims(x, axis), x.astype(np.float64).sum(axis=axis, keepdims=True)
        assert got.shape == want.shape and got.dtype == dtype
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(x).sum(axis=axis, keepdims=True).max(initial=1))
    if shape[-1]:
        x64 = x.astype(np.float64)
        e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
        np.testing.assert_allclose(softmax(x), e / e.sum(axis=-1, keepdims=True), rtol=tol, atol=tol / 10)
        np.testing.assert_allclose(log_softmax(x), np.log(e / e.sum(axis=-1, keepdims=True)), rtol=tol, atol=tol)


def test_sum_keepdims_of_whole_numbers_is_numpys_sum():
    """Not a float array: x.sum itself (an einsum would keep int8 and overflow, or sum booleans to True)."""
    x = np.ones((2, 300), dtype=np.int8)
    np.testing.assert_array_equal(sum_keepdims(x), x.sum(axis=-1, keepdims=True))
    np.testing.assert_array_equal(sum_keepdims(x > 0), np.full((2, 1), 300))


def test_decoders_keep_their_kv_cache_buffers(monkeypatch):
    """The decoders give the cache room for their longest output and beam search reorders it in place,
    so each layer's keys and values get one buffer for the whole search (a reordered copy, or a name
    still holding the cache, would force a new one a step; too little room, one at every doubling)."""
    import numpytransformer.multihead as mh
    from numpytransformer import Transformer, TransformerConfig
    from numpytransformer.decoding import beam_search, greedy_decode

    class CountingNumpy:  # numpy, with its 4-D np.empty calls (the cache buffers) counted
        buffers = 0

        def __getattr__(self, name):
            return getattr(np, name)

        def empty(self, shape, *args, **kwargs):
            CountingNumpy.buffers += len(shape) == 4
            return np.empty(shape, *args, **kwargs)

    cfg = TransformerConfig(src_vocab_size=13, tgt_vocab_size=11, d_model=16, n_heads=4, n_layers=2, d_ff=32,
                            max_len=40, dropout=0.0, pad_id=0, dtype="float64", seed=0)
    model = Transformer(cfg)
    src = np.random.default_rng(9).integers(1, 13, (3, 6))
    expected = {k: search(model, src, 30, bos_id=1, eos_id=2) for k, search in (("beam", beam_search),
                                                                                 ("greedy", greedy_decode))}
    monkeypatch.setattr(mh, "np", CountingNumpy())
    for kind, search in (("beam", beam_search), ("greedy", greedy_decode)):
        CountingNumpy.buffers = 0
        assert search(model, src, 30, bos_id=1, eos_id=2) == expected[kind]
        assert CountingNumpy.buffers == 2 * cfg.n_decoder_layers, kind
