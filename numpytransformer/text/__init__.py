"""Text pipeline: normalisation, word tokens, byte-pair encoding and vocabularies.

Everything a translation task needs between a raw sentence and a list of ids, in
plain Python (no spaCy, no sentencepiece), so that a student can read all of it:

    text --normalize--> text --word_tokenize--> words --BPE.encode--> units
         --Vocab.encode--> ids

and back again with ``Vocab.decode``, ``BPE.decode`` / ``detokenize``.

========================  ===========================================================
``text/words.py``         :func:`normalize`, :func:`word_tokenize`, :func:`detokenize`
``text/bpe.py``           :class:`BPE`; the readable learner :func:`learn_merges`
                          beside the fast one :func:`learn_merges_fast`
``text/vocab.py``         :class:`Vocab`, tokens <-> ids with four special tokens
``text/tokenizer.py``     :class:`Tokenizer`, word or BPE tokens behind one interface
========================  ===========================================================

Every object here serialises to a JSON-compatible dict (``to_dict`` / ``from_dict``);
nothing is pickled.
"""
from .bpe import BPE, learn_merges, learn_merges_fast, word_counts
from .tokenizer import Tokenizer
from .vocab import Vocab
from .words import detokenize, normalize, word_tokenize
from .wordpiece import WordPieceTokenizer

__all__ = [
    "normalize",
    "word_tokenize",
    "detokenize",
    "BPE",
    "word_counts",
    "learn_merges",
    "learn_merges_fast",
    "Vocab",
    "Tokenizer",
    "WordPieceTokenizer",
]
