"""The simulated collectives of ``training/collectives.py``: the ring's halves and their power-of-two
siblings, recursive halving and doubling, sum what np.sum sums and send what the ring sends."""
from collections import Counter

import numpy as np
import pytest

from numpytransformer.errors import NumpyTransformerError
from numpytransformer.training.collectives import (doubling_all_gather, halving_doubling_allreduce,
                                                   halving_reduce_scatter, ring_allreduce)


def _ranks(N: int, seed: int):
    """N ranks' vectors, each cut into N chunks of varying sizes (chunk i of i % 3 + 1 entries)."""
    r = np.random.default_rng(seed)
    return [[r.standard_normal(i % 3 + 1) for i in range(N)] for _ in range(N)]


@pytest.mark.parametrize("allreduce", [ring_allreduce, halving_doubling_allreduce])
@pytest.mark.parametrize("N", [1, 2, 4, 8])
def test_an_allreduce_leaves_the_sum_on_every_rank(allreduce, N):
    r = np.random.default_rng(N)
    vectors = [r.standard_normal(11) for _ in range(N)]  # 11: N need not divide the length
    kept = [v.copy() for v in vectors]
    sums, messages = allreduce(vectors)
    assert len(sums) == N
    for s in sums:
        np.testing.assert_allclose(s, np.sum(vectors, axis=0), rtol=1e-12, atol=1e-12)
    assert all(np.array_equal(v, k) for v, k in zip(vectors, kept))  # the inputs stay as they were
    assert len(messages) == 2 * N * (N - 1)


@pytest.mark.parametrize("N", [1, 2, 4, 8])
def test_recursive_halving_leaves_the_sum_of_chunk_r_on_rank_r(N):
    ranks = _ranks(N, seed=N)
    chunks, messages = halving_reduce_scatter(ranks)
    for r in range(N):
        np.testing.assert_allclose(chunks[r][r], np.sum([ranks[q][r] for q in range(N)], axis=0), rtol=1e-12)
    steps = N.bit_length() - 1
    assert {m.step for m in messages} == set(range(steps))
    assert len({(m.step, m.sender, m.receiver) for m in messages}) == N * steps  # one partner a step
    assert all(m.receiver == m.sender ^ (N >> (m.step + 1)) for m in messages)
    assert Counter(m.sender for m in messages) == Counter({r: N - 1 for r in range(N)} if N > 1 else {})
    assert len(messages) == N * (N - 1)


@pytest.mark.parametrize("N", [1, 2, 4, 8])
def test_recursive_doubling_gives_every_rank_every_finished_chunk(N):
    ranks = _ranks(N, seed=10 + N)
    for r in range(N):  # only rank r's chunk r is finished; the rest must not be read
        for i in range(N):
            if i != r:
                ranks[r][i] = np.full_like(ranks[r][i], np.nan)
    chunks, messages = doubling_all_gather(ranks)
    for r in range(N):
        for i in range(N):
            np.testing.assert_array_equal(chunks[r][i], ranks[i][i])
    steps = N.bit_length() - 1
    assert len({(m.step, m.sender, m.receiver) for m in messages}) == N * steps
    assert all(m.receiver == m.sender ^ (1 << m.step) for m in messages)
    assert Counter(m.sender for m in messages) == Counter({r: N - 1 for r in range(N)} if N > 1 else {})
    assert len(messages) == N * (N - 1)


def test_the_allreduce_numbers_the_all_gather_after_the_reduce_scatter():
    _, messages = halving_doubling_allreduce([np.arange(8.0) * r for r in range(8)])
    per_step = Counter(m.step for m in messages)
    assert per_step == Counter({0: 32, 1: 16, 2: 8, 3: 8, 4: 16, 5: 32})  # halving, then doubling


@pytest.mark.parametrize("call, arg", [
    (halving_reduce_scatter, [[np.zeros(2)] * 3] * 3),
    (doubling_all_gather, [[np.zeros(2)] * 6] * 6),
    (halving_doubling_allreduce, [np.zeros(5)] * 3),
])
def test_recursive_halving_and_doubling_need_a_power_of_two_ranks(call, arg):
    with pytest.raises(NumpyTransformerError, match=r"power-of-two number of ranks .* got \d+ ranks"):
        call(arg)
