"""Translation: Multi30K German<->English, or the embedded number-words pair.

The pipeline: tokenize (word level or BPE), map to ids with a vocabulary per language,
batch by length under a token budget, train the encoder-decoder with teacher forcing,
decode greedily or with beam search, and score with BLEU two ways:

(a) ``sacrebleu``: sacreBLEU's default, the measure the field reports: cased, 13a
    tokenization, on detokenised text (:data:`SIGNATURE`); it picks the best checkpoint;
(b) ``bleu``: lower-cased word tokens, corpus 4-gram BLEU, the way the well-known
    PyTorch tutorials report Multi30K (higher, and not comparable with (a)).
"""
from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import Dict, List, Optional, Sequence

import numpy as np

from ..text.bleu import bleu_tokens, corpus_bleu
from ..nn.config import REGION_MAX, TransformerConfig
from ..datasets.batching import bucket_batches, length_batches, pad_batch, pad_or_unk, teacher_forcing
from ..datasets.multi30k import load_multi30k
from ..datasets.numbers import make_number_pairs
from ..nn.decoding import beam_search, greedy_decode
from ..errors import NumpyTransformerError
from ..nn.models import Transformer
from ..training.settings import ModelSettings, check_fields, flag_of, option
from ..text import Tokenizer, Vocab, word_tokenize
from ..training.trainer import TrainConfig
from .base import Task

__all__ = ["TranslateData", "TranslationTask"]

PAD, BOS, EOS, UNK = 0, 1, 2, 3
#: sacreBLEU's signature of measure (a); numpytransformer.text.bleu computes it (tests compare with sacrebleu).
SIGNATURE = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp"


