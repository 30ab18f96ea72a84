"""An embedded translation task: English number words to German number words.

Generated on the fly, no download::

    21   -> "twenty-one"                              / "ein und zwanzig"
    347  -> "three hundred forty-seven"               / "drei hundert sieben und vierzig"
    1999 -> "one thousand nine hundred ninety-nine"   / "ein tausend neun hundert neun und neunzig"

German writes a number below a million as one compound word
("dreihundertsiebenundvierzig"), which gives a word-level model nothing to align.
With ``spaced=True`` (the default) the German side is written as its morphemes
separated by spaces, in German order. The units-before-tens swap ("sieben und
vierzig" for "forty-seven") shows as a crossing in the attention heatmap when the
English side is cut into subword units (the BPE tokenizer of the translation task);
a word-level tokenizer keeps "forty-seven" one token, so both German morphemes
attend to the same column and there is nothing to cross.

Conventions
-----------
* English: American style, no "and" ("three hundred forty-seven"), tens and
  units hyphenated ("ninety-nine").
* German: the standalone and final one is "eins" (1, 101 "einhunderteins"); inside
  a compound it is "ein" ("einundzwanzig", "eintausend").
* German hundreds and thousands always carry their count: 100 is "einhundert"
  (spaced "ein hundert"), 1000 is "eintausend", never bare "hundert"/"tausend".
* German morphemes (spaced mode): the units ``ein/eins, zwei, ..., neun``, "und",
  the teens ``zehn, elf, zwölf, dreizehn, ..., neunzehn`` and the tens ``zwanzig,
  ..., neunzig`` as whole words (their stems change: "sechzehn", "siebzig"),
  "hundert", "tausend". Joining the parts without spaces gives the correct
  German spelling.
* Range 0..999,999 (German switches to a separate word, "eine Million", above).
"""

from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np

#: Largest number the word functions accept.
MAX_SUPPORTED = 999_999

_EN_ONES = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
    "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
    "seventeen", "eighteen", "nineteen",
]
_EN_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]

# Index 1 is the compound form "ein"; the final/standalone "eins" is special-cased.
_DE_ONES = [
    "null", "ein", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun",
    "zehn", "elf", "zwölf", "dreizehn", "vierzehn", "fünfzehn", "sechzehn",
    "siebzehn", "achtzehn", "neunzehn",
]
_DE_TENS = ["", "", "zwanzig", "dreißig", "vierzig", "fünfzig", "sechzig", "siebzig", "achtzig", "neunzig"]


def _check_number(n, name: str = "n") -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"{name} is a {type(n).__name__}; expected an int in 0..{MAX_SUPPORTED}")
    if not 0 <= n <= MAX_SUPPORTED:
        raise ValueError(f"{name}={n}; expected an int in 0..{MAX_SUPPORTED}")
    return int(n)


def _english_below_1000(n: int) -> List[str]:
    """Words of 1 <= n <= 999."""
    words = []
    hundreds, rest = divmod(n, 100)
    if hundreds:
        words += [_EN_ONES[hundreds], "hundred"]
    if rest >= 20:
        tens, ones = divmod(rest, 10)
        words.append(_EN_TENS[tens] + (f"-{_EN_ONES[ones]}" if ones else ""))
    elif rest:
        words.append(_EN_ONES[rest])
    return words


def english_words(n: int) -> str:
    """English words for ``0 <= n <= 999,999``.

    Examples
    --------
    >>> english_words(347)
    'three hundred forty-seven'
    >>> english_words(1999)
    'one thousand nine hundred ninety-nine'
    """
    n = _check_number(n)
    if n == 0:
        return "zero"
    thousands, rest = divmod(n, 1000)
    words = []
    if thousands:
        words += _english_below_1000(thousands) + ["thousand"]
    if rest:
        words += _english_below_1000(rest)
    return " ".join(words)


def _german_below_1000(n: int, final: bool) -> List[str]:
    """Morphemes of 1 <= n <= 999; ``final`` means nothing follows in the compound."""
    parts = []
    hundreds, rest = divmod(n, 100)
    if hundreds:
        parts += [_DE_ONES[hundreds], "hundert"]
    if rest >= 20:
        tens, ones = divmod(rest, 10)
        if ones:
            # German says the unit first: 47 = "sieben und vierzig".
            parts += [_DE_ONES[ones], "und"]
        parts.append(_DE_TENS[tens])
    elif rest == 1:
        # "eins" only when the number ends in it: 101 "hunderteins", but 1000 "eintausend".
        parts.append("eins" if final else "ein")
    elif rest:
        parts.append(_DE_ONES[rest])
    return parts


def german_parts(n: int) -> List[str]:
    """German morphemes of ``0 <= n <= 999,999`` in German order.

    ``"".join(german_parts(n))`` is the German word; ``" ".join(...)`` the spaced form.
    """
    n = _check_number(n)
    if n == 0:
        return ["null"]
    thousands, rest = divmod(n, 1000)
    parts = []
    if thousands:
        parts += _german_below_1000(thousands, final=False) + ["tausend"]
    if rest:
        parts += _german_below_1000(rest, final=True)
    return parts


def german_words(n: int, spaced: bool = True) -> str:
    """German words for ``0 <= n <= 999,999``.

    Parameters
    ----------
    n : int
    spaced : bool, default True
        Separate the morphemes with spaces ("ein und zwanzig") instead of writing
        the one compound word ("einundzwanzig").

    Examples
    --------
    >>> german_words(347)
    'drei hundert sieben und vierzig'
    >>> german_words(347, spaced=False)
    'dreihundertsiebenundvierzig'
    """
    return (" " if spaced else "").join(german_parts(n))


def make_number_pairs(
    n_train: int,
    n_val: int,
    n_test: int,
    seed: int,
    max_number: int = 9999,
    spaced: bool = True,
) -> Dict[str, List[Tuple[str, str]]]:
    """Random (English, German) number pairs in three disjoint splits.

    Parameters
    ----------
    n_train, n_val, n_test : int
        Number of pairs in each split.
    seed : int
        Seed of ``np.random.default_rng``; the same seed gives the same pairs.
    max_number : int, default 9999
        Numbers are drawn without replacement from ``0..max_number`` (at most 999,999).
    spaced : bool, default True
        Passed to :func:`german_words`.

    Returns
    -------
    dict
        ``{"train": [(en, de), ...], "val": [...], "test": [...]}``; each number
        appears in at most one split, once.
    """
    max_number = _check_number(max_number, "max_number")
    counts = {}
    for name, value in (("train", n_train), ("val", n_val), ("test", n_test)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"make_number_pairs: n_{name}={value!r}; expected a non-negative integer")
        counts[name] = int(value)
    total = sum(counts.values())
    if total > max_number + 1:
        raise ValueError(
            f"make_number_pairs: requested n_train + n_val + n_test = {total} distinct numbers, "
            f"but 0..{max_number} has only {max_number + 1}; ask for fewer or raise max_number"
        )
    numbers = np.random.default_rng(seed).permutation(max_number + 1)[:total]
    out, start = {}, 0
    for name, c in counts.items():
        out[name] = [(english_words(int(k)), german_words(int(k), spaced)) for k in numbers[start : start + c]]
        start += c
    return out
