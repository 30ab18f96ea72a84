"""Language modelling: a GPT on Tiny Shakespeare, or on the embedded grammar corpus.

The model reads a window of ``block_size`` tokens and predicts, at every position, the
next token; batches are random windows of the training text (the first 90%), a fixed
number of them per "epoch". The validation loss is the cross-entropy over the whole
validation split (the last 10%) cut into non-overlapping windows, in nats per
*character*: the loss summed over the predicted tokens divided by the characters they
stand for. For characters that is the loss per token; for BPE tokens, which stand for
about two characters each, it makes the two comparable. Perplexity is ``exp`` of it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Dict, List, Optional, Sequence

import numpy as np

from ..core.losses import cross_entropy
from ..nn.config import SIZE_LIMITS, TransformerConfig
from ..datasets.batching import next_token_windows, random_windows
from ..datasets.shakespeare import (
    BPETokenizer,
    CharTokenizer,
    load_corpus,
    split_text,
    text_digest,
    tokenizer_from_dict,
)
from ..errors import NumpyTransformerError
from ..nn.gpt import TransformerLM, next_token_nats
from ..nn.sampling import generate
from ..training.settings import ModelSettings, check_fields, option
from ..training.trainer import TrainConfig
from .base import Task

__all__ = ["LMData", "LanguageModelTask"]


@dataclass
class LMData:
    """The text, its tokenization, and how training windows are drawn."""

    corpus: str = option("--corpus", "shakespeare", "Tiny Shakespeare (tinyshakespeare/input.txt in the data folder), "
                         "or the embedded grammar corpus (no download)", choices=("shakespeare", "embedded"))
    tokenization: str = option("--tokenization", "bpe", "the project's BPE, or characters (the loss is reported per character "
                               "either way)", choices=("bpe", "char"))
    bpe_merges: int = option("--bpe-merges", 500, "BPE merges", low=0, high=10 ** 5)
    block_size: int = option("--block-size", 128, "context: tokens the model sees", low=2, high=4096)
    batch_size: int = option("--batch-size", 16, "windows in a batch", low=1, high=10 ** 5)
    batches_per_epoch: int = option("--batches-per-epoch", 500, "random batches between two validations", low=1, high=10 ** 7)
    positions: str = option("--positions", "learned", "learned positions (GPT), the paper's sinusoids, rotary queries "
                            "and keys (RoPE), or ALiBi's distance bias on the attention scores",
                            choices=("learned", "sinusoidal", "rotary", "alibi"))
    normalization: str = option("--normalization", "layernorm", "the norm of every sublayer and the final one: "
                                "LayerNorm, or RMSNorm (no centring, no beta)", choices=("layernorm", "rmsnorm"))
    activation: str = option("--activation", "relu", "the feed-forward sublayer: ReLU, GELU (exact or tanh form), or "
                             "the gated SwiGLU of LLaMA", choices=("relu", "gelu", "gelu_tanh", "swiglu"))
    kv_heads: Optional[int] = option("--kv-heads", None, "key and value heads, each shared by a group of query heads "
                                     "(grouped-query attention); must divide --heads", low=1,
                                     high=SIZE_LIMITS["n_heads"], none="--heads")
    block: str = option("--block", "sequential", "each block's two sublayers: one after the other (GPT-2), or in "
                        "parallel from one shared norm, x + attn(norm x) + ffn(norm x) (GPT-J, PaLM; needs --norm pre)",
                        choices=("sequential", "parallel"))
    z_loss: float = option("--z-loss", 0.0, "PaLM's z-loss: this times the mean squared log of the softmax's "
                           "normaliser, added to the training loss (0: off; PaLM: 1e-4)", low=0.0, high=1.0)
    embedded_chars: int = option("--embedded-chars", 60_000, "size of the embedded corpus in characters", low=1000, high=10 ** 8)

    def __post_init__(self):
        check_fields(self)


def perplexity(loss: float) -> float:
    """``exp(loss)``, infinite where that exceeds the largest float (a loss above about 709 nats):
    a diverged model's figure, to report, not a crash."""
    return math.inf if loss > math.log(np.finfo(np.float64).max) else math.exp(loss)


#: What ``predict`` generates for each input line.
PREDICT_TOKENS, PREDICT_TEMPERATURE, PREDICT_TOP_K = 300, 0.8, 40
NO_BEAM = "--beam must be 1 for the language model (it samples, it does not search)"


