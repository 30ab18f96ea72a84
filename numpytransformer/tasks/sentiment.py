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

With ``init`` (``--init DIR``) the run fine-tunes a pretrained BERT-family encoder instead (Devlin et
al., 2019; Sun et al., 2019, "How to Fine-Tune BERT for Text Classification?"): the reviews are cut
into the model's own WordPiece pieces, ``[CLS] head ... tail [SEP]``; the classifier is the
pretrained encoder, mean pooling (or the ``[CLS]`` vector) and a fresh linear head, every weight
trained with AdamW, a small rate, a linear warm-up and a linear decay (:data:`SentimentTask.FINETUNE`).
The checkpoint holds the vocabulary and the encoder's configuration, so it runs without ``DIR``.
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from ..nn.config import REGION_MAX, SIZE_LIMITS, TransformerConfig
from ..datasets.batching import length_batches, next_token_windows, pad_or_unk
from ..datasets.imdb import clean_review, imdb_test, reviews_digest, train_val_texts, truncate_ids
from ..errors import NumpyTransformerError
from ..nn.gpt import TransformerLM, next_token_nats
from ..nn.models import TransformerClassifier
from ..nn.transfer import lm_into_classifier
from ..pretrained import bert, files, load as load_pretrained
from ..pretrained.files import PretrainedError
from ..training.parallel import SingleProcess
from ..training.settings import ModelSettings, check_fields, flag_of, option
from ..core.softmax import softmax
from ..text import Tokenizer, Vocab
from ..text.wordpiece import WordPieceTokenizer
from ..training.trainer import TrainConfig, Trainer, TrainingTask
from .base import Task

__all__ = ["SentimentData", "SentimentTask", "ReviewText", "id_stream", "lm_loss_of_stream", "encoder_config",
           "LABELS"]

PAD, BOS, UNK = 0, 1, 3
LABELS = ("negative", "positive")  # by label id


