"""An embedded corpus for the language model: little plays generated from a small grammar.

Tests and lesson 12 need text to train a language model on without the shared data.
This module writes it: short scenes in the shape of Tiny Shakespeare (a speaker's name in
capitals, a colon, one or two lines of speech, a blank line), with sentences from a
small phrase-structure grammar. The text has structure a model can learn in seconds
(names, the colon and newline after them, agreement of "the"/"a" with the nouns the
grammar allows, full stops) and enough randomness that it cannot be memorised.

The same ``seed`` and ``n_chars`` always give the same text.
"""
from __future__ import annotations

import numpy as np

__all__ = ["grammar_corpus", "SPEAKERS"]

SPEAKERS = ("ROMEO", "JULIET", "NURSE", "FRIAR", "KING", "QUEEN")

_GRAMMAR = {
    "S": [["NP", "VP", "."], ["NP", "VP", "and", "NP", "VP", "."], ["O", "NAME", ",", "NP", "VP", "!"]],
    "NP": [["the", "N"], ["a", "N"], ["my", "N"], ["the", "ADJ", "N"], ["thy", "ADJ", "N"]],
    "VP": [["V", "NP"], ["V", "NP", "P", "NP"], ["IV"]],
    "N": [["king"], ["queen"], ["moon"], ["rose"], ["sword"], ["heart"], ["night"], ["love"]],
    "ADJ": [["sweet"], ["cold"], ["fair"], ["dark"], ["gentle"]],
    "V": [["loves"], ["sees"], ["takes"], ["keeps"], ["hath"]],
    "IV": [["sleeps"], ["weeps"], ["dies"], ["sings"]],
    "P": [["with"], ["by"], ["for"]],
    "NAME": [[s.capitalize()] for s in SPEAKERS],
}
_NO_SPACE_BEFORE = {".", ",", "!"}


def _expand(symbol: str, rng: np.random.Generator, out: list) -> None:
    if symbol not in _GRAMMAR:
        out.append(symbol)
        return
    rules = _GRAMMAR[symbol]
    for s in rules[int(rng.integers(len(rules)))]:
        _expand(s, rng, out)


def _sentence(rng: np.random.Generator) -> str:
    words: list = []
    _expand("S", rng, words)
    text = ""
    for w in words:
        text += w if (not text or w in _NO_SPACE_BEFORE) else " " + w
    return text[0].upper() + text[1:]


def grammar_corpus(n_chars: int = 60_000, seed: int = 0) -> str:
    """At least ``n_chars`` characters of generated scenes, cut at the end of a speech.

    >>> print(grammar_corpus(120)[:60])  # doctest: +SKIP
    JULIET:
    The cold rose sleeps. A king hath my heart.
    """
    rng = np.random.default_rng(seed)
    parts, size = [], 0
    while size < n_chars:
        speaker = SPEAKERS[int(rng.integers(len(SPEAKERS)))]
        lines = [" ".join(_sentence(rng) for _ in range(int(rng.integers(1, 3))))
                 for _ in range(int(rng.integers(1, 3)))]
        part = speaker + ":\n" + "\n".join(lines) + "\n\n"
        parts.append(part)
        size += len(part)
    return "".join(parts)
