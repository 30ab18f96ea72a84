"""Text pipeline: normalisation, word tokens, byte-pair encoding and vocabularies.

Everything a translation task needs between a raw sentence and a list of ids, in
plain Python (no spaCy, no sentencepiece), so that a student can read all of it:

    text --normalize--> text --word_tokenize--> words --BPE.encode--> units
         --Vocab.encode--> ids

and back again with ``Vocab.decode``, ``BPE.decode`` / ``detokenize``.
Every object here serialises to a JSON-compatible dict (``to_dict`` / ``from_dict``);
nothing is pickled.
"""

import heapq
import re
import unicodedata
from collections import Counter, defaultdict

import numpy as np

__all__ = [
    "normalize",
    "word_tokenize",
    "detokenize",
    "BPE",
    "Vocab",
    "Tokenizer",
]


# --------------------------------------------------------------------------- #
# Normalisation and word tokens
# --------------------------------------------------------------------------- #

# A word is a run of word characters (unicode letters, digits, "_"), which may be
# joined by an apostrophe ("don't", "woman's"), a hyphen ("T-shirt"), or a point,
# comma or colon between two digits ("2.00", "10,000", "10:30"). A hyphen may also
# end a word, for the German suspended compound ("Ess- und Wohnzimmer").
# Every other non-space character is a token of its own.
_TOKEN_RE = re.compile(
    r"\w+(?:(?:[-'\u2019]|(?<=\d)[.,:](?=\d))\w+)*-?"
    r"|[^\w\s]"
)

# Punctuation that sticks to the token on its left ("word," "word." "(word)").
_CLOSING = frozenset(".,!?;:)]}%'\u2019\u2026")
# Punctuation that sticks to the token on its right.
_OPENING = frozenset("([{\u2018\u201a")
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
    return _TOKEN_RE.findall(normalize(text, lowercase=lowercase))


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


# --------------------------------------------------------------------------- #
# Byte-pair encoding
# --------------------------------------------------------------------------- #

def _merge_pair(symbols, pair, merged):
    """Replace every occurrence of ``pair`` in ``symbols``, scanning left to right."""
    a, b = pair
    out = []
    i, n = 0, len(symbols)
    while i < n:
        if i < n - 1 and symbols[i] == a and symbols[i + 1] == b:
            out.append(merged)
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


