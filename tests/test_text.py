"""Tests for the numpytransformer.text package: normalisation, word tokens, BPE, Vocab, Tokenizer."""

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numpytransformer.text import (
    BPE,
    Tokenizer,
    Vocab,
    detokenize,
    learn_merges,
    learn_merges_fast,
    normalize,
    word_counts,
    word_tokenize,
)

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("NUMPYTRANSFORMER_DATA", REPO.parent / "shared" / "data"))

SENTENCES = [
    "A man, in a blue shirt, rides a bike.",
    "Two young, White males are outside near many bushes.",
    "A boy wearing headphones sits on a woman's shoulders.",
    "Several men in hard hats are operating a giant pulley system.",
    "A little girl climbing into a wooden playhouse!",
    "Is this a dog (or a cat)?",
    'A sign reads "Stop here": nobody does.',
    "A man sells 10,000 tickets for 2.00 Euros; 50% are gone.",
    "Ein Mann, der fährt.",
    "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
    "Ein Mädchen in einem rosa Kleid klettert in ein Spielhaus aus Holz.",
    "Eine Frau mit einem großen Geldbeutel geht an einem Tor vorbei.",
    "Ein Football-Spieler trägt ein Trikot mit der Zahl „4“.",
    "Menschen stehen vor einem Schild mit der Aufschrift \"The Deep End\".",
    "Mehrere Menschen in einem Ess- und Wohnzimmer, einige schlafen.",
    "Der Fußgänger überquert die Straße – ganz allein.",
]


# --------------------------------------------------------------------------- #
# normalize
# --------------------------------------------------------------------------- #

def test_normalize_nfc_whitespace_strip():
    decomposed = "Ma\u0308dchen"  # "a" + combining diaeresis
    assert normalize(f"  {decomposed}\t spielt \n\u00a0 Ball ") == "M\u00e4dchen spielt Ball"


def test_normalize_lowercase():
    assert normalize("Straße IST Groß", lowercase=True) == "straße ist groß"


def test_normalize_rejects_non_str():
    with pytest.raises(TypeError, match="text"):
        normalize(b"bytes")


# --------------------------------------------------------------------------- #
# word_tokenize / detokenize
# --------------------------------------------------------------------------- #

@pytest.mark.parametrize("text, expected", [
    ("Ein Mann, der fährt.", ["Ein", "Mann", ",", "der", "fährt", "."]),
    ("Die Straße ist groß!", ["Die", "Straße", "ist", "groß", "!"]),
    ("I don't know.", ["I", "don't", "know", "."]),
    ("A woman's T-shirt", ["A", "woman's", "T-shirt"]),
    ("the dogs' bowl", ["the", "dogs", "'", "bowl"]),
    ("for 2.00 Euros, 10,000 times at 10:30", ["for", "2.00", "Euros", ",", "10,000", "times", "at", "10:30"]),
    ("Wait...", ["Wait", ".", ".", "."]),
    ('He said "hi" (twice)', ["He", "said", '"', "hi", '"', "(", "twice", ")"]),
    ("ein „slow“-Schild", ["ein", "„", "slow", "“", "-", "Schild"]),
    ("Ess- und Wohnzimmer", ["Ess-", "und", "Wohnzimmer"]),
    ("rock & roll / jazz", ["rock", "&", "roll", "/", "jazz"]),
    ("", []),
    ("   ", []),
])
def test_word_tokenize_examples(text, expected):
    assert word_tokenize(text) == expected


def test_word_tokenize_lowercase():
    assert word_tokenize("Ein MANN.", lowercase=True) == ["ein", "mann", "."]


@given(st.text(max_size=40))
def test_word_tokenize_loses_only_whitespace(text):
    tokens = word_tokenize(text)
    assert all(tok and not any(ch.isspace() for ch in tok) for tok in tokens)
    assert "".join(tokens) == normalize(text).replace(" ", "")


@pytest.mark.parametrize("sentence", SENTENCES)
def test_detokenize_round_trip_fixed(sentence):
    assert detokenize(word_tokenize(sentence)) == normalize(sentence)


@pytest.mark.parametrize("sentence, tokens", [
    ("नमस्ते दुनिया", ["नमस्ते", "दुनिया"]),             # Devanagari vowel signs and virama are combining marks
    ("สวัสดีครับ", ["สวัสดีครับ"]),                        # Thai tone marks and vowels above and below
    ("q\u0303 x", ["q\u0303", "x"]),                      # a mark that no NFC code point absorbs
    ("日本語のテキスト。", ["日本語のテキスト", "。"]),        # CJK punctuation sticks to the left
])
def test_scripts_with_combining_marks_round_trip(sentence, tokens):
    assert word_tokenize(sentence) == tokens
    assert detokenize(tokens) == normalize(sentence)
    bpe = BPE.learn([sentence] * 3, num_merges=20)
    assert bpe.decode(bpe.encode(sentence)) == normalize(sentence)


