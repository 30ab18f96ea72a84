"""Greedy and beam search: the KV cache changes nothing but speed; EOS stops decoding."""
import numpy as np
import pytest

from numpytransformer import Transformer, TransformerConfig
from numpytransformer.nn.decoding import beam_search, greedy_decode, log_softmax
from numpytransformer.nn.ensemble import Ensemble
from numpytransformer.errors import NumpyTransformerError


def _model(seed=0, norm_first=False, tie=False):
    cfg = TransformerConfig(src_vocab_size=15, tgt_vocab_size=17, d_model=16, n_heads=4, n_layers=2, d_ff=32,
                            max_len=30, dropout=0.1, dtype="float64", seed=seed, norm_first=norm_first,
                            tie_embeddings=tie)
    return Transformer(cfg).eval()


def _src(seed=0):
    src = np.random.default_rng(seed).integers(4, 15, size=(5, 7))
    src[1, 4:] = 0
    src[3, 2:] = 0
    return src


@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_greedy_equals_uncached(norm_first):
    model = _model(norm_first=norm_first)
    src = _src()
    assert greedy_decode(model, src, 20, use_cache=True) == greedy_decode(model, src, 20, use_cache=False)


def test_decode_step_logits_equal_full_decode():
    model = _model(tie=True)
    src = _src(1)
    memory, src_mask = model.encode(src)
    ys = np.random.default_rng(2).integers(4, 17, size=(5, 6))
    ys[:, 0] = 1
    full = model.decode(ys, memory, src_mask)
    caches = [{} for _ in range(model.cfg.n_decoder_layers)]
    steps = [model.decode_step(ys[:, t:t + 1], memory, src_mask, caches, position=t)[:, 0] for t in range(6)]
    np.testing.assert_allclose(np.stack(steps, axis=1), full, rtol=0, atol=1e-12)


def test_greedy_stops_at_eos_and_strips_it():
    model = _model()
    # Make EOS (id 2) the most likely token everywhere: a large output bias.
    model.out.linear.params["b"][2] = 100.0
    assert greedy_decode(model, _src(), 20) == [[]] * 5


def test_beam_size_one_equals_greedy():
    model = _model(seed=3)
    src = _src(4)
    assert beam_search(model, src, 15, beam_size=1, length_penalty=0.0) == greedy_decode(model, src, 15)


def test_beam_finds_a_hypothesis_at_least_as_likely_as_greedy():
    model = _model(seed=5)
    model.out.linear.params["b"][2] = 2.0  # so that hypotheses end with EOS and can be compared
    src = _src(6)

    def logprob(row, hyp):
        ys = np.array([[1] + hyp], dtype=np.int64)
        memory, mask = model.encode(src[row:row + 1])
        lp = log_softmax(model.decode(ys, memory, mask))[0]
        target = hyp + [2]
        return sum(lp[t, tok] for t, tok in enumerate(target))

    greedy = greedy_decode(model, src, 12)
    beam = beam_search(model, src, 12, beam_size=4, length_penalty=0.0)
    compared = 0
    for r in range(len(src)):
        if len(greedy[r]) < 12 and len(beam[r]) < 12:  # both finished with EOS
            assert logprob(r, beam[r]) >= logprob(r, greedy[r]) - 1e-9
            compared += 1
    assert compared >= 3


def test_beam_size_must_be_positive():
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(_model(), _src(), 5, beam_size=0)


def _reference_beam(model, src, max_len, K, lp, bos=1, eos=2):
    """Beam search without the KV cache: every step re-runs the decoder on whole prefixes,
    so no cache has to be reordered. The library's cached version must agree."""
    memory, src_mask = model.encode(src)
    B = memory.shape[0]
    memory, src_mask = np.repeat(memory, K, 0), np.repeat(src_mask, K, 0)
    scores = np.full((B, K), -np.inf)
    scores[:, 0] = 0
    seqs = np.full((B, K, 1), bos)
    fin = np.zeros((B, K), bool)
    lengths = np.zeros((B, K), int)
    for _ in range(max_len):
        logits = model.decode(seqs.reshape(B * K, -1), memory, src_mask)[:, -1]
        logits[:, [0, bos]] = -np.inf
        logp = log_softmax(logits).reshape(B, K, -1)
        V = logp.shape[-1]
        logp[fin] = -np.inf
        logp[fin, eos] = 0
        cand = (scores[:, :, None] + logp).reshape(B, K * V)
        top = np.argsort(-cand, axis=1, kind="stable")[:, :K]
        beam, tok = top // V, top % V
        scores = np.take_along_axis(cand, top, 1)
        seqs = np.concatenate([np.take_along_axis(seqs, beam[:, :, None], 1), tok[:, :, None]], 2)
        was = np.take_along_axis(fin, beam, 1)
        lengths = np.take_along_axis(lengths, beam, 1) + ~was
        fin = was | (tok == eos)
        if fin.all():
            break
    best = (scores / ((5.0 + lengths) / 6.0) ** lp).argmax(1)
    return [list(map(int, seqs[b, best[b], 1:][: list(seqs[b, best[b], 1:]).index(eos)]))
            if eos in seqs[b, best[b], 1:] else list(map(int, seqs[b, best[b], 1:])) for b in range(B)]