class BPE:
    r"""Byte-pair encoding over word tokens (Sennrich, Haddow and Birch, 2016).

    Each word starts as its characters, the last one carrying the end-of-word
    marker ``"</w>"`` (``"Mann"`` -> ``M a n n</w>``). Learning repeatedly merges
    the most frequent adjacent pair of symbols in the training words; encoding
    a new word replays the learned merges, lowest rank first. Because the marker
    sits on the last unit of every word, ``decode`` can put words back together
    exactly: concatenate the units, cut after each ``"</w>"``.

    Parameters
    ----------
    merges : list of (str, str)
        The merges in the order they were learned.
    lowercase : bool, optional
        Whether :meth:`encode` lower-cases text before word tokenization
        (set by :meth:`learn` to what the merges were learned on).

    Attributes
    ----------
    END_OF_WORD : str
        The end-of-word marker, ``"</w>"``.
    merges : list of (str, str)
        The learned merges; ``merges[r]`` has rank ``r``.
    lowercase : bool
    """

    END_OF_WORD = "</w>"

    def __init__(self, merges=(), lowercase=False):
        checked = []
        for r, pair in enumerate(merges):
            if (not isinstance(pair, (list, tuple)) or len(pair) != 2
                    or not all(isinstance(s, str) and s for s in pair)):
                raise TypeError(
                    f"merges[{r}] must be a pair of non-empty str, got {pair!r}"
                )
            checked.append((pair[0], pair[1]))
        self.merges = checked
        self.lowercase = bool(lowercase)
        # Later duplicates cannot fire (the pair is gone once merged), so the
        # first rank is the one that counts.
        self._ranks = {}
        for r, pair in enumerate(checked):
            self._ranks.setdefault(pair, r)
        # word -> units; test sentences repeat words a lot, so this pays off.
        self._cache = {}

    def __repr__(self):
        return f"BPE(num_merges={len(self.merges)}, lowercase={self.lowercase})"

    def __len__(self):
        """Number of merges."""
        return len(self.merges)

    @classmethod
    def _initial_symbols(cls, word):
        return list(word[:-1]) + [word[-1] + cls.END_OF_WORD]

    @classmethod
    def _word_counts(cls, texts_or_token_lists, lowercase):
        counts = Counter()
        for i, item in enumerate(texts_or_token_lists):
            if isinstance(item, str):
                words = word_tokenize(item, lowercase=lowercase)
            elif isinstance(item, (list, tuple)):
                _check_token_list(item, f"texts_or_token_lists[{i}]")
                words = [w.lower() for w in item] if lowercase else item
            else:
                raise TypeError(
                    f"texts_or_token_lists[{i}] must be a str or a list of str "
                    f"tokens, got {type(item).__name__}"
                )
            for w in words:
                if cls.END_OF_WORD in w:
                    raise ValueError(
                        f"texts_or_token_lists[{i}] contains the token {w!r}, which "
                        f"includes the end-of-word marker {cls.END_OF_WORD!r}"
                    )
            counts.update(w for w in words if w)
        return counts

    @classmethod
    def learn(cls, texts_or_token_lists, num_merges, min_frequency=2, lowercase=False):
        """Learn merges from training text.

        Pair counts are kept up to date incrementally: a merge only revisits the
        words that contain the merged pair (an index pair -> words says which),
        and a heap with lazy deletion finds the most frequent pair. Recounting
        every pair of every word after each merge gives the same merges (the
        tests check this) but costs a pass over the whole vocabulary per merge.

        Ties between equally frequent pairs go to the lexicographically smallest
        pair, so the result is deterministic.

        Parameters
        ----------
        texts_or_token_lists : iterable of (str or list of str)
            Sentences (word-tokenized with :func:`word_tokenize`) or lists of
            word tokens (used as they are).
        num_merges : int
            Maximum number of merges to learn.
        min_frequency : int, optional
            Stop early when the most frequent pair occurs fewer times than this.
        lowercase : bool, optional
            Lower-case the text (and later :meth:`encode` input) first.

        Returns
        -------
        BPE
        """
        if isinstance(num_merges, bool) or not isinstance(num_merges, int) or num_merges < 0:
            raise ValueError(f"num_merges must be an int >= 0, got {num_merges!r}")
        if isinstance(min_frequency, bool) or not isinstance(min_frequency, int) or min_frequency < 1:
            raise ValueError(f"min_frequency must be an int >= 1, got {min_frequency!r}")
        if isinstance(texts_or_token_lists, str):
            raise TypeError(
                "texts_or_token_lists must be a list of sentences or token lists, "
                "not a single str"
            )

        word_counts = cls._word_counts(texts_or_token_lists, lowercase)
        words = [cls._initial_symbols(w) for w in word_counts]
        freqs = list(word_counts.values())

        pair_counts = defaultdict(int)
        where = defaultdict(set)  # pair -> indices of the words that contain it
        for idx, (symbols, f) in enumerate(zip(words, freqs)):
            for pair in zip(symbols, symbols[1:]):
                pair_counts[pair] += f
                where[pair].add(idx)
        heap = [(-c, pair) for pair, c in pair_counts.items()]
        heapq.heapify(heap)

        merges = []
        while len(merges) < num_merges and heap:
            neg_count, pair = heapq.heappop(heap)
            count = pair_counts.get(pair, 0)
            if count != -neg_count or count == 0:
                continue  # stale heap entry; the current count was pushed later
            if count < min_frequency:
                break
            merges.append(pair)
            merged = pair[0] + pair[1]
            changed = set()
            for idx in where.pop(pair):
                old = words[idx]
                new = _merge_pair(old, pair, merged)
                f = freqs[idx]
                old_pairs = list(zip(old, old[1:]))
                new_pairs = list(zip(new, new[1:]))
                for p in old_pairs:
                    pair_counts[p] -= f
                for p in new_pairs:
                    pair_counts[p] += f
                new_set = set(new_pairs)
                for p in set(old_pairs) - new_set:
                    if p != pair:
                        where[p].discard(idx)
                for p in new_set:
                    where[p].add(idx)
                changed.update(old_pairs)
                changed.update(new_pairs)
                words[idx] = new
            del pair_counts[pair]
            changed.discard(pair)
            for p in changed:
                c = pair_counts[p]
                if c > 0:
                    heapq.heappush(heap, (-c, p))
                else:
                    del pair_counts[p]
                    where.pop(p, None)
        return cls(merges, lowercase=lowercase)

    def encode_word(self, word):
        """Subword units of one word token (cached).

        Parameters
        ----------
        word : str
            A non-empty word token.

        Returns
        -------
        tuple of str
            The units; the last one ends with ``"</w>"``.
        """
        units = self._cache.get(word)
        if units is not None:
            return units
        if not isinstance(word, str) or not word:
            raise ValueError(f"word must be a non-empty str, got {word!r}")
        symbols = self._initial_symbols(word)
        ranks = self._ranks
        while len(symbols) > 1:
            best = min(zip(symbols, symbols[1:]),
                       key=lambda p: ranks.get(p, float("inf")))
            if best not in ranks:
                break
            symbols = _merge_pair(symbols, best, best[0] + best[1])
        units = tuple(symbols)
        self._cache[word] = units
        return units

    def encode_words(self, words):
        """Subword units of a list of word tokens.

        Parameters
        ----------
        words : list of str

        Returns
        -------
        list of str
        """
        _check_token_list(words, "words")
        out = []
        for w in words:
            out.extend(self.encode_word(w))
        return out

    def encode(self, text):
        """Subword units of a sentence.

        Parameters
        ----------
        text : str

        Returns
        -------
        list of str
            E.g. ``['Ein</w>', 'Man', 'n</w>', ',</w>']``.
        """
        return self.encode_words(word_tokenize(text, lowercase=self.lowercase))

    @classmethod
    def units_to_words(cls, units):
        """Put subword units back together into word tokens.

        A unit ending in ``"</w>"`` ends a word. Trailing units without the
        marker (a model output cut off mid-word) still form a last word.

        Parameters
        ----------
        units : list of str

        Returns
        -------
        list of str
        """
        _check_token_list(units, "units")
        words, current = [], []
        for u in units:
            if u.endswith(cls.END_OF_WORD):
                current.append(u[: -len(cls.END_OF_WORD)])
                words.append("".join(current))
                current = []
            else:
                current.append(u)
        if current:
            words.append("".join(current))
        return [w for w in words if w]

    def decode(self, units):
        """Sentence from subword units: :meth:`units_to_words` then :func:`detokenize`.

        ``units_to_words(encode(s)) == word_tokenize(s)`` holds for every ``s``;
        ``decode(encode(s)) == normalize(s)`` (lower-cased if ``lowercase``) holds
        under the guarantee of :func:`detokenize`.

        Parameters
        ----------
        units : list of str

        Returns
        -------
        str
        """
        return detokenize(self.units_to_words(units))

    def to_dict(self):
        """JSON-compatible description (see :meth:`from_dict`)."""
        return {
            "type": "BPE",
            "end_of_word": self.END_OF_WORD,
            "lowercase": self.lowercase,
            "merges": [[a, b] for a, b in self.merges],
        }

    @classmethod
    def from_dict(cls, d):
        """Rebuild a :class:`BPE` from :meth:`to_dict` output.

        Parameters
        ----------
        d : dict

        Returns
        -------
        BPE
        """
        if not isinstance(d, dict) or d.get("type") != "BPE":
            raise ValueError("d must be a dict made by BPE.to_dict() (type 'BPE')")
        if d.get("end_of_word", cls.END_OF_WORD) != cls.END_OF_WORD:
            raise ValueError(
                f"d['end_of_word'] is {d['end_of_word']!r}, this BPE uses "
                f"{cls.END_OF_WORD!r}"
            )
        return cls(d["merges"], lowercase=d.get("lowercase", False))


