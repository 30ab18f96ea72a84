"""Vocabulary: a two-way map between tokens and integer ids."""

from collections import Counter

import numpy as np

from .words import _check_str, _check_token_list

__all__ = ["Vocab"]


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
