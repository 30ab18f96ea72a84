"""Sentiment classification of IMDB movie reviews with the encoder-only classifier.

A review is cleaned (``<br />`` tags, HTML entities), tokenized (lower-cased words, or
BPE units), mapped to ids with a vocabulary of the training split, and cut to
``max_tokens``; reviews of similar length are batched under a token budget, and
:class:`~numpytransformer.nn.models.TransformerClassifier` (encoder, pooling, one linear
layer to two logits) learns the cross-entropy of the label.

The 25,000 training reviews give the training and validation sets (``val_fraction``,
stratified, disjoint by text, the same for every seed: see
:func:`~numpytransformer.datasets.imdb.train_val_texts`);
the official test split is read only after training and by ``eval``. The tokenizer and
the vocabulary are saved in the checkpoint, so a checkpoint classifies new text without the data.

With ``pretrain_updates`` the run takes GPT-1's path: the encoder first learns as a language
model on the training reviews' text (:class:`ReviewText`, trained by the same
:class:`~numpytransformer.training.trainer.Trainer`; see :meth:`SentimentTask.pretrain`), then
:func:`~numpytransformer.nn.transfer.lm_into_classifier` copies it into the classifier, which is
fine-tuned from it.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np

from ..nn.config import REGION_MAX, SIZE_LIMITS, TransformerConfig
from ..datasets.batching import length_batches, next_token_windows, pad_or_unk
from ..datasets.imdb import clean_review, imdb_test, reviews_digest, train_val_texts, truncate_ids
from ..errors import NumpyTransformerError
from ..nn.gpt import TransformerLM, next_token_nats
from ..nn.models import TransformerClassifier
from ..nn.transfer import lm_into_classifier
from ..training.settings import ModelSettings, check_fields, option
from ..core.softmax import softmax
from ..text import Tokenizer, Vocab
from ..training.trainer import TrainConfig, Trainer, TrainingTask
from .base import Task

__all__ = ["SentimentData", "SentimentTask", "ReviewText", "id_stream", "lm_loss_of_stream", "LABELS"]

PAD, BOS, UNK = 0, 1, 3
LABELS = ("negative", "positive")  # by label id


@dataclass
class SentimentData:
    """The reviews, the text pipeline and the batching."""

    tokenizer: str = option("--tokenizer", "word", "word tokens, or BPE subwords", choices=("word", "bpe"))
    bpe_merges: int = option("--bpe-merges", 8000, "BPE merges", low=0, high=10 ** 6)
    cased: bool = option("--cased", False, "keep case (default: lower-case)")
    vocab_size: int = option("--vocab-size", 10000, "largest vocabulary, the 4 special tokens included", low=5, high=10 ** 7)
    min_freq: int = option("--min-freq", 2, "rarer tokens become <unk>", low=1, high=10 ** 6)
    max_tokens: int = option("--max-tokens", 512, "longer reviews are cut", low=1, high=SIZE_LIMITS["max_len"] - 1)  # + a <bos>
    truncate: str = option("--truncate", "head+tail", "keep the first and last halves (reviews often conclude at the end), "
                           "or the start", choices=("head+tail", "head"))
    pooling: str = option("--pooling", "mean", "mean of the token vectors, or the vector of a <bos> put in front",
                          choices=("mean", "first"))
    val_fraction: float = option("--val-fraction", 0.1, "share of the training reviews held out for validation", low=0.001, high=0.999)
    n_train: Optional[int] = option("--n-train", None, "a stratified random subset of this many training reviews (before the "
                                    "validation split)", low=4, high=10 ** 7, none="all")
    n_test: Optional[int] = option("--n-test", None, "a stratified random subset of this many test reviews for the final "
                                   "report", low=2, high=10 ** 7, none="all")
    batch_tokens: int = option("--batch-tokens", 8192, "token budget of a batch, padding included", low=1, high=10 ** 7)
    max_batch_size: int = option("--max-batch-size", 128, "most reviews in a batch", low=1, high=65536)
    causal: bool = option("--causal", False, "causal self-attention in the encoder, as in a language model: each token "
                          "sees only itself and earlier ones (needs --pooling mean)")
    region: Optional[int] = option("--region", None, "each word's input vector also adds the embeddings of its N neighbours on "
                                   "each side, one table for each offset (a region embedding: phrases such as 'not "
                                   "good' reach the encoder as units; 0: off; not with --causal)", low=0,
                                   high=REGION_MAX, none="1, or 0 with --causal")
    pretrain_updates: int = option("--pretrain-updates", 0, "first pretrain the encoder as a language model (GPT-1) for this many "
                                   "updates (0: off) on the training reviews' text, then fine-tune it as the "
                                   "classifier; needs --causal and --norm pre, and uses --lr-factor, --warmup and "
                                   "--clip", low=0, high=10 ** 7)
    pretrain_block: int = option("--pretrain-block", 256, "tokens in a window of pretraining, at most --max-tokens + 1", low=2,
                                 high=SIZE_LIMITS["max_len"])
    pretrain_batch: int = option("--pretrain-batch", 16, "windows in a batch of pretraining", low=1, high=10 ** 5)

    def __post_init__(self):
        check_fields(self)
        longest = self.max_tokens + (self.pooling == "first")
        if self.batch_tokens < longest:
            raise NumpyTransformerError(f"--batch-tokens {self.batch_tokens} is less than one review of --max-tokens "
                                        f"{self.max_tokens}; expected at least {longest}")
        if self.causal and self.pooling == "first":
            raise NumpyTransformerError("--causal with --pooling first would classify the <bos> alone (a causal "
                                        "encoder's first vector sees nothing else): use --pooling mean")
        if self.region is None:  # the recipe's, unless the encoder is causal (and may not read the next word)
            self.region = 0 if self.causal else 1
        if self.causal and self.region:
            raise NumpyTransformerError(f"--region {self.region} embeds each word's next words too, which --causal "
                                        "hides from it: use one or the other")
        if self.pretrain_updates and self.pretrain_block > self.max_tokens + 1:
            raise NumpyTransformerError(f"--pretrain-block {self.pretrain_block} is longer than the classifier's "
                                        f"context (--max-tokens {self.max_tokens} + 1): lower it or raise --max-tokens")


def id_stream(docs: Sequence[Sequence[int]], separator: int) -> np.ndarray:
    """One array of ids: every document with ``separator`` in front (GPT's stream of text)."""
    return np.concatenate([np.array([separator, *doc], dtype=np.int64) for doc in docs])


def lm_loss_of_stream(model: TransformerLM, ids: np.ndarray, block: int) -> float:
    """Mean next-token loss (nats per token) over ``ids`` cut into non-overlapping windows of
    ``block`` (shorter if ``ids`` is), in eval mode."""
    x, y = next_token_windows(ids, min(block, len(ids) - 1))  # (N, T) each
    model.eval()
    return next_token_nats(model, x, y, model.vocab_size) / y.size


class ReviewText(TrainingTask):
    """GPT-1's first stage as the trainer sees it: a language model learns the reviews' text.

    One epoch of ``updates`` batches; a batch is the start positions of ``batch`` random windows
    of ``block + 1`` ids of the training stream (nanoGPT's ``get_batch``), drawn from a generator
    of their own, apart from the model's dropout generator. The loss is the mean next-token
    cross-entropy; validation reports it over the validation stream (``lm_loss``, nats per token).
    """

    selection_metric = "neg_lm_loss"
    target_pad = None  # a stream: every next token counts

    def __init__(self, train_ids: np.ndarray, val_ids: np.ndarray, block: int, batch: int, updates: int, seed: int):
        if len(train_ids) < block + 1:
            raise NumpyTransformerError(f"the pretraining text holds {len(train_ids)} tokens, fewer than one window "
                                        f"of {block + 1}: lower --pretrain-block or use more reviews")
        self.train_ids, self.val_ids = train_ids, val_ids
        self.block, self.batch, self.updates, self.seed = block, batch, updates, seed

    def train_batches(self, epoch: int) -> list:
        rng = np.random.default_rng([self.seed, epoch + 1])
        return list(rng.integers(0, len(self.train_ids) - self.block, size=(self.updates, self.batch)))

    def batch_arrays(self, starts: np.ndarray):
        windows = self.train_ids[starts[:, None] + np.arange(self.block + 1)]  # (batch, block + 1)
        return (windows[:, :-1],), windows[:, 1:]

    def validate(self, model) -> Dict[str, float]:
        loss = lm_loss_of_stream(model, self.val_ids, self.block)
        return {"lm_loss": loss, "neg_lm_loss": -loss}

    def to_dict(self) -> dict:
        return {"name": "review text", "block": self.block, "batch": self.batch, "updates": self.updates,
                "seed": self.seed}


class SentimentTask(Task):
    """IMDB data, vocabulary, classifier, loss and accuracy."""

    name = "sentiment"
    Data = SentimentData
    selection_metric = "accuracy"
    count_unit = "reviews"
    target_pad = None
    predict_command = "classify"
    default_eval_n = 0
    searches = False
    summary = "IMDB movie reviews: positive or negative"

    @classmethod
    def recipe(cls, data: SentimentData):
        # Two layers of d_model 128 reading 256 tokens overfitted after two epochs; one small
        # layer that reads twice as much of each review did better.
        return (ModelSettings(d_model=64, n_heads=4, n_layers=1, d_ff=128, dropout=0.3),
                TrainConfig(epochs=4, lr_factor=0.5, warmup=500, label_smoothing=0.0, log_every=100))

    def check_settings(self) -> None:
        if self.data.pretrain_updates:
            needed = [flag for flag, ok in (("--causal", self.data.causal), ("--norm pre", self.model.norm == "pre"))
                      if not ok]
            if needed:
                raise NumpyTransformerError(f"--pretrain-updates needs {' and '.join(needed)}: the pretrained "
                                            "language model is causal and pre-LN")

    def __init__(self, data, model, data_dir=None, state=None):
        self._texts, self._ids, self.n_val_duplicates = {}, {}, 0
        super().__init__(data, model, data_dir, state)
        self.tok, self.vocab = Tokenizer.from_dict(self.state["tokenizer"]), Vocab.from_dict(self.state["vocab"])

    # ---- data ----------------------------------------------------------------------------
    def texts(self, split: str):
        """Cleaned texts and labels (1 positive) of ``"train"``, ``"val"`` or ``"test"``, read when first needed."""
        if split not in self._texts:
            d, seed = self.data, 0  # the same reviews for every --seed, so that runs (and ensembles) share a vocabulary
            if split == "test":
                self._texts["test"] = imdb_test(self.data_dir, d.n_test, seed)
            else:
                train, val, self.n_val_duplicates = train_val_texts(self.data_dir, d.n_train, d.val_fraction, seed)
                for name, (_, labels) in (("training", train), ("validation", val)):
                    if len(np.unique(labels)) < len(LABELS):
                        raise NumpyTransformerError(f"the {name} set has no review of some class: raise --n-train "
                                                    "or adjust --val-fraction")
                self._texts.update(train=train, val=val)
        return self._texts[split]

    def build_state(self) -> dict:
        d, train = self.data, self.texts("train")[0]
        tok = Tokenizer.learn(d.tokenizer, train, d.bpe_merges, lowercase=not d.cased)
        vocab = Vocab.build((tok.tokenize(t) for t in train), min_freq=d.min_freq, max_size=d.vocab_size)
        return {"tokenizer": tok.to_dict(), "vocab": vocab.to_dict()}

    def data_summary(self) -> dict:
        """Review counts and a digest of the training and validation reviews."""
        train, val = self.texts("train"), self.texts("val")
        return {"train_reviews": len(train[0]), "val_reviews": len(val[0]), "sha256": reviews_digest(train, val)}

    def tokens(self, text: str, cut: bool = True) -> List[str]:
        """The kept tokens of one raw review: cleaned, tokenized and (``cut``) truncated."""
        toks = self.tok.tokenize(clean_review(text))
        if not cut:
            return toks
        return [toks[i] for i in truncate_ids(range(len(toks)), self.data.max_tokens, self.data.truncate)]

    def encode(self, text: str) -> np.ndarray:
        """Ids of one raw review; a ``<bos>`` in front when pooling is "first"."""
        return np.array([BOS] * (self.data.pooling == "first") + self.vocab.encode(self.tokens(text)), dtype=np.int64)

    def split_ids(self, split: str):
        """(id arrays, labels) of a split, encoded once."""
        if split not in self._ids:
            texts, labels = self.texts(split)
            self._ids[split] = ([self.encode(t) for t in texts], labels)
        return self._ids[split]

    def build_model(self) -> TransformerClassifier:
        return TransformerClassifier(TransformerConfig(
            src_vocab_size=len(self.vocab), max_len=self.data.max_tokens + 1, pad_id=PAD, n_classes=len(LABELS),
            pooling=self.data.pooling, causal=self.data.causal, region=self.data.region,
            **self.model.config_fields()))

    def pretrain(self, model: TransformerClassifier, train: TrainConfig, log=print) -> None:
        """With ``pretrain_updates``: train a language model of the classifier's shape on the text of
        the training reviews, then copy it into ``model``'s encoder (GPT-1's pretraining).

        The text is every training review, cleaned, tokenized and encoded as for the classifier but
        not truncated, with a ``<bos>`` in front; the validation reviews' text gives the language
        model's final validation loss. The test reviews are not read.
        """
        d = self.data
        if not d.pretrain_updates:
            return
        lm = TransformerLM(dataclasses.replace(model.cfg, tie_embeddings=True))
        text = ReviewText(*(id_stream([self.vocab.encode(self.tokens(t, cut=False)) for t in self.texts(split)[0]], BOS)
                            for split in ("train", "val")), d.pretrain_block, d.pretrain_batch, d.pretrain_updates,
                          self.model.seed)
        log(f"pretraining a {type(lm).__name__} with {lm.num_parameters():,} parameters for {d.pretrain_updates} "
            f"updates of {d.pretrain_batch} windows of {d.pretrain_block} tokens, on the {len(text.train_ids):,} "
            "tokens of the training reviews")
        # nanoGPT's update with the run's Noam schedule and clip: no smoothing, no weight decay, one
        # pass of the trainer over ``pretrain_updates`` batches, nothing written.
        cfg = TrainConfig(epochs=1, lr_factor=train.lr_factor, warmup=train.warmup, label_smoothing=0.0,
                          clip_norm=train.clip_norm, log_every=100)
        start = time.perf_counter()
        metrics = Trainer(lm, text, cfg, out_dir=None, log=lambda msg: log(f"pretraining: {msg}")).fit()
        log(f"pretrained in {time.perf_counter() - start:.1f} s: validation lm_loss {metrics['lm_loss']:.4f} (nats "
            f"per token, {len(text.val_ids):,} tokens of the validation reviews)")
        lm_into_classifier(lm, model)
        n = len(lm.layers)
        log(f"copied its embedding, {n} block{'s' * (n != 1)} and final LayerNorm into the classifier's encoder; "
            "the classification head starts fresh")

    # ---- training ----------------------------------------------------------------------------
    def train_batches(self, epoch: int) -> list:
        return length_batches(self.split_ids("train")[0], self.data.batch_tokens, shuffle=True,
                              seed=self.model.seed * 1000 + epoch, max_batch_size=self.data.max_batch_size)

    def batch_arrays(self, idx):
        ids, labels = self.split_ids("train")
        return (pad_or_unk([ids[i] for i in idx], PAD, UNK),), labels[idx]

    def target_count(self, idx) -> int:
        """One label a review, without padding the reviews."""
        return len(idx)

    def input_tokens(self, idx) -> int:
        ids = self.split_ids("train")[0]
        return int(sum(max(len(ids[i]), 1) for i in idx))

    # ---- evaluation ----------------------------------------------------------------------------
    def probabilities(self, model, ids: Sequence[np.ndarray]) -> np.ndarray:
        """Class probabilities (N, 2) of encoded reviews, in their order."""
        model.eval()
        probs = np.zeros((len(ids), len(LABELS)))
        for idx in length_batches(ids, 16384, max_batch_size=self.data.max_batch_size):
            probs[idx] = softmax(model.forward(pad_or_unk([ids[i] for i in idx], PAD, UNK)).astype(np.float64))
        return probs

    def scores(self, model, ids, labels) -> Dict[str, float]:
        if not len(labels):  # a data file without this split's reviews
            raise NumpyTransformerError("there are no reviews to score: the data holds none of this split")
        probs = self.probabilities(model, ids)
        p_true = probs[np.arange(len(labels)), labels]
        return {"loss": float(-np.mean(np.log(np.maximum(p_true, 1e-300)))),
                "accuracy": float(np.mean(probs.argmax(axis=1) == labels))}

    def validate(self, model) -> Dict[str, float]:
        m = self.scores(model, *self.split_ids("val"))
        return {"val_loss": m["loss"], "accuracy": m["accuracy"]}

    def test_report(self, model) -> Dict[str, float]:
        m = self.scores(model, *self.split_ids("test"))
        return {"n": len(self.split_ids("test")[1]), "test_loss": m["loss"], "test_accuracy": m["accuracy"]}

    def evaluate(self, model, n: int, seed: int, beam: int = 1) -> Dict[str, float]:
        """Accuracy on the whole test split, or on a stratified sample of exactly ``n`` reviews."""
        texts, labels = imdb_test(self.data_dir, self.eval_count(n) or None, seed)
        return {"split": "test", "n": len(labels), **self.scores(model, [self.encode(t) for t in texts], labels)}

    # ---- the user's side ----------------------------------------------------------------------
    def example_input(self) -> str:
        return "This film was a delight."

    def check_input(self, text: str) -> None:
        super().check_input(text)
        if not self.tokens(text):
            raise NumpyTransformerError("the input has no words once cleaned (tags, HTML entities and spaces removed)")

    def predict(self, model, lines: Sequence[str], beam: int = 1) -> List[str]:
        """``"positive 0.93"`` for each line; a line with no words gives an empty line."""
        ids = [self.encode(line) for line in lines]
        keep = [i for i, x in enumerate(ids) if len(x) > (self.data.pooling == "first")]
        outs = [""] * len(lines)
        for i, p in zip(keep, self.probabilities(model, [ids[i] for i in keep])):
            outs[i] = f"{LABELS[int(p.argmax())]} {p.max():.2f}"
        return outs

    def attention(self, model, text: str):
        """Encoder maps (H, T, T) per layer, and ``"pooled"`` (H, 1, T): the row of the last
        attention that reaches the classified vector (averaged over queries for mean pooling,
        the <bos> query for first pooling), each head's row scaled to a maximum of 1."""
        self.check_input(text)
        x = self.encode(text)[None]
        label = self.predict(model, [text])[0]
        model.forward(x)
        toks = self.vocab.decode(x[0], strip_special=False)
        maps, labels = self.labelled_maps(model, toks)
        last = maps[list(maps)[-1]]
        pooled, row = (last[:, :1, :], [toks[0]]) if self.data.pooling == "first" else (
            last.mean(axis=1, keepdims=True), ["mean"])
        maps["pooled"], labels["pooled"] = pooled / pooled.max(axis=2, keepdims=True), (row, toks)
        return maps, labels, label
