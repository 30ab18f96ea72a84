"""WordPiece: the tokenizer of BERT and its family (MiniLM, DistilBERT, ...).

A pretrained BERT only understands the ids its own tokenizer gives, so this one is
written to give exactly those ids for the model's ``vocab.txt``. It works in two stages:

    text --clean_text--> --space_cjk--> --NFC, split on whitespace--> words
         --lower-case, strip_accents--> --split_punctuation--> words      (basic)
         --wordpiece_split--> pieces --vocabulary--> ids                 (WordPiece)

and :class:`WordPieceTokenizer` adds the special tokens around each text,
``[CLS] pieces [SEP]``, truncates, and pads a batch into NumPy arrays.

WordPiece (Schuster & Nakajima, 2012; Devlin et al., 2019) splits each word greedily:
take the longest prefix that is in the vocabulary, then the longest vocabulary piece
of what is left, written with ``##`` to say "continues the previous piece":

    "unaffable" -> ["un", "##aff", "##able"]

A word that cannot be covered this way, or one longer than 100 characters, becomes the
single piece ``[UNK]``.

Two behaviours of the Hugging Face tokenizers are deliberately not reproduced: a special
token written in the text itself (the five characters ``[SEP]``) is tokenized as
ordinary text, so a review cannot forge a separator; and only ``do_lower_case`` is read
from ``tokenizer_config.json`` (accents are stripped exactly when text is lower-cased,
as in the original BERT, and CJK characters are always spaced).
"""
from __future__ import annotations

import functools
import json
import os
import re
import unicodedata
from pathlib import Path
from typing import Dict, List, NamedTuple, Sequence, Union

import numpy as np

from ..errors import NumpyTransformerError

__all__ = [
    "WordPieceTokenizer",
    "BertBatch",
    "load_vocab",
    "basic_tokenize",
    "wordpiece_split",
    "clean_text",
    "space_cjk",
    "strip_accents",
    "split_punctuation",
]

PAD, UNK, CLS, SEP = "[PAD]", "[UNK]", "[CLS]", "[SEP]"
SPECIALS = (PAD, UNK, CLS, SEP)

#: Longest word WordPiece tries to split; a longer one is ``[UNK]`` (BERT's limit).
MAX_WORD_CHARS = 100

# The CJK Unified Ideographs and their extensions and compatibility blocks. Chinese is
# written without spaces, so each ideograph is made a word of its own. Hiragana,
# Katakana and Hangul are not in these blocks: those scripts separate words with spaces.
_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)
_CJK = re.compile("[" + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in _CJK_RANGES) + "]")

# ASCII symbols that Unicode does not class as punctuation ("$", "+", "<", "^", "`", "|",
# "~", ...) are split off all the same, so that every non-alphanumeric ASCII character
# behaves alike.
_ASCII_PUNCTUATION = frozenset(chr(c) for c in [*range(33, 48), *range(58, 65), *range(91, 97), *range(123, 127)])


def _is_whitespace(ch: str) -> bool:
    # Tab, newline and carriage return are control characters to Unicode (Cc), but
    # they separate words.
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def _is_control(ch: str) -> bool:
    return ch not in "\t\n\r" and unicodedata.category(ch).startswith("C")


def _is_punctuation(ch: str) -> bool:
    return ch in _ASCII_PUNCTUATION or unicodedata.category(ch).startswith("P")


def clean_text(text: str) -> str:
    """Drop NUL, the replacement character U+FFFD and control characters; make every
    whitespace character a space.

    Control characters (Unicode category C*: ``\\x00``-``\\x1f`` except tab, newline and
    carriage return, zero-width joiners, byte-order marks, unassigned code points) carry
    no text; U+FFFD marks bytes that a decoder could not read.

    >>> clean_text("a\\tb\\u200bc\\ufffd")
    'a bc'
    """
    return "".join(map(_clean_char, text))


# A corpus uses few distinct characters, so each one's Unicode lookups are done once;
# the bound keeps a text of every code point from growing the cache without end.
@functools.lru_cache(maxsize=1 << 16)
def _clean_char(ch: str) -> str:
    if ch == "\x00" or ch == "\ufffd" or _is_control(ch):
        return ""
    return " " if _is_whitespace(ch) else ch


