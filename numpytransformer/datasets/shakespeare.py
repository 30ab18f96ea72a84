"""Tiny Shakespeare for character-level (and BPE) language modelling.

The file is ``tinyshakespeare/input.txt`` in the data folder (see :mod:`.paths`): 1,115,394
characters of Shakespeare's plays, 65 distinct characters, collected by Andrej Karpathy for
char-rnn. Elsewhere, get it from the char-rnn repository:
https://github.com/karpathy/char-rnn/blob/master/data/tinyshakespeare/input.txt
(nanoGPT's ``data/shakespeare_char/prepare.py`` downloads the same file).

The usual split, as char-rnn and nanoGPT make it: the first 90% of the characters for
training, the last 10% for validation.

Two tokenizations, both lossless (``decode(encode(text)) == text``):

- :class:`CharTokenizer`: one token per character;
- :class:`BPETokenizer`: the project's byte-pair encoding (:class:`~numpytransformer.text.BPE`)
  learned on the training text cut into chunks that keep their spacing (a word with the
  space before it, a run of punctuation, a single newline), so that text comes back
  exactly. Each token knows how many characters it stands for, so a loss summed over
  tokens can be divided by characters: nats per character, comparable between the two.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..errors import NumpyTransformerError
from ..text import BPE
from .paths import missing_file_error, reading, resolve_data_dir

__all__ = ["SOURCE", "load_text", "split_text", "text_digest", "CharTokenizer", "BPETokenizer", "chunks",
           "tokenizer_from_dict"]

SOURCE = "https://github.com/karpathy/char-rnn/tree/master/data/tinyshakespeare"
RELATIVE_PATH = Path("tinyshakespeare") / "input.txt"


def load_text(data_dir=None) -> str:
    """The whole of ``tinyshakespeare/input.txt``; a clear error when it is missing."""
    root = resolve_data_dir(data_dir)
    path = None if root is None else root / RELATIVE_PATH
    if path is None or not path.is_file():
        raise missing_file_error(path, "Tiny Shakespeare", SOURCE)
    with reading(path, "UTF-8 text"):
        return path.read_text(encoding="utf-8")


def split_text(text: str, train_fraction: float = 0.9) -> Tuple[str, str]:
    """``(train, val)``: the first ``train_fraction`` of the characters, and the rest."""
    n = int(len(text) * train_fraction)
    return text[:n], text[n:]


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_CHUNK = re.compile(r" ?[A-Za-z]+| ?[^A-Za-z\s]+|\s")


def chunks(text: str) -> List[str]:
    """Cut text into the pieces BPE merges within: `` word``, ``,``/`` --``, ``\\n``, `` ``.

    Every character falls in exactly one piece, so ``"".join(chunks(t)) == t``.
    """
    return _CHUNK.findall(text)


class CharTokenizer:
    """One id per character; the vocabulary is the sorted characters of the training text."""

    kind = "char"

    def __init__(self, chars: Sequence[str]):
        self.units = list(chars)
        self._ids = {c: i for i, c in enumerate(self.units)}
        self.lengths = np.ones(len(self.units), dtype=np.int64)  # characters per token

    @classmethod
    def learn(cls, text: str) -> "CharTokenizer":
        return cls(sorted(set(text)))

    def __len__(self) -> int:
        return len(self.units)

    def encode(self, text: str) -> np.ndarray:
        try:
            return np.array([self._ids[c] for c in text], dtype=np.int64)
        except KeyError as e:
            raise NumpyTransformerError(f"the text holds the character {e.args[0]!r}, which is not in the "
                                        f"vocabulary of {len(self.units)} characters") from None

    def decode(self, ids) -> str:
        return "".join(self.units[int(i)] for i in ids)

    def to_dict(self) -> dict:
        return {"kind": "char", "units": self.units}


class BPETokenizer:
    """Byte-pair encoding over spacing-preserving chunks (see :func:`chunks`).

    The vocabulary is every initial symbol of the training text (each character, alone
    and as the last character of a chunk, which BPE marks with ``</w>``) followed by the
    result of each merge, so any text over the training characters can be encoded.
    """

    kind = "bpe"
    EOW = BPE.END_OF_WORD

    def __init__(self, merges: Sequence[Sequence[str]], units: Sequence[str]):
        self.bpe = BPE(merges)
        self.units = list(units)
        self._ids = {u: i for i, u in enumerate(self.units)}
        self.lengths = np.array([len(u[:-len(self.EOW)] if u.endswith(self.EOW) else u) for u in self.units],
                                dtype=np.int64)

    @classmethod
    def learn(cls, text: str, num_merges: int) -> "BPETokenizer":
        bpe = BPE.learn([chunks(text)], num_merges, min_frequency=2)
        chars = sorted(set(text))
        units = chars + [c + cls.EOW for c in chars]
        seen = set(units)
        for a, b in bpe.merges:
            if a + b not in seen:
                seen.add(a + b)
                units.append(a + b)
        return cls(bpe.merges, units)

    def __len__(self) -> int:
        return len(self.units)

    def encode(self, text: str) -> np.ndarray:
        ids = []
        for piece in chunks(text):
            for u in self.bpe.encode_word(piece):
                i = self._ids.get(u)
                if i is None:
                    bad = next((c for c in piece if c not in self._ids), u)
                    raise NumpyTransformerError(f"the text holds {bad!r}, which is not in the BPE vocabulary")
                ids.append(i)
        return np.array(ids, dtype=np.int64)

    def decode(self, ids) -> str:
        return "".join(self.units[int(i)] for i in ids).replace(self.EOW, "")

    def to_dict(self) -> dict:
        return {"kind": "bpe", "merges": [list(m) for m in self.bpe.merges], "units": self.units}


def tokenizer_from_dict(d: dict, field: str = "tokenizer"):
    """Rebuild a tokenizer from its ``to_dict`` (a checkpoint's task state), checking it.

    A damaged state is refused here, in one line naming ``field``: a unit listed twice would
    make two ids decode alike, a character unit of two characters would make decoding and the
    per-character loss wrong, and a BPE merge whose result is not a unit could not be encoded.
    """
    if not isinstance(d, dict) or d.get("kind") not in ("char", "bpe") or not isinstance(d.get("units"), list):
        raise NumpyTransformerError(f"{field} must be a dict with kind 'char' or 'bpe' and a list of units")
    units, eow = d["units"], BPETokenizer.EOW
    seen = set()
    for i, u in enumerate(units):
        if not isinstance(u, str) or not (u[:-len(eow)] if u.endswith(eow) else u):
            raise NumpyTransformerError(f"{field}.units[{i}] must be a non-empty str, got {u!r}")
        if d["kind"] == "char" and len(u) != 1:
            raise NumpyTransformerError(f"{field}.units[{i}] must be one character, got {u!r}")
        if u in seen:
            raise NumpyTransformerError(f"{field}.units holds {u!r} twice (units[{i}])")
        seen.add(u)
    if d["kind"] == "char":
        return CharTokenizer(units)
    merges = d.get("merges")
    if not isinstance(merges, list):
        raise NumpyTransformerError(f"{field}.merges must be a list of pairs, got {type(merges).__name__}")
    try:
        tok = BPETokenizer(merges, units)
    except TypeError as e:  # BPE names the bad merge: "merges[3] must be a pair of non-empty str"
        raise NumpyTransformerError(f"{field}.{e}") from None
    for r, (a, b) in enumerate(tok.bpe.merges):
        if a + b not in seen:
            raise NumpyTransformerError(f"{field}.merges[{r}] makes {a + b!r}, which is not among the units")
    return tok


def load_corpus(corpus: str, data_dir: Optional[str] = None, embedded_chars: int = 60_000) -> str:
    """The whole text of ``corpus``: "shakespeare" (the file) or "embedded" (generated)."""
    if corpus == "shakespeare":
        return load_text(data_dir)
    if corpus == "embedded":
        from .tinygrammar import grammar_corpus

        return grammar_corpus(embedded_chars)
    raise NumpyTransformerError(f"corpus must be 'shakespeare' or 'embedded', got {corpus!r}")
