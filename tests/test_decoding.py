"""Greedy and beam search: the KV cache changes nothing but speed; EOS stops decoding."""
import numpy as np
import pytest

from numpytransformer import Transformer, TransformerConfig
from numpytransformer.decoding import beam_search, greedy_decode, log_softmax


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
    src = _src(6)

    def logprob(row, hyp):
        ys = np.array([[1] + hyp], dtype=np.int64)
        memory, mask = model.encode(src[row:row + 1])
        lp = log_softmax(model.decode(ys, memory, mask))[0]
        target = hyp + [2]
        return sum(lp[t, tok] for t, tok in enumerate(target))

    greedy = greedy_decode(model, src, 12)
    beam = beam_search(model, src, 12, beam_size=4, length_penalty=0.0)
    for r in range(len(src)):
        if len(greedy[r]) < 12 and len(beam[r]) < 12:  # both finished with EOS
            assert logprob(r, beam[r]) >= logprob(r, greedy[r]) - 1e-9


def test_beam_size_must_be_positive():
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(_model(), _src(), 5, beam_size=0)
