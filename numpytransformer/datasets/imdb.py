"""Loader of the IMDB Large Movie Review Dataset v1.0 (Maas et al., ACL 2011).

Binary sentiment classification: 25,000 training and 25,000 test reviews, half
positive, half negative. Two layouts of the data are read, under the data folder
(``--data-dir``, else ``$NUMPYTRANSFORMER_DATA``):

- ``<data_dir>/imdb/imdb.csv.gz``: one gzip CSV with the columns ``review, sentiment,
  split, id, rating, orig_path``;
- the extracted Stanford archive ``aclImdb_v1.tar.gz``, as ``<data_dir>/imdb/aclImdb/``
  or ``<data_dir>/aclImdb/``: one text file per review,
  ``aclImdb/{train,test}/{pos,neg}/<id>_<rating>.txt`` (the archive's ``unsup/``
  reviews, which have no label, are not read).

The CSV wins when both are there. Both give the reviews in the same order (the
positive ones by id, then the negative ones by id), so a seed gives the same
validation split with either.

Known property of the data set: 123 test reviews have the same text as a training
review (the archive holds a few duplicated reviews, 49,582 distinct texts of 50,000).
The test split is the official one and is left as it is.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import html
import math
import os
import re
from pathlib import Path
from typing import List, Sequence, Tuple, Union

import numpy as np

from ..errors import NumpyTransformerError
from .paths import missing_file_error, reading, resolve_data_dir

#: Where to download the original data set.
SOURCE = ("Stanford's Large Movie Review Dataset page, https://ai.stanford.edu/~amaas/data/sentiment/ "
          "(aclImdb_v1.tar.gz: extract it into the data folder or its imdb/ subfolder)")

_LABELS = {"negative": 0, "positive": 1}
_COLUMNS = ("review", "sentiment", "split")
_BR = re.compile(r"<br\s*/?>", re.IGNORECASE)
_SPACES = re.compile(r"\s+")
_REVIEW_FILE = re.compile(r"^(\d+)_(\d+)\.txt$")


def clean_review(text: str) -> str:
    """Make a raw review plain text.

    Replaces the ``<br />`` line breaks (also ``<br/>`` and ``<br>``) with a space,
    unescapes HTML entities (``&amp;`` -> ``&``, ``&#8230;`` -> ``…``) and collapses
    runs of whitespace into one space.

    Parameters
    ----------
    text : str

    Returns
    -------
    str
    """
    if not isinstance(text, str):
        raise TypeError(f"clean_review: text is a {type(text).__name__}; expected str")
    text = _BR.sub(" ", text)
    text = html.unescape(text)
    return _SPACES.sub(" ", text).strip()


def imdb_sources(data_dir: Union[str, os.PathLike, None] = None) -> List[Path]:
    """The places :func:`load_imdb` looks at, in order: the CSV, then the two folders.

    Returns an empty list when no data folder is configured.
    """
    root = resolve_data_dir(data_dir)
    if root is None:
        return []
    return [root / "imdb" / "imdb.csv.gz", root / "imdb" / "aclImdb", root / "aclImdb"]


def load_imdb(
    split: str,
    data_dir: Union[str, os.PathLike, None] = None,
    clean: bool = False,
) -> Tuple[List[str], np.ndarray]:
    """Load the reviews and labels of one split.

    Reads ``<data_dir>/imdb/imdb.csv.gz`` if it exists, else the extracted archive
    folder ``<data_dir>/imdb/aclImdb/`` or ``<data_dir>/aclImdb/`` (see the module
    docstring for both layouts).

    Parameters
    ----------
    split : {"train", "test"}
        25,000 reviews each. Make a validation set with :func:`train_val_split`.
    data_dir : str or path, optional
        Folder that contains ``imdb/`` (or ``aclImdb/``). Defaults to
        ``$NUMPYTRANSFORMER_DATA``, else ``<repo root>/../shared/data``.
    clean : bool, default False
        Apply :func:`clean_review` to every text.

    Returns
    -------
    texts : list of str, length N
        Positive reviews first, then negative ones, each by the id of its original file.
    labels : np.ndarray of int64, shape (N,)
        1 for a positive review, 0 for a negative one.
    """
    if split not in ("train", "test"):
        raise ValueError(f"load_imdb: split={split!r}; expected 'train' or 'test'")
    sources = imdb_sources(data_dir)
    source = next((p for p in sources if (p.is_file() if p.suffix == ".gz" else p.is_dir())), None)
    if source is None:
        raise missing_file_error(sources or None, "IMDB", SOURCE)
    if source.suffix == ".gz":
        texts, labels = _read_csv(source, split)
    else:
        texts, labels = _read_folder(source, split)
    if clean:
        texts = [clean_review(t) for t in texts]
    return texts, np.array(labels, dtype=np.int64)


def _read_csv(path: Path, split: str) -> Tuple[List[str], List[int]]:
    """Reviews and labels of ``split`` from the gzip CSV, in the file's order."""
    # Reviews reach ~14,000 characters, within the default 131,072, but the limit is
    # raised so that a longer review in another copy does not abort the load.
    csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))
    texts: List[str] = []
    labels: List[int] = []
    with reading(path, "a gzip-compressed UTF-8 CSV"), gzip.open(path, "rt", encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None or any(c not in header for c in _COLUMNS):
            raise NumpyTransformerError(f"load_imdb: {path} has header {header}; expected the columns {list(_COLUMNS)}")
        i_review, i_sentiment, i_split = (header.index(c) for c in _COLUMNS)
        for row_number, row in enumerate(reader, start=2):
            if len(row) < len(header):
                raise NumpyTransformerError(
                    f"load_imdb: {path} record {row_number} has {len(row)} fields; "
                    f"expected {len(header)} (the columns {header})"
                )
            if row[i_split] != split:
                continue
            label = _LABELS.get(row[i_sentiment])
            if label is None:
                raise NumpyTransformerError(
                    f"load_imdb: {path} record {row_number} has sentiment {row[i_sentiment]!r}; "
                    "expected 'positive' or 'negative'"
                )
            texts.append(row[i_review])
            labels.append(label)
    return texts, labels


def _read_folder(root: Path, split: str) -> Tuple[List[str], List[int]]:
    """Reviews and labels of ``split`` from an extracted ``aclImdb/`` folder.

    ``root/<split>/pos/<id>_<rating>.txt`` are the positive reviews, ``.../neg/...`` the
    negative ones; each group is read in the order of the numeric id, as the CSV lists them.
    """
    texts: List[str] = []
    labels: List[int] = []
    for sub, label in (("pos", 1), ("neg", 0)):
        folder = root / split / sub
        if not folder.is_dir():
            raise FileNotFoundError(
                f"load_imdb: {folder} is missing; expected the extracted archive's layout "
                f"aclImdb/{{train,test}}/{{pos,neg}}/<id>_<rating>.txt under {root.parent}"
            )
        files = []
        for path in folder.iterdir():
            if path.suffix != ".txt":
                continue
            m = _REVIEW_FILE.match(path.name)
            if m is None:
                raise NumpyTransformerError(f"load_imdb: {path} is not named <id>_<rating>.txt as the archive's reviews are")
            files.append((int(m.group(1)), path))
        if not files:
            raise NumpyTransformerError(f"load_imdb: {folder} holds no <id>_<rating>.txt review files")
        for _, path in sorted(files):
            # newline="" keeps the text exactly as stored, as the CSV reader does.
            with reading(path, "a UTF-8 text file"), open(path, encoding="utf-8", newline="") as f:
                texts.append(f.read())
            labels.append(label)
    return texts, labels


def train_val_split(
    texts: Sequence[str], labels, val_fraction: float = 0.1, seed: int = 0
) -> Tuple[List[str], np.ndarray, List[str], np.ndarray]:
    """Split off a validation set with the same label balance, deterministically.

    Each label contributes ``round(val_fraction * count)`` of its examples, chosen at
    random; both parts are returned in a random order (the IMDB file lists all
    positive reviews before the negative ones).

    Parameters
    ----------
    texts : sequence of str, length N
    labels : array-like of int, shape (N,)
    val_fraction : float, default 0.1
        In ``[0, 1)``.
    seed : int, default 0
        Seed of ``np.random.default_rng``.

    Returns
    -------
    train_texts : list of str
    train_labels : np.ndarray of int64
    val_texts : list of str
    val_labels : np.ndarray of int64
    """
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.shape[0] != len(texts):
        raise ValueError(
            f"train_val_split: labels has shape {labels.shape} for {len(texts)} texts; "
            "expected one label per text"
        )
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"train_val_split: val_fraction={val_fraction!r}; expected a number in [0, 1)")
    rng = np.random.default_rng(seed)
    val_parts, train_parts = [], []
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        n_val = int(round(val_fraction * idx.size))
        val_parts.append(idx[:n_val])
        train_parts.append(idx[n_val:])
    train_idx = rng.permutation(np.concatenate(train_parts)) if train_parts else np.array([], dtype=np.int64)
    val_idx = rng.permutation(np.concatenate(val_parts)) if val_parts else np.array([], dtype=np.int64)
    return (
        [texts[i] for i in train_idx],
        labels[train_idx].astype(np.int64),
        [texts[i] for i in val_idx],
        labels[val_idx].astype(np.int64),
    )


