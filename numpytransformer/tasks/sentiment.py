"""Sentiment classification of IMDB movie reviews with the encoder-only classifier.

The pipeline: clean a review (``<br />`` tags, HTML entities), tokenize it (lower-cased
words, or BPE units), map the tokens to ids with a vocabulary built from the training
split only, cut it to ``max_tokens``, batch reviews of similar length under a token
budget, and train :class:`~numpytransformer.models.TransformerClassifier` (encoder,
pooling, one linear layer to two logits) with the cross-entropy of the label.

Splits: the 25,000 training reviews give the training and validation sets
(``val_fraction``, stratified). A validation review whose cleaned text is also a
training review's is dropped (15 of 2,500 with the defaults), so that the two sets are
disjoint by text, not only by position. The 25,000 test reviews are read only by
``final_report`` and ``evaluate_fresh``; they are the official split and are left as
they are, although 123 of them have the text of a training review (a known property
of the data set). Encoded ids are kept in the task object, never written to disk. The
tokenizer and the vocabulary go into :meth:`SentimentTask.to_dict`, so a checkpoint
classifies new text without the data.
"""
from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..config import TransformerConfig
from ..datasets.batching import bucket_batches, pad_batch
from ..datasets.imdb import clean_review, load_imdb, train_val_split
from ..models import TransformerClassifier
from ..text import BPE, Tokenizer, Vocab
from ..trainer import TrainConfig
from .common import loss_and_backward

__all__ = ["SentimentSettings", "SentimentTask", "SENTIMENT_TRAIN", "LABELS", "truncate_ids", "flag"]

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = Vocab.SPECIALS  # ("<pad>", "<bos>", "<eos>", "<unk>"): ids 0 to 3
#: Class names by label id, as in :func:`~numpytransformer.datasets.imdb.load_imdb`.
LABELS = ("negative", "positive")

#: The IMDB recipe for the default model (one layer, d_model 64, 512 tokens head+tail, a
#: 10,000-word vocabulary, dropout 0.3): about 680 updates of <= 8,192 tokens an epoch,
#: peak learning rate 2.8e-3 at update 500. Chosen by measurement (benchmarks/RESULTS.md):
#: the first recipe (2 layers of d_model 128, 256 tokens, 20,000 words, dropout 0.1) reached
#: 86.6% on test and overfitted after its second epoch; the small model sees twice as much
#: of each review and memorises less. The best validation epoch is kept, usually the 2nd or
#: 3rd. The time budget stops after the epoch that crosses 16 minutes.
SENTIMENT_TRAIN = TrainConfig(epochs=4, lr_factor=0.5, warmup=500, label_smoothing=0.0, clip_norm=1.0,
                              accum_steps=1, log_every=100, max_minutes=16)


def truncate_ids(ids: Sequence[int], max_tokens: int, mode: str = "head+tail") -> List[int]:
    """Cut a review to at most ``max_tokens`` tokens.

    ``"head"`` keeps the first ``max_tokens``. ``"head+tail"`` keeps the first
    ``ceil(max_tokens / 2)`` and the last ``floor(max_tokens / 2)``: a reviewer often
    sums up at the end ("... 7/10, worth a look"), and Sun et al. (2019, "How to
    Fine-Tune BERT for Text Classification") found head+tail the best cut on IMDB.

    >>> truncate_ids([1, 2, 3, 4, 5, 6, 7], 4, "head+tail")
    [1, 2, 6, 7]
    """
    ids = list(ids)
    if len(ids) <= max_tokens:
        return ids
    if mode == "head":
        return ids[:max_tokens]
    if mode == "head+tail":
        n_tail = max_tokens // 2
        return ids[:max_tokens - n_tail] + (ids[-n_tail:] if n_tail else [])
    raise ValueError(f"truncate must be 'head' or 'head+tail', got {mode!r}")


#: The command-line flag of each :class:`SentimentSettings` field whose flag is not simply
#: ``--`` and the field name with dashes.
_FLAGS = {"lowercase": "--cased", "n_heads": "--heads", "n_layers": "--layers", "norm_first": "--norm"}