def space_cjk(text: str) -> str:
    """Put a space on each side of every CJK ideograph, so that each is a word.

    >>> space_cjk("BERT是模型")
    'BERT 是  模  型 '
    """
    return _CJK.sub(r" \g<0> ", text)


def strip_accents(word: str) -> str:
    """Remove accents: decompose (NFD) and drop the combining marks (category Mn).

    >>> strip_accents("café naïve")
    'cafe naive'
    """
    return "".join(ch for ch in unicodedata.normalize("NFD", word) if unicodedata.category(ch) != "Mn")


def split_punctuation(word: str) -> List[str]:
    """Split a word before and after each punctuation character; each punctuation
    character is a word of its own.

    >>> split_punctuation("don't...")
    ['don', "'", 't', '.', '.', '.']
    """
    out: List[str] = []
    run = ""  # the current run of non-punctuation characters
    for ch in word:
        if _is_punctuation(ch):
            if run:
                out.append(run)
                run = ""
            out.append(ch)
        else:
            run += ch
    if run:
        out.append(run)
    return out


def _words(text: str) -> List[str]:
    """The whitespace-separated words of ``text`` after cleaning and spacing CJK.

    The text is put in composed form (NFC) before splitting, so that "é" written as one
    character or as "e" plus a combining accent gives the same words.
    """
    # str.split() with no argument splits on every Unicode whitespace, which after
    # clean_text is the space and the line and paragraph separators U+2028, U+2029.
    return unicodedata.normalize("NFC", space_cjk(clean_text(text))).split()


def _basic_split(word: str, lower_case: bool) -> List[str]:
    """The basic tokens of one whitespace-separated word of cleaned text."""
    if lower_case:
        word = strip_accents(word.lower())
    return split_punctuation(word)


def basic_tokenize(text: str, lower_case: bool = True) -> List[str]:
    """BERT's basic tokenization: clean, space CJK, split on whitespace, lower-case and
    strip accents (when ``lower_case``), and split off punctuation.

    >>> basic_tokenize("Hello, Café-World!")
    ['hello', ',', 'cafe', '-', 'world', '!']
    """
    return [token for word in _words(text) for token in _basic_split(word, lower_case)]


def wordpiece_split(word: str, vocab: Dict[str, int], max_chars: int = MAX_WORD_CHARS) -> List[str]:
    """Split one basic token into vocabulary pieces, longest match first.

    From the start of the word, take the longest prefix in ``vocab``; then from where it
    ended the longest ``"##" + substring`` in ``vocab``; and so on to the end. If some
    position has no match, or the word has more than ``max_chars`` characters, the whole
    word is ``[UNK]``.

    Parameters
    ----------
    word : str
        One basic token (no whitespace, already lower-cased if the model is uncased).
    vocab : dict of str to int
        The pieces of the vocabulary.
    max_chars : int, default 100

    Returns
    -------
    list of str
        The pieces, e.g. ``["un", "##aff", "##able"]``, or ``["[UNK]"]``.
    """
    if len(word) > max_chars:
        return [UNK]
    pieces = []
    start = 0
    while start < len(word):
        prefix = "##" if start > 0 else ""
        end = len(word)
        while end > start and prefix + word[start:end] not in vocab:
            end -= 1
        if end == start:
            return [UNK]
        pieces.append(prefix + word[start:end])
        start = end
    return pieces


def load_vocab(path: Union[str, os.PathLike]) -> List[str]:
    """Read a ``vocab.txt``: one piece per line, the id of a piece is its line number.

    Parameters
    ----------
    path : str or path

    Returns
    -------
    list of str
        ``pieces[i]`` is the piece of id ``i``.

    Raises
    ------
    NumpyTransformerError
        The file is missing, unreadable, empty, or lacks one of ``[PAD]``, ``[UNK]``,
        ``[CLS]``, ``[SEP]``.
    """
    path = Path(path)
    try:
        # Universal newlines: a vocabulary saved with "\r\n" reads the same.
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise NumpyTransformerError(f"vocab file {path} not found; "
                                    "expected a vocab.txt with one piece per line") from None
    except (OSError, UnicodeDecodeError) as e:
        raise NumpyTransformerError(f"vocab file {path} cannot be read ({type(e).__name__}: {e}); "
                                    "expected UTF-8 text with one piece per line") from None
    # split("\n"), not splitlines(): a piece may itself be a character that splitlines()
    # treats as a line break (U+2028, U+0085, ...).
    pieces = text.split("\n")
    if pieces[-1] == "":
        pieces.pop()  # the newline that ends the last line
    if not pieces:
        raise NumpyTransformerError(f"vocab file {path} is empty; expected one piece per line")
    missing = [s for s in SPECIALS if s not in pieces]
    if missing:
        raise NumpyTransformerError(f"vocab file {path} lacks {', '.join(missing)}; "
                                    f"expected a BERT vocabulary with all of {', '.join(SPECIALS)}")
    return pieces


