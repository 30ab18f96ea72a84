"""Reduce-scatter and all-gather, the two halves of an allreduce, simulated on ranks held as a Python list.

Lesson 13 §3 writes the ring allreduce with MPI messages: a reduce-scatter, then an all-gather.
Each half is a collective of its own, and the larger systems use them apart: ZeRO and fully
sharded data parallelism (FSDP) reduce-scatter the gradient, so that each rank updates only its
shard of the weights with its shard of the summed gradient, then all-gather the updated weights.
Here the N ranks are the entries of a list and a message is a copy from one entry to another, so
that each step can be checked and its messages counted without ``mpiexec``.

The ring, as lesson 13 §3 writes it:

- :func:`ring_reduce_scatter`: N - 1 steps; at step s rank r sends its chunk (r - s) mod N to its
  right neighbour and adds the chunk (r - s - 1) mod N that its left neighbour sends; afterwards
  rank r holds the complete sum of chunk (r + 1) mod N.
- :func:`ring_all_gather`: N - 1 steps; each rank passes the complete chunks on, replacing its
  own: at step s rank r sends chunk (r + 1 - s) mod N and receives chunk (r - s) mod N.
- :func:`ring_allreduce`: the two in a row, :math:`2(N - 1)` steps in which every rank sends one
  chunk, :math:`2(N - 1)/N` of its vector in all.

Its sibling for a power-of-two number of ranks (Rabenseifner's allreduce; MPICH's reduce-scatter
and all-gather for such N), in which ranks exchange in pairs, rank r with rank r XOR d:

- :func:`halving_reduce_scatter`: recursive halving, :math:`\\log_2 N` steps at distances N/2,
  N/4, ..., 1, the chunks still being summed halved at each; afterwards rank r holds the complete
  sum of chunk r.
- :func:`doubling_all_gather`: recursive doubling, :math:`\\log_2 N` steps at distances 1, 2, ...,
  N/2, the finished chunks doubled at each.
- :func:`halving_doubling_allreduce`: the two in a row. Each rank sends N/2 + N/4 + ... + 1 =
  N - 1 chunks in each half, :math:`2(N - 1)/N` of its vector as in the ring, but in
  :math:`2 \\log_2 N` steps instead of :math:`2(N - 1)`: fewer latencies :math:`\\alpha`.
"""
from __future__ import annotations

from typing import List, NamedTuple, Sequence, Tuple

import numpy as np

from ..errors import NumpyTransformerError

__all__ = ["Message", "ring_reduce_scatter", "ring_all_gather", "ring_allreduce", "halving_reduce_scatter",
           "doubling_all_gather", "halving_doubling_allreduce"]


class Message(NamedTuple):
    """One chunk sent from one rank to another at one step of a collective."""

    step: int
    sender: int
    receiver: int
    chunk: int  # the chunk's index, 0..N-1


def _copied(chunks_per_rank, name: str) -> List[List[np.ndarray]]:
    """The ranks' chunks, checked (N ranks of N numeric arrays, chunk i of one shape on every rank)
    and copied, so that the caller's arrays stay as they were."""
    if not isinstance(chunks_per_rank, (list, tuple)) or not chunks_per_rank:
        raise NumpyTransformerError(f"{name} must be a list of ranks, each a list of its chunks, got "
                                    f"{type(chunks_per_rank).__name__}")
    N = len(chunks_per_rank)
    for r, chunks in enumerate(chunks_per_rank):
        if not isinstance(chunks, (list, tuple)) or len(chunks) != N:
            got = len(chunks) if isinstance(chunks, (list, tuple)) else type(chunks).__name__
            raise NumpyTransformerError(f"{name}[{r}] must be a list of {N} chunks (one per rank), got {got}")
        for i, c in enumerate(chunks):
            if not isinstance(c, np.ndarray) or c.dtype.kind not in "iuf":
                raise NumpyTransformerError(f"{name}[{r}][{i}] must be an ndarray of numbers, got "
                                            f"{getattr(c, 'dtype', type(c).__name__)}")
            if c.shape != chunks_per_rank[0][i].shape:
                raise NumpyTransformerError(f"{name}[{r}][{i}] has shape {c.shape}, but rank 0's chunk {i} has "
                                            f"{chunks_per_rank[0][i].shape}: chunk i must have one shape on every rank")
    return [[c.copy() for c in chunks] for chunks in chunks_per_rank]