def flag(field: str) -> str:
    """The ``train sentiment`` option that sets a :class:`SentimentSettings` field.

    >>> flag("vocab_size"), flag("n_heads")
    ('--vocab-size', '--heads')
    """
    return _FLAGS.get(field, "--" + field.replace("_", "-"))


def _split_counts_error(n_val: Sequence[int], n_train: Sequence[int], subset: str, val_fraction: float) -> str:
    """The message for a split that leaves a class without a validation or a training review.

    ``n_val[c]`` and ``n_train[c]`` count the reviews of class ``c``; ``subset`` says which
    reviews were split (``"the --n-train 10 reviews"``).
    """
    if len(set(n_val)) == 1 and len(set(n_train)) == 1:
        counts = f"{n_train[0]:,} training and {n_val[0]:,} validation reviews of each class"
    else:
        counts = ", ".join(f"{n_train[c]:,} training and {n_val[c]:,} validation {LABELS[c]} reviews"
                           for c in range(len(LABELS)))
    fix = "raise --val-fraction or --n-train" if min(n_val) < 1 else "lower --val-fraction or raise --n-train"
    return (f"--val-fraction {val_fraction} of {subset} gives {counts}; each class needs at least one "
            f"training and one validation review: {fix}")


@dataclass
class SentimentSettings:
    """What defines a sentiment run: the data, the text pipeline and the model's shape.

    ``vocab_size`` caps the vocabulary (the four special tokens included) built from the
    training split with ``min_freq``. ``max_tokens`` cuts each review (see
    :func:`truncate_ids` for ``truncate``). ``n_train`` uses a stratified random subset of
    about that many of the 25,000 training reviews *before* the validation split, and
    ``n_test`` a stratified subset of the test reviews (each class gives its rounded share,
    so the size can be off by one per class; both for quick runs; None: all).
    ``pooling="first"`` puts a ``<bos>`` token, the classifier's [CLS], in front of every review.

    Every field is checked when the settings are made, before any data is read; a bad
    value raises ValueError naming the ``train sentiment`` option that sets it (see
    :func:`flag`), e.g. ``--vocab-size`` for ``vocab_size``.
    """

    tokenizer: str = "word"
    lowercase: bool = True
    bpe_merges: int = 8000
    vocab_size: int = 10000
    min_freq: int = 2
    max_tokens: int = 512
    truncate: str = "head+tail"
    val_fraction: float = 0.1
    n_train: Optional[int] = None
    n_test: Optional[int] = None
    seed: int = 0
    batch_tokens: int = 8192
    max_batch_size: int = 128
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 1
    d_ff: int = 128
    dropout: float = 0.3
    pooling: str = "mean"
    dtype: str = "float32"
    norm_first: bool = False

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Raise ValueError, naming the command-line option, for the first bad field."""
        choices = {"tokenizer": ("word", "bpe"), "truncate": ("head+tail", "head"), "pooling": ("mean", "first"),
                   "dtype": ("float32", "float64")}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{flag(name)} must be one of {', '.join(allowed)}; got {getattr(self, name)!r}")
        specials = f" (the {len(SPECIALS)} special tokens {' '.join(SPECIALS)} and at least one word)"
        minimum = {  # the smallest sensible value of each whole-number field, and why
            "bpe_merges": (0, ""), "vocab_size": (len(SPECIALS) + 1, specials), "min_freq": (1, ""),
            "max_tokens": (1, ""), "batch_tokens": (1, ""), "max_batch_size": (1, ""), "seed": (0, ""),
            "d_model": (1, ""), "n_heads": (1, ""), "n_layers": (1, ""), "d_ff": (1, ""),
            "n_train": (2, " (or unset: all)"), "n_test": (2, " (or unset: all)")}
        for name, (low, why) in minimum.items():
            value = getattr(self, name)
            if value is None and name in ("n_train", "n_test"):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ValueError(f"{flag(name)} must be a whole number, got {value!r}")
            if value < low:
                raise ValueError(f"{flag(name)} must be at least {low}{why}, got {value}")
        if self.d_model % self.n_heads:
            raise ValueError(f"--d-model {self.d_model} must be divisible by --heads {self.n_heads} "
                             "(each head gets d_model / heads dimensions)")
        longest = self.max_tokens + (self.pooling == "first")
        if self.batch_tokens < longest:
            bos = " plus <bos> (--pooling first)" if self.pooling == "first" else ""
            raise ValueError(f"--batch-tokens {self.batch_tokens} is less than one review of --max-tokens "
                             f"{self.max_tokens}{bos}; expected at least {longest}")
        # "not 0 < x < 1" is also true for NaN.
        if not _is_number(self.val_fraction) or not 0.0 < self.val_fraction < 1.0:
            raise ValueError(f"--val-fraction must be a number in (0, 1), got {self.val_fraction!r}")
        if not _is_number(self.dropout) or not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"--dropout must be a number in [0, 1), got {self.dropout!r}")
        if self.n_train is not None:
            # IMDB is balanced, so a class has about n_train / 2 reviews; the split rounds
            # val_fraction of each class's count (exact counts are checked once loaded).
            per_class = self.n_train // 2
            n_val = int(round(self.val_fraction * per_class))
            if n_val < 1 or per_class - n_val < 1:
                raise ValueError(_split_counts_error([n_val] * 2, [per_class - n_val] * 2,
                                                     f"the --n-train {self.n_train} reviews", self.val_fraction))


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _stratified_pick(labels: np.ndarray, n: Optional[int], seed: int) -> np.ndarray:
    """Indices of the stratified random subset that ``n_train`` and ``n_test`` select (all of
    them, in order, when ``n`` is None or at least ``len(labels)``).

    It is :func:`~numpytransformer.datasets.imdb.train_val_split` with a "validation"
    fraction of ``n / len(labels)``: each class gives ``round(n * share)`` examples, so the
    total can differ from ``n`` by one per class. Checkpoints record the settings, not the
    indices, so this selection must stay as it is for a saved run to resume on the same
    reviews; :func:`_sample_exactly` is the sampler with an exact size.
    """
    if n is None or n >= len(labels):
        return np.arange(len(labels))
    _, _, pick, _ = train_val_split(list(range(len(labels))), labels, val_fraction=n / len(labels), seed=seed)
    return np.array(pick, dtype=np.int64)


def _sample_exactly(labels: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Indices of a random sample of exactly ``n`` examples in the labels' proportions, for ``eval --n``.

    Each class gets ``floor(n * share)``; the examples left over go to the classes with the
    largest remainders, ties broken at random with ``seed`` (so an odd sample of a balanced
    split is not always one negative review short), and ``n = 1`` draws one review.
    """
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(labels, return_counts=True)
    share = n * counts / counts.sum()
    take = np.floor(share).astype(np.int64)
    order = np.lexsort((rng.random(len(classes)), -(share - take)))  # largest remainder, then a random tie-break
    take[order[:n - take.sum()]] += 1
    pick = np.concatenate([rng.choice(np.flatnonzero(labels == c), size=k, replace=False)
                           for c, k in zip(classes, take)])
    return rng.permutation(pick).astype(np.int64)