# --------------------------------------------------------------------------- #
# Vocabulary
# --------------------------------------------------------------------------- #

class Vocab:
    """Two-way map between tokens and integer ids, with four special tokens.

    Ids 0-3 are always ``<pad>``, ``<bos>``, ``<eos>``, ``<unk>``; ordinary
    tokens follow. ``pad_id == 0`` lets a zero-initialised batch be all padding.

    Parameters
    ----------
    tokens : iterable of str, optional
        The ordinary tokens, in id order (ids start at 4). Must be unique and
        must not include the special tokens.
    """

    PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
    SPECIALS = (PAD, BOS, EOS, UNK)
    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    def __init__(self, tokens=()):
        tokens = list(tokens)
        _check_token_list(tokens, "tokens")
        self._itos = list(self.SPECIALS)
        self._stoi = {s: i for i, s in enumerate(self.SPECIALS)}
        for tok in tokens:
            if tok in self._stoi:
                what = "a special token" if tok in self.SPECIALS else "a duplicate"
                raise ValueError(f"tokens contains {tok!r}, which is {what}")
            self._stoi[tok] = len(self._itos)
            self._itos.append(tok)

    @classmethod
    def build(cls, token_lists, min_freq=1, max_size=None):
        """Vocabulary of the tokens in a corpus.

        Tokens are ordered by frequency (most frequent first), ties broken
        alphabetically, so the same corpus always gives the same ids.

        Parameters
        ----------
        token_lists : iterable of list of str
            Tokenized sentences.
        min_freq : int, optional
            Keep tokens seen at least this many times.
        max_size : int or None, optional
            Maximum ``len(vocab)``, the four special tokens included.

        Returns
        -------
        Vocab
        """
        if isinstance(min_freq, bool) or not isinstance(min_freq, int) or min_freq < 1:
            raise ValueError(f"min_freq must be an int >= 1, got {min_freq!r}")
        if max_size is not None and (
                isinstance(max_size, bool) or not isinstance(max_size, int)
                or max_size < len(cls.SPECIALS)):
            raise ValueError(
                f"max_size must be None or an int >= {len(cls.SPECIALS)} (the "
                f"special tokens), got {max_size!r}"
            )
        if isinstance(token_lists, str):
            raise TypeError("token_lists must be a list of token lists, not a str")
        counts = Counter()
        for i, toks in enumerate(token_lists):
            _check_token_list(toks, f"token_lists[{i}]")
            counts.update(toks)
        for s in cls.SPECIALS:
            counts.pop(s, None)
        kept = sorted((t for t, c in counts.items() if c >= min_freq),
                      key=lambda t: (-counts[t], t))
        if max_size is not None:
            kept = kept[: max_size - len(cls.SPECIALS)]
        return cls(kept)

    def __len__(self):
        return len(self._itos)

    def __contains__(self, token):
        return token in self._stoi

    def __repr__(self):
        return f"Vocab(size={len(self)})"

    def token_to_id(self, token):
        """Id of ``token``; ``unk_id`` if it is not in the vocabulary."""
        _check_str(token, "token")
        return self._stoi.get(token, self.unk_id)

    def id_to_token(self, idx):
        """Token with id ``idx``; ValueError if out of range."""
        return self._itos[self._check_id(idx, "idx")]

    def _check_id(self, idx, name):
        # numpy integers are welcome (ids often come from argmax); bools are not.
        if isinstance(idx, bool) or not isinstance(idx, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {type(idx).__name__}")
        idx = int(idx)
        if not 0 <= idx < len(self._itos):
            raise ValueError(
                f"{name} is {idx}, expected an id in [0, {len(self._itos) - 1}]"
            )
        return idx

    def encode(self, tokens, add_bos=False, add_eos=False):
        """Ids of a list of tokens; unknown tokens get ``unk_id``.

        Parameters
        ----------
        tokens : list of str
        add_bos, add_eos : bool, optional
            Prepend ``bos_id`` / append ``eos_id``.

        Returns
        -------
        list of int
        """
        _check_token_list(tokens, "tokens")
        ids = [self._stoi.get(t, self.unk_id) for t in tokens]
        if add_bos:
            ids.insert(0, self.bos_id)
        if add_eos:
            ids.append(self.eos_id)
        return ids

    def decode(self, ids, strip_special=True):
        """Tokens of a sequence of ids.

        Parameters
        ----------
        ids : sequence of int or 1-D integer numpy array
        strip_special : bool, optional
            Stop at the first ``<eos>`` and drop ``<pad>`` and ``<bos>``, which is
            what one wants for a decoded model output. ``<unk>`` is kept.

        Returns
        -------
        list of str
        """
        if isinstance(ids, (str, bytes)) or not hasattr(ids, "__len__"):
            raise TypeError(
                f"ids must be a sequence of int, got {type(ids).__name__}"
            )
        if getattr(ids, "ndim", 1) != 1:
            raise ValueError(f"ids must be 1-D, got an array of shape {ids.shape}")
        out = []
        for i, idx in enumerate(ids):
            idx = self._check_id(idx, f"ids[{i}]")
            if strip_special:
                if idx == self.eos_id:
                    break
                if idx in (self.pad_id, self.bos_id):
                    continue
            out.append(self._itos[idx])
        return out

    def to_dict(self):
        """JSON-compatible description (see :meth:`from_dict`)."""
        return {"type": "Vocab", "itos": list(self._itos)}

    @classmethod
    def from_dict(cls, d):
        """Rebuild a :class:`Vocab` from :meth:`to_dict` output.

        Parameters
        ----------
        d : dict

        Returns
        -------
        Vocab
        """
        if not isinstance(d, dict) or d.get("type") != "Vocab":
            raise ValueError("d must be a dict made by Vocab.to_dict() (type 'Vocab')")
        itos = list(d["itos"])
        if tuple(itos[: len(cls.SPECIALS)]) != cls.SPECIALS:
            raise ValueError(
                f"d['itos'] must start with the special tokens {list(cls.SPECIALS)}, "
                f"got {itos[: len(cls.SPECIALS)]}"
            )
        return cls(itos[len(cls.SPECIALS):])


# --------------------------------------------------------------------------- #
# One object to store in a checkpoint
# --------------------------------------------------------------------------- #

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
