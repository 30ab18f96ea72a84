"""One tokenizer object, word or BPE, to store in a checkpoint."""

from .bpe import BPE
from .words import detokenize, word_tokenize

__all__ = ["Tokenizer"]


class Tokenizer:
    """Word or BPE tokenization behind one interface, serialisable to JSON.

    Parameters
    ----------
    kind : {"word", "bpe"}
        Word tokens (:func:`word_tokenize`) or BPE subword units.
    lowercase : bool or None, optional
        Lower-case text before tokenizing. None means ``bpe.lowercase`` for
        ``kind="bpe"`` and False for ``kind="word"``.
    bpe : BPE or None
        The learned merges; required for ``kind="bpe"``.
    """

    KINDS = ("word", "bpe")

    def __init__(self, kind="word", lowercase=None, bpe=None):
        if kind not in self.KINDS:
            raise ValueError(f"kind must be one of {self.KINDS}, got {kind!r}")
        if kind == "bpe" and not isinstance(bpe, BPE):
            raise TypeError(
                f"bpe must be a BPE instance when kind='bpe', got {type(bpe).__name__}"
            )
        if kind == "word" and bpe is not None:
            raise ValueError("bpe must be None when kind='word'")
        if lowercase is None:
            lowercase = bpe.lowercase if kind == "bpe" else False
        self.kind = kind
        self.lowercase = bool(lowercase)
        self.bpe = bpe

    @classmethod
    def learn(cls, kind, texts, bpe_merges, lowercase):
        """A word tokenizer, or a BPE tokenizer whose merges are learned from ``texts``."""
        if kind == "bpe":
            return cls("bpe", bpe=BPE.learn(texts, bpe_merges, lowercase=lowercase))
        return cls(kind, lowercase=lowercase)

    def __repr__(self):
        return f"Tokenizer(kind={self.kind!r}, lowercase={self.lowercase}, bpe={self.bpe!r})"

    def tokenize(self, text):
        """Tokens (words or subword units) of a sentence."""
        words = word_tokenize(text, lowercase=self.lowercase)
        if self.kind == "bpe":
            return self.bpe.encode_words(words)
        return words

    def detokenize(self, tokens):
        """Sentence from tokens; BPE units are first joined into words."""
        if self.kind == "bpe":
            tokens = BPE.units_to_words(tokens)
        return detokenize(tokens)

    def to_dict(self):
        """JSON-compatible description (see :meth:`from_dict`)."""
        return {
            "type": "Tokenizer",
            "kind": self.kind,
            "lowercase": self.lowercase,
            "bpe": self.bpe.to_dict() if self.bpe is not None else None,
        }

    @classmethod
    def from_dict(cls, d):
        """Rebuild a :class:`Tokenizer` from :meth:`to_dict` output."""
        if not isinstance(d, dict) or d.get("type") != "Tokenizer":
            raise ValueError(
                "d must be a dict made by Tokenizer.to_dict() (type 'Tokenizer')"
            )
        bpe = BPE.from_dict(d["bpe"]) if d.get("bpe") is not None else None
        return cls(d["kind"], lowercase=d["lowercase"], bpe=bpe)