def _check_vectors(vectors) -> None:
    """The ranks' vectors of an allreduce: N 1-D arrays of one length."""
    if not isinstance(vectors, (list, tuple)) or not vectors:
        raise NumpyTransformerError(f"vectors must be a list of ranks' 1-D arrays, got {type(vectors).__name__}")
    for r, x in enumerate(vectors):
        if not isinstance(x, np.ndarray) or x.ndim != 1 or x.shape != np.shape(vectors[0]):
            shape = getattr(x, "shape", type(x).__name__)
            raise NumpyTransformerError(f"vectors[{r}] must be a 1-D ndarray of the length of vectors[0], got {shape}")


def _check_power_of_two(N: int, name: str) -> None:
    if N & (N - 1):
        raise NumpyTransformerError(f"{name} must hold a power-of-two number of ranks (1, 2, 4, 8, ...) for "
                                    f"recursive halving and doubling, got {N} ranks")


def ring_reduce_scatter(chunks_per_rank: Sequence[Sequence[np.ndarray]]) -> Tuple[List[List[np.ndarray]], List[Message]]:
    """Sum chunk i over the ranks, leaving the complete sum of chunk (r + 1) mod N on rank r.

    .. math:: \\text{after the last step, rank } r \\text{ holds } \\sum_{q=0}^{N-1} x_q^{(r+1) \\bmod N}

    where :math:`x_q^{i}` is chunk i of rank q. At step s (from 0 to N - 2) every rank at once sends
    chunk :math:`(r - s) \\bmod N` to rank r + 1 and adds what rank r - 1 sends into its chunk
    :math:`(r - s - 1) \\bmod N`; a chunk travels round the ring gathering one term a hop.

    Parameters
    ----------
    chunks_per_rank : list of N lists of N arrays
        ``chunks_per_rank[r][i]`` is chunk i of rank r's vector (chunk i has one shape on every rank).

    Returns
    -------
    (chunks, messages)
        The ranks' chunks afterwards (new arrays; the other chunks hold partial sums), and the
        N(N - 1) messages sent, N at each of the N - 1 steps: one :class:`Message` ``(step, sender,
        receiver, chunk)`` per chunk sent, ``chunk`` its index 0..N-1. Their order in the list is free.
    """
    chunks = _copied(chunks_per_rank, "chunks_per_rank")
    N, messages = len(chunks), []
    for s in range(N - 1):
        sent = [chunks[r][(r - s) % N].copy() for r in range(N)]  # all ranks send at once, before any adds
        for r in range(N):
            left, i = (r - 1) % N, (r - s - 1) % N  # rank r receives the chunk its left neighbour sent
            chunks[r][i] = chunks[r][i] + sent[left]
            messages.append(Message(s, left, r, i))
    return chunks, messages


def ring_all_gather(chunks_per_rank: Sequence[Sequence[np.ndarray]]) -> Tuple[List[List[np.ndarray]], List[Message]]:
    """Give every rank every rank's finished chunk: rank r's chunk (r + 1) mod N, as
    :func:`ring_reduce_scatter` leaves it, reaches all the others.

    At step s (from 0 to N - 2) rank r sends chunk :math:`(r + 1 - s) \\bmod N` to rank r + 1 and
    replaces (does not add to) its chunk :math:`(r - s) \\bmod N` with what rank r - 1 sends.

    Parameters
    ----------
    chunks_per_rank : list of N lists of N arrays
        As :func:`ring_reduce_scatter` takes them; on rank r only chunk (r + 1) mod N is read.

    Returns
    -------
    (chunks, messages)
        Every rank's chunks afterwards, chunk i on every rank equal to rank (i - 1) mod N's, and the
        N(N - 1) messages sent, as :func:`ring_reduce_scatter` lists them (order free).
    """
    chunks = _copied(chunks_per_rank, "chunks_per_rank")
    N, messages = len(chunks), []
    for s in range(N - 1):
        sent = [chunks[r][(r + 1 - s) % N].copy() for r in range(N)]
        for r in range(N):
            left, i = (r - 1) % N, (r - s) % N
            chunks[r][i] = sent[left]
            messages.append(Message(s, left, r, i))
    return chunks, messages