@dataclass
class TranslateData:
    """What the translation data is, how it is tokenized and batched."""

    dataset: str = option("--dataset", "numbers", "multi30k (its recipe trains a fixed number of epochs: a slower machine takes "
                          "longer, for the same result), or the embedded English->German number words (no download)",
                          choices=("numbers", "multi30k"))
    direction: str = option("--direction", "de-en", "Multi30K direction", choices=("de-en", "en-de"))
    tokenizer: Optional[str] = option("--tokenizer", None, "word tokens, or BPE subwords (learned per language)",
                                      choices=("word", "bpe"), none="bpe for multi30k, word for numbers")
    bpe_merges: int = option("--bpe-merges", 5000, "BPE merges per language (with --joint-vocab: for both together)",
                             low=0, high=10 ** 6)
    word_dropout: Optional[float] = option("--word-dropout", None, "in training, each source token and each decoder-input token "
                                           "(not <bos>) becomes <unk> with this probability, drawn afresh at every "
                                           "update (a regulariser for small data; 0: off)", low=0.0, high=0.9,
                                           none="0.1 for multi30k en-de (chosen on the validation split), 0 otherwise")
    joint_vocab: bool = option("--joint-vocab", False, "one tokenizer and one vocabulary learned on both languages; the encoder and "
                               "the decoder then read one embedding matrix (--tie shares it with the output too)")
    cased: bool = option("--cased", True, "keep case (--no-cased: lower-case everything, as the tutorials do)")
    min_freq: int = option("--min-freq", 2, "rarer words become <unk> (word tokens only: BPE keeps every subword it learned)",
                           low=1, high=10 ** 6)
    n_train: int = option("--n-train", 8000, "number-word training pairs", low=1, high=10 ** 6)
    n_val: int = option("--n-val", 500, "number-word validation pairs", low=1, high=10 ** 5)
    n_test: int = option("--n-test", 1000, "number-word test pairs", low=1, high=10 ** 5)
    max_number: int = option("--max-number", 9999, "largest number written out", low=1, high=10 ** 9)
    holdout: int = option("--holdout", 0, "hold out N Multi30K training pairs, drawn at random (the same for every seed), as "
                          "fresh sentences never trained or tuned on, scored at the end beside the test split "
                          "(0: train on all 29,000)",
                          low=0, high=28_000)
    batch_tokens: Optional[int] = option("--batch-tokens", None, "token budget of a batch, padding included", low=16, high=10 ** 7,
                                         none="3000 for multi30k, 1000 for numbers")
    max_len: int = option("--max-len", 128, "longest sentence in tokens; longer inputs are cut, with a warning",
                          low=4, high=4096)
    region: int = option("--region", 0, "each source token's input vector also adds the embeddings of its N neighbours on "
                         "each side, one table for each offset (a region embedding, as `train sentiment` has; the "
                         "decoder's input is untouched; 0: off)", low=0, high=REGION_MAX)
    length_penalty: Optional[float] = option("--length-penalty", None, "beam search's length penalty: a hypothesis's log-probability "
                                             "is divided by ((5 + length) / 6) ** X (GNMT's)", low=0.0, high=10.0,
                                             none="1.6 for multi30k de-en, 1.2 for en-de (chosen on the validation "
                                                  "split), 0.6 for numbers")

    def __post_init__(self):
        check_fields(self)
        if self.holdout and self.dataset != "multi30k":
            raise NumpyTransformerError("--holdout: for Multi30K only; the number words draw fresh pairs as --n-test")
        numbers_only = [flag_of(self, f.name) for f in fields(self)
                        if f.name in ("n_train", "n_val", "n_test", "max_number") and getattr(self, f.name) != f.default]
        if self.dataset == "multi30k" and numbers_only:
            raise NumpyTransformerError(f"{', '.join(numbers_only)}: for the number words only; Multi30K's splits are "
                                        "fixed (29,000, 1,014 and 1,000 pairs)")
        if self.dataset == "numbers" and self.n_train + self.n_val + self.n_test > self.max_number + 1:
            raise NumpyTransformerError(f"--n-train + --n-val + --n-test is {self.n_train + self.n_val + self.n_test} "
                                        f"numbers; 0..--max-number {self.max_number} holds only {self.max_number + 1}")
        if self.batch_tokens is None:
            self.batch_tokens = 3000 if self.dataset == "multi30k" else 1000
        if self.tokenizer is None:
            self.tokenizer = "bpe" if self.dataset == "multi30k" else "word"
        recipe = TranslationTask.MULTI30K[self.direction]  # data settings, but the recipe's choices
        if self.word_dropout is None:
            self.word_dropout = recipe["word_dropout"] if self.dataset == "multi30k" else 0.0
        if self.length_penalty is None:
            self.length_penalty = recipe["length_penalty"] if self.dataset == "multi30k" else 0.6

    @property
    def langs(self):
        return tuple(self.direction.split("-")) if self.dataset == "multi30k" else ("en", "de")


def holdout_split(pairs: List[tuple], n: int):
    """``(kept, held_out)``, each in file order, as ``--holdout n`` splits the training pairs: one draw
    with a fixed seed, whatever the model's."""
    drawn = set(np.random.default_rng(0).choice(len(pairs), n, replace=False).tolist())
    return [p for i, p in enumerate(pairs) if i not in drawn], [p for i, p in enumerate(pairs) if i in drawn]