class LanguageModelTask(Task):
    """A decoder-only Transformer that continues text, for the trainer and the command line."""

    name = "lm"
    Data = LMData
    selection_metric = "neg_val_loss"
    target_pad = None  # no padding: every next token counts
    count_unit = "char"  # the training loss is per character, as the validation loss is
    predict_command = "generate"
    default_eval_n = 0
    searches = False
    summary = "language model (GPT): Tiny Shakespeare or the embedded corpus, characters or BPE"
    later_fields = ("normalization", "activation", "kv_heads", "block", "z_loss")

    @classmethod
    def recipe(cls, data: LMData):
        """Pre-LN blocks with tied weights, a high Noam peak and 16 windows of 128 tokens a batch; at
        the number of updates a CPU affords, two blocks learn more than four.

        BPE (the default): two blocks of 192 with dropout 0.1 (a wider model overfits this 1 MB text
        without it) and AdamW's weight decay 0.3, 4,000 updates, the last 30% cooling down to 0.
        Characters: two blocks of 128 without dropout, 5,000 updates, the last 20% cooling down. The
        embedded corpus: two blocks of 64, 2,000 updates."""
        small = ModelSettings(d_model=128, n_heads=4, n_layers=2, d_ff=512, dropout=0.0, norm="pre",
                              tie_embeddings=True)
        train = TrainConfig(epochs=4, lr_factor=0.8, warmup=100, label_smoothing=0.0, clip_norm=1.0, log_every=100)
        if data.corpus == "embedded":  # half as wide, with a higher peak rate
            return replace(small, d_model=64, d_ff=256), replace(train, lr_factor=1.0, warmup=50, log_every=50)
        if data.tokenization == "char":
            return small, replace(train, epochs=10, cooldown=0.2)
        return (replace(small, d_model=192, n_heads=6, d_ff=768, dropout=0.1),
                replace(train, epochs=8, cooldown=0.3, weight_decay=0.3))

    def __init__(self, data, model: ModelSettings, data_dir: Optional[str] = None, state: Optional[dict] = None):
        super().__init__(data, model, data_dir, state)
        self.tokenizer = tokenizer_from_dict(self.state.get("tokenizer"), "state.tokenizer")  # refuses a damaged one

    def check_settings(self) -> None:
        heads, kv = self.model.n_heads, self.data.kv_heads
        if kv is not None and (kv > heads or heads % kv):
            raise NumpyTransformerError(f"--kv-heads {kv} must divide --heads {heads}: each key and value head "
                                        "serves a group of query heads")
        if self.data.block == "parallel" and self.model.norm != "pre":
            raise NumpyTransformerError(f"--block parallel shares one norm in front of both sublayers: it needs "
                                        f"--norm pre, got --norm {self.model.norm}")
        if self.data.positions == "rotary" and (self.model.d_model // heads) % 2:
            raise NumpyTransformerError(f"--positions rotary rotates pairs of features: --d-model {self.model.d_model}"
                                        f" / --heads {heads} must be even")

    # ---- data ---------------------------------------------------------------------------
    @cached_property
    def texts(self):
        """``(train, val)``: the first 90% of the corpus's characters and the rest, read when first needed."""
        return split_text(load_corpus(self.data.corpus, self.data_dir, self.data.embedded_chars))

    @cached_property
    def split_ids(self):
        """``(train, val)`` as token ids, each longer than a window."""
        train, val = (self.tokenizer.encode(text) for text in self.texts)
        if min(len(train), len(val)) <= self.data.block_size:
            raise NumpyTransformerError(f"--block-size {self.data.block_size} must be shorter than each split "
                                        f"({len(train)} and {len(val)} tokens)")
        return train, val

    def build_state(self) -> dict:
        train, d = self.texts[0], self.data
        tok = CharTokenizer.learn(train) if d.tokenization == "char" else BPETokenizer.learn(train, d.bpe_merges)
        return {"tokenizer": tok.to_dict()}

    def data_summary(self) -> dict:
        train, val = self.texts
        return {"corpus": self.data.corpus, "train_chars": len(train), "val_chars": len(val),
                "sha256": text_digest(train + val)}

    # ---- model and training ---------------------------------------------------------------
    def build_model(self):
        d = self.data
        return TransformerLM(TransformerConfig(src_vocab_size=len(self.tokenizer), max_len=d.block_size,
                                               positions=d.positions, norm=d.normalization, activation=d.activation,
                                               n_kv_heads=d.kv_heads, block=d.block, **self.model.config_fields()))

    def train_batches(self, epoch: int) -> list:
        """``batches_per_epoch`` arrays of ``batch_size`` random windows of ``block_size + 1`` ids."""
        d = self.data
        return random_windows(self.split_ids[0], d.block_size + 1, d.batch_size, d.batches_per_epoch,
                              np.random.default_rng([self.model.seed, epoch]))

    def batch_arrays(self, batch):
        return (batch[:, :-1],), batch[:, 1:]

    def loss(self, logits, targets, label_smoothing: float):
        """The loss per character, as validation reports it, counted over the characters the
        targets stand for (the gradient stays that of the mean loss per token). The loss per token is
        :func:`~numpytransformer.core.losses.lm_loss_forward`'s: ``batch_arrays`` shifts the ids, and
        :func:`~numpytransformer.core.losses.cross_entropy` (its fast form) scores them, with the z-loss
        of ``--z-loss``; validation's :func:`~numpytransformer.nn.gpt.next_token_nats` is the same loss."""
        loss, dlogits = cross_entropy(logits, targets, label_smoothing=label_smoothing, z_loss=self.data.z_loss)
        tokens = targets.size
        chars = max(int(self.tokenizer.lengths[targets].sum()), 1)
        return loss * tokens / chars, chars, dlogits

    def input_tokens(self, batch) -> int:
        return batch[:, :-1].size

    def val_loss(self, model, n: int = 0, seed: int = 0) -> Dict[str, float]:
        """Loss per character over the validation split's non-overlapping windows (``n`` random ones if n > 0)."""
        x, y = next_token_windows(self.split_ids[1], self.data.block_size)
        if 0 < n < len(x):
            pick = np.sort(np.random.default_rng(seed).choice(len(x), n, replace=False))
            x, y = x[pick], y[pick]
        nats = next_token_nats(model, x, y, len(self.tokenizer))
        chars = int(self.tokenizer.lengths[y].sum())
        loss = nats / chars
        return {"val_loss": loss, "neg_val_loss": -loss, "val_ppl": perplexity(loss), "val_bpc": loss / math.log(2),
                "val_tokens": int(y.size), "val_chars": chars, "val_loss_per_token": nats / y.size}

    def validate(self, model) -> Dict[str, float]:
        m = self.val_loss(model)
        return {k: m[k] for k in ("val_loss", "val_ppl", "neg_val_loss")}

    # ---- after training ------------------------------------------------------------------
    def test_report(self, model) -> Dict[str, float]:
        """The validation figures: Tiny Shakespeare has no third split (nor does nanoGPT use one)."""
        return self.val_loss(model.eval())

    def evaluate(self, model, n: int, seed: int, beam: int = 1) -> Dict[str, float]:
        """Validation loss in nats per character and perplexity, over ``n`` windows (0: all)."""
        if beam != 1:
            raise NumpyTransformerError(NO_BEAM)
        return self.val_loss(model.eval(), self.eval_count(n), seed)

    def encode_prompt(self, prompt: str) -> np.ndarray:
        if not isinstance(prompt, str):
            raise NumpyTransformerError(f"prompt must be a str, got {type(prompt).__name__}")
        return self.tokenizer.encode(prompt if prompt else "\n")  # an empty prompt starts a new line

    def generate(self, model, prompt: str, tokens: int, temperature: float = 1.0, top_k: Optional[int] = None,
                 top_p: Optional[float] = None, seed: int = 0, min_p: Optional[float] = None) -> str:
        """The prompt followed by ``tokens`` sampled tokens, as text (see :func:`~numpytransformer.nn.sampling.generate`)."""
        ids = generate(model, self.encode_prompt(prompt), tokens, temperature, top_k, top_p, seed, min_p=min_p)
        return prompt + self.tokenizer.decode(ids)

    def predict(self, model, lines: Sequence[str], beam: int = 1) -> List[str]:
        """Each line continued by 300 sampled tokens (temperature 0.8, top-k 40, seed 0); an empty
        line gives an empty line."""
        if beam != 1:
            raise NumpyTransformerError(NO_BEAM)
        return [self.generate(model, line, PREDICT_TOKENS, PREDICT_TEMPERATURE, PREDICT_TOP_K, None, 0)
                if line.strip() else "" for line in lines]

    def attention(self, model, text: str):
        """Self-attention maps of every layer over the (last ``block_size``) tokens of ``text``,
        and the model's greedy guess of the next token after each position."""
        ids = self.encode_prompt(text)[-self.data.block_size:]
        logits = model.eval().forward(ids[None])
        labels = [self.tokenizer.decode([i]) for i in ids]
        maps, labelled = self.labelled_maps(model, labels, labels)
        return maps, labelled, self.tokenizer.decode(logits[0].argmax(axis=-1))

    def example_input(self) -> str:
        return "ROMEO:" if self.data.corpus == "shakespeare" else "JULIET:"
