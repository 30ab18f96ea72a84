"""Translation: Multi30K German<->English, or the embedded number-words pair.

The pipeline: tokenize (word level or BPE), map to ids with a vocabulary per
language, batch by length under a token budget, train the encoder-decoder with
teacher forcing, decode greedily or with beam search, and score with BLEU two ways:

(a) ``bleu_tokens``: lower-cased word tokens, corpus 4-gram BLEU, the way the
    well-known PyTorch tutorials report Multi30K;
(b) ``sacrebleu``: sacreBLEU's definition (13a tokenization) on detokenised text
    (lower-cased too when the model is trained lower-cased).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np

from ..bleu import bleu_tokens, corpus_bleu
from ..config import TransformerConfig
from ..datasets.batching import bucket_batches, pad_batch
from ..datasets.multi30k import load_multi30k
from ..datasets.numbers import make_number_pairs
from ..decoding import beam_search, greedy_decode
from ..models import Transformer
from ..text import BPE, Tokenizer, Vocab, word_tokenize
from ..trainer import TrainConfig
from .common import loss_and_backward, mean_loss

__all__ = ["TranslateSettings", "TranslationTask", "MULTI30K_TRAIN", "NUMBERS_TRAIN", "RECIPES"]

PAD, BOS, EOS, UNK = 0, 1, 2, 3

#: The Multi30K recipe: a time budget of 52 minutes (the epoch that crosses it finishes),
#: about 150 updates of 3,000 tokens an epoch. See benchmarks/RESULTS.md for what it reaches.
MULTI30K_TRAIN = TrainConfig(epochs=30, lr_factor=0.5, warmup=600, label_smoothing=0.1, clip_norm=1.0,
                             accum_steps=1, log_every=50, max_minutes=52)
#: The embedded number-words task trains in minutes.
NUMBERS_TRAIN = TrainConfig(epochs=8, lr_factor=0.5, warmup=400, label_smoothing=0.1, clip_norm=1.0,
                            accum_steps=1, log_every=50)
RECIPES = {"multi30k": (MULTI30K_TRAIN, {"batch_tokens": 3000}),
           "numbers": (NUMBERS_TRAIN, {"batch_tokens": 1000})}


@dataclass
class TranslateSettings:
    """What defines a translation run.

    ``dataset`` is ``"multi30k"`` (``src_lang``/``tgt_lang`` ``de``/``en`` either way)
    or ``"numbers"`` (English number words into German ones, generated, no download).
    """

    dataset: str = "numbers"
    src_lang: str = "de"
    tgt_lang: str = "en"
    tokenizer: str = "word"
    lowercase: bool = True
    bpe_merges: int = 8000
    min_freq: int = 2
    n_train: int = 8000
    n_val: int = 500
    n_test: int = 1000
    max_number: int = 9999
    seed: int = 0
    batch_tokens: int = 3000
    max_len: int = 128
    d_model: int = 256
    n_heads: int = 8
    n_layers: int = 3
    d_ff: int = 512
    dropout: float = 0.1
    tie_embeddings: bool = False
    dtype: str = "float32"
    norm_first: bool = False

    def __post_init__(self):
        if self.dataset not in ("multi30k", "numbers"):
            raise ValueError(f"dataset must be 'multi30k' or 'numbers', got {self.dataset!r}")
        if self.tokenizer not in ("word", "bpe"):
            raise ValueError(f"tokenizer must be 'word' or 'bpe', got {self.tokenizer!r}")
        if self.dataset == "multi30k" and {self.src_lang, self.tgt_lang} != {"de", "en"}:
            raise ValueError(f"Multi30K directions are de-en and en-de, got {self.src_lang}-{self.tgt_lang}")


class TranslationTask:
    """Data, vocabularies, model, loss and BLEU evaluation for the trainer and the CLI."""

    selection_metric = "bleu"

    def __init__(self, settings: TranslateSettings, data_dir: Optional[str] = None, state: Optional[dict] = None):
        self.s = settings
        self.data_dir = data_dir
        self._pairs: Optional[Dict[str, List[tuple]]] = None
        self._ids: Dict[str, tuple] = {}
        if state is None:
            state = self._build_state()
        self.src_tok = Tokenizer.from_dict(state["src_tokenizer"])
        self.tgt_tok = Tokenizer.from_dict(state["tgt_tokenizer"])
        self.src_vocab = Vocab.from_dict(state["src_vocab"])
        self.tgt_vocab = Vocab.from_dict(state["tgt_vocab"])

    # ---- data and vocabularies ------------------------------------------------------
    @property
    def pairs(self) -> Dict[str, List[tuple]]:
        """``{"train"|"val"|"test": [(source, target), ...]}`` as raw text."""
        if self._pairs is None:
            s = self.s
            if s.dataset == "numbers":
                en_de = make_number_pairs(s.n_train, s.n_val, s.n_test, s.seed, s.max_number)
                self._pairs = {k: [(en, de) for en, de in v] for k, v in en_de.items()}
            else:
                self._pairs = {split: load_multi30k(split, self.data_dir, s.src_lang, s.tgt_lang)
                               for split in ("train", "val", "test")}
        return self._pairs

    def _make_tokenizer(self, texts: Sequence[str]) -> Tokenizer:
        if self.s.tokenizer == "word":
            return Tokenizer("word", lowercase=self.s.lowercase)
        bpe = BPE.learn(texts, self.s.bpe_merges, lowercase=self.s.lowercase)
        return Tokenizer("bpe", bpe=bpe)

    def _build_state(self) -> dict:
        train = self.pairs["train"]
        src_tok = self._make_tokenizer([p[0] for p in train])
        tgt_tok = self._make_tokenizer([p[1] for p in train])
        src_vocab = Vocab.build([src_tok.tokenize(p[0]) for p in train], min_freq=self.s.min_freq)
        tgt_vocab = Vocab.build([tgt_tok.tokenize(p[1]) for p in train], min_freq=self.s.min_freq)
        return {"src_tokenizer": src_tok.to_dict(), "tgt_tokenizer": tgt_tok.to_dict(),
                "src_vocab": src_vocab.to_dict(), "tgt_vocab": tgt_vocab.to_dict()}

    def to_dict(self) -> dict:
        return {"name": "translate", **asdict(self.s),
                "state": {"src_tokenizer": self.src_tok.to_dict(), "tgt_tokenizer": self.tgt_tok.to_dict(),
                          "src_vocab": self.src_vocab.to_dict(), "tgt_vocab": self.tgt_vocab.to_dict()}}

    @classmethod
    def from_dict(cls, d: dict, data_dir: Optional[str] = None) -> "TranslationTask":
        settings = {k: v for k, v in d.items() if k not in ("name", "state")}
        return cls(TranslateSettings(**settings), data_dir=data_dir, state=d["state"])

    def encode_src(self, text: str) -> np.ndarray:
        ids = self.src_vocab.encode(self.src_tok.tokenize(text))[: self.s.max_len]
        return np.array(ids, dtype=np.int64)

    def encode_tgt(self, text: str) -> np.ndarray:
        ids = self.tgt_vocab.encode(self.tgt_tok.tokenize(text))[: self.s.max_len - 1]
        return np.array(ids, dtype=np.int64)

    def split_ids(self, split: str):
        """(source id arrays, target id arrays) of a split, encoded once and kept."""
        if split not in self._ids:
            pairs = self.pairs[split]
            self._ids[split] = ([self.encode_src(a) for a, _ in pairs], [self.encode_tgt(b) for _, b in pairs])
        return self._ids[split]

    # ---- model ------------------------------------------------------------------------
    def model_config(self) -> TransformerConfig:
        s = self.s
        return TransformerConfig(src_vocab_size=len(self.src_vocab), tgt_vocab_size=len(self.tgt_vocab),
                                 d_model=s.d_model, n_heads=s.n_heads, n_layers=s.n_layers, d_ff=s.d_ff,
                                 max_len=s.max_len, dropout=s.dropout, pad_id=PAD, dtype=s.dtype, seed=s.seed,
                                 norm_first=s.norm_first, tie_embeddings=s.tie_embeddings)

    def build_model(self) -> Transformer:
        return Transformer(self.model_config())

    # ---- training -----------------------------------------------------------------------
    def _batch(self, src: Sequence[np.ndarray], tgt: Sequence[np.ndarray]):
        """((src, tgt_in), tgt_out): BOS before the target for the decoder's input, EOS after it for the output."""
        src_b = pad_batch(src, PAD)
        tgt_in = pad_batch([np.concatenate([[BOS], t]) for t in tgt], PAD)
        tgt_out = pad_batch([np.concatenate([t, [EOS]]) for t in tgt], PAD)
        return (src_b, tgt_in), tgt_out

    def _index_batches(self, split: str, shuffle: bool, seed: int = 0) -> List[np.ndarray]:
        src, tgt = self.split_ids(split)
        lengths = (np.array([len(x) for x in src]), np.array([len(y) + 1 for y in tgt]))
        return bucket_batches(lengths, self.s.batch_tokens, shuffle=shuffle, seed=seed)

    def train_batches(self, epoch: int) -> List[np.ndarray]:
        return self._index_batches("train", shuffle=True, seed=self.s.seed * 1000 + epoch)

    def forward_backward(self, model, idx: np.ndarray, label_smoothing: float, scale: float = 1.0):
        src, tgt = self.split_ids("train")
        inputs, targets = self._batch([src[i] for i in idx], [tgt[i] for i in idx])
        return loss_and_backward(model, inputs, targets, PAD, label_smoothing, scale)

    # ---- decoding and BLEU ------------------------------------------------------------------
    def translate_ids(self, model, src: Sequence[np.ndarray], beam: int = 1, batch_tokens: int = 6000,
                      length_penalty: float = 0.6) -> List[List[int]]:
        """Decoded target ids for source id arrays, batched by length, in the input's order."""
        out: List[Optional[List[int]]] = [None] * len(src)
        lengths = np.array([max(len(x), 1) for x in src])
        for idx in bucket_batches(lengths, batch_tokens, shuffle=False, max_batch_size=256):
            batch = pad_batch([src[i] if len(src[i]) else np.array([UNK]) for i in idx], PAD)
            max_out = min(int(batch.shape[1] * 1.5) + 10, self.s.max_len)
            if beam > 1:
                hyps = beam_search(model, batch, max_out, beam, length_penalty, BOS, EOS)
            else:
                hyps = greedy_decode(model, batch, max_out, BOS, EOS)
            for i, h in zip(idx, hyps):
                out[i] = h
        return out  # type: ignore[return-value]

    def detok(self, ids: Sequence[int]) -> str:
        return self.tgt_tok.detokenize(self.tgt_vocab.decode(ids))

    def bleu(self, model, split: str, beam: int = 1, limit: Optional[int] = None) -> Dict[str, float]:
        """BLEU of a split: ``bleu`` is measure (a), ``sacrebleu`` measure (b)."""
        pairs = self.pairs[split][:limit]
        src = self.split_ids(split)[0][:limit]
        hyps = [self.detok(h) for h in self.translate_ids(model, src, beam)]
        refs = [t for _, t in pairs]
        a = bleu_tokens([word_tokenize(h, lowercase=True) for h in hyps],
                        [word_tokenize(r, lowercase=True) for r in refs])
        b = corpus_bleu(hyps, refs, lowercase=self.s.lowercase)
        return {"bleu": a.score, "sacrebleu": b.score}

    def validate(self, model) -> Dict[str, float]:
        src, tgt = self.split_ids("val")
        batches = (self._batch([src[i] for i in idx], [tgt[i] for i in idx])
                   for idx in self._index_batches("val", shuffle=False))
        return {"val_loss": mean_loss(model, batches, PAD), **self.bleu(model, "val")}

    def final_report(self, model) -> Dict[str, float]:
        greedy = self.bleu(model, "test")
        beam = self.bleu(model, "test", beam=4)
        return {"test_bleu_greedy": greedy["bleu"], "test_sacrebleu_greedy": greedy["sacrebleu"],
                "test_bleu_beam4": beam["bleu"], "test_sacrebleu_beam4": beam["sacrebleu"]}

    def evaluate_fresh(self, model, n: int = 0, seed: int = 1, beam: int = 1) -> Dict[str, float]:
        """BLEU on the test split (``n`` > 0: its first n pairs)."""
        if n < 0:
            raise ValueError(f"--n must be 0 (all) or positive, got {n}")
        return {"split": "test", **self.bleu(model, "test", beam=beam, limit=n or None)}

    # ---- the user's side -----------------------------------------------------------------
    def example_input(self) -> str:
        if self.s.dataset == "numbers":
            return "three hundred forty-seven"
        return "Ein Mann fährt Fahrrad." if self.s.src_lang == "de" else "A man rides a bike."

    def predict_text(self, model, lines: Sequence[str], beam: int = 1) -> List[str]:
        """Translate each line; an empty line gives an empty line."""
        src = [self.encode_src(line) for line in lines]
        keep = [i for i, x in enumerate(src) if len(x)]
        outs = [""] * len(lines)
        hyps = self.translate_ids(model, [src[i] for i in keep], beam) if keep else []
        for i, h in zip(keep, hyps):
            outs[i] = self.detok(h)
        return outs

    def attention(self, model, text: str):
        """Cross- and self-attention maps for one sentence: (maps, labels, translation)."""
        src_ids = self.encode_src(text)
        if not len(src_ids):
            raise ValueError("the sentence is empty")
        hyp = self.translate_ids(model, [src_ids])[0]
        model.forward(src_ids[None], np.array([[BOS] + hyp], dtype=np.int64))
        src_labels = self.src_vocab.decode(src_ids, strip_special=False)
        out_labels = ["<bos>"] + self.tgt_vocab.decode(hyp, strip_special=False)
        maps, labels = {}, {}
        for name, w in model.attention_maps().items():
            maps[name] = w[0]
            if name.startswith("encoder"):
                labels[name] = (src_labels, src_labels)
            elif "self_attn" in name:
                labels[name] = (out_labels, out_labels)
            else:
                labels[name] = (out_labels, src_labels)
        return maps, labels, self.detok(hyp)