class TranslationTask(Task):
    """Data, vocabularies, model, loss and BLEU for the trainer and the command line."""

    name = "translate"
    Data = TranslateData
    selection_metric = "sacrebleu"
    default_eval_n = 0
    summary = "translation: Multi30K de<->en, or embedded number words"

    #: Multi30K's epochs, dropout, Noam factor, weight decay (AdamW), word dropout and beam length
    #: penalty by direction, chosen on the validation split (de -> en keeps the first recipe's
    #: factor, untuned; en -> de alone has the decay and word dropout; TranslateData reads the last
    #: two). The epochs are a fixed count, not a time budget, so that a slower machine takes longer
    #: for the same result.
    MULTI30K = {"de-en": {"epochs": 28, "dropout": 0.2, "lr_factor": 0.5, "weight_decay": 0.0, "word_dropout": 0.0,
                          "length_penalty": 1.6},
                "en-de": {"epochs": 28, "dropout": 0.2, "lr_factor": 1.0, "weight_decay": 0.2, "word_dropout": 0.1,
                          "length_penalty": 1.2}}

    @classmethod
    def recipe(cls, data: TranslateData):
        """The number words: 8 epochs. Multi30K: the epochs, dropout, Noam factor and weight decay of
        :data:`MULTI30K`, about 155 updates an epoch, the target embedding tied to the output
        projection, and the rate falling linearly to 0 over the last 30% of the updates; the last 5
        epochs are kept, and their average replaces the best epoch only if it validates better."""
        model = ModelSettings(d_model=256, n_heads=8, n_layers=3, d_ff=512, dropout=0.1)
        if data.dataset == "multi30k":
            direction = cls.MULTI30K[data.direction]
            return (replace(model, tie_embeddings=True, dropout=direction["dropout"]),
                    TrainConfig(epochs=direction["epochs"], lr_factor=direction["lr_factor"], warmup=600,
                                weight_decay=direction["weight_decay"], cooldown=0.3, keep_epochs=5,
                                log_every=50))
        return model, TrainConfig(epochs=8, lr_factor=0.5, warmup=400, log_every=50)

    def __init__(self, data, model, data_dir=None, state=None):
        self._ids: Dict[str, tuple] = {}
        super().__init__(data, model, data_dir, state)
        self.src_tok, self.tgt_tok = (Tokenizer.from_dict(self.state[k]) for k in ("src_tokenizer", "tgt_tokenizer"))
        self.src_vocab, self.tgt_vocab = (Vocab.from_dict(self.state[k]) for k in ("src_vocab", "tgt_vocab"))

    # ---- data and vocabularies ------------------------------------------------------------
    @cached_property
    def pairs(self) -> Dict[str, List[tuple]]:
        """``{"train"|"val"|"test": [(source, target), ...]}`` as raw text, read when first needed;
        with ``holdout`` N, also ``"fresh"``: N training pairs drawn at random, taken out of ``"train"``.
        Not the file's last N: it is in image order, and its tail is longer and less like the rest."""
        d = self.data
        if d.dataset == "numbers":
            return make_number_pairs(d.n_train, d.n_val, d.n_test, self.model.seed, d.max_number)
        pairs = {split: load_multi30k(split, self.data_dir, *d.langs) for split in ("train", "val", "test")}
        if d.holdout:
            if d.holdout >= len(pairs["train"]):
                raise NumpyTransformerError(f"--holdout {d.holdout}: the training split has only "
                                            f"{len(pairs['train'])} pairs; hold out fewer")
            pairs["train"], pairs["fresh"] = holdout_split(pairs["train"], d.holdout)
        return pairs

    def build_state(self) -> dict:
        d, train = self.data, self.pairs["train"]

        def learn(texts):
            tok = Tokenizer.learn(d.tokenizer, texts, d.bpe_merges, lowercase=not d.cased)
            min_freq = d.min_freq if d.tokenizer == "word" else 1  # so no <unk> is ever a training target
            return tok.to_dict(), Vocab.build([tok.tokenize(t) for t in texts], min_freq=min_freq).to_dict()

        src, tgt = [p[0] for p in train], [p[1] for p in train]
        src_side = learn(src + tgt if d.joint_vocab else src)
        tgt_side = src_side if d.joint_vocab else learn(tgt)  # a joint vocabulary serves both sides
        return {"src_tokenizer": src_side[0], "src_vocab": src_side[1],
                "tgt_tokenizer": tgt_side[0], "tgt_vocab": tgt_side[1]}

    def data_summary(self) -> dict:
        """Pair counts and a digest of the training and validation pairs."""
        train, val = self.pairs["train"], self.pairs["val"]
        h = hashlib.sha256()
        for a, b in train + val:
            h.update(f"{a}\t{b}\n".encode())
        return {"train_pairs": len(train), "val_pairs": len(val), "sha256": h.hexdigest()}

    def encode_src(self, text: str) -> np.ndarray:
        return np.array(self.src_vocab.encode(self.src_tok.tokenize(text)), dtype=np.int64)

    def encode_tgt(self, text: str) -> np.ndarray:
        return np.array(self.tgt_vocab.encode(self.tgt_tok.tokenize(text)), dtype=np.int64)

    def split_ids(self, split: str):
        """(source id arrays, target id arrays) of a split, cut to ``max_len``, encoded once."""
        if split not in self._ids:
            n = self.data.max_len
            src = [self.encode_src(a)[:n] for a, _ in self.pairs[split]]
            tgt = [self.encode_tgt(b)[:n - 1] for _, b in self.pairs[split]]
            self._ids[split] = (src, tgt)
        return self._ids[split]

    def build_model(self) -> Transformer:
        return Transformer(TransformerConfig(src_vocab_size=len(self.src_vocab), tgt_vocab_size=len(self.tgt_vocab),
                                             max_len=self.data.max_len, pad_id=PAD,
                                             share_embeddings=self.data.joint_vocab, region=self.data.region,
                                             **self.model.config_fields()))

    # ---- training -------------------------------------------------------------------------
    def _index_batches(self, split: str, shuffle: bool, seed: int = 0) -> List[np.ndarray]:
        src, tgt = self.split_ids(split)
        lengths = (np.array([len(x) for x in src]), np.array([len(y) + 1 for y in tgt]))
        return [(split, idx) for idx in bucket_batches(lengths, self.data.batch_tokens, shuffle=shuffle, seed=seed)]

    def train_batches(self, epoch: int) -> list:
        return self._index_batches("train", shuffle=True, seed=self.model.seed * 1000 + epoch)

    def shard(self, batch, rank: int, size: int):
        split, idx = batch
        rows = super().shard(idx, rank, size)
        return None if rows is None else (split, rows)

    def batch_arrays(self, batch):
        """``((src, tgt_in), tgt_out)``: BOS before the decoder's input, EOS after its output."""
        split, idx = batch
        src, tgt = self.split_ids(split)
        tgt_in, tgt_out = teacher_forcing([tgt[i] for i in idx], BOS, EOS, PAD)
        return (pad_batch([src[i] for i in idx], PAD), tgt_in), tgt_out

    def noised(self, model, inputs: tuple) -> tuple:
        """Word dropout: each source and decoder-input token but padding and <bos> becomes <unk> with
        probability ``word_dropout``, drawn from the model's dropout generator; in training mode only."""
        p = self.data.word_dropout
        if not (p and model.training):
            return inputs
        return tuple(np.where((model.rng.random(ids.shape) < p) & (ids != PAD) & (ids != BOS), UNK, ids)
                     for ids in inputs)

    def target_count(self, batch) -> int:
        """From the lengths, without padding: each target sentence and its EOS."""
        split, idx = batch
        tgt = self.split_ids(split)[1]
        return sum(len(tgt[i]) + 1 for i in idx)

    # ---- decoding and BLEU ------------------------------------------------------------------
    def translate_ids(self, model, src: Sequence[np.ndarray], beam: int = 1, length_penalty: Optional[float] = None):
        """Decoded target ids for source id arrays, batched by length, in the input's order; beam search
        divides by the data settings' length penalty unless ``length_penalty`` is given."""
        length_penalty = self.data.length_penalty if length_penalty is None else length_penalty
        model.eval()
        out: List[Optional[List[int]]] = [None] * len(src)
        for idx in length_batches(src, 6000, max_batch_size=256):
            batch = pad_or_unk([src[i] for i in idx], PAD, UNK)
            n = min(int(batch.shape[1] * 1.5) + 10, self.data.max_len)
            hyps = (beam_search(model, batch, n, beam, length_penalty, BOS, EOS) if beam > 1
                    else greedy_decode(model, batch, n, BOS, EOS))
            for i, h in zip(idx, hyps):
                out[i] = h
        return out

    def detok(self, ids: Sequence[int]) -> str:
        return self.tgt_tok.detokenize(self.tgt_vocab.decode(ids))

    def hypotheses(self, model, split: str, beam: int = 1, limit: Optional[int] = None,
                   length_penalty: Optional[float] = None):
        """``(translations, references)`` of a split's first ``limit`` pairs, as detokenised text."""
        ids = self.translate_ids(model, self.split_ids(split)[0][:limit], beam, length_penalty)
        return [self.detok(h) for h in ids], [t for _, t in self.pairs[split][:limit]]

    def bleu(self, model, split: str, beam: int = 1, limit: Optional[int] = None,
             length_penalty: Optional[float] = None) -> Dict[str, float]:
        """BLEU of a split: ``sacrebleu`` is measure (a), ``bleu`` measure (b)."""
        hyps, refs = self.hypotheses(model, split, beam, limit, length_penalty)
        a = bleu_tokens([word_tokenize(h, lowercase=True) for h in hyps], [word_tokenize(r, lowercase=True) for r in refs])
        return {"sacrebleu": corpus_bleu(hyps, refs).score, "bleu": a.score}

    def validate(self, model) -> Dict[str, float]:
        return {"val_loss": self.mean_loss(model, self._index_batches("val", shuffle=False)), **self.bleu(model, "val")}

    def test_report(self, model) -> Dict[str, float]:
        report = {}
        for split in ("test", "fresh") if self.data.holdout else ("test",):
            greedy, beam = self.bleu(model, split), self.bleu(model, split, beam=4)
            for measure in ("sacrebleu", "bleu"):
                report.update({f"{split}_{measure}_greedy": greedy[measure], f"{split}_{measure}_beam4": beam[measure]})
        return {**report, "signature": SIGNATURE}

    def evaluate(self, model, n: int, seed: int, beam: int = 1) -> Dict[str, float]:
        """BLEU on the test split (``n`` > 0: its first n pairs)."""
        limit = self.eval_count(n) or None
        return {"split": "test", "n": len(self.pairs["test"][:limit]), **self.bleu(model, "test", beam=beam, limit=limit),
                "signature": SIGNATURE}

    # ---- the user's side ----------------------------------------------------------------------
    def example_input(self) -> str:
        if self.data.dataset == "numbers":
            return "three hundred forty-seven"
        return "Ein Mann fährt Fahrrad." if self.data.langs[0] == "de" else "A man rides a bike."

    def predict(self, model, lines: Sequence[str], beam: int = 1) -> List[str]:
        """Translate each line; an empty line gives an empty line. Longer inputs than the model
        reads are cut, with a warning on standard error."""
        src, n = [self.encode_src(line) for line in lines], self.data.max_len
        for i, x in enumerate(src):
            if len(x) > n:
                print(f"warning: line {i + 1} has {len(x)} tokens; only the first {n} are translated", file=sys.stderr)
        keep = [i for i, x in enumerate(src) if len(x)]
        hyps = dict(zip(keep, self.translate_ids(model, [src[i][:n] for i in keep], beam)))
        return [self.detok(hyps[i]) if i in hyps else "" for i in range(len(lines))]

    def attention(self, model, text: str):
        src_ids = self.encode_src(text)[:self.data.max_len]
        if not len(src_ids):
            raise NumpyTransformerError("the sentence is empty")
        hyp = self.translate_ids(model, [src_ids])[0][:self.data.max_len - 1]  # so that [BOS] + hyp fits the model
        model.forward(src_ids[None], np.array([[BOS] + hyp], dtype=np.int64))
        maps, labels = self.labelled_maps(model, self.src_vocab.decode(src_ids, strip_special=False),
                                          ["<bos>"] + self.tgt_vocab.decode(hyp, strip_special=False))
        return maps, labels, self.detok(hyp)
