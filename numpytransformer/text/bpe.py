"""Byte-pair encoding over word tokens (Sennrich, Haddow and Birch, 2016).

Two learners give the same merges: :func:`learn_merges` is the textbook loop (count
every pair, merge the most frequent, repeat), :func:`learn_merges_fast` keeps the
counts up to date incrementally and is what :meth:`BPE.learn` uses.
"""

import heapq
from collections import Counter, defaultdict

from .words import _check_token_list, detokenize, word_tokenize

__all__ = ["BPE", "word_counts", "learn_merges", "learn_merges_fast"]

END_OF_WORD = "</w>"


def _initial_symbols(word):
    """A word as its characters, the last one carrying the marker: ``Mann`` -> ``M a n n</w>``."""
    return list(word[:-1]) + [word[-1] + END_OF_WORD]


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


def word_counts(texts_or_token_lists, lowercase=False):
    """How often each word occurs: the input of both learners.

    Parameters
    ----------
    texts_or_token_lists : iterable of (str or list of str)
        Sentences (word-tokenized with :func:`word_tokenize`) or lists of word
        tokens (used as they are).
    lowercase : bool, optional
        Lower-case the words first.

    Returns
    -------
    collections.Counter
        word -> count, in order of first occurrence.
    """
    if isinstance(texts_or_token_lists, str):
        raise TypeError(
            "texts_or_token_lists must be a list of sentences or token lists, "
            "not a single str"
        )
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
            if END_OF_WORD in w:
                raise ValueError(
                    f"texts_or_token_lists[{i}] contains the token {w!r}, which "
                    f"includes the end-of-word marker {END_OF_WORD!r}"
                )
        counts.update(w for w in words if w)
    return counts


def learn_merges(counts, num_merges, min_frequency=2):
    """The textbook BPE learner: count every adjacent pair, merge the most frequent, repeat.

    Each merge recounts every pair of every word, a pass over the whole vocabulary;
    :func:`learn_merges_fast` gives the same merges without the recount.

    Parameters
    ----------
    counts : dict of str -> int
        Word frequencies (see :func:`word_counts`); words are non-empty and free of
        the end-of-word marker.
    num_merges : int
        Maximum number of merges to learn.
    min_frequency : int, optional
        Stop early when the most frequent pair occurs fewer times than this.

    Returns
    -------
    list of (str, str)
        The merges in the order they were learned. Ties between equally frequent
        pairs go to the lexicographically smallest pair.
    """
    # Distinct words stay distinct tuples: their symbols concatenate to the word.
    words = {tuple(_initial_symbols(w)): f for w, f in counts.items()}
    merges = []
    while len(merges) < num_merges:
        pairs = Counter()
        for symbols, f in words.items():
            for pair in zip(symbols, symbols[1:]):
                pairs[pair] += f
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        if pairs[best] < min_frequency:
            break
        merges.append(best)
        merged = best[0] + best[1]
        words = {tuple(_merge_pair(symbols, best, merged)): f for symbols, f in words.items()}
    return merges


def learn_merges_fast(counts, num_merges, min_frequency=2):
    """The learner of :func:`learn_merges`, with the pair counts kept up to date.

    A merge only revisits the words that contain the merged pair (an index
    pair -> words says which), subtracting their old pairs' counts and adding the
    new ones; a heap with lazy deletion finds the most frequent pair. Same
    parameters, same result (the tests check this), without a pass over the whole
    vocabulary per merge.
    """
    words = [_initial_symbols(w) for w in counts]
    freqs = list(counts.values())

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
    return merges


class BPE:
    r"""Byte-pair encoding over word tokens.

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

    END_OF_WORD = END_OF_WORD

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
    def learn(cls, texts_or_token_lists, num_merges, min_frequency=2, lowercase=False):
        """Learn merges from training text, with :func:`learn_merges_fast`.

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
        counts = word_counts(texts_or_token_lists, lowercase)
        return cls(learn_merges_fast(counts, num_merges, min_frequency), lowercase=lowercase)

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
        symbols = _initial_symbols(word)
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