@pytest.mark.parametrize("seed", range(3))
def test_cached_beam_equals_uncached_reference_with_rows_finishing_apart(seed):
    model = _model(seed=seed)
    model.out.linear.params["b"][2] = 1.0  # EOS likely enough that rows finish at different steps
    src = _src(seed)
    ours = beam_search(model, src, 12, beam_size=3)
    assert ours == _reference_beam(model, src, 12, 3, 0.6)
    lengths = {len(h) for h in ours}
    assert len(lengths) > 1 and min(lengths) < 12  # some rows finished, at different lengths


def test_greedy_rows_finish_at_different_steps_with_and_without_cache():
    model = _model(seed=1)
    model.out.linear.params["b"][2] = 2.0
    src = _src(2)
    cached = greedy_decode(model, src, 12)
    assert cached == greedy_decode(model, src, 12, use_cache=False)
    assert len({len(h) for h in cached}) > 1


def test_decoding_leaves_a_training_model_in_training_mode():
    model = _model().train()
    state = model.rng.bit_generator.state
    a = greedy_decode(model, _src(), 8)
    assert model.training and a == greedy_decode(model.eval(), _src(), 8)
    assert model.rng.bit_generator.state == state  # no dropout mask was drawn


# ---- an ensemble of translators -------------------------------------------------------------
def test_ensemble_of_one_model_or_of_a_model_twice_decodes_as_the_model():
    model, src = _model(), _src()
    for ens in (Ensemble([model]), Ensemble([model, model])):
        assert greedy_decode(ens, src, 20) == greedy_decode(model, src, 20)
        assert beam_search(ens, src, 20, beam_size=3) == beam_search(model, src, 20, beam_size=3)


def test_ensemble_step_is_the_log_of_the_members_mean_probability():
    """Two members of different widths; the cached step of the ensemble against each member's
    teacher-forced softmax, averaged by hand."""
    a = _model(seed=0)
    b = Transformer(TransformerConfig(src_vocab_size=15, tgt_vocab_size=17, d_model=8, n_heads=2, n_layers=3,
                                      d_ff=16, max_len=30, dtype="float64", seed=1)).eval()
    ens, src = Ensemble([a, b]), _src()
    tgt = np.random.default_rng(1).integers(4, 17, size=(5, 6))
    tgt[:, 0] = 1
    mean = (np.exp(log_softmax(a.forward(src, tgt))) + np.exp(log_softmax(b.forward(src, tgt)))) / 2
    memory, mask = ens.encode(src)
    caches = [{} for _ in range(ens.cfg.n_decoder_layers)]
    steps = np.concatenate([ens._decode_step(tgt[:, t:t + 1], memory, mask, caches, t) for t in range(6)], axis=1)
    np.testing.assert_allclose(np.exp(steps), mean, atol=1e-12)
    np.testing.assert_allclose(np.exp(ens._decode(tgt, memory, mask)), mean, atol=1e-12)
    # The mean is the same in either order, so the beam search, which repeats the members' memories
    # side by side and reorders their caches, must find the same hypotheses.
    assert beam_search(ens, src, 20, beam_size=3) == beam_search(Ensemble([b, a]), src, 20, beam_size=3)
    assert greedy_decode(ens, src, 20, use_cache=True) == greedy_decode(ens, src, 20, use_cache=False)
    with pytest.raises(NumpyTransformerError, match="memory: expected the members' memories side by side, 24"):
        ens._decode_step(tgt[:, :1], memory[..., :16], mask, [{} for _ in range(5)], 0)


def test_ensemble_members_must_share_the_vocabularies():
    other = Transformer(TransformerConfig(src_vocab_size=15, tgt_vocab_size=19, d_model=8, n_heads=2, n_layers=1,
                                          d_ff=16, max_len=30)).eval()
    with pytest.raises(NumpyTransformerError, match=r"models\[1\]: tgt_vocab_size 19 differs"):
        Ensemble([_model(), other])
    with pytest.raises(NumpyTransformerError, match="at least one"):
        Ensemble([])


def test_an_ensemble_of_classifiers_scores_the_mean_probability():
    from numpytransformer.nn.models import TransformerClassifier

    members = [TransformerClassifier(TransformerConfig(src_vocab_size=15, d_model=d, n_heads=2, n_layers=1, d_ff=16,
                                                       max_len=30, dtype="float64", seed=s)).eval()
               for s, d in ((0, 8), (1, 12), (2, 8))]
    x = _src()
    mean = np.mean([np.exp(log_softmax(m.forward(x))) for m in members], axis=0)
    np.testing.assert_allclose(np.exp(log_softmax(Ensemble(members).forward(x))), mean, atol=1e-12)
    with pytest.raises(NumpyTransformerError, match=r"models\[1\]: a Transformer, but models\[0\] is a Transf"):
        Ensemble([members[0], _model()])
    with pytest.raises(NumpyTransformerError, match="model must be an encoder-decoder Transformer"):
        greedy_decode(Ensemble(members), _src(), 10)  # classifiers do not decode
