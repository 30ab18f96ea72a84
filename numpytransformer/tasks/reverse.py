"""Sequence reversal, in two formulations.

- ``seq2seq``: an encoder-decoder reads ``3 5 4 2 1`` and writes ``1 2 4 5 3`` token by
  token after BOS, ending with EOS (decoded greedily or with beam search).
- ``tagger``: an encoder-only model reads the input padded to ``max_len`` and predicts
  at each position ``i`` the token at position ``len - 1 - i``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, List, Sequence

import numpy as np

from ..config import TransformerConfig
from ..datasets.batching import bucket_batches
from ..datasets.reverse import ReverseTask, make_splits, seq2seq_batch, tagger_batch
from ..decoding import beam_search, greedy_decode
from ..losses import cross_entropy
from ..metrics import sequence_metrics
from ..models import Transformer, TransformerTagger

__all__ = ["ReverseSettings", "ReversalTask"]

PAD, BOS, EOS = 0, 1, 2


@dataclass
class ReverseSettings:
    """What defines a reversal run: the data, the formulation and the model's shape."""

    formulation: str = "seq2seq"
    n_symbols: int = 20
    min_len: int = 1
    max_len: int = 20
    n_train: int = 40000
    n_val: int = 500
    n_test: int = 1000
    seed: int = 0
    batch_tokens: int = 3000
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 256
    dropout: float = 0.0
    dtype: str = "float32"
    norm_first: bool = False

    def __post_init__(self):
        if self.formulation not in ("seq2seq", "tagger"):
            raise ValueError(f"formulation must be 'seq2seq' or 'tagger', got {self.formulation!r}")


class ReversalTask:
    """Reversal data, model construction, loss and evaluation for the :class:`~numpytransformer.trainer.Trainer`."""

    selection_metric = "exact_match"

    def __init__(self, settings: ReverseSettings):
        self.s = settings
        self.spec = ReverseTask(settings.n_symbols, settings.min_len, settings.max_len)
        self._splits = None

    # ---- settings -------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"name": "reverse", **asdict(self.s)}

    @classmethod
    def from_dict(cls, d: dict) -> "ReversalTask":
        d = {k: v for k, v in d.items() if k != "name"}
        return cls(ReverseSettings(**d))

    def model_config(self) -> TransformerConfig:
        s = self.s
        # seq2seq targets are BOS + reversed (or reversed + EOS): one longer than the input.
        return TransformerConfig(src_vocab_size=self.spec.vocab_size, d_model=s.d_model, n_heads=s.n_heads,
                                 n_layers=s.n_layers, d_ff=s.d_ff, max_len=s.max_len + 2, dropout=s.dropout,
                                 pad_id=PAD, dtype=s.dtype, seed=s.seed, norm_first=s.norm_first)

    def build_model(self):
        cfg = self.model_config()
        return Transformer(cfg) if self.s.formulation == "seq2seq" else TransformerTagger(cfg)

    # ---- data -----------------------------------------------------------------
    @property
    def splits(self):
        if self._splits is None:
            s = self.s
            self._splits = make_splits(self.spec, s.n_train, s.n_val, s.n_test, s.seed)
        return self._splits

    def train_batches(self, epoch: int) -> List[np.ndarray]:
        train = self.splits[0]
        lengths = np.array([len(x) for x in train])
        idx_batches = bucket_batches(lengths + 1, self.s.batch_tokens, shuffle=True, seed=self.s.seed * 1000 + epoch)
        return [[train[i] for i in b] for b in idx_batches]

    def make_batch(self, seqs):
        if self.s.formulation == "seq2seq":
            return seq2seq_batch(seqs, PAD, BOS, EOS)
        return tagger_batch(seqs, self.s.max_len, PAD)

    # ---- training ---------------------------------------------------------------
    def forward_backward(self, model, seqs, label_smoothing: float, scale: float = 1.0):
        if self.s.formulation == "seq2seq":
            src, tgt_in, tgt_out = self.make_batch(seqs)
            logits = model.forward(src, tgt_in)
        else:
            src, tgt_out = self.make_batch(seqs)
            logits = model.forward(src)
        loss, dlogits = cross_entropy(logits, tgt_out, pad_id=PAD, label_smoothing=label_smoothing)
        if scale != 1.0:
            dlogits *= dlogits.dtype.type(scale)
        model.backward(dlogits)
        return loss, int((tgt_out != PAD).sum())

    # ---- inference --------------------------------------------------------------
    def predict_ids(self, model, seqs: Sequence[np.ndarray], beam: int = 1, batch_size: int = 500) -> List[List[int]]:
        """Reversed id sequences predicted for ``seqs`` (lists of content ids)."""
        out: List[List[int]] = []
        for i in range(0, len(seqs), batch_size):
            chunk = seqs[i:i + batch_size]
            if self.s.formulation == "seq2seq":
                src = seq2seq_batch(chunk, PAD, BOS, EOS)[0]
                if beam > 1:
                    out += beam_search(model, src, max_len=self.s.max_len + 1, beam_size=beam, bos_id=BOS, eos_id=EOS)
                else:
                    out += greedy_decode(model, src, max_len=self.s.max_len + 1, bos_id=BOS, eos_id=EOS)
            else:
                x, _ = tagger_batch(chunk, self.s.max_len, PAD)
                pred = model.forward(x).argmax(axis=-1)
                out += [list(map(int, pred[j, :len(chunk[j])])) for j in range(len(chunk))]
        return out

    def evaluate(self, model, seqs: Sequence[np.ndarray], beam: int = 1) -> Dict[str, float]:
        model.eval()
        preds = self.predict_ids(model, seqs, beam)
        refs = [list(map(int, s[::-1])) for s in seqs]
        return sequence_metrics(preds, refs)

    def validation_loss(self, model, seqs, batch_size: int = 500) -> float:
        total, n = 0.0, 0
        for i in range(0, len(seqs), batch_size):
            batch = self.make_batch(seqs[i:i + batch_size])
            if self.s.formulation == "seq2seq":
                logits, tgt_out = model.forward(batch[0], batch[1]), batch[2]
            else:
                logits, tgt_out = model.forward(batch[0]), batch[1]
            loss, _ = cross_entropy(logits, tgt_out, pad_id=PAD)
            k = int((tgt_out != PAD).sum())
            total, n = total + loss * k, n + k
        return total / max(n, 1)

    def validate(self, model) -> Dict[str, float]:
        val = self.splits[1]
        return {"val_loss": self.validation_loss(model, val), **self.evaluate(model, val)}

    # ---- the user's side: symbols ------------------------------------------------
    def parse(self, text: str) -> np.ndarray:
        """``"3 5 4 2 1"`` -> content ids, with a clear error for bad symbols or lengths."""
        parts = text.split()
        if not parts:
            raise ValueError("the sequence is empty: give symbols separated by spaces, e.g. \"3 5 4 2 1\"")
        symbols = []
        for p in parts:
            try:
                symbols.append(int(p))
            except ValueError:
                raise ValueError(f"unknown token {p!r}: symbols are the integers 1..{self.s.n_symbols}") from None
        return self.spec.encode_symbols(symbols)

    def format(self, ids: Sequence[int]) -> str:
        return " ".join(str(i - 3) if i > 3 else "?" for i in ids)
