"""Sequence reversal, in two formulations.

- ``seq2seq``: an encoder-decoder reads ``3 5 4 2 1`` and writes ``1 2 4 5 3`` token by
  token after BOS, ending with EOS (decoded greedily or with beam search).
- ``tagger``: an encoder-only model reads the input padded to ``max_len`` and predicts
  at each position ``i`` the token at position ``len - 1 - i``.

Lengths 1 and 2 are trained on completely (see
:func:`~numpytransformer.datasets.reverse.short_lengths`); ``eval`` reports exact match per length.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Dict, List, Sequence

import numpy as np

from ..nn.config import TransformerConfig
from ..datasets.batching import pad_batch, teacher_forcing
from ..datasets.reverse import SymbolSequences, fresh_sequences, short_lengths, training_splits
from ..nn.decoding import beam_search, greedy_decode
from ..errors import NumpyTransformerError
from .metrics import sequence_metrics
from ..nn.models import Transformer, TransformerTagger
from ..training.settings import ModelSettings, check_fields, option
from ..training.trainer import TrainConfig
from .base import Task

__all__ = ["ReverseData", "ReversalTask"]

PAD, BOS, EOS = 0, 1, 2


@dataclass
class ReverseData:
    """What the sequences are, and how they are batched."""

    formulation: str = option("--formulation", "seq2seq", "encoder-decoder with BOS/EOS, or encoder-only per-position tagger",
                              choices=("seq2seq", "tagger"))
    n_symbols: int = option("--n-symbols", 20, "symbols are 1..N", low=1, high=10_000)
    min_len: int = option("--min-len", 1, "shortest sequence", low=1, high=512)
    max_len: int = option("--max-len", 20, "longest sequence", low=1, high=512)
    n_train: int = option("--n-train", 20000, "training sequences", low=1, high=10 ** 7)
    n_val: int = option("--n-val", 500, "validation sequences", low=1, high=10 ** 6)
    n_test: int = option("--n-test", 1000, "test sequences", low=1, high=10 ** 6)
    batch_size: int = option("--batch-size", 128, "sequences per batch", low=1, high=65536)

    def __post_init__(self):
        check_fields(self)
        if self.max_len < self.min_len:
            raise NumpyTransformerError(f"--max-len {self.max_len} is less than --min-len {self.min_len}")
        wanted = self.n_train + self.n_val + self.n_test
        exist = sum(self.n_symbols ** length for length in range(self.min_len, self.max_len + 1))
        if wanted > exist:
            raise NumpyTransformerError(f"--n-train + --n-val + --n-test is {wanted} sequences; only {exist} "
                                        f"distinct ones of --n-symbols {self.n_symbols}, lengths {self.min_len}-"
                                        f"{self.max_len} exist")


class ReversalTask(Task):
    """Reverse sequences of integer symbols, e.g. '3 5 4 2 1' -> '1 2 4 5 3'."""

    name = "reverse"
    Data = ReverseData
    selection_metric = "exact_match"
    summary = "sequence reversal (the quick demo)"

    @classmethod
    def recipe(cls, data: ReverseData):
        # Pre-LN and a Noam factor of 0.15 learn fast; the rate falling to 0 over the last 30%
        # of the updates ends the epoch-to-epoch swing of exact match, so the last epochs are
        # as good as the best one.
        model = ModelSettings(d_model=64, n_heads=4, n_layers=2, d_ff=256, dropout=0.0, norm="pre")
        return model, TrainConfig(epochs=9, lr_factor=0.15, warmup=100, label_smoothing=0.1, clip_norm=1.0,
                                  log_every=200, cooldown=0.3)

    def __init__(self, data, model, data_dir=None, state=None):
        super().__init__(data, model, data_dir, state)
        self.spec = SymbolSequences(data.n_symbols, data.min_len, data.max_len)
        self.searches = data.formulation == "seq2seq"  # the tagger reads its output off: no --beam

    # ---- data -----------------------------------------------------------------------
    @cached_property
    def splits(self):
        """(train, val, test) lists of content-id arrays (see :func:`training_splits`)."""
        d = self.data
        return training_splits(self.spec, d.n_train, d.n_val, d.n_test, self.model.seed)

    def short_lengths(self) -> List[int]:
        """The lengths trained on completely (and so not held out)."""
        return short_lengths(self.spec, self.data.n_train)

    def train_batches(self, epoch: int) -> list:
        """Random batches of mixed lengths, reshuffled every epoch (bucketing by length made
        each update fit one length, and validation swung from one length to the next)."""
        train = self.splits[0]
        order = np.random.default_rng([self.model.seed, epoch]).permutation(len(train))
        bs = self.data.batch_size
        return [[train[i] for i in order[j:j + bs]] for j in range(0, len(order), bs)]

    def target(self, seq: np.ndarray) -> np.ndarray:
        """What the model must output for ``seq``: here its reversal (a subclass may change it)."""
        return seq[::-1]

    def batch_arrays(self, seqs):
        """seq2seq: ``((src, [BOS] + target), target + [EOS])``; tagger: ``((x,), target)``, padded to max_len."""
        targets = [self.target(np.asarray(s)) for s in seqs]
        if self.data.formulation == "tagger":
            n = self.data.max_len
            return (pad_batch(seqs, PAD, max_len=n),), pad_batch(targets, PAD, max_len=n)
        tgt_in, tgt_out = teacher_forcing(targets, BOS, EOS, PAD)
        return (pad_batch(seqs, PAD), tgt_in), tgt_out

    def target_count(self, seqs) -> int:
        """From the lengths, without padding: a target is as long as its sequence, plus EOS in seq2seq."""
        return sum(len(s) for s in seqs) + (len(seqs) if self.data.formulation == "seq2seq" else 0)

    def build_model(self):
        # seq2seq targets are BOS + reversed: one longer than the input; one position spare.
        cfg = TransformerConfig(src_vocab_size=self.spec.vocab_size, max_len=self.data.max_len + 2, pad_id=PAD,
                                **self.model.config_fields())
        return Transformer(cfg) if self.data.formulation == "seq2seq" else TransformerTagger(cfg)

    # ---- evaluation -------------------------------------------------------------------------
    def predict_ids(self, model, seqs: Sequence[np.ndarray], beam: int = 1, batch_size: int = 500) -> List[List[int]]:
        """Reversed id sequences predicted for ``seqs`` (content ids)."""
        model.eval()
        out: List[List[int]] = []
        for i in range(0, len(seqs), batch_size):
            chunk = seqs[i:i + batch_size]
            if self.data.formulation == "tagger":
                pred = model.forward(pad_batch(chunk, PAD, max_len=self.data.max_len)).argmax(axis=-1)
                out += [list(map(int, pred[j, :len(chunk[j])])) for j in range(len(chunk))]
                continue
            src, n = pad_batch(chunk, PAD), self.data.max_len + 1
            out += (beam_search(model, src, max_len=n, beam_size=beam, bos_id=BOS, eos_id=EOS) if beam > 1
                    else greedy_decode(model, src, max_len=n, bos_id=BOS, eos_id=EOS))
        return out

    def metrics(self, model, seqs: Sequence[np.ndarray], beam: int = 1, by_length: bool = False) -> Dict[str, float]:
        """Token accuracy and exact match (and, ``by_length``, exact match at each length)."""
        preds = self.predict_ids(model, seqs, beam)
        refs = [list(map(int, self.target(s))) for s in seqs]
        out = sequence_metrics(preds, refs)
        if by_length:
            for L in sorted({len(s) for s in seqs}):
                hits = [p == r for p, r in zip(preds, refs) if len(r) == L]
                out[f"exact_len{L}"] = float(np.mean(hits))
        return out

    def validate(self, model) -> Dict[str, float]:
        val = self.splits[1]
        return {"val_loss": self.mean_loss(model, [val[i:i + 500] for i in range(0, len(val), 500)]),
                **self.metrics(model, val)}

    def test_report(self, model) -> Dict[str, float]:
        return self.evaluate(model, n=self.data.n_test, seed=1)

    def evaluate(self, model, n: int, seed: int, beam: int = 1) -> Dict[str, float]:
        """Metrics on ``n`` fresh sequences (in neither the training nor the validation split, but for
        the short lengths), overall and at each length; 0 ("all" has no meaning for a generator): 1000."""
        n, short = self.eval_count(n), self.short_lengths()
        seqs = fresh_sequences(self.spec, n, seed, self.splits[0] + self.splits[1], short)
        note = {"trained_on_lengths": f"{short[0]}-{short[-1]}"} if short else {}
        return {"n": n, **note, **self.metrics(model, seqs, beam, by_length=True)}

    # ---- the user's side --------------------------------------------------------------------
    def parse(self, text: str) -> np.ndarray:
        """``"3 5 4 2 1"`` -> content ids, with a clear error for bad symbols or lengths."""
        parts, d = text.split(), self.data
        if not parts:
            raise NumpyTransformerError('the sequence is empty: give symbols separated by spaces, e.g. "3 5 4 2 1"')
        if len(parts) > d.max_len:
            raise NumpyTransformerError(f"the sequence has {len(parts)} symbols; this model reverses at most {d.max_len}")
        for p in parts:
            if not (p.isascii() and p.isdigit() and 1 <= int(p) <= d.n_symbols):
                raise NumpyTransformerError(f"unknown symbol {p!r}: symbols are the integers 1..{d.n_symbols}")
        return np.array([int(p) + 3 for p in parts], dtype=np.int64)

    def format(self, ids: Sequence[int]) -> str:
        """Predicted ids as symbols; a special token emitted mid-sequence shows by name."""
        names = {PAD: "<pad>", BOS: "<bos>", EOS: "<eos>", 3: "<unk>"}
        return " ".join(names.get(int(i), str(int(i) - 3)) for i in ids)

    def example_input(self) -> str:
        symbols = [x for x in [3, 5, 4, 2, 1] if x <= self.data.n_symbols][:self.data.max_len]
        return " ".join(map(str, symbols))

    def predict(self, model, lines: Sequence[str], beam: int = 1) -> List[str]:
        """The output for each line of symbols; an empty line gives an empty line."""
        seqs = {}
        for i, line in enumerate(lines):
            try:
                if line.strip():
                    seqs[i] = self.parse(line)
            except NumpyTransformerError as e:
                raise NumpyTransformerError(f"line {i + 1}: {e}" if len(lines) > 1 else str(e)) from None
        outs = dict(zip(seqs, self.predict_ids(model, list(seqs.values()), beam)))
        return [self.format(outs[i]) if i in outs else "" for i in range(len(lines))]

    def attention(self, model, text: str):
        x = self.parse(text)
        pred = self.predict_ids(model, [x])[0]
        if self.data.formulation == "seq2seq":
            model.forward(x[None], np.array([[BOS] + pred], dtype=np.int64))
        else:
            model.forward(x[None])
        maps, labels = self.labelled_maps(model, text.split(), ["<bos>"] + self.format(pred).split())
        return maps, labels, self.format(pred)