def truncate_ids(ids: Sequence[int], max_tokens: int, mode: str = "head+tail", head_share: float = 0.5) -> List[int]:
    """Cut a review to at most ``max_tokens`` tokens.

    ``"head"`` keeps the first ``max_tokens``; ``"head+tail"`` the first
    ``ceil(head_share * max_tokens)`` and the rest from the end: a reviewer often sums
    up at the end, and Sun et al. (2019) found head+tail the best cut on IMDB (their
    BERT kept the first 128 and the last 382 of 510 pieces, a ``head_share`` of 1/4).

    >>> truncate_ids([1, 2, 3, 4, 5, 6, 7], 4, "head+tail")
    [1, 2, 6, 7]
    >>> truncate_ids([1, 2, 3, 4, 5, 6, 7, 8, 9], 4, "head+tail", head_share=0.25)
    [1, 7, 8, 9]
    """
    ids = list(ids)
    if len(ids) <= max_tokens or mode == "head":
        return ids[:max_tokens]
    n_tail = max_tokens - math.ceil(head_share * max_tokens)
    return ids[:max_tokens - n_tail] + (ids[-n_tail:] if n_tail else [])


def sample_stratified(labels: np.ndarray, n, seed: int) -> np.ndarray:
    """Indices of a random sample of exactly ``n`` examples in the labels' proportions
    (all of them, in order, for None or n >= len). Remainders go to the classes with the
    largest fractional share, ties broken at random."""
    if n is None or n >= len(labels):
        return np.arange(len(labels))
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(labels, return_counts=True)
    share = n * counts / counts.sum()
    take = np.floor(share).astype(np.int64)
    take[np.lexsort((rng.random(len(classes)), -(share - take)))[:n - take.sum()]] += 1
    pick = np.concatenate([rng.choice(np.flatnonzero(labels == c), size=k, replace=False)
                           for c, k in zip(classes, take)])
    return rng.permutation(pick)