def test_detokenize_round_trip_needs_normalize():
    messy = "  Ein  Mann,der\tfährt . "
    assert detokenize(word_tokenize(messy)) == "Ein Mann, der fährt."


def test_detokenize_edge_cases():
    assert detokenize([]) == ""
    assert detokenize([".", "a"]) == ". a"
    assert detokenize(["a", "(", "b", ")", "c"]) == "a (b) c"
    # quotes alternate: open, close, open, close
    assert detokenize(['"', "a", '"', "b", '"', "c", '"']) == '"a" b "c"'


def test_detokenize_rejects_str():
    with pytest.raises(TypeError, match="tokens"):
        detokenize("a sentence")


# Sentences written the "ordinary" way that detokenize promises to restore.
_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZäöüÄÖÜßéçñ0123456789"
def _joined_word(draw):
    parts = draw(st.lists(st.text(_LETTERS, min_size=1, max_size=6), min_size=1, max_size=3))
    joiners = draw(st.lists(st.sampled_from(["'", "-", "\u2019"]),
                            min_size=len(parts) - 1, max_size=len(parts) - 1))
    word = parts[0] + "".join(j + p for j, p in zip(joiners, parts[1:]))
    return word + draw(st.sampled_from(["", "", "", "-"]))


@st.composite
def ordinary_sentences(draw):
    items = []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["word", "word", "closing", "opening", "quote", "symbol"]))
        if kind == "symbol":
            items.append(draw(st.sampled_from(["&", "-", "\u2013", "/", "#", "@"])))
            continue
        words = [_joined_word(draw) for _ in range(draw(st.integers(1, 3)))]
        text = " ".join(words)
        if kind == "closing":
            text += "".join(draw(st.lists(st.sampled_from(list(".,!?;:)]}%'\u2019\u2026")),
                                          min_size=1, max_size=3)))
        elif kind == "opening":
            text = draw(st.sampled_from(["(", "[", "{", "\u2018", "\u201a"])) + text
        elif kind == "quote":
            left, right = draw(st.sampled_from([('"', '"'), ("\u201e", "\u201c"),
                                                ("\u201c", "\u201d")]))
            text = left + text + right
        items.append(text)
    return " ".join(items)


@given(ordinary_sentences())
def test_detokenize_round_trip_generated(sentence):
    assert detokenize(word_tokenize(sentence)) == normalize(sentence)


# --------------------------------------------------------------------------- #
# BPE
# --------------------------------------------------------------------------- #

def test_bpe_sennrich_toy_example():
    corpus = [["low"]] * 5 + [["lower"]] * 2 + [["newest"]] * 6 + [["widest"]] * 3
    bpe = BPE.learn(corpus, num_merges=3)
    assert bpe.merges == [("e", "s"), ("es", "t</w>"), ("l", "o")]
    assert bpe.encode_word("lowest") == ("lo", "w", "est</w>")


def test_fast_learner_matches_the_readable_one():
    corpus = [word_tokenize(s) for s in SENTENCES] * 3 + [["aaaa", "aaa", "abab", "baba"]] * 2
    counts = word_counts(corpus)
    for num_merges, min_frequency in [(200, 2), (300, 1)]:
        expected = learn_merges(counts, num_merges, min_frequency)
        assert learn_merges_fast(counts, num_merges, min_frequency) == expected
        assert BPE.learn(corpus, num_merges, min_frequency=min_frequency).merges == expected


def test_fast_learner_matches_the_readable_one_on_multi30k():
    """Real text, both languages: 200 sentences each, every merge down to frequency 1."""
    sentences = []
    for lang in ("en", "de"):
        path = DATA_DIR / "multi30k" / f"train.{lang}.gz"
        if not path.exists():
            pytest.skip(f"Multi30K training data not found at {path} (set NUMPYTRANSFORMER_DATA)")
        with gzip.open(path, "rt", encoding="utf-8") as f:
            sentences += [next(f) for _ in range(200)]
    counts = word_counts(sentences)
    merges = learn_merges(counts, 250, min_frequency=1)
    assert len(merges) == 250
    assert learn_merges_fast(counts, 250, min_frequency=1) == merges