@dataclass
class SentimentData:
    """The reviews, the text pipeline and the batching; with ``init``, the pretrained encoder to fine-tune
    (some defaults then follow :data:`SentimentTask.FINETUNE`)."""

    init: Optional[str] = option("--init", None, "fine-tune the pretrained BERT-family encoder of this Hugging Face directory "
                                 "(config.json, model.safetensors, vocab.txt; such as all-MiniLM-L6-v2) with its "
                                 "WordPiece tokenizer and a fresh linear head, instead of training a classifier from "
                                 "scratch; the unset options then take the fine-tuning recipe",
                                 none="off: a classifier from scratch")
    tokenizer: str = option("--tokenizer", "word", "word tokens, or BPE subwords", choices=("word", "bpe"))
    bpe_merges: int = option("--bpe-merges", 8000, "BPE merges", low=0, high=10 ** 6)
    cased: bool = option("--cased", False, "keep case (default: lower-case)")
    vocab_size: int = option("--vocab-size", 10000, "largest vocabulary, the 4 special tokens included", low=5, high=10 ** 7)
    min_freq: int = option("--min-freq", 2, "rarer tokens become <unk>", low=1, high=10 ** 6)
    max_tokens: Optional[int] = option("--max-tokens", None, "longer reviews are cut (with --init: pieces, [CLS] and [SEP] "
                                       "included)", low=1, high=SIZE_LIMITS["max_len"] - 1,  # + a <bos>
                                       none="512, or the fine-tuning recipe's with --init")
    truncate: str = option("--truncate", "head+tail", "keep the first and last halves (reviews often conclude at the end; "
                           "with --init the first quarter and the last three), or the start",
                           choices=("head+tail", "head"))
    pooling: str = option("--pooling", "mean", "mean of the token vectors, or the vector of a <bos> put in front (with "
                          "--init: of [CLS])", choices=("mean", "first"))
    val_fraction: Optional[float] = option("--val-fraction", None, "share of the training reviews held out for validation",
                                           low=0.001, high=0.999, none="0.1, or the fine-tuning recipe's with --init")
    n_train: Optional[int] = option("--n-train", None, "a stratified random subset of this many training reviews (before the "
                                    "validation split; 25000: all)", low=4, high=10 ** 7,
                                    none="all, or the fine-tuning recipe's with --init")
    n_test: Optional[int] = option("--n-test", None, "a stratified random subset of this many test reviews for the final "
                                   "report", low=2, high=10 ** 7, none="all")
    batch_tokens: Optional[int] = option("--batch-tokens", None, "token budget of a batch, padding included", low=1,
                                         high=10 ** 7, none="8192, or room for --max-batch-size reviews of --max-tokens "
                                                            "with --init")
    max_batch_size: Optional[int] = option("--max-batch-size", None, "most reviews in a batch", low=1, high=65536,
                                           none="128, or the fine-tuning recipe's with --init")
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
        if self.init is not None:
            self._resolve_finetuning()
        for name, default in (("max_tokens", 512), ("val_fraction", 0.1), ("batch_tokens", 8192),
                              ("max_batch_size", 128)):
            if getattr(self, name) is None:
                setattr(self, name, default)
        longest = self.max_tokens + (self.pooling == "first" and self.init is None)
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

    def _resolve_finetuning(self) -> None:
        """Refuse the options of a classifier from scratch (the pretrained model brings its tokenizer and
        encoder); fill the unset ones that the fine-tuning recipe sets."""
        scratch = [flag_of(self, f.name) for f in dataclasses.fields(self)
                   if f.name in ("tokenizer", "bpe_merges", "cased", "vocab_size", "min_freq", "causal", "pretrain_updates",
                                 "pretrain_block", "pretrain_batch") and getattr(self, f.name) != f.default]
        if self.region:
            scratch.append(flag_of(self, "region"))
        if scratch:
            raise NumpyTransformerError(f"{', '.join(scratch)}: for a classifier from scratch; --init brings its own "
                                        "WordPiece tokenizer and encoder")
        recipe = SentimentTask.FINETUNE
        self.region = 0
        for name in ("max_tokens", "val_fraction", "n_train", "max_batch_size"):
            if getattr(self, name) is None:
                setattr(self, name, recipe[name])
        if self.max_tokens < 3:
            raise NumpyTransformerError(f"--max-tokens {self.max_tokens}: with --init a review is [CLS] pieces [SEP]; "
                                        "expected at least 3")
        if self.batch_tokens is None:
            self.batch_tokens = self.max_batch_size * self.max_tokens