def _read_lower_case(path: Path) -> bool:
    """``do_lower_case`` of a ``tokenizer_config.json``; True (BERT's default) when absent."""
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise NumpyTransformerError(f"{path} cannot be read ({type(e).__name__}: {e}); "
                                    "expected a JSON object") from None
    if not isinstance(config, dict):
        raise NumpyTransformerError(f"{path} holds a {type(config).__name__}; expected a JSON object")
    lower_case = config.get("do_lower_case", True)
    if not isinstance(lower_case, bool):
        raise NumpyTransformerError(f"{path} has do_lower_case={lower_case!r}; expected true or false")
    return lower_case


class BertBatch(NamedTuple):
    """A batch of texts as a BERT model takes it.

    Attributes
    ----------
    ids : np.ndarray of int64, shape (N, T)
        ``[CLS] pieces [SEP]`` of each text, then ``[PAD]`` up to the longest text.
    mask : np.ndarray of bool, shape (N, T)
        True at the real tokens (specials included), False at the padding.
    token_type_ids : np.ndarray of int64, shape (N, T)
        Zeros: every token belongs to the first (and only) segment.
    """

    ids: np.ndarray
    mask: np.ndarray
    token_type_ids: np.ndarray


class WordPieceTokenizer:
    """BERT's tokenizer: basic tokenization, WordPiece, ``[CLS] ... [SEP]``, padding.

    Parameters
    ----------
    pieces : sequence of str
        The vocabulary; ``pieces[i]`` is the piece of id ``i``. Must hold ``[PAD]``,
        ``[UNK]``, ``[CLS]`` and ``[SEP]``.
    lower_case : bool, default True
        Lower-case and strip accents (an "uncased" model); False keeps the text's case.

    Examples
    --------
    >>> tok = WordPieceTokenizer.from_pretrained("path/to/all-MiniLM-L6-v2")  # doctest: +SKIP
    >>> tok.tokenize("Unaffable!")  # doctest: +SKIP
    ['una', '##ffa', '##ble', '!']
    >>> batch = tok(["A film.", "Too long, and dull."], max_length=256)  # doctest: +SKIP
    >>> batch.ids.shape, batch.mask.sum(axis=1)  # doctest: +SKIP
    ((2, 8), array([5, 8]))
    """

    def __init__(self, pieces: Sequence[str], lower_case: bool = True):
        pieces = list(pieces)
        bad = next((i for i, p in enumerate(pieces) if not isinstance(p, str)), None)
        if bad is not None:
            raise NumpyTransformerError(f"pieces[{bad}] is a {type(pieces[bad]).__name__}; expected str")
        missing = [s for s in SPECIALS if s not in pieces]
        if missing:
            raise NumpyTransformerError(f"pieces lacks {', '.join(missing)}; expected all of {', '.join(SPECIALS)}")
        if not isinstance(lower_case, bool):
            raise NumpyTransformerError(f"lower_case is a {type(lower_case).__name__}; expected True or False")
        self.pieces = pieces
        # A piece listed twice keeps its last line's id, as BERT's own reader does.
        self.vocab = {p: i for i, p in enumerate(pieces)}
        self.lower_case = lower_case
        self.pad_id, self.unk_id, self.cls_id, self.sep_id = (self.vocab[s] for s in SPECIALS)
        # Most words of a corpus recur, so each distinct whitespace-separated word is
        # tokenized once and its ids looked up afterwards.
        self._word_ids: Dict[str, List[int]] = {}

    @classmethod
    def from_pretrained(cls, path: Union[str, os.PathLike]) -> "WordPieceTokenizer":
        """Read a model's tokenizer from its folder (or straight from its ``vocab.txt``).

        The folder holds ``vocab.txt`` and, optionally, ``tokenizer_config.json``, whose
        ``do_lower_case`` says whether the model is uncased (True when absent).
        """
        path = Path(path)
        folder = path if path.is_dir() else path.parent
        vocab_file = path / "vocab.txt" if path.is_dir() else path
        config_file = folder / "tokenizer_config.json"
        lower_case = _read_lower_case(config_file) if config_file.is_file() else True
        return cls(load_vocab(vocab_file), lower_case=lower_case)

    def __len__(self) -> int:
        return len(self.pieces)

    def _ids_of_word(self, word: str) -> List[int]:
        ids = self._word_ids.get(word)
        if ids is None:
            pieces = [p for token in _basic_split(word, self.lower_case) for p in wordpiece_split(token, self.vocab)]
            ids = self._word_ids[word] = [self.vocab[p] for p in pieces]
        return ids

    def _text_ids(self, text: str, name: str) -> List[int]:
        if not isinstance(text, str):
            raise NumpyTransformerError(f"{name} is a {type(text).__name__}; expected str")
        return [i for word in _words(text) for i in self._ids_of_word(word)]

    def tokenize(self, text: str) -> List[str]:
        """The WordPiece pieces of ``text``, without special tokens.

        >>> tok.tokenize("Unaffable!")  # doctest: +SKIP
        ['una', '##ffa', '##ble', '!']
        """
        return [self.pieces[i] for i in self._text_ids(text, "text")]

    def encode(self, text: str, max_length: Union[int, None] = None) -> List[int]:
        """The ids of ``[CLS] pieces [SEP]``, the pieces cut so that at most
        ``max_length`` ids remain (the two special tokens count).

        Parameters
        ----------
        text : str
        max_length : int >= 2, optional
            No truncation when None.

        Returns
        -------
        list of int
        """
        _check_max_length(max_length)
        ids = self._text_ids(text, "text")
        if max_length is not None:
            ids = ids[:max_length - 2]
        return [self.cls_id, *ids, self.sep_id]

    def __call__(self, texts: Union[str, Sequence[str]], max_length: Union[int, None] = None) -> BertBatch:
        """Encode a batch of texts and pad it to its longest member.

        Parameters
        ----------
        texts : str or sequence of str, length N
            One text is a batch of one.
        max_length : int >= 2, optional
            Truncate each text to this many ids, ``[CLS]`` and ``[SEP]`` included.

        Returns
        -------
        BertBatch
            ``ids``, ``mask`` and ``token_type_ids``, each of shape (N, T) with T the
            longest encoded text.
        """
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, Sequence):
            raise NumpyTransformerError(f"texts is a {type(texts).__name__}; expected a str or a list of str")
        _check_max_length(max_length)
        rows = []
        for n, text in enumerate(texts):
            ids = self._text_ids(text, f"texts[{n}]")
            if max_length is not None:
                ids = ids[:max_length - 2]
            rows.append([self.cls_id, *ids, self.sep_id])
        T = max((len(r) for r in rows), default=0)
        ids = np.full((len(rows), T), self.pad_id, dtype=np.int64)  # (N, T)
        mask = np.zeros((len(rows), T), dtype=bool)  # (N, T)
        for n, row in enumerate(rows):
            ids[n, :len(row)] = row
            mask[n, :len(row)] = True
        return BertBatch(ids=ids, mask=mask, token_type_ids=np.zeros((len(rows), T), dtype=np.int64))

    def decode(self, ids) -> List[str]:
        """The pieces of ``ids`` (the inverse of the vocabulary lookup, specials included)."""
        ids = np.asarray(ids)
        if ids.size == 0:
            return []
        if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer) or ids.min() < 0 or ids.max() >= len(self):
            raise NumpyTransformerError(f"ids must be a 1-D list of ints in [0, {len(self)}), got {ids!r}")
        return [self.pieces[i] for i in ids.tolist()]


def _check_max_length(max_length) -> None:
    if max_length is None:
        return
    if isinstance(max_length, bool) or not isinstance(max_length, (int, np.integer)) or max_length < 2:
        raise NumpyTransformerError(f"max_length={max_length!r}; expected None or an int >= 2 "
                                    "(room for [CLS] and [SEP])")
