"""Sentence embeddings the sentence-transformers way: a BERT's hidden states, pooled, then of unit length.

A sentence-transformers directory (such as all-MiniLM-L6-v2) is a BERT directory with three
more files, which say how the hidden states (N, T, D) become one vector per sentence:

- ``modules.json`` lists the steps: the Transformer, a Pooling, and a Normalize if present;
- the Pooling's ``config.json`` (``1_Pooling/``) names the pooling: the mean of the real tokens'
  states, the first token's ([CLS]), or their elementwise maximum;
- ``sentence_bert_config.json`` gives ``max_seq_length``: a sentence is cut to that many
  pieces, [CLS] and [SEP] included.

.. math:: e = \\frac{\\text{pool}(h)}{\\lVert \\text{pool}(h) \\rVert_2}

:meth:`SentenceEncoder.embed` runs the sentences longest first, in batches of neighbours in
length, each padded only to its own longest: padding is work thrown away, and random batches
of reviews would pad most sentences to the longest of the set. Under ``mpiexec -n N`` each rank
takes every N-th batch and one sum gathers the rows (each row is computed by one rank; the
others add zeros).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..core.pooling import first_token_forward, mean_pool_forward
from ..errors import NumpyTransformerError
from ..nn.bert import EncoderModel
from ..text.wordpiece import WordPieceTokenizer
from ..training.parallel import SingleProcess
from . import load
from .files import PretrainedError

__all__ = ["SentenceEncoder", "POOLINGS", "check_texts"]

#: The Pooling config's flags this library computes -> the pooling.
POOLINGS = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max"}
POOLING_TYPE = "sentence_transformers.models.Pooling"
NORMALIZE_TYPE = "sentence_transformers.models.Normalize"


def _read_json(path: Path, what: str):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PretrainedError(f"{path} ({what}) is not readable JSON: {e}") from None


@dataclass
class SentenceEncoder:
    """A BERT encoder with its tokenizer, pooling (``"mean"``, ``"cls"`` or ``"max"``), normalisation
    and the longest input in pieces (``max_length``)."""

    model: EncoderModel
    tokenizer: WordPieceTokenizer
    pooling: str
    normalize: bool
    max_length: int

    @classmethod
    def from_directory(cls, directory, dtype: str = "float32") -> "SentenceEncoder":
        """Read a sentence-transformers directory; anything else is refused in one line naming the file."""
        directory = Path(directory)
        modules_path = directory / "modules.json"
        if not directory.is_dir():
            raise PretrainedError(f"--model {directory} is not a directory (expected a sentence-transformers "
                                  "model directory)")
        if not modules_path.is_file():
            raise PretrainedError(f"--model {directory} has no modules.json: embed needs a sentence-transformers "
                                  "directory (a BERT with modules.json and its pooling's config.json)")
        modules = _read_json(modules_path, "the steps of the model")
        if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
            raise PretrainedError(f"{modules_path} must hold a list of objects")
        types = [m.get("type") for m in modules]
        if POOLING_TYPE not in types:
            raise PretrainedError(f"{modules_path} lists no {POOLING_TYPE}: the hidden states have no pooling")
        pooling_path = directory / str(modules[types.index(POOLING_TYPE)].get("path", "")) / "config.json"
        if not pooling_path.is_file():
            raise PretrainedError(f"{pooling_path} is missing: it names the pooling of the hidden states")
        flags = _read_json(pooling_path, "the pooling")
        chosen = [POOLINGS[k] for k in POOLINGS if isinstance(flags, dict) and flags.get(k) is True]
        others = [k for k, v in (flags.items() if isinstance(flags, dict) else ())
                  if k.startswith("pooling_mode_") and k not in POOLINGS and v is True]
        if others or len(chosen) != 1:
            raise PretrainedError(f"{pooling_path}: embed computes exactly one of {', '.join(POOLINGS)}; "
                                  f"this one asks for {', '.join(others + chosen) or 'none'}")
        loaded = load(directory, dtype)
        if loaded.model_type != "bert":
            raise PretrainedError(f"--model {directory} holds a {loaded.model_type}; embed needs a BERT-family encoder")
        if "vocab.txt" not in loaded.tokenizer_files:
            raise PretrainedError(f"--model {directory} has no vocab.txt: the WordPiece tokenizer reads it")
        max_length = loaded.model.cfg.max_len
        st_config = directory / "sentence_bert_config.json"
        if st_config.is_file():
            value = _read_json(st_config, "the longest input").get("max_seq_length", max_length)
            if isinstance(value, bool) or not isinstance(value, int) or not 2 <= value <= max_length:
                raise PretrainedError(f"{st_config}: max_seq_length must be a whole number from 2 to "
                                      f"{max_length}, got {value!r}")
            max_length = value
        return cls(loaded.model, WordPieceTokenizer.from_pretrained(directory), chosen[0],
                   NORMALIZE_TYPE in types, max_length)

    def pool(self, h: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Hidden states (B, T, D) and their mask (B, T) -> one vector per sentence (B, D), normalised
        if the directory says so."""
        if self.pooling == "mean":
            out, _ = mean_pool_forward(h, mask)
        elif self.pooling == "cls":
            out, _ = first_token_forward(h)
        else:
            out = np.where(mask[:, :, None], h, -np.inf).max(axis=1)  # padding is never the maximum
        if self.normalize:  # sentence-transformers divides by max(norm, 1e-12)
            out = out / np.maximum(np.linalg.norm(out, axis=-1, keepdims=True), 1e-12)
        return out.astype(np.float32)

    def embed(self, texts: Sequence[str], batch_size: int = 32, comm=None) -> np.ndarray:
        """float32 (N, D) embeddings of ``texts``, in their order.

        ``comm`` (a :func:`~numpytransformer.training.parallel.world`): each rank embeds every
        ``size``-th batch, and every rank returns all rows.
        """
        comm = comm or SingleProcess()
        ids = [self.tokenizer.encode(t, self.max_length) for t in texts]
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))  # longest first: stable among equals
        out = np.zeros((len(ids), self.model.cfg.d_model), dtype=np.float32)
        batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
        for rows in comm.my_rows(batches):
            T = len(ids[rows[0]])
            batch = np.full((len(rows), T), self.tokenizer.pad_id, dtype=np.int64)  # (B, T)
            mask = np.zeros((len(rows), T), dtype=bool)  # (B, T)
            for n, i in enumerate(rows):
                batch[n, :len(ids[i])] = ids[i]
                mask[n, :len(ids[i])] = True
            out[rows] = self.pool(self.model.forward(batch, mask), mask)
        return comm.allreduce_sum(out)


def check_texts(texts) -> None:
    """Refuse input that holds no sentence."""
    if not texts or not any(t.strip() for t in texts):
        raise NumpyTransformerError("standard input holds no sentences: give one per line")