def encoder_config(directory) -> dict:
    """The ``config.json`` of the pretrained encoder that ``--init directory`` names, after refusing in one
    line a directory this task cannot fine-tune: another family (a GPT-2), or weights that are not in
    ``model.safetensors`` (a pickled ``.bin``, shards)."""
    directory = Path(directory)
    hf = files.read_config(directory)
    if hf.get("model_type") != bert.MODEL_TYPE:
        raise PretrainedError(f"--init {directory}: model_type={hf.get('model_type')!r}; the sentiment classifier "
                              f"fine-tunes a BERT-family encoder (model_type {bert.MODEL_TYPE!r}, such as MiniLM)")
    if not (directory / files.WEIGHTS).is_file():
        files.read_tensors(directory)  # refuses, naming what the directory holds instead
    return hf


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
    later_fields = ("init",)  # a checkpoint from before fine-tuning existed trained from scratch

    #: Fine-tuning a pretrained encoder (``--init``), after Sun et al. (2019): reviews cut to
    #: ``max_tokens`` pieces, the first quarter and the last three kept (``head_share``); batches of
    #: ``max_batch_size`` reviews; AdamW at peak rate ``lr`` with ``weight_decay``, a linear rise over
    #: ``warmup_share`` of the updates and a linear fall to zero over the rest; ``dropout`` in the
    #: encoder (and its attention). One pass over a stratified subset of ``n_train`` reviews, of
    #: which ``val_fraction`` validate, fixes the number of updates. Fewer pieces and reviews than
    #: the paper's 510 and 25,000: on a CPU every piece costs time in training and again in the test
    #: of all 25,000 reviews (benchmarks/RESULTS.md gives the run's time).
    FINETUNE = {"max_tokens": 128, "head_share": 0.25, "max_batch_size": 16, "n_train": 8000, "val_fraction": 0.05,
                "epochs": 1, "lr": 5e-5, "warmup_share": 0.06, "weight_decay": 0.01, "dropout": 0.1}

    @classmethod
    def recipe(cls, data: SentimentData):
        """From scratch: one small layer. With ``--init``: the pretrained encoder's shape and
        :data:`FINETUNE`; BERT's schedule is the cosine schedule with its floor at its peak (flat
        after the rise) and a cool-down over every update after the rise (a linear fall to zero)."""
        if data.init is None:
            # Two layers of d_model 128 reading 256 tokens overfitted after two epochs; one small
            # layer that reads twice as much of each review did better.
            return (ModelSettings(d_model=64, n_heads=4, n_layers=1, d_ff=128, dropout=0.3),
                    TrainConfig(epochs=4, lr_factor=0.5, warmup=500, label_smoothing=0.0, log_every=100))
        r, cfg = cls.FINETUNE, bert.model_config(encoder_config(data.init), "float32")
        updates = r["epochs"] * math.ceil(round(data.n_train * (1 - data.val_fraction)) / data.max_batch_size)
        warmup = max(1, round(r["warmup_share"] * updates))
        return (ModelSettings(d_model=cfg.d_model, n_heads=cfg.n_heads, n_layers=cfg.n_layers, d_ff=cfg.d_ff,
                              dropout=r["dropout"], norm="post"),
                TrainConfig(epochs=r["epochs"], schedule="cosine", lr=r["lr"], min_lr_ratio=1.0, warmup=warmup,
                            cooldown=1 - warmup / updates, weight_decay=r["weight_decay"], label_smoothing=0.0,
                            clip_norm=1.0, log_every=20))

    def check_settings(self) -> None:
        if self.data.pretrain_updates:
            needed = [flag for flag, ok in (("--causal", self.data.causal), ("--norm pre", self.model.norm == "pre"))
                      if not ok]
            if needed:
                raise NumpyTransformerError(f"--pretrain-updates needs {' and '.join(needed)}: the pretrained "
                                            "language model is causal and pre-LN")

    #: The final test scores each rank's share of the test reviews (see :meth:`test_report`).
    shares_test = True

    def __init__(self, data, model, data_dir=None, state=None):
        self._texts, self._ids, self.n_val_duplicates = {}, {}, 0
        super().__init__(data, model, data_dir, state)
        if data.init is None:
            self.tok, self.vocab = Tokenizer.from_dict(self.state["tokenizer"]), Vocab.from_dict(self.state["vocab"])
            self.wordpiece, self.pad_id, self.unk_id = None, PAD, UNK
        else:
            wp = self.state["wordpiece"]
            self.tok = self.vocab = None
            self.wordpiece = WordPieceTokenizer(wp["pieces"], wp["lower_case"])
            self.pad_id, self.unk_id = self.wordpiece.pad_id, self.wordpiece.unk_id
        # The ids around a review's tokens: [CLS] and [SEP], or the <bos> of first pooling.
        self.n_specials = 2 if data.init is not None else int(data.pooling == "first")

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
        """The tokenizer and vocabulary learned from the training reviews; with ``init``, the pretrained
        model's WordPiece vocabulary and configuration (``config.json``), read from its directory."""
        if self.data.init is not None:
            return self._pretrained_state()
        d, train = self.data, self.texts("train")[0]
        tok = Tokenizer.learn(d.tokenizer, train, d.bpe_merges, lowercase=not d.cased)
        vocab = Vocab.build((tok.tokenize(t) for t in train), min_freq=d.min_freq, max_size=d.vocab_size)
        return {"tokenizer": tok.to_dict(), "vocab": vocab.to_dict()}

    def _pretrained_state(self) -> dict:
        d, m = self.data, self.model
        hf = encoder_config(d.init)
        cfg = bert.model_config(hf, m.dtype)
        differ = [f"{flag_of(m, name)} {getattr(m, name)} (it has {ours})" for name, ours in
                  (("d_model", cfg.d_model), ("n_heads", cfg.n_heads), ("n_layers", cfg.n_layers), ("d_ff", cfg.d_ff),
                   ("norm", "post"), ("tie_embeddings", False)) if getattr(m, name) != ours]
        if differ:
            raise NumpyTransformerError(f"{', '.join(differ)}: the shape of a fine-tuned model is the pretrained "
                                        f"encoder's in --init {d.init}; leave these options out")
        if d.max_tokens > cfg.max_len:
            raise NumpyTransformerError(f"--max-tokens {d.max_tokens}: the encoder of --init {d.init} has "
                                        f"{cfg.max_len} positions; expected at most {cfg.max_len}")
        tok = WordPieceTokenizer.from_pretrained(d.init)
        if len(tok) > cfg.src_vocab_size or tok.pad_id != cfg.pad_id:
            raise PretrainedError(f"--init {d.init}: vocab.txt does not fit config.json ({len(tok)} pieces, [PAD] "
                                  f"{tok.pad_id}; vocab_size {cfg.src_vocab_size}, pad_token_id {cfg.pad_id})")
        return {"encoder": hf, "wordpiece": {"pieces": tok.pieces, "lower_case": tok.lower_case}}

    def data_summary(self) -> dict:
        """Review counts and a digest of the training and validation reviews."""
        train, val = self.texts("train"), self.texts("val")
        return {"train_reviews": len(train[0]), "val_reviews": len(val[0]), "sha256": reviews_digest(train, val)}

    def tokens(self, text: str, cut: bool = True) -> List[str]:
        """The kept tokens (or WordPiece pieces) of one raw review: cleaned, tokenized and (``cut``)
        truncated, leaving room for the special tokens around them."""
        text = clean_review(text)
        toks = self.tok.tokenize(text) if self.wordpiece is None else self.wordpiece.tokenize(text)
        if not cut:
            return toks
        budget = self.data.max_tokens - (self.n_specials if self.wordpiece is not None else 0)
        share = 0.5 if self.wordpiece is None else self.FINETUNE["head_share"]
        return [toks[i] for i in truncate_ids(range(len(toks)), budget, self.data.truncate, share)]

    def encode(self, text: str) -> np.ndarray:
        """Ids of one raw review; a ``<bos>`` in front when pooling is "first"; with ``init``,
        ``[CLS] pieces [SEP]``."""
        if self.wordpiece is not None:
            wp = self.wordpiece
            return np.array([wp.cls_id, *(wp.vocab[p] for p in self.tokens(text)), wp.sep_id], dtype=np.int64)
        return np.array([BOS] * (self.data.pooling == "first") + self.vocab.encode(self.tokens(text)), dtype=np.int64)

    def split_ids(self, split: str):
        """(id arrays, labels) of a split, encoded once."""
        if split not in self._ids:
            texts, labels = self.texts(split)
            self._ids[split] = ([self.encode(t) for t in texts], labels)
        return self._ids[split]

    def build_model(self) -> TransformerClassifier:
        if self.data.init is not None:  # the encoder of config.json, with this run's dropout and seed
            m = self.model
            return TransformerClassifier(dataclasses.replace(
                bert.model_config(self.state["encoder"], m.dtype), n_classes=len(LABELS), pooling=self.data.pooling,
                dropout=m.dropout, attention_dropout=m.dropout, seed=m.seed))
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
        if d.init is not None:
            self._load_encoder(model, log)
            return
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

    def _load_encoder(self, model: TransformerClassifier, log=print) -> None:
        """Copy the weights of the pretrained encoder (``init``) into ``model``'s encoder, whose
        parameters have the same names; the head keeps its fresh start."""
        encoder = load_pretrained(self.data.init, self.model.dtype).model
        theirs, ours = encoder.parameters(), model.parameters()
        wrong = [k for k, v in theirs.items() if k not in ours or ours[k].shape != v.shape]
        if wrong:
            raise PretrainedError(f"--init {self.data.init}: its {wrong[0]!r} does not fit the classifier built from "
                                  "the configuration read when the run started (did the directory change?)")
        for k, v in theirs.items():
            ours[k][...] = v
        fresh = sorted(set(ours) - set(theirs))
        log(f"fine-tuning the encoder of {self.data.init} ({encoder.num_parameters():,} parameters, "
            f"{encoder.cfg.n_layers} layers of {encoder.cfg.d_model}); fresh: {', '.join(fresh)}")

    # ---- training ----------------------------------------------------------------------------
    def train_batches(self, epoch: int) -> list:
        return length_batches(self.split_ids("train")[0], self.data.batch_tokens, shuffle=True,
                              seed=self.model.seed * 1000 + epoch, max_batch_size=self.data.max_batch_size)

    def batch_arrays(self, idx):
        ids, labels = self.split_ids("train")
        return (pad_or_unk([ids[i] for i in idx], self.pad_id, self.unk_id),), labels[idx]

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
            probs[idx] = softmax(model.forward(pad_or_unk([ids[i] for i in idx], self.pad_id, self.unk_id))
                                 .astype(np.float64))
        return probs

    def scores(self, model, ids, labels, probs: Optional[np.ndarray] = None) -> Dict[str, float]:
        """Mean cross-entropy and accuracy of encoded reviews (``probs``: their probabilities, if known)."""
        if not len(labels):  # a data file without this split's reviews
            raise NumpyTransformerError("there are no reviews to score: the data holds none of this split")
        probs = self.probabilities(model, ids) if probs is None else probs
        p_true = probs[np.arange(len(labels)), labels]
        return {"loss": float(-np.mean(np.log(np.maximum(p_true, 1e-300)))),
                "accuracy": float(np.mean(probs.argmax(axis=1) == labels))}

    def validate(self, model) -> Dict[str, float]:
        m = self.scores(model, *self.split_ids("val"))
        return {"val_loss": m["loss"], "accuracy": m["accuracy"]}

    def test_report(self, model, comm=None) -> Dict[str, float]:
        """Loss and accuracy on the test split. Under ``comm``, a run's ranks, each rank encodes and
        scores the reviews ``rank``, ``rank + size``, ...; one sum of the (N, 2) probabilities, zero
        at the others' rows, gives every rank all of them."""
        texts, labels = self.texts("test")
        comm = comm or SingleProcess()
        mine = comm.my_rows(np.arange(len(texts)))
        probs = np.zeros((len(texts), len(LABELS)))
        probs[mine] = self.probabilities(model, [self.encode(texts[i]) for i in mine])
        comm.allreduce_sum(probs)
        m = self.scores(model, None, labels, probs)
        return {"n": len(labels), "test_loss": m["loss"], "test_accuracy": m["accuracy"]}

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
        keep = [i for i, x in enumerate(ids) if len(x) > self.n_specials]
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
        toks = self.vocab.decode(x[0], strip_special=False) if self.wordpiece is None else self.wordpiece.decode(x[0])
        maps, labels = self.labelled_maps(model, toks)
        last = maps[list(maps)[-1]]
        pooled, row = (last[:, :1, :], [toks[0]]) if self.data.pooling == "first" else (
            last.mean(axis=1, keepdims=True), ["mean"])
        maps["pooled"], labels["pooled"] = pooled / pooled.max(axis=2, keepdims=True), (row, toks)
        return maps, labels, label