def ring_allreduce(vectors: Sequence[np.ndarray]) -> Tuple[List[np.ndarray], List[Message]]:
    """The sum of the ranks' vectors on every rank: each cut into N chunks (``np.array_split``,
    so N need not divide the length), reduce-scattered, then all-gathered; lesson 13 §3's ring.

    Parameters
    ----------
    vectors : list of N 1-D arrays of one length, one per rank

    Returns
    -------
    (sums, messages)
        Each rank's copy of :math:`\\sum_r x_r`, and the 2N(N - 1) messages of the 2(N - 1) steps
        (the all-gather's steps numbered after the reduce-scatter's).
    """
    _check_vectors(vectors)
    N = len(vectors)
    scattered, first = ring_reduce_scatter([np.array_split(x, N) for x in vectors])
    gathered, second = ring_all_gather(scattered)
    messages = first + [m._replace(step=m.step + N - 1) for m in second]
    return [np.concatenate(chunks) for chunks in gathered], messages


def halving_reduce_scatter(chunks_per_rank: Sequence[Sequence[np.ndarray]]) -> Tuple[List[List[np.ndarray]], List[Message]]:
    """Sum chunk i over the ranks by recursive halving, leaving the complete sum of chunk r on rank r.

    .. math:: \\text{after the last step, rank } r \\text{ holds } \\sum_{q=0}^{N-1} x_q^{r}

    where :math:`x_q^{i}` is chunk i of rank q, and N is a power of two. There are :math:`\\log_2 N`
    steps, s = 0, 1, ...; at step s ranks exchange in pairs, rank r with rank
    :math:`r \\oplus (N \\gg (s + 1))` (XOR: distances N/2, N/4, ..., 1). At each step every rank
    sends its partner half of the chunks it is still summing, those the partner will finish, each
    as it holds it then, and adds what the partner sends into the other half; every send of a step
    happens before any add. A chunk a rank has sent is left as it was. Each rank sends
    N/2 + N/4 + ... + 1 = N - 1 chunks, as in :func:`ring_reduce_scatter`, in
    :math:`\\log_2 N` steps instead of N - 1.

    .. solution-only::

        Before step s (d = N >> (s + 1)) rank r is summing the aligned block of 2d chunks that holds
        r, ``(r // (2 d)) * 2 d`` onwards; its partner r ^ d holds the same block. The block's half
        that holds the partner starts at ``(partner // d) * d``: rank r sends those d chunks and adds
        the partner's copies of its own half, from ``(r // d) * d``. After the step with d = 1 the
        block is chunk r alone, summed over all N ranks.

    Parameters
    ----------
    chunks_per_rank : list of N lists of N arrays, N a power of two
        ``chunks_per_rank[r][i]`` is chunk i of rank r's vector (chunk i has one shape on every rank).

    Returns
    -------
    (chunks, messages)
        The ranks' chunks afterwards (new arrays; rank r's chunk r complete, its other chunks the
        partial sums they held when it sent them), and the N(N - 1) messages sent: one
        :class:`Message` ``(step, sender, receiver, chunk)`` per chunk sent, ``chunk`` its index
        0..N-1, N N/2 of them at step 0, N N/4 at step 1, ... Their order in the list is free.

    Raises
    ------
    NumpyTransformerError
        If N is not a power of two (N = 1 is: no step at all).
    """
    chunks = _copied(chunks_per_rank, "chunks_per_rank")
    N, messages = len(chunks), []
    _check_power_of_two(N, "chunks_per_rank")
    ### BEGIN SOLUTION 13.1: log2 N steps; at each every rank sends its partner the half of its block that holds the partner, and adds the half it receives into its own
    for s in range(N.bit_length() - 1):
        d = N >> (s + 1)
        sent = {}  # sender -> {chunk index: copy}; all ranks send at once, before any adds
        for r in range(N):
            partner = r ^ d
            theirs = range((partner // d) * d, (partner // d + 1) * d)
            sent[r] = {i: chunks[r][i].copy() for i in theirs}
            messages.extend(Message(s, r, partner, i) for i in theirs)
        for r in range(N):
            for i, received in sent[r ^ d].items():  # the partner's copies of rank r's half
                chunks[r][i] = chunks[r][i] + received
    ### END SOLUTION
    return chunks, messages


def doubling_all_gather(chunks_per_rank: Sequence[Sequence[np.ndarray]]) -> Tuple[List[List[np.ndarray]], List[Message]]:
    """Give every rank every rank's finished chunk by recursive doubling: rank r's chunk r, as
    :func:`halving_reduce_scatter` leaves it, reaches all the others.

    N is a power of two. There are :math:`\\log_2 N` steps, s = 0, 1, ...; at step s ranks exchange
    in pairs, rank r with rank :math:`r \\oplus (1 \\ll s)` (XOR: distances 1, 2, ..., N/2). At each
    step every rank sends its partner every finished chunk it holds, and replaces (does not add to)
    its own copies of those chunks with what the partner sends. Each rank sends 1 + 2 + ... + N/2 =
    N - 1 chunks, as in :func:`ring_all_gather`, in :math:`\\log_2 N` steps instead of N - 1.

    .. solution-only::

        Before step s (d = 1 << s) rank r holds the finished chunks of the aligned block of d chunks
        that holds r, ``(r // d) * d`` onwards; its partner r ^ d those of the other half of their
        common block of 2d. Each sends its d chunks and keeps the partner's, so that afterwards
        both hold the whole block of 2d.

    Parameters
    ----------
    chunks_per_rank : list of N lists of N arrays, N a power of two
        As :func:`halving_reduce_scatter` takes them; on rank r only chunk r is read.

    Returns
    -------
    (chunks, messages)
        Every rank's chunks afterwards (new arrays), chunk i on every rank equal to rank i's chunk i,
        and the N(N - 1) messages sent: one :class:`Message` ``(step, sender, receiver, chunk)`` per
        chunk sent, N at step 0, 2N at step 1, ..., N N/2 at the last. Their order in the list is free.

    Raises
    ------
    NumpyTransformerError
        If N is not a power of two (N = 1 is: no step at all).
    """
    chunks = _copied(chunks_per_rank, "chunks_per_rank")
    N, messages = len(chunks), []
    _check_power_of_two(N, "chunks_per_rank")
    ### BEGIN SOLUTION 13.2: log2 N steps; at each every rank sends its partner every finished chunk it holds, and keeps the partner's in their place
    for s in range(N.bit_length() - 1):
        d = 1 << s
        sent = {}  # sender -> {chunk index: copy}
        for r in range(N):
            partner, mine = r ^ d, range((r // d) * d, (r // d + 1) * d)
            sent[r] = {i: chunks[r][i].copy() for i in mine}
            messages.extend(Message(s, r, partner, i) for i in mine)
        for r in range(N):
            for i, received in sent[r ^ d].items():
                chunks[r][i] = received
    ### END SOLUTION
    return chunks, messages


def halving_doubling_allreduce(vectors: Sequence[np.ndarray]) -> Tuple[List[np.ndarray], List[Message]]:
    """The sum of the ranks' vectors on every rank: each cut into N chunks (``np.array_split``,
    so N need not divide the length), reduce-scattered by recursive halving, then all-gathered by
    recursive doubling; N must be a power of two.

    Parameters
    ----------
    vectors : list of N 1-D arrays of one length, one per rank, N a power of two

    Returns
    -------
    (sums, messages)
        Each rank's copy of :math:`\\sum_r x_r`, and the 2N(N - 1) messages of the
        :math:`2 \\log_2 N` steps (the all-gather's steps numbered after the reduce-scatter's).
    """
    _check_vectors(vectors)
    N = len(vectors)
    _check_power_of_two(N, "vectors")
    scattered, first = halving_reduce_scatter([np.array_split(x, N) for x in vectors])
    gathered, second = doubling_all_gather(scattered)
    steps = N.bit_length() - 1
    messages = first + [m._replace(step=m.step + steps) for m in second]
    return [np.concatenate(chunks) for chunks in gathered], messages
