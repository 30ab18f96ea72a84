"""Tests for numpytransformer.text.bleu: hand-computed cases and parity with sacreBLEU."""

import gzip
import math
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numpytransformer.text.bleu import BLEUResult, bleu_tokens, corpus_bleu, tokenize_13a

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("NUMPYTRANSFORMER_DATA", REPO.parent / "shared" / "data"))

REFERENCES = [
    "A man, in a blue shirt, rides a bike.",
    "Two young, White males are outside near many bushes.",
    "A boy wearing headphones sits on a woman's shoulders.",
    'A sign reads "Stop here": nobody does.',
    "A man sells 10,000 tickets for 2.00 Euros; 50% are gone.",
    "People walking down the street past a Lounge &amp; Grill.",
    "A little-league baseball player, wearing a white #19 jersey, hits the ball.",
    "Is this a dog (or a cat)?",
    "Several men in hard hats are operating a giant pulley system.",
    "A little girl climbing into a wooden playhouse!",
    "Ein Mann, der fährt.",
    "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
]


def perturb(sentence, i):
    """A deterministic, imperfect 'translation' of a reference sentence."""
    words = sentence.split()
    mode = i % 5
    if mode == 0 and len(words) > 1:
        del words[i % len(words)]
    elif mode == 1 and len(words) > 1:
        j = i % (len(words) - 1)
        words[j], words[j + 1] = words[j + 1], words[j]
    elif mode == 2:
        words = words[: max(1, 2 * len(words) // 3)]
    elif mode == 3:
        words = [w.lower() for w in words] + ["again"]
    return " ".join(words)


def assert_same_as_sacrebleu(hyps, refs, **kwargs):
    sacrebleu = pytest.importorskip("sacrebleu")
    streams = [refs] if isinstance(refs[0], str) else refs
    expected = sacrebleu.corpus_bleu(hyps, streams, **kwargs)
    got = corpus_bleu(hyps, refs, **kwargs)
    assert got.score == pytest.approx(expected.score, abs=1e-6)
    assert got.precisions == pytest.approx(expected.precisions, abs=1e-6)
    assert got.bp == pytest.approx(expected.bp, abs=1e-12)
    assert (got.sys_len, got.ref_len) == (expected.sys_len, expected.ref_len)
    return got


# --------------------------------------------------------------------------- #
# tokenize_13a
# --------------------------------------------------------------------------- #

@pytest.mark.parametrize("line, expected", [
    ('A man, in a "blue" T-shirt, paid $2.50.', 'A man , in a " blue " T-shirt , paid $ 2.50 .'),
    ("I don't know (really)!", "I don't know ( really ) !"),
    ("Lounge &amp; Grill &quot;x&quot;", 'Lounge & Grill " x "'),
    ("10,000 people in 1990-2000.", "10,000 people in 1990 - 2000 ."),
    ("end.Next,one", "end . Next , one"),
    ("  many   spaces\there ", "many spaces here"),
    ("hyphen-\nated <skipped> line\nbreak", "hyphenated line break"),
    ("", ""),
])
def test_tokenize_13a_examples(line, expected):
    assert tokenize_13a(line) == expected


_13A_ALPHABET = "ab1 9.,-'\"&;:<>/?!()$%_`[]{}#@\n\täß–"


@settings(max_examples=300)
@given(st.text(_13A_ALPHABET, max_size=15)
       | st.sampled_from(["&amp;quot;", "&lt;a&gt;", "x-\ny", "1.-2", "a.,b", ".,.,"]))
def test_tokenize_13a_matches_sacrebleu(line):
    tokenizers = pytest.importorskip("sacrebleu.tokenizers.tokenizer_13a")
    assert tokenize_13a(line) == tokenizers.Tokenizer13a()(line)


def test_tokenize_13a_rejects_non_str():
    with pytest.raises(TypeError, match="line"):
        tokenize_13a(["a", "b"])


# --------------------------------------------------------------------------- #
# corpus_bleu: cases computed by hand
# --------------------------------------------------------------------------- #

def test_perfect_match_is_100():
    result = corpus_bleu(REFERENCES, REFERENCES)
    assert isinstance(result, BLEUResult)
    assert result.score == pytest.approx(100.0)
    assert result.precisions == [100.0] * 4 and result.bp == 1.0
    assert result.sys_len == result.ref_len


def test_no_match_at_all_is_0():
    result = corpus_bleu(["x y z w v"], ["a b c d e"])
    assert result.score == 0.0 and result.precisions == [0.0] * 4


def test_no_4gram_match_is_smoothed_in_corpus_bleu_and_0_in_bleu_tokens():
    hyp, ref = "the cat sat on the mat", "the cat is on the mat"
    # p1 = 5/6, p2 = 3/5, p3 = 1/4; no 4-gram matches, "exp" smoothing: p4 = 1/(2*3)
    expected = 100 * (5 / 6 * 3 / 5 * 1 / 4 * 1 / 6) ** 0.25
    result = corpus_bleu([hyp], [ref])
    assert result.score == pytest.approx(expected, rel=1e-12)
    assert result.precisions == pytest.approx([500 / 6, 60.0, 25.0, 100 / 6])
    assert bleu_tokens([hyp.split()], [ref.split()]).score == 0.0


def test_two_orders_without_match_halve_twice():
    # p1 = 4/5, p2 = 2/4, p3 = 0/3 -> 1/(2*3), p4 = 0/2 -> 1/(4*2)
    result = corpus_bleu(["a b x c d"], ["a b y c d"])
    assert result.score == pytest.approx(100 * (0.8 * 0.5 / 6 / 8) ** 0.25, rel=1e-12)


def test_hypotheses_shorter_than_4_tokens_score_0():
    # no 4-grams at all: sacreBLEU stops there, p4 stays 0 and so does BLEU
    result = corpus_bleu(["a b c", "d e"], ["a b c", "d e"])
    assert result.precisions == [100.0, 100.0, 100.0, 0.0]
    assert result.score == 0.0


def test_brevity_penalty():
    result = corpus_bleu(["a b c d e f"], ["a b c d e f g h"])
    assert result.bp == pytest.approx(math.exp(1 - 8 / 6))
    assert result.score == pytest.approx(100 * math.exp(1 - 8 / 6))
    assert (result.sys_len, result.ref_len) == (6, 8)
    assert corpus_bleu(["a b c d e f g h i"], ["a b c d e f g h"]).bp == 1.0
    assert corpus_bleu([""], ["a b c d"]).bp == 0.0


def test_multiple_references_closest_length_tie_goes_to_shorter():
    # reference lengths 7 and 3 are both 2 away from 5: sacreBLEU takes 3, so BP = 1
    hyps = ["a b c d e"]
    refs = [["a b c d e f g"], ["a b c"]]
    result = corpus_bleu(hyps, refs)
    assert result.ref_len == 3 and result.score == pytest.approx(100.0)


def test_lowercase_and_tokenize_none():
    assert corpus_bleu(["THE CAT SAT DOWN ."], ["the cat sat down ."], lowercase=True).score \
        == pytest.approx(100.0)
    # without 13a, "down." is one token and does not match "down ."
    result = corpus_bleu(["the cat sat down."], ["the cat sat down ."], tokenize="none")
    assert result.sys_len == 4 and result.ref_len == 5 and result.score < 100


# --------------------------------------------------------------------------- #
# corpus_bleu: parity with sacreBLEU
# --------------------------------------------------------------------------- #

def test_matches_sacrebleu_on_fixed_sentences():
    hyps = [perturb(r, i) for i, r in enumerate(REFERENCES)]
    assert_same_as_sacrebleu(hyps, REFERENCES)
    assert_same_as_sacrebleu(hyps, REFERENCES, lowercase=True)
    assert_same_as_sacrebleu(hyps, REFERENCES, tokenize="none")
    second = [perturb(r, i + 2) for i, r in enumerate(REFERENCES)]
    assert_same_as_sacrebleu(hyps, [REFERENCES, second])


def test_matches_sacrebleu_sentence_by_sentence():
    # one-sentence corpora exercise the smoothing and zero-count paths
    for i, ref in enumerate(REFERENCES):
        for k in range(5):
            assert_same_as_sacrebleu([perturb(ref, i + k)], [ref])


_WORDS = ["a", "man", "rides", "the", "bike", ".", ",", "dog's", "2.50", "(x)"]


@settings(max_examples=100)
@given(st.lists(st.tuples(st.lists(st.sampled_from(_WORDS), max_size=8),
                          st.lists(st.sampled_from(_WORDS), max_size=8)),
                min_size=1, max_size=4))
def test_matches_sacrebleu_on_random_corpora(pairs):
    hyps = [" ".join(h) for h, _ in pairs]
    refs = [" ".join(r) for _, r in pairs]
    assert_same_as_sacrebleu(hyps, refs)


def _multi30k_val_en():
    path = DATA_DIR / "multi30k" / "val.en.gz"
    if not path.exists():
        pytest.skip(f"Multi30K validation data not found at {path} (set NUMPYTRANSFORMER_DATA)")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def test_matches_sacrebleu_on_multi30k_val():
    refs = _multi30k_val_en()
    hyps = [perturb(r, i) for i, r in enumerate(refs)]
    result = assert_same_as_sacrebleu(hyps, refs)
    assert 20 < result.score < 90  # a perturbed copy: clearly imperfect, clearly related
    second = [perturb(r, i + 1) for i, r in enumerate(refs[:300])]
    assert_same_as_sacrebleu(hyps[:300], [refs[:300], second], lowercase=True)


# --------------------------------------------------------------------------- #
# bleu_tokens (torchtext-style)
# --------------------------------------------------------------------------- #

def test_bleu_tokens_torchtext_docstring_example():
    # torchtext's docstring example; torchtext prints 0.8408964276313782 because it
    # sums in float32, the exact value is 0.5 ** 0.25 (p = 4/6, 3/4, 2/2, 1/1)
    candidates = [["My", "full", "pytorch", "test"], ["Another", "Sentence"]]
    references = [[["My", "full", "pytorch", "test"], ["Completely", "Different"]],
                  [["No", "Match"]]]
    result = bleu_tokens(candidates, references)
    assert result.score == pytest.approx(100 * 0.5 ** 0.25, rel=1e-12)
    assert result.precisions == pytest.approx([400 / 6, 75.0, 100.0, 100.0])


def test_bleu_tokens_hand_computed():
    hyp = "the cat sat on the mat today".split()
    ref = "the cat sat on the mat".split()
    # p1 = 6/7, p2 = 5/6, p3 = 4/5, p4 = 3/4, hypothesis longer: BP = 1
    expected = 100 * (6 / 7 * 5 / 6 * 4 / 5 * 3 / 4) ** 0.25
    assert bleu_tokens([hyp], [ref]).score == pytest.approx(expected, rel=1e-12)
    short = bleu_tokens([ref[:4]], [ref])
    assert short.bp == pytest.approx(math.exp(1 - 6 / 4))
    assert short.score == pytest.approx(100 * math.exp(1 - 6 / 4))


def test_bleu_tokens_lowercases_and_breaks_length_ties_like_torchtext():
    assert bleu_tokens([["A", "Man", "Rides", "Bikes"]], [["a", "man", "rides", "bikes"]]).score \
        == pytest.approx(100.0)
    assert bleu_tokens([["A", "b", "c", "d"]], [["a", "b", "c", "d"]], lowercase=False).score == 0.0
    # references of length 7 and 3 are both 2 away from 5: torchtext takes the first
    result = bleu_tokens([list("abcde")], [[list("abcdefg"), list("abc")]])
    assert result.ref_len == 7 and result.bp == pytest.approx(math.exp(1 - 7 / 5))


# --------------------------------------------------------------------------- #
# errors
# --------------------------------------------------------------------------- #

def test_length_mismatch_names_both_arguments():
    with pytest.raises(ValueError, match="hypotheses and references"):
        corpus_bleu(["a", "b"], ["a"])
    with pytest.raises(ValueError, match=r"hypotheses and references\[1\]"):
        corpus_bleu(["a", "b"], [["a", "b"], ["a"]])
    with pytest.raises(ValueError, match="hyp_token_lists and ref_token_lists"):
        bleu_tokens([["a"]], [["a"], ["b"]])


def test_bad_arguments():
    with pytest.raises(ValueError, match="tokenize"):
        corpus_bleu(["a"], ["a"], tokenize="intl")
    with pytest.raises(TypeError, match="hypotheses"):
        corpus_bleu("a b c", ["a b c"])
    with pytest.raises(TypeError, match=r"hypotheses\[1\]"):
        corpus_bleu(["a", ["b"]], ["a", "b"])
    with pytest.raises(ValueError, match="hypotheses must not be empty"):
        corpus_bleu([], [])
    with pytest.raises(TypeError, match=r"hyp_token_lists\[0\]"):
        bleu_tokens(["a b"], [["a", "b"]])