@pytest.mark.parametrize("lang", ["en", "de"])
def test_real_sentences_come_back_from_cased_bpe(lang):
    """Multi30K's validation and test sentences through the translator's tokenizer (cased
    BPE learned on 2,000 training sentences) and back. The only sentences that do not
    come back whole are known: initialisms ("J.P." -> "J. P.") and the raw data's own
    space before a final point or inside "now ... what's"."""
    paths = [DATA_DIR / "multi30k" / f"{split}.{lang}.gz" for split in ("train", "val", "test_2016_flickr")]
    if not all(p.exists() for p in paths):
        pytest.skip(f"Multi30K data not found in {DATA_DIR} (set NUMPYTRANSFORMER_DATA)")
    train, val, test = ([line.rstrip("\n") for line in gzip.open(p, "rt", encoding="utf-8")] for p in paths)
    tok = Tokenizer.learn("bpe", train[:2000], 500, lowercase=False)
    changed = [s for s in val + test if tok.detokenize(tok.tokenize(s)) != normalize(s)]
    assert len(val + test) == 2014
    known = ("J.P.", "E.S.E.", " ...", " .")
    assert all(any(k in s for k in known) for s in changed), changed
    assert len(changed) <= 4


def test_word_counts():
    assert word_counts(["Ein Mann.", ["ein", "Mann"]], lowercase=True) == {"ein": 2, "mann": 2, ".": 1}


def test_bpe_min_frequency_stops_early():
    bpe = BPE.learn(["ab cd ef"], num_merges=10, min_frequency=2)
    assert bpe.merges == []
    assert bpe.encode("ab") == ["a", "b</w>"]


@pytest.fixture(scope="module")
def bpe():
    return BPE.learn(SENTENCES * 2, num_merges=150)


@pytest.mark.parametrize("sentence", SENTENCES)
def test_bpe_round_trip_fixed(bpe, sentence):
    units = bpe.encode(sentence)
    assert all(isinstance(u, str) and u for u in units)
    assert units[-1].endswith(BPE.END_OF_WORD)
    assert bpe.decode(units) == normalize(sentence)


def test_bpe_merges_frequent_words_whole(bpe):
    assert bpe.encode("Ein Mann.") == ["Ein</w>", "Mann</w>", ".</w>"]


@settings(max_examples=60)
@given(st.text(max_size=30))
def test_bpe_units_give_back_the_words(bpe, text):
    # unseen characters included: they stay single-character units
    assert BPE.units_to_words(bpe.encode(text)) == word_tokenize(text)


@settings(max_examples=60)
@given(ordinary_sentences())
def test_bpe_round_trip_generated(bpe, sentence):
    assert bpe.decode(bpe.encode(sentence)) == normalize(sentence)


def test_bpe_decode_truncated_output():
    assert BPE.units_to_words(["Ein</w>", "Ma", "nn"]) == ["Ein", "Mann"]


def test_bpe_lowercase():
    bpe = BPE.learn(["Der Mann, der Mann."], num_merges=20, lowercase=True)
    assert bpe.lowercase
    assert bpe.decode(bpe.encode("DER MANN.")) == "der mann."


def test_bpe_json_round_trip(bpe):
    clone = BPE.from_dict(json.loads(json.dumps(bpe.to_dict())))
    assert clone.merges == bpe.merges and clone.lowercase == bpe.lowercase
    for s in SENTENCES:
        assert clone.encode(s) == bpe.encode(s)


def test_bpe_errors():
    with pytest.raises(ValueError, match="num_merges"):
        BPE.learn(["a b"], num_merges=-1)
    with pytest.raises(ValueError, match="min_frequency"):
        BPE.learn(["a b"], num_merges=1, min_frequency=0)
    with pytest.raises(TypeError, match=r"texts_or_token_lists\[1\]"):
        BPE.learn(["a b", 3], num_merges=1)
    with pytest.raises(TypeError, match="texts_or_token_lists"):
        BPE.learn("a single string", num_merges=1)
    with pytest.raises(ValueError, match="end-of-word"):
        BPE.learn([["a</w>"]], num_merges=1)
    with pytest.raises(TypeError, match=r"merges\[0\]"):
        BPE([("a",)])
    with pytest.raises(ValueError, match="d must be"):
        BPE.from_dict({"merges": []})


# --------------------------------------------------------------------------- #
# Vocab
# --------------------------------------------------------------------------- #

def test_vocab_specials():
    v = Vocab()
    assert (v.pad_id, v.bos_id, v.eos_id, v.unk_id) == (0, 1, 2, 3)
    assert [v.id_to_token(i) for i in range(4)] == [Vocab.PAD, Vocab.BOS, Vocab.EOS, Vocab.UNK]
    assert (Vocab.PAD, Vocab.BOS, Vocab.EOS, Vocab.UNK) == ("<pad>", "<bos>", "<eos>", "<unk>")
    assert len(v) == 4