def train_val_texts(data_dir, n_train, val_fraction: float, seed: int):
    """Cleaned ``(texts, labels)`` of the training and validation reviews, and how many
    validation reviews were dropped because a training review has the same text (IMDB
    repeats a few: a copy in both sets would be scored on what was trained on).

    ``n_train`` (None: all 25,000) draws a stratified subset before the split.
    """
    texts, labels = load_imdb("train", data_dir, clean=True)
    if n_train is not None and n_train > len(labels):
        raise NumpyTransformerError(f"--n-train {n_train} is more than the {len(labels):,} training reviews in the data")
    pick = sample_stratified(labels, n_train, seed)
    tr_t, tr_y, va_t, va_y = train_val_split([texts[i] for i in pick], labels[pick], val_fraction, seed)
    seen = set(tr_t)
    keep = np.array([t not in seen for t in va_t], dtype=bool)
    return (tr_t, tr_y), ([t for t, k in zip(va_t, keep) if k], va_y[keep]), int((~keep).sum())


def imdb_test(data_dir, n, seed: int) -> Tuple[List[str], np.ndarray]:
    """Cleaned ``(texts, labels)`` of a stratified sample of ``n`` test reviews (None: all, in order)."""
    texts, labels = load_imdb("test", data_dir, clean=True)
    pick = sample_stratified(labels, n, seed)
    return [texts[i] for i in pick], labels[pick]


def reviews_digest(*splits) -> str:
    """A short SHA-256 of ``(texts, labels)`` splits: what identifies the reviews read."""
    h = hashlib.sha256()
    for texts, labels in splits:
        h.update(np.ascontiguousarray(labels, dtype="<i8").tobytes())
        for t in texts:
            h.update(t.encode("utf-8") + b"\0")
    return h.hexdigest()[:16]
