"""Sequence reversal: the smallest task on which attention must learn to look elsewhere.

Input ``3 1 4 1 5``, output ``5 1 4 1 3``. Output position i needs input position
``len-1-i``, so a model that solves it has learned a clean anti-diagonal
attention pattern, easy to see in a heatmap.

Token ids
---------
The user speaks of symbols ``1..n_symbols``; the model sees ids, with the
project-wide special tokens first::

    0 = PAD, 1 = BOS, 2 = EOS, 3 = UNK, symbol s -> id s + 3

so the vocabulary has ``n_symbols + 4`` entries.

Two formulations
----------------
* :func:`seq2seq_batch`: encoder-decoder; the decoder reads ``[BOS] + reversed``
  and predicts ``reversed + [EOS]``.
* :func:`tagger_batch`: encoder only; position i predicts the token at
  ``len-1-i`` and padding positions predict PAD (ignored by the loss).
"""

from __future__ import annotations

import itertools

from dataclasses import dataclass
from typing import List, Sequence, Tuple

import numpy as np

from ..errors import NumpyTransformerError
from .batching import pad_batch, teacher_forcing

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
#: Number of special ids before the first content id.
N_SPECIAL = 4


@dataclass(frozen=True)
class SymbolSequences:
    """The sequences a reversal (or sorting) model reads: symbols ``1..n_symbols``, lengths
    ``min_len..max_len``, and the symbol <-> id mapping.

    Parameters
    ----------
    n_symbols : int, default 20
        Symbols are the integers ``1..n_symbols``.
    min_len, max_len : int, default 1, 20
        Inclusive range of sequence lengths.
    """

    n_symbols: int = 20
    min_len: int = 1
    max_len: int = 20

    def __post_init__(self):
        if not isinstance(self.n_symbols, (int, np.integer)) or self.n_symbols < 1:
            raise ValueError(f"SymbolSequences: n_symbols={self.n_symbols!r}; expected an integer >= 1")
        if not isinstance(self.min_len, (int, np.integer)) or self.min_len < 1:
            raise ValueError(f"SymbolSequences: min_len={self.min_len!r}; expected an integer >= 1")
        if not isinstance(self.max_len, (int, np.integer)) or self.max_len < self.min_len:
            raise ValueError(
                f"SymbolSequences: max_len={self.max_len!r}; expected an integer >= min_len={self.min_len}"
            )

    @property
    def vocab_size(self) -> int:
        """Number of ids: the 4 special tokens plus one per symbol."""
        return self.n_symbols + N_SPECIAL

    def encode_symbols(self, symbols: Sequence[int]) -> np.ndarray:
        """Map symbols ``1..n_symbols`` to content ids (no BOS/EOS added).

        Parameters
        ----------
        symbols : sequence of int, length <= max_len

        Returns
        -------
        np.ndarray of int64, shape (len(symbols),)
            ``symbols + 3``.
        """
        s = np.asarray(symbols)
        if s.ndim != 1:
            raise ValueError(f"encode_symbols: symbols has shape {s.shape}; expected a 1-D sequence")
        if s.size and not np.issubdtype(s.dtype, np.integer):
            raise TypeError(f"encode_symbols: symbols has dtype {s.dtype}; expected integers")
        if s.size > self.max_len:
            raise ValueError(
                f"encode_symbols: sequence of length {s.size} is longer than max_len={self.max_len}"
            )
        bad = (s < 1) | (s > self.n_symbols)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(
                f"encode_symbols: unknown symbol {int(s[i])} at position {i}; "
                f"expected symbols in 1..{self.n_symbols}"
            )
        return s.astype(np.int64) + (N_SPECIAL - 1)

    def decode_ids(self, ids: Sequence[int]) -> List[int]:
        """Map ids back to symbols.

        PAD and BOS are skipped and decoding stops at the first EOS, so a model's
        output row can be decoded as it is.

        Parameters
        ----------
        ids : sequence of int

        Returns
        -------
        list of int
            The symbols, each in ``1..n_symbols``.
        """
        a = np.asarray(ids)
        if a.ndim != 1:
            raise ValueError(f"decode_ids: ids has shape {a.shape}; expected a 1-D sequence")
        if a.size and not np.issubdtype(a.dtype, np.integer):
            raise TypeError(f"decode_ids: ids has dtype {a.dtype}; expected integers")
        eos = np.flatnonzero(a == EOS_ID)
        if eos.size:
            a = a[: eos[0]]
        a = a[(a != PAD_ID) & (a != BOS_ID)]
        bad = (a < N_SPECIAL) | (a >= self.vocab_size)
        if bad.any():
            raise ValueError(
                f"decode_ids: id {int(a[np.argmax(bad)])} is not a symbol id; "
                f"expected ids in {N_SPECIAL}..{self.vocab_size - 1} (or PAD/BOS/EOS)"
            )
        if a.size > self.max_len:
            raise ValueError(
                f"decode_ids: sequence of length {a.size} is longer than max_len={self.max_len}"
            )
        return (a - (N_SPECIAL - 1)).astype(np.int64).tolist()