def test_vocab_build_order_min_freq_max_size():
    lists = [["b", "a", "c", "a"], ["c", "d", "a", "<unk>"], ["e"]]
    v = Vocab.build(lists)
    # a:3, c:2, then b, d, e (count 1) alphabetically; "<unk>" is not added twice
    assert [v.id_to_token(i) for i in range(4, len(v))] == ["a", "c", "b", "d", "e"]
    assert len(Vocab.build(lists, min_freq=2)) == 6
    assert [v.id_to_token(i) for i in range(len(v))] == \
        [v.id_to_token(i) for i in range(len(Vocab.build(reversed(lists))))]
    small = Vocab.build(lists, max_size=5)
    assert len(small) == 5 and "a" in small and "c" not in small


def test_vocab_encode_decode():
    v = Vocab.build([["ein", "mann", "."]])
    ids = v.encode(["ein", "hund", "."], add_bos=True, add_eos=True)
    assert ids == [v.bos_id, v.token_to_id("ein"), v.unk_id, v.token_to_id("."), v.eos_id]
    assert v.decode(ids) == ["ein", "<unk>", "."]
    assert v.decode(ids, strip_special=False) == ["<bos>", "ein", "<unk>", ".", "<eos>"]
    # stops at the first <eos>; padding and <bos> dropped anywhere before it
    padded = [v.bos_id, 4, v.pad_id, 5, v.eos_id, 6, v.eos_id, v.pad_id]
    assert v.decode(padded) == [v.id_to_token(4), v.id_to_token(5)]
    assert v.decode(np.array(padded, dtype=np.int64)) == v.decode(padded)
    assert v.token_to_id("unbekannt") == v.unk_id
    assert "mann" in v and "hund" not in v


@given(st.lists(st.sampled_from(["ein", "mann", ".", "fährt", "Straße"]), max_size=10))
def test_vocab_round_trip(tokens):
    v = Vocab.build([["ein", "mann", ".", "fährt", "Straße"]])
    assert v.decode(v.encode(tokens, add_bos=True, add_eos=True)) == tokens


def test_vocab_json_round_trip():
    v = Vocab.build([["z", "y", "y", "fährt"]])
    clone = Vocab.from_dict(json.loads(json.dumps(v.to_dict())))
    assert [clone.id_to_token(i) for i in range(len(clone))] == \
        [v.id_to_token(i) for i in range(len(v))]


def test_vocab_errors():
    v = Vocab.build([["a", "b"]])
    with pytest.raises(ValueError, match=r"ids\[1\].*\[0, 5\]"):
        v.decode([4, 6])
    with pytest.raises(ValueError, match=r"ids\[0\]"):
        v.decode([-1])
    with pytest.raises(TypeError, match=r"ids\[0\] must be an int"):
        v.decode([1.0])
    with pytest.raises(TypeError, match=r"ids\[0\] must be an int"):
        v.decode([True])
    with pytest.raises(ValueError, match="1-D"):
        v.decode(np.zeros((2, 2), dtype=int))
    with pytest.raises(TypeError, match="tokens"):
        v.encode("a b")
    with pytest.raises(TypeError, match=r"tokens\[1\]"):
        v.encode(["a", 1])
    with pytest.raises(ValueError, match="idx"):
        v.id_to_token(99)
    with pytest.raises(ValueError, match="min_freq"):
        Vocab.build([["a"]], min_freq=0)
    with pytest.raises(ValueError, match="max_size"):
        Vocab.build([["a"]], max_size=2)
    with pytest.raises(ValueError, match="duplicate"):
        Vocab(["a", "a"])
    with pytest.raises(ValueError, match="special"):
        Vocab(["<eos>"])
    with pytest.raises(ValueError, match="itos"):
        Vocab.from_dict({"type": "Vocab", "itos": ["a", "b", "c", "d"]})


# --------------------------------------------------------------------------- #
# Tokenizer
# --------------------------------------------------------------------------- #

def test_tokenizer_word():
    tok = Tokenizer("word", lowercase=True)
    assert tok.tokenize("Ein Mann, der fährt.") == ["ein", "mann", ",", "der", "fährt", "."]
    assert tok.detokenize(tok.tokenize("Ein Mann, der fährt.")) == "ein mann, der fährt."


def test_tokenizer_bpe_and_json(bpe):
    tok = Tokenizer("bpe", bpe=bpe)
    assert tok.lowercase is False
    clone = Tokenizer.from_dict(json.loads(json.dumps(tok.to_dict())))
    for s in SENTENCES:
        units = tok.tokenize(s)
        assert units == bpe.encode(s) == clone.tokenize(s)
        assert clone.detokenize(units) == normalize(s)


def test_tokenizer_errors(bpe):
    with pytest.raises(ValueError, match="kind"):
        Tokenizer("char")
    with pytest.raises(TypeError, match="bpe"):
        Tokenizer("bpe")
    with pytest.raises(ValueError, match="bpe"):
        Tokenizer("word", bpe=bpe)