class SentimentTask:
    """IMDB data, vocabulary, classifier, loss and accuracy for the trainer and the CLI."""

    selection_metric = "accuracy"

    def __init__(self, settings: SentimentSettings, data_dir: Optional[str] = None, state: Optional[dict] = None):
        self.s = settings
        self.data_dir = data_dir
        self._texts: Dict[str, Tuple[List[str], np.ndarray]] = {}
        self._ids: Dict[str, Tuple[List[np.ndarray], np.ndarray]] = {}
        self._index: Dict[str, np.ndarray] = {}
        self._train_lengths: Optional[np.ndarray] = None  # tokens of each training review, for input_tokens
        self._summary: Optional[dict] = None  # data_summary(), hashed once: every checkpoint records it
        #: Validation reviews dropped because a training review has the same text (set once loaded).
        self.n_val_duplicates = 0
        if state is None:
            state = self._build_state()
        self.tok = Tokenizer.from_dict(state["tokenizer"])
        self.vocab = Vocab.from_dict(state["vocab"])

    # ---- data and vocabulary ----------------------------------------------------------
    def texts(self, split: str) -> Tuple[List[str], np.ndarray]:
        """Cleaned review texts and labels (1 positive, 0 negative) of ``"train"``, ``"val"`` or ``"test"``.

        ``"val"`` leaves out the reviews whose text is also a training review's
        (:attr:`n_val_duplicates` counts them); a split that leaves a class without a
        training or a validation review is a ValueError naming ``--n-train`` and ``--val-fraction``.
        """
        if split not in ("train", "val", "test"):
            raise ValueError(f"split must be 'train', 'val' or 'test', got {split!r}")
        if split not in self._texts:
            if split == "test":
                texts, labels = load_imdb("test", self.data_dir, clean=True)
                pick = _stratified_pick(labels, self.s.n_test, self.s.seed)
                self._texts["test"] = ([texts[i] for i in pick], labels[pick])
            else:
                self._split_train_val()
        return self._texts[split]

    def split_indices(self, split: str) -> np.ndarray:
        """Positions in ``load_imdb("train")`` of the ``"train"`` or ``"val"`` reviews, in the split's order."""
        if split not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        if split not in self._index:
            self._split_train_val()
        return self._index[split]

    def _split_train_val(self) -> None:
        """The ``n_train`` subset, its stratified split, and the validation reviews that are not training texts."""
        s = self.s
        texts, labels = load_imdb("train", self.data_dir, clean=True)
        pool = _stratified_pick(labels, s.n_train, s.seed)
        tr, _, va, _ = train_val_split(list(range(len(pool))), labels[pool], s.val_fraction, s.seed)
        train_idx, val_idx = pool[np.array(tr, dtype=np.int64)], pool[np.array(va, dtype=np.int64)]
        # IMDB repeats a few reviews; a copy in both sets would be scored on what was trained on.
        seen = {texts[i] for i in train_idx}
        unique = np.array([texts[i] not in seen for i in val_idx], dtype=bool)
        self.n_val_duplicates = int((~unique).sum())
        val_idx = val_idx[unique]
        n_val = [int((labels[val_idx] == c).sum()) for c in range(len(LABELS))]
        n_tr = [int((labels[train_idx] == c).sum()) for c in range(len(LABELS))]
        if min(n_val) < 1 or min(n_tr) < 1:
            subset = (f"the --n-train {s.n_train} reviews" if s.n_train is not None
                      else f"all {len(texts):,} training reviews")
            raise ValueError(_split_counts_error(n_val, n_tr, subset, s.val_fraction))
        for name, idx in (("train", train_idx), ("val", val_idx)):
            self._index[name] = idx
            self._texts[name] = ([texts[i] for i in idx], labels[idx])

    def _build_state(self) -> dict:
        s = self.s
        train = self.texts("train")[0]
        if s.tokenizer == "word":
            tok = Tokenizer("word", lowercase=s.lowercase)
        else:
            tok = Tokenizer("bpe", bpe=BPE.learn(train, s.bpe_merges, lowercase=s.lowercase))
        vocab = Vocab.build((tok.tokenize(t) for t in train), min_freq=s.min_freq, max_size=s.vocab_size)
        return {"tokenizer": tok.to_dict(), "vocab": vocab.to_dict()}

    def data_summary(self) -> dict:
        """What the run's data split is: review counts and digests of which reviews.

        ``split_sha256`` covers the reviews' positions in the file; ``data_sha256`` covers
        their positions, labels and cleaned texts too (a review edited in place keeps its
        position). The trainer stores both in the checkpoint and, through
        :meth:`data_changes`, refuses to resume on other data (a changed data file, or a
        validation set that lost other duplicates), which would otherwise continue silently
        with different reviews."""
        if self._summary is not None:
            return self._summary
        positions, everything = hashlib.sha256(), hashlib.sha256()
        for split in ("train", "val"):
            texts, labels = self.texts(split)
            idx = np.ascontiguousarray(self.split_indices(split), dtype="<i8").tobytes()
            positions.update(idx)
            everything.update(idx)
            everything.update(np.ascontiguousarray(labels, dtype="<i8").tobytes())
            for text in texts:
                everything.update(text.encode("utf-8") + b"\0")
        self._summary = {"train_reviews": int(len(self.split_indices("train"))),
                         "val_reviews": int(len(self.split_indices("val"))),
                         "data_sha256": everything.hexdigest()[:16], "split_sha256": positions.hexdigest()[:16]}
        return self._summary

    def data_changes(self, recorded: dict) -> List[str]:
        """How the data now differs from ``recorded``, a checkpoint's :meth:`data_summary`.

        Checkpoints written before ``data_sha256`` existed hold one digest, ``split_sha256``,
        which meant the positions only (dbdd7d3) or positions, labels and texts (36f842f):
        one that matches either of today's digests stands for both. Every other entry must
        match, so a record without a digest cannot pass for the same data."""
        now = self.data_summary()
        if "data_sha256" not in recorded and recorded.get("split_sha256") in (now["split_sha256"],
                                                                              now["data_sha256"]):
            recorded = {**recorded, "data_sha256": now["data_sha256"], "split_sha256": now["split_sha256"]}
        return [f"{k} {recorded.get(k, 'nothing')} then, {v} now" for k, v in now.items() if recorded.get(k) != v]

    def to_dict(self) -> dict:
        return {"name": "sentiment", **asdict(self.s),
                "state": {"tokenizer": self.tok.to_dict(), "vocab": self.vocab.to_dict()}}

    @classmethod
    def from_dict(cls, d: dict, data_dir: Optional[str] = None) -> "SentimentTask":
        settings = {k: v for k, v in d.items() if k not in ("name", "state")}
        return cls(SentimentSettings(**settings), data_dir=data_dir, state=d["state"])

    def tokens(self, text: str) -> List[str]:
        """The kept tokens of one raw review: cleaned, tokenized and truncated."""
        toks = self.tok.tokenize(clean_review(text))
        return [toks[i] for i in truncate_ids(range(len(toks)), self.s.max_tokens, self.s.truncate)]

    def encode(self, text: str) -> np.ndarray:
        """Ids of one raw review, truncated; a ``<bos>`` in front when pooling is "first"."""
        ids = self.vocab.encode(self.tokens(text))
        if self.s.pooling == "first":
            ids = [BOS] + ids
        return np.array(ids, dtype=np.int32)

    def split_ids(self, split: str) -> Tuple[List[np.ndarray], np.ndarray]:
        """(id arrays, labels) of a split, encoded once and kept in memory."""
        if split not in self._ids:
            texts, labels = self.texts(split)
            self._ids[split] = ([self.encode(t) for t in texts], labels)
        return self._ids[split]

    # ---- model ------------------------------------------------------------------------
    def model_config(self) -> TransformerConfig:
        s = self.s
        return TransformerConfig(src_vocab_size=len(self.vocab), d_model=s.d_model, n_heads=s.n_heads,
                                 n_layers=s.n_layers, d_ff=s.d_ff, max_len=s.max_tokens + 1, dropout=s.dropout,
                                 pad_id=PAD, dtype=s.dtype, seed=s.seed, norm_first=s.norm_first,
                                 n_classes=len(LABELS), pooling=s.pooling)

    def build_model(self) -> TransformerClassifier:
        return TransformerClassifier(self.model_config())

    def describe(self) -> str:
        """The model's shape and text pipeline in one line, for the start of a training run."""
        s = self.s
        return (f"model: {s.n_layers} layer{'s' if s.n_layers != 1 else ''}, d_model {s.d_model}, "
                f"{s.n_heads} heads, d_ff {s.d_ff}, dropout {s.dropout}, {'pre' if s.norm_first else 'post'}-LN, "
                f"{s.dtype}; vocabulary {len(self.vocab):,} ({s.tokenizer} tokens), max_tokens {s.max_tokens} "
                f"({s.truncate}), pooling {s.pooling}")

    # ---- training -----------------------------------------------------------------------
    def _index_batches(self, ids: Sequence[np.ndarray], shuffle: bool, seed: int = 0,
                       batch_tokens: Optional[int] = None) -> List[np.ndarray]:
        lengths = np.array([max(len(x), 1) for x in ids], dtype=np.int64)
        return bucket_batches(lengths, batch_tokens or self.s.batch_tokens, shuffle=shuffle, seed=seed,
                              max_batch_size=self.s.max_batch_size)

    def _pad(self, seqs: Sequence[np.ndarray]) -> np.ndarray:
        # An empty review becomes one <unk>, so that it still has a position to pool.
        return pad_batch([x if len(x) else np.array([UNK]) for x in seqs], PAD)

    def train_batches(self, epoch: int) -> List[np.ndarray]:
        """Index batches of reviews of similar length, the same for the same seed and epoch."""
        return self._index_batches(self.split_ids("train")[0], shuffle=True, seed=self.s.seed * 1000 + epoch)

    #: What ``forward_backward`` counts, as the trainer's progress line names it.
    count_unit = "reviews"

    def input_tokens(self, idx: np.ndarray) -> int:
        """Tokens the model reads in a training batch: its reviews' ids, padding excluded (the
        trainer reports them as tok/s beside reviews/s)."""
        if self._train_lengths is None:
            # An empty review is fed as one <unk> (see _pad), so it counts one token.
            self._train_lengths = np.array([max(len(x), 1) for x in self.split_ids("train")[0]], dtype=np.int64)
        return int(self._train_lengths[idx].sum())

    def forward_backward(self, model, idx: np.ndarray, label_smoothing: float, scale: float = 1.0):
        """Mean cross-entropy of the batch; the count returned is the number of reviews."""
        ids, labels = self.split_ids("train")
        x = self._pad([ids[i] for i in idx])
        return loss_and_backward(model, (x,), labels[idx], None, label_smoothing, scale)

    # ---- evaluation ---------------------------------------------------------------------------
    def probabilities(self, model, ids: Sequence[np.ndarray], batch_tokens: int = 16384) -> np.ndarray:
        """Class probabilities (N, 2) of encoded reviews, in their order (batched by length)."""
        probs = np.zeros((len(ids), len(LABELS)))
        for idx in self._index_batches(ids, shuffle=False, batch_tokens=batch_tokens):
            logits = model.forward(self._pad([ids[i] for i in idx])).astype(np.float64)
            e = np.exp(logits - logits.max(axis=1, keepdims=True))
            probs[idx] = e / e.sum(axis=1, keepdims=True)
        return probs

    @staticmethod
    def _scores(probs: np.ndarray, labels: np.ndarray) -> Dict[str, float]:
        """Mean cross-entropy and accuracy of predicted probabilities (N, 2)."""
        p_true = probs[np.arange(len(labels)), labels]
        return {"loss": float(-np.mean(np.log(np.maximum(p_true, 1e-300)))),
                "accuracy": float(np.mean(probs.argmax(axis=1) == labels))}

    def evaluate(self, model, split: str) -> Dict[str, float]:
        """Loss and accuracy on a split (the model is put in eval mode)."""
        ids, labels = self.split_ids(split)
        model.eval()
        return self._scores(self.probabilities(model, ids), labels)

    def validate(self, model) -> Dict[str, float]:
        m = self.evaluate(model, "val")
        return {"val_loss": m["loss"], "accuracy": m["accuracy"]}

    def final_report(self, model) -> Dict[str, float]:
        """Accuracy on the test reviews (25,000 unless ``n_test``): the only place they are read."""
        m = self.evaluate(model, "test")
        return {"n": len(self.split_ids("test")[1]), "test_loss": m["loss"], "test_accuracy": m["accuracy"]}

    #: ``eval`` without ``--n`` scores the whole test split.
    default_eval_n = 0

    def evaluate_fresh(self, model, n: int = 0, seed: int = 1, beam: int = 1) -> Dict[str, float]:
        """Accuracy on the whole test split (the run's ``n_test`` does not apply); ``n`` > 0: a
        random sample of exactly n test reviews, in the split's label proportions, drawn with ``seed``."""
        if n < 0:
            raise ValueError(f"--n must be 0 (the whole test split) or positive, got {n}")
        if self.s.n_test is None:
            ids, labels = self.split_ids("test")
        else:
            if "test_all" not in self._ids:
                texts, labels = load_imdb("test", self.data_dir, clean=True)
                self._ids["test_all"] = ([self.encode(t) for t in texts], labels)
            ids, labels = self._ids["test_all"]
        if 0 < n < len(labels):
            pick = _sample_exactly(labels, n, seed)
            ids, labels = [ids[i] for i in pick], labels[pick]
        model.eval()
        return {"split": "test", "n": len(labels), **self._scores(self.probabilities(model, ids), labels)}

    # ---- the user's side -----------------------------------------------------------------
    def example_input(self) -> str:
        return "This film was a delight."

    def _format(self, p: np.ndarray) -> str:
        k = int(p.argmax())
        return f"{LABELS[k]} {p[k]:.2f}"

    def predict_text(self, model, lines: Sequence[str], beam: int = 1) -> List[str]:
        """``"positive 0.93"`` or ``"negative 0.81"`` for each line (the label and its
        probability); a line with no tokens (empty or blank) gives an empty line, so the
        output lines stay aligned with the input lines."""
        ids = [self.encode(line) for line in lines]
        first = 1 if self.s.pooling == "first" else 0
        keep = [i for i, x in enumerate(ids) if len(x) > first]
        outs = [""] * len(lines)
        if keep:
            model.eval()
            for i, p in zip(keep, self.probabilities(model, [ids[i] for i in keep])):
                outs[i] = self._format(p)
        return outs

    def attention(self, model, text: str):
        """Encoder self-attention maps for one review: (maps, labels, "positive 0.93").

        Besides one map (H, T, T) per layer, ``"pooled"`` (H, 1, T) is the row of the last
        layer's attention that reaches the classified vector. With ``pooling="mean"`` the
        classifier reads the mean of all positions, so the row is the last attention
        averaged over the query positions (labelled ``mean``); with ``pooling="first"`` it
        reads only the ``<bos>`` position, so the row is ``<bos>``'s own attention (labelled
        ``<bos>``). Either way it shows how much each token contributes, through the last
        attention, to what is classified. Each head's row is divided by its maximum so that
        the heatmap's 0..1 colour scale shows it (the raw values sum to 1 over T).
        """
        if not self.tokens(text):
            raise ValueError("the review is empty (no tokens after cleaning)")
        x = self.encode(text)[None].astype(np.int64)
        model.eval()
        logits = model.forward(x).astype(np.float64)[0]
        p = np.exp(logits - logits.max())
        p /= p.sum()
        toks = self.vocab.decode(x[0], strip_special=False)
        maps, labels = {}, {}
        for name, w in model.attention_maps().items():
            if name.startswith("encoder"):
                maps[name] = w[0]  # (H, T, T)
                labels[name] = (toks, toks)
        last = maps[list(maps)[-1]]  # named_modules lists the layers in order
        if self.s.pooling == "first":
            pooled, row = last[:, :1, :], [toks[0]]  # (H, 1, T): the <bos> query, the only one read
        else:
            pooled, row = last.mean(axis=1, keepdims=True), ["mean"]  # (H, 1, T)
        maps["pooled"] = pooled / pooled.max(axis=2, keepdims=True)
        labels["pooled"] = (row, toks)
        return maps, labels, self._format(p)
