"""A bag-of-words logistic regression in NumPy: the baseline a sentiment Transformer must beat.

Each text becomes the set of its vocabulary words (binary features, scaled to unit L2
norm so that long and short reviews weigh the same), and the model is

.. math:: p(\\text{positive} \\mid x) = \\sigma(w^\\top x + b),

trained with mini-batch Adam on the mean cross-entropy plus ``l2/2 * ||w||^2``.

The features are sparse: 25,000 reviews x 20,000 words as a dense float32 matrix is
2 GB, but a review has ~130 distinct words. So a batch is kept as three flat arrays
(CSR): ``indices`` (the word ids), ``values`` (the feature values) and ``rows`` (which
review each entry belongs to), and

- the logits are ``bincount(rows, weights=w[indices] * values)``, the sum per review;
- the gradient of ``w`` is ``bincount(indices, weights=dz[rows] * values)``, the sum per word.

Run ``python benchmarks/baseline_bow.py imdb`` for the test accuracy on IMDB. It lives with the
benchmarks: it is a measuring stick for the sentiment model, not part of the library.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import Dict, List, NamedTuple, Optional, Sequence

import numpy as np

from numpytransformer.training.optim import Adam
from numpytransformer.text import Tokenizer, Vocab

__all__ = ["SparseRows", "BowLogReg", "bow_features", "train_bow_logreg", "evaluate"]


class SparseRows(NamedTuple):
    """N rows of a sparse (N, V) matrix in CSR form: row ``n`` holds
    ``values[indptr[n]:indptr[n+1]]`` at the columns ``indices[indptr[n]:indptr[n+1]]``."""

    indptr: np.ndarray  # (N + 1,) int64
    indices: np.ndarray  # (nnz,) int64
    values: np.ndarray  # (nnz,) float32

    @property
    def n_rows(self) -> int:
        return len(self.indptr) - 1

    def take(self, rows: np.ndarray) -> "SparseRows":
        """The rows ``rows`` (in that order) as a new :class:`SparseRows`."""
        starts, ends = self.indptr[rows], self.indptr[rows + 1]
        lengths = ends - starts
        indptr = np.concatenate([[0], np.cumsum(lengths)])
        # Position j of the result reads entry starts[r] + (j - indptr[r]) of its row r.
        pos = np.repeat(starts - indptr[:-1], lengths) + np.arange(indptr[-1])
        return SparseRows(indptr, self.indices[pos], self.values[pos])

    def row_ids(self) -> np.ndarray:
        """(nnz,) the row of every entry."""
        return np.repeat(np.arange(self.n_rows), np.diff(self.indptr))


def bow_features(texts: Sequence[str], tokenizer: Tokenizer, vocab: Vocab) -> SparseRows:
    """Binary bag-of-words rows of unit L2 norm; ``<unk>`` and the other special tokens are left out."""
    first = len(Vocab.SPECIALS)
    indptr, chunks = [0], []
    for text in texts:
        ids = np.unique(np.array(vocab.encode(tokenizer.tokenize(text)), dtype=np.int64))
        ids = ids[ids >= first]
        chunks.append(ids)
        indptr.append(indptr[-1] + len(ids))
    indptr = np.array(indptr, dtype=np.int64)
    indices = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)
    norms = np.sqrt(np.maximum(np.diff(indptr), 1)).astype(np.float32)
    values = np.repeat(1.0 / norms, np.diff(indptr)).astype(np.float32)
    return SparseRows(indptr, indices, values)


@dataclass
class BowLogReg:
    """A trained bag-of-words logistic regression: its text pipeline and its weights."""

    tokenizer: Tokenizer
    vocab: Vocab
    w: np.ndarray  # (V,)
    b: float

    def logits(self, x: SparseRows) -> np.ndarray:
        """(N,) ``w . x_n + b``."""
        return np.bincount(x.row_ids(), weights=self.w[x.indices] * x.values, minlength=x.n_rows) + self.b

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        """(N,) probability that each text is positive."""
        return _sigmoid(self.logits(bow_features(texts, self.tokenizer, self.vocab)))


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # = 1 / (1 + e^-z), without overflow


def train_bow_logreg(train_texts: Sequence[str], train_labels, vocab_size: int = 20000, min_freq: int = 2,
                     l2: float = 1e-6, epochs: int = 5, lr: float = 0.02, batch_size: int = 128, seed: int = 0,
                     lowercase: bool = True, log=None) -> BowLogReg:
    """Fit the logistic regression with mini-batch Adam.

    Parameters
    ----------
    train_texts : sequence of str, length N
    train_labels : array-like of {0, 1}, shape (N,)
    vocab_size, min_freq : the vocabulary, built from ``train_texts`` as the Transformer's is
        (lower-cased word tokens, specials included in ``vocab_size``).
    l2 : weight of the penalty ``l2/2 * ||w||^2`` (not on the bias).
    epochs, lr, batch_size, seed : Adam (betas 0.9, 0.999) over shuffled mini-batches.
    log : callable(str), optional; progress per epoch.

    Returns
    -------
    BowLogReg

    Notes
    -----
    With :math:`z = Xw + b` and :math:`L = \\frac1B\\sum_n \\text{BCE}(\\sigma(z_n), y_n)`,
    :math:`\\partial L/\\partial z_n = (\\sigma(z_n) - y_n)/B`, so
    :math:`\\partial L/\\partial w = X^\\top \\partial z + l_2 w` and
    :math:`\\partial L/\\partial b = \\sum_n \\partial z_n`.
    """
    y = np.asarray(train_labels, dtype=np.float64)
    if y.ndim != 1 or len(y) != len(train_texts):
        raise ValueError(f"train_labels has shape {y.shape} for {len(train_texts)} texts; expected one label each")
    tokenizer = Tokenizer("word", lowercase=lowercase)
    token_lists = [tokenizer.tokenize(t) for t in train_texts]
    vocab = Vocab.build(token_lists, min_freq=min_freq, max_size=vocab_size)
    x = bow_features(train_texts, tokenizer, vocab)
    V = len(vocab)
    params = {"w": np.zeros(V), "b": np.zeros(1)}
    opt = Adam(params, lr=lr, betas=(0.9, 0.999), eps=1e-8)  # the library's Adam (exercise 8.2)
    rng = np.random.default_rng(seed)
    for epoch in range(epochs):
        order = rng.permutation(len(y))
        total = 0.0
        for start in range(0, len(y), batch_size):
            rows = order[start:start + batch_size]
            xb, yb = x.take(rows), y[rows]
            w, b = params["w"], params["b"]
            rid = xb.row_ids()
            z = np.bincount(rid, weights=w[xb.indices] * xb.values, minlength=len(rows)) + b[0]
            p = _sigmoid(z)
            total += float(np.sum(np.logaddexp(0.0, z) - yb * z))  # BCE from the logits
            dz = (p - yb) / len(rows)
            opt.step({"w": np.bincount(xb.indices, weights=dz[rid] * xb.values, minlength=V) + l2 * w,
                      "b": np.array([dz.sum()])})
        if log is not None:
            log(f"epoch {epoch + 1}/{epochs}: train loss {total / len(y):.4f}")
    return BowLogReg(tokenizer, vocab, params["w"], float(params["b"][0]))


def evaluate(model: BowLogReg, texts: Sequence[str], labels) -> Dict[str, float]:
    """Accuracy and mean cross-entropy on labelled texts."""
    y = np.asarray(labels, dtype=np.float64)
    z = model.logits(bow_features(texts, model.tokenizer, model.vocab))
    return {"accuracy": float(np.mean((z > 0) == (y == 1))),
            "loss": float(np.mean(np.logaddexp(0.0, z) - y * z))}


def _check_args(args) -> None:
    """Reject bad options before the data is read, naming the flag."""
    for flag, value, low in (("--vocab-size", args.vocab_size, len(Vocab.SPECIALS) + 1), ("--epochs", args.epochs, 1),
                             ("--batch-size", args.batch_size, 1), ("--seed", args.seed, 0)):
        if value < low:
            raise ValueError(f"{flag} must be at least {low}, got {value}")
    if not args.lr > 0:
        raise ValueError(f"--lr must be positive, got {args.lr}")
    if not args.l2 >= 0:
        raise ValueError(f"--l2 must be 0 or positive, got {args.l2}")


def _imdb(args) -> None:
    from numpytransformer.datasets.imdb import load_imdb

    _check_args(args)
    start = time.perf_counter()
    train_texts, train_labels = load_imdb("train", args.data_dir, clean=True)
    test_texts, test_labels = load_imdb("test", args.data_dir, clean=True)
    loaded = time.perf_counter()
    print(f"loaded {len(train_texts):,} training and {len(test_texts):,} test reviews in {loaded - start:.1f} s",
          flush=True)
    model = train_bow_logreg(train_texts, train_labels, vocab_size=args.vocab_size, l2=args.l2,
                             epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, seed=args.seed,
                             log=lambda msg: print(msg, flush=True))
    trained = time.perf_counter()
    m = evaluate(model, test_texts, test_labels)
    done = time.perf_counter()
    print(f"bag-of-words logistic regression, {len(model.vocab):,} words: test accuracy {m['accuracy']:.4f} "
          f"(loss {m['loss']:.4f}); training {trained - loaded:.1f} s (tokenizing included), "
          f"test {done - trained:.1f} s, total {done - start:.1f} s")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/baseline_bow.py",
                                     description="Baselines to compare the Transformer with.")
    sub = parser.add_subparsers(dest="dataset", metavar="DATASET", required=True)
    p = sub.add_parser("imdb", help="bag-of-words logistic regression on IMDB: train on the 25,000 training "
                                    "reviews, report the accuracy on the 25,000 test reviews",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data-dir", default=None,
                   help="folder holding imdb/imdb.csv.gz, or the extracted archive as imdb/aclImdb/ or aclImdb/ "
                        "(default: $NUMPYTRANSFORMER_DATA, else ../shared/data)")
    p.add_argument("--vocab-size", type=int, default=20000)
    p.add_argument("--l2", type=float, default=1e-6)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_imdb)
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
