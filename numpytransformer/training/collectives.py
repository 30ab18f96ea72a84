"""The ring's two halves, reduce-scatter and all-gather, simulated on ranks held as a Python list.

Lesson 13 §3 writes the ring allreduce with MPI messages: a reduce-scatter, then an all-gather.
Each half is a collective of its own, and the larger systems use them apart: ZeRO and fully
sharded data parallelism (FSDP) reduce-scatter the gradient, so that each rank updates only its
shard of the weights with its shard of the summed gradient, then all-gather the updated weights.
Here the N ranks are the entries of a list and a message is a copy from one entry to the next, so
that each step can be checked and its messages counted without ``mpiexec``:

- :func:`ring_reduce_scatter`: N - 1 steps; at step s rank r sends its chunk (r - s) mod N to its
  right neighbour and adds the chunk (r - s - 1) mod N that its left neighbour sends; afterwards
  rank r holds the complete sum of chunk (r + 1) mod N.
- :func:`ring_all_gather`: N - 1 steps; each rank passes the complete chunks on, replacing its
  own: at step s rank r sends chunk (r + 1 - s) mod N and receives chunk (r - s) mod N.
- :func:`ring_allreduce`: the two in a row, :math:`2(N - 1)` steps in which every rank sends one
  chunk, :math:`2(N - 1)/N` of its vector in all.

Siblings of lesson 13 §3's ring allreduce.
"""
from __future__ import annotations

from typing import List, NamedTuple, Sequence, Tuple

import numpy as np

from ..errors import NumpyTransformerError

__all__ = ["Message", "ring_reduce_scatter", "ring_all_gather", "ring_allreduce"]


class Message(NamedTuple):
    """One chunk sent from a rank to its right neighbour at one step of the ring."""

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
    ### BEGIN SOLUTION 13.1: N - 1 steps; at each every rank sends one chunk to its right neighbour, which adds it to its own
    for s in range(N - 1):
        sent = [chunks[r][(r - s) % N].copy() for r in range(N)]  # all ranks send at once, before any adds
        for r in range(N):
            left, i = (r - 1) % N, (r - s - 1) % N  # rank r receives the chunk its left neighbour sent
            chunks[r][i] = chunks[r][i] + sent[left]
            messages.append(Message(s, left, r, i))
    ### END SOLUTION
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
    ### BEGIN SOLUTION 13.2: N - 1 steps; at each every rank passes one finished chunk to its right neighbour, which keeps it
    for s in range(N - 1):
        sent = [chunks[r][(r + 1 - s) % N].copy() for r in range(N)]
        for r in range(N):
            left, i = (r - 1) % N, (r - s) % N
            chunks[r][i] = sent[left]
            messages.append(Message(s, left, r, i))
    ### END SOLUTION
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
    if not isinstance(vectors, (list, tuple)) or not vectors:
        raise NumpyTransformerError(f"vectors must be a list of ranks' 1-D arrays, got {type(vectors).__name__}")
    for r, x in enumerate(vectors):
        if not isinstance(x, np.ndarray) or x.ndim != 1 or x.shape != np.shape(vectors[0]):
            shape = getattr(x, "shape", type(x).__name__)
            raise NumpyTransformerError(f"vectors[{r}] must be a 1-D ndarray of the length of vectors[0], got {shape}")
    N = len(vectors)
    scattered, first = ring_reduce_scatter([np.array_split(x, N) for x in vectors])
    gathered, second = ring_all_gather(scattered)
    messages = first + [m._replace(step=m.step + N - 1) for m in second]
    return [np.concatenate(chunks) for chunks in gathered], messages
