"""Padding, length-bucketed batching, and the windows of a language model's token stream.

A batch costs roughly ``batch_size * longest_sequence`` tokens of compute, padding
included. Grouping sequences of similar length keeps the padding small, and a
token budget (rather than a fixed batch size) keeps the cost of every batch
about the same, as in "Attention Is All You Need" (batches of ~25,000 tokens).
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple, Union

import numpy as np


def pad_batch(seqs: Sequence, pad_id: int = 0, max_len: Optional[int] = None) -> np.ndarray:
    """Stack 1-D integer sequences into one right-padded array.

    Parameters
    ----------
    seqs : sequence of 1-D array-like of int
        The B sequences; lengths may differ.
    pad_id : int, default 0
        The id written after the end of each sequence.
    max_len : int, optional
        Width L of the result. Defaults to the longest sequence; a sequence
        longer than ``max_len`` is an error (it is never truncated silently).

    Returns
    -------
    np.ndarray of int64, shape (B, L)
        ``out[b, :len(seqs[b])] = seqs[b]`` and ``pad_id`` elsewhere.
    """
    arrays = [np.asarray(s) for s in seqs]
    if len(arrays) == 0:
        raise ValueError("pad_batch: seqs is empty; expected at least one sequence")
    for i, a in enumerate(arrays):
        if a.ndim != 1:
            raise ValueError(f"pad_batch: seqs[{i}] has shape {a.shape}; expected a 1-D sequence")
        if a.size and not np.issubdtype(a.dtype, np.integer):
            raise TypeError(f"pad_batch: seqs[{i}] has dtype {a.dtype}; expected integer ids")
    lengths = np.array([a.size for a in arrays], dtype=np.int64)
    longest = int(lengths.max())
    if max_len is None:
        max_len = longest
    elif max_len < longest:
        i = int(lengths.argmax())
        raise ValueError(
            f"pad_batch: seqs[{i}] has length {longest} > max_len={max_len}; "
            "expected every sequence to fit in max_len"
        )
    out = np.full((len(arrays), max_len), pad_id, dtype=np.int64)
    # One vectorised scatter instead of a Python loop of slice assignments.
    mask = np.arange(max_len) < lengths[:, None]  # (B, L)
    if longest:
        out[mask] = np.concatenate(arrays).astype(np.int64, copy=False)
    return out


def teacher_forcing(targets: Sequence, bos_id: int = 1, eos_id: int = 2,
                    pad_id: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    """``(tgt_in, tgt_out)``, shape (B, T+1) each: ``[BOS] + target``, what a decoder reads, and
    ``target + [EOS]``, what it must predict (``tgt_in`` shifted left by one), both padded."""
    tgt_in = pad_batch([np.concatenate([[bos_id], t]) for t in targets], pad_id)
    tgt_out = pad_batch([np.concatenate([t, [eos_id]]) for t in targets], pad_id)
    return tgt_in, tgt_out


def _as_lengths(lengths: Union[Sequence[int], np.ndarray, Tuple[np.ndarray, ...]]) -> np.ndarray:
    """The per-example length that the token budget counts (max over src and tgt)."""
    if isinstance(lengths, tuple):
        if len(lengths) == 0:
            raise ValueError("bucket_batches: lengths is an empty tuple; expected 1-D arrays")
        arrays = [np.asarray(a) for a in lengths]
        shapes = {a.shape for a in arrays}
        if len(shapes) != 1:
            raise ValueError(
                f"bucket_batches: the arrays in lengths have shapes {sorted(shapes)}; "
                "expected one length per example in each (same shape)"
            )
        out = np.max(np.stack(arrays), axis=0)
    else:
        out = np.asarray(lengths)
    if out.ndim != 1:
        raise ValueError(f"bucket_batches: lengths has shape {out.shape}; expected a 1-D array")
    if out.size and not np.issubdtype(out.dtype, np.integer):
        raise TypeError(f"bucket_batches: lengths has dtype {out.dtype}; expected integers")
    if out.size and out.min() < 0:
        raise ValueError("bucket_batches: lengths contains a negative value; expected lengths >= 0")
    return out.astype(np.int64)


def bucket_batches(
    lengths: Union[Sequence[int], np.ndarray, Tuple[np.ndarray, ...]],
    max_tokens: int,
    shuffle: bool = True,
    seed: Optional[int] = None,
    max_batch_size: Optional[int] = None,
) -> List[np.ndarray]:
    """Group example indices into batches of similar length under a token budget.

    Examples are sorted by length (ties broken at random when ``shuffle``, so an
    epoch does not always pair the same examples), then packed greedily so that

    .. math:: \\text{batch size} \\times \\max_{i \\in \\text{batch}} \\ell_i \\le \\text{max\\_tokens}.

    An example longer than ``max_tokens`` still gets a batch of its own.

    Parameters
    ----------
    lengths : 1-D array-like of int, or tuple of them
        Length of each of the N examples. A tuple ``(src_lengths, tgt_lengths)``
        counts the longer of the two for each example.
    max_tokens : int
        Token budget of one batch, padding included.
    shuffle : bool, default True
        Break length ties at random and shuffle the order of the batches.
        With ``False`` the result is sorted by length, shortest batch first.
    seed : int, optional
        Seed of ``np.random.default_rng``; the same seed gives the same batches.
    max_batch_size : int, optional
        Upper limit on the number of examples in a batch.

    Returns
    -------
    list of np.ndarray of int64
        Each array holds the indices of one batch; every index in ``range(N)``
        appears in exactly one batch.
    """
    ell = _as_lengths(lengths)
    if not isinstance(max_tokens, (int, np.integer)) or max_tokens < 1:
        raise ValueError(f"bucket_batches: max_tokens={max_tokens!r}; expected a positive integer")
    if max_batch_size is not None and (
        not isinstance(max_batch_size, (int, np.integer)) or max_batch_size < 1
    ):
        raise ValueError(
            f"bucket_batches: max_batch_size={max_batch_size!r}; expected a positive integer or None"
        )
    n = ell.size
    if n == 0:
        return []

    rng = np.random.default_rng(seed)
    if shuffle:
        # A random permutation followed by a stable sort shuffles within each length.
        perm = rng.permutation(n)
        order = perm[np.argsort(ell[perm], kind="stable")]
    else:
        order = np.argsort(ell, kind="stable")

    # An empty sequence still occupies a slot, so it costs at least one token.
    cost = np.maximum(ell[order], 1)
    limit = max_batch_size if max_batch_size is not None else n
    batches = []
    start = 0
    for i in range(1, n + 1):
        # Sorted ascending, so the newest example is the longest in the batch.
        if i == n or (i + 1 - start) * cost[i] > max_tokens or i - start >= limit:
            batches.append(order[start:i].astype(np.int64))
            start = i
    if shuffle:
        batches = [batches[j] for j in rng.permutation(len(batches))]
    return batches


def random_windows(ids: np.ndarray, width: int, batch_size: int, n_batches: int,
                   rng: np.random.Generator) -> List[np.ndarray]:
    """``n_batches`` arrays of shape (batch_size, width): windows of ``ids`` starting at random places
    (a language model's training batches, as nanoGPT's ``get_batch`` draws them)."""
    starts = rng.integers(0, len(ids) - width + 1, size=(n_batches, batch_size))
    return [ids[s[:, None] + np.arange(width)] for s in starts]


def next_token_windows(ids: np.ndarray, T: int) -> Tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` of shape (N, T) each: ``ids`` cut into N non-overlapping windows, and at each
    position the id that follows it (a language model's validation batches)."""
    n = (len(ids) - 1) // T
    return ids[:n * T].reshape(n, T), ids[1:n * T + 1].reshape(n, T)


def length_batches(seqs: Sequence, max_tokens: int, shuffle: bool = False, seed: Optional[int] = None,
                   max_batch_size: Optional[int] = None) -> List[np.ndarray]:
    """:func:`bucket_batches` of sequences, an empty one counting as one token (see :func:`pad_or_unk`)."""
    lengths = np.array([max(len(x), 1) for x in seqs], dtype=np.int64)
    return bucket_batches(lengths, max_tokens, shuffle=shuffle, seed=seed, max_batch_size=max_batch_size)


def pad_or_unk(seqs: Sequence, pad_id: int = 0, unk_id: int = 3) -> np.ndarray:
    """:func:`pad_batch`, with an empty sequence written as one ``<unk>``: a model reads at least one token."""
    return pad_batch([x if len(x) else np.array([unk_id]) for x in seqs], pad_id)