def _check_count(name: str, value) -> int:
    if not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"make_splits: {name}={value!r}; expected a non-negative integer")
    return int(value)


def _unique_rows(rows: np.ndarray) -> np.ndarray:
    """Indices of the first occurrence of each distinct row, in order of appearance."""
    rows = np.ascontiguousarray(rows)
    # A void view turns each row into one hashable/sortable scalar.
    keys = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
    _, first = np.unique(keys, return_index=True)
    return np.sort(first)


def _sample_distinct(rng: np.random.Generator, n_symbols: int, length: int, count: int) -> np.ndarray:
    """``count`` distinct symbol sequences of one length, shape (count, length), values 1..n_symbols."""
    capacity = n_symbols**length  # a Python int: may exceed int64
    if capacity <= 4 * count:
        # Dense regime: rejection sampling would be a coupon collector, so draw the
        # sequences' indices without replacement and write them in base n_symbols.
        index = rng.choice(capacity, size=count, replace=False).astype(np.int64)
        powers = n_symbols ** np.arange(length, dtype=np.int64)  # (length,)
        return (index[:, None] // powers) % n_symbols + 1
    rows = np.empty((0, length), dtype=np.int64)
    while rows.shape[0] < count:
        # At most a quarter of the space is wanted, so ~1.5x oversampling suffices.
        need = count - rows.shape[0]
        fresh = rng.integers(1, n_symbols + 1, size=(need + need // 2 + 16, length), dtype=np.int64)
        rows = np.concatenate([rows, fresh])
        rows = rows[_unique_rows(rows)]
    return rows[:count]


def make_splits(
    spec: SymbolSequences, n_train: int, n_val: int, n_test: int, seed: int
) -> Tuple[List[np.ndarray], List[np.ndarray], List[np.ndarray]]:
    """Draw distinct random sequences and deal them into three disjoint splits.

    Lengths are uniform in ``[min_len, max_len]``; where a length has fewer distinct
    sequences than its share (length 1 has only ``n_symbols``), it takes them all
    and its surplus is spread uniformly over the other lengths.

    Parameters
    ----------
    spec : SymbolSequences
    n_train, n_val, n_test : int
        Number of sequences in each split.
    seed : int
        Seed of ``np.random.default_rng``; the same seed gives the same splits.

    Returns
    -------
    train, val, test : list of np.ndarray of int64, each 1-D
        Content ids (symbol + 3), no BOS/EOS. No sequence appears twice, within a
        split or across splits.
    """
    if not isinstance(spec, SymbolSequences):
        raise TypeError(f"make_splits: spec is a {type(spec).__name__}; expected a SymbolSequences")
    counts = [_check_count(k, v) for k, v in (("n_train", n_train), ("n_val", n_val), ("n_test", n_test))]
    total = sum(counts)
    lengths = np.arange(spec.min_len, spec.max_len + 1)
    capacity = [spec.n_symbols ** int(L) for L in lengths]
    if total > sum(capacity):
        raise ValueError(
            f"make_splits: requested n_train + n_val + n_test = {total} distinct sequences, "
            f"but only {sum(capacity)} exist with n_symbols={spec.n_symbols} and lengths "
            f"{spec.min_len}..{spec.max_len}; ask for fewer, or allow more symbols or lengths"
        )
    rng = np.random.default_rng(seed)

    # Clipping at `total` keeps the capacities inside int64.
    cap = np.array([min(c, total) for c in capacity], dtype=np.int64)
    per_length = rng.multinomial(total, np.full(lengths.size, 1.0 / lengths.size))
    while True:
        overflow = int(np.maximum(per_length - cap, 0).sum())
        if overflow == 0:
            break
        per_length = np.minimum(per_length, cap)
        open_ = per_length < cap
        per_length[open_] += rng.multinomial(overflow, np.full(open_.sum(), 1.0 / open_.sum()))

    seqs: List[np.ndarray] = []
    for L, c in zip(lengths, per_length):
        if c:
            rows = _sample_distinct(rng, spec.n_symbols, int(L), int(c)) + (N_SPECIAL - 1)
            seqs.extend(rows)
    order = rng.permutation(total)
    seqs = [seqs[i] for i in order]
    n_tr, n_va, _ = counts
    return seqs[:n_tr], seqs[n_tr : n_tr + n_va], seqs[n_tr + n_va :]


def seq2seq_batch(
    seqs: Sequence, pad_id: int = PAD_ID, bos_id: int = BOS_ID, eos_id: int = EOS_ID
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Build an encoder-decoder batch whose target is the reversed source.

    Parameters
    ----------
    seqs : sequence of 1-D array-like of int
        B content-id sequences.
    pad_id, bos_id, eos_id : int

    Returns
    -------
    src : np.ndarray of int64, shape (B, S)
        The sequences, right-padded to the longest, ``S = max len``.
    tgt_in : np.ndarray of int64, shape (B, T)
        ``[BOS] + reversed``, ``T = S + 1``: what the decoder reads (teacher forcing).
    tgt_out : np.ndarray of int64, shape (B, T)
        ``reversed + [EOS]``: what it must predict, i.e. ``tgt_in`` shifted left by one.
    """
    src = pad_batch(seqs, pad_id=pad_id)  # (B, S)
    return (src, *teacher_forcing([np.asarray(s)[::-1] for s in seqs], bos_id, eos_id, pad_id))


def tagger_batch(seqs: Sequence, max_len: int, pad_id: int = PAD_ID) -> Tuple[np.ndarray, np.ndarray]:
    """Build an encoder-only batch: each position predicts its mirror position.

    .. math:: y_{b,i} = x_{b,\\,\\ell_b - 1 - i} \\text{ for } i < \\ell_b, \\qquad y_{b,i} = \\text{PAD otherwise}

    Parameters
    ----------
    seqs : sequence of 1-D array-like of int
        B content-id sequences, each of length ``<= max_len``.
    max_len : int
        Width of the batch (fixed, so the model sees one input length).
    pad_id : int, default 0
        Written at padding positions of both ``x`` and ``y``; the loss ignores it.

    Returns
    -------
    x, y : np.ndarray of int64, shape (B, max_len)
    """
    x = pad_batch(seqs, pad_id=pad_id, max_len=max_len)  # (B, max_len)
    lengths = np.array([np.asarray(s).size for s in seqs], dtype=np.int64)  # (B,)
    pos = np.arange(max_len)  # (max_len,)
    mirror = np.clip(lengths[:, None] - 1 - pos, 0, None)  # (B, max_len)
    y = np.take_along_axis(x, mirror, axis=1)
    y[pos >= lengths[:, None]] = pad_id
    return x, y


def short_lengths(spec: SymbolSequences, n_train: int) -> List[int]:
    """The lengths with no more distinct sequences than their share of ``n_train``.

    Only 20 sequences of length 1 and 400 of length 2 exist with 20 symbols: dealt into
    disjoint splits they would nearly vanish from training, although a user types them as
    often as any other length. :func:`training_splits` trains on all of them instead.
    """
    share = n_train // (spec.max_len - spec.min_len + 1)
    return [L for L in range(spec.min_len, spec.max_len + 1) if spec.n_symbols ** L <= share]


def training_splits(spec: SymbolSequences, n_train: int, n_val: int, n_test: int, seed: int):
    """:func:`make_splits`, except that every sequence of a :func:`short_lengths` length is in
    training, repeated up to the length's share (those lengths cannot be held out)."""
    train, val, test = make_splits(spec, n_train, n_val, n_test, seed)
    short = short_lengths(spec, n_train)
    share = n_train // (spec.max_len - spec.min_len + 1)
    train = [x for x in train if len(x) not in short]
    for L in short:
        every = [np.array(s, dtype=np.int64) + (N_SPECIAL - 1)
                 for s in itertools.product(range(1, spec.n_symbols + 1), repeat=L)]
        train += [every[i % len(every)] for i in range(share)]
    return train, val, test


def fresh_sequences(spec: SymbolSequences, n: int, seed: int, seen: Sequence[np.ndarray],
                    short: Sequence[int]) -> List[np.ndarray]:
    """``n`` sequences of uniformly drawn lengths that are not in ``seen`` (the lengths in
    ``short``, trained on completely, are drawn from all sequences)."""
    seen = {x.tobytes() for x in seen}
    rng, out = np.random.default_rng(seed), []
    for L in rng.integers(spec.min_len, spec.max_len + 1, size=n):
        for _ in range(1000):
            x = rng.integers(1, spec.n_symbols + 1, size=int(L)) + (N_SPECIAL - 1)
            if int(L) in short or x.tobytes() not in seen:
                out.append(x)
                break
        else:
            raise NumpyTransformerError(f"no unseen sequence of length {L} is left: the training set holds them all")
    return out
