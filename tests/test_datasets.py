"""Tests of numpytransformer.datasets: generators, batch builders, loaders, batching."""

import gzip
import os
from pathlib import Path

import numpy as np
import pytest

from numpytransformer.datasets import (
    DATA_ENV,
    SymbolSequences,
    bucket_batches,
    clean_review,
    default_data_dir,
    english_words,
    german_words,
    load_imdb,
    load_multi30k,
    make_number_pairs,
    make_splits,
    pad_batch,
    seq2seq_batch,
    tagger_batch,
    train_val_split,
)
from numpytransformer.datasets.numbers import german_parts


# --------------------------------------------------------------------------- reversal


def _keys(seqs):
    return [s.tobytes() for s in seqs]


def test_symbol_sequences_ids_roundtrip():
    spec = SymbolSequences(n_symbols=5, max_len=4)
    assert spec.vocab_size == 9
    ids = spec.encode_symbols([1, 5, 3])
    assert ids.dtype == np.int64
    np.testing.assert_array_equal(ids, [4, 8, 6])
    assert spec.decode_ids(ids) == [1, 5, 3]
    # BOS and PAD are skipped, decoding stops at EOS.
    assert spec.decode_ids([1, 4, 8, 2, 6, 0]) == [1, 5]


def test_symbol_sequences_errors():
    spec = SymbolSequences(n_symbols=5, max_len=4)
    with pytest.raises(ValueError, match=r"unknown symbol 6 at position 1.*1\.\.5"):
        spec.encode_symbols([1, 6])
    with pytest.raises(ValueError, match=r"unknown symbol 0"):
        spec.encode_symbols([0])
    with pytest.raises(ValueError, match=r"length 5 is longer than max_len=4"):
        spec.encode_symbols([1, 1, 1, 1, 1])
    with pytest.raises(ValueError, match=r"id 3 is not a symbol id.*4\.\.8"):
        spec.decode_ids([4, 3])
    with pytest.raises(ValueError, match=r"id 9 is not a symbol id"):
        spec.decode_ids([9])
    with pytest.raises(ValueError, match=r"max_len=0; expected an integer >= min_len=1"):
        SymbolSequences(max_len=0)
    with pytest.raises(ValueError, match=r"n_symbols=0"):
        SymbolSequences(n_symbols=0)


def test_make_splits_disjoint_unique_in_range():
    spec = SymbolSequences(n_symbols=6, min_len=2, max_len=7)
    train, val, test = make_splits(spec, 3000, 300, 300, seed=1)
    assert (len(train), len(val), len(test)) == (3000, 300, 300)
    keys = _keys(train) + _keys(val) + _keys(test)
    assert len(set(keys)) == len(keys), "a sequence appears twice"
    for s in train + val + test:
        assert s.ndim == 1 and s.dtype == np.int64
        assert spec.min_len <= s.size <= spec.max_len
        assert s.min() >= 4 and s.max() <= spec.vocab_size - 1  # content ids only
    lengths = np.bincount([s.size for s in train], minlength=spec.max_len + 1)
    assert np.all(lengths[spec.min_len :] > 0), "every length should occur"


def test_make_splits_deterministic():
    spec = SymbolSequences()
    a = make_splits(spec, 200, 20, 20, seed=7)
    b = make_splits(spec, 200, 20, 20, seed=7)
    c = make_splits(spec, 200, 20, 20, seed=8)
    for sa, sb in zip(a, b):
        assert _keys(sa) == _keys(sb)
    assert _keys(a[0]) != _keys(c[0])


def test_make_splits_exhausts_small_space_and_refuses_more():
    spec = SymbolSequences(n_symbols=2, min_len=1, max_len=2)  # 2 + 4 = 6 sequences
    train, val, test = make_splits(spec, 4, 1, 1, seed=0)
    assert len(set(_keys(train + val + test))) == 6
    with pytest.raises(ValueError, match=r"requested n_train \+ n_val \+ n_test = 7.*only 6 exist"):
        make_splits(spec, 5, 1, 1, seed=0)
    with pytest.raises(ValueError, match=r"n_val=-1"):
        make_splits(spec, 1, -1, 1, seed=0)


def test_seq2seq_batch_small_example():
    seqs = [np.array([4, 5, 6]), np.array([7])]
    src, tgt_in, tgt_out = seq2seq_batch(seqs)
    np.testing.assert_array_equal(src, [[4, 5, 6], [7, 0, 0]])
    np.testing.assert_array_equal(tgt_in, [[1, 6, 5, 4], [1, 7, 0, 0]])
    np.testing.assert_array_equal(tgt_out, [[6, 5, 4, 2], [7, 2, 0, 0]])
    assert src.dtype == tgt_in.dtype == tgt_out.dtype == np.int64


def test_tagger_batch_small_example():
    x, y = tagger_batch([np.array([4, 5, 6]), np.array([7, 8])], max_len=5)
    np.testing.assert_array_equal(x, [[4, 5, 6, 0, 0], [7, 8, 0, 0, 0]])
    np.testing.assert_array_equal(y, [[6, 5, 4, 0, 0], [8, 7, 0, 0, 0]])
    with pytest.raises(ValueError, match=r"seqs\[0\] has length 3 > max_len=2"):
        tagger_batch([np.array([4, 5, 6])], max_len=2)


def test_make_splits_100k_is_fast():
    import time

    t0 = time.perf_counter()
    train, val, test = make_splits(SymbolSequences(), 80_000, 10_000, 10_000, seed=0)
    elapsed = time.perf_counter() - t0
    assert len(set(_keys(train + val + test))) == 100_000
    assert elapsed < 2.0, f"make_splits took {elapsed:.2f} s for 100,000 sequences"


# --------------------------------------------------------------------------- numbers

KNOWN = {
    0: ("zero", "null", "null"),
    1: ("one", "eins", "eins"),
    7: ("seven", "sieben", "sieben"),
    11: ("eleven", "elf", "elf"),
    12: ("twelve", "zwölf", "zwölf"),
    16: ("sixteen", "sechzehn", "sechzehn"),
    17: ("seventeen", "siebzehn", "siebzehn"),
    20: ("twenty", "zwanzig", "zwanzig"),
    21: ("twenty-one", "einundzwanzig", "ein und zwanzig"),
    30: ("thirty", "dreißig", "dreißig"),
    60: ("sixty", "sechzig", "sechzig"),
    70: ("seventy", "siebzig", "siebzig"),
    99: ("ninety-nine", "neunundneunzig", "neun und neunzig"),
    100: ("one hundred", "einhundert", "ein hundert"),
    101: ("one hundred one", "einhunderteins", "ein hundert eins"),
    110: ("one hundred ten", "einhundertzehn", "ein hundert zehn"),
    347: ("three hundred forty-seven", "dreihundertsiebenundvierzig", "drei hundert sieben und vierzig"),
    777: ("seven hundred seventy-seven", "siebenhundertsiebenundsiebzig", "sieben hundert sieben und siebzig"),
    1000: ("one thousand", "eintausend", "ein tausend"),
    1001: ("one thousand one", "eintausendeins", "ein tausend eins"),
    1999: (
        "one thousand nine hundred ninety-nine",
        "eintausendneunhundertneunundneunzig",
        "ein tausend neun hundert neun und neunzig",
    ),
    2024: ("two thousand twenty-four", "zweitausendvierundzwanzig", "zwei tausend vier und zwanzig"),
    9999: (
        "nine thousand nine hundred ninety-nine",
        "neuntausendneunhundertneunundneunzig",
        "neun tausend neun hundert neun und neunzig",
    ),
    21000: ("twenty-one thousand", "einundzwanzigtausend", "ein und zwanzig tausend"),
}


@pytest.mark.parametrize("n", sorted(KNOWN))
def test_number_words_known_values(n):
    en, de, de_spaced = KNOWN[n]
    assert english_words(n) == en
    assert german_words(n, spaced=False) == de
    assert german_words(n) == de_spaced


def test_german_spaced_joins_to_compound():
    for n in range(0, 10000, 37):
        assert "".join(german_parts(n)) == german_words(n, spaced=False)


def test_number_words_errors():
    with pytest.raises(ValueError, match=r"n=-1; expected an int in 0\.\.999999"):
        english_words(-1)
    with pytest.raises(TypeError, match=r"n is a float"):
        german_words(2.0)


def test_make_number_pairs_disjoint_and_deterministic():
    pairs = make_number_pairs(500, 100, 100, seed=3, max_number=999)
    assert [len(pairs[k]) for k in ("train", "val", "test")] == [500, 100, 100]
    en = [e for k in pairs for e, _ in pairs[k]]
    assert len(set(en)) == len(en), "a number appears in two places"
    assert pairs == make_number_pairs(500, 100, 100, seed=3, max_number=999)
    assert pairs != make_number_pairs(500, 100, 100, seed=4, max_number=999)
    for e, d in pairs["train"][:50]:
        assert isinstance(e, str) and isinstance(d, str)
    with pytest.raises(ValueError, match=r"= 11 distinct numbers.*0\.\.9 has only 10"):
        make_number_pairs(9, 1, 1, seed=0, max_number=9)


# --------------------------------------------------------------------------- batching


def test_pad_batch():
    out = pad_batch([[1, 2], [3], []], pad_id=9)
    np.testing.assert_array_equal(out, [[1, 2], [3, 9], [9, 9]])
    assert out.dtype == np.int64
    assert pad_batch([[1]], max_len=3).tolist() == [[1, 0, 0]]
    with pytest.raises(ValueError, match=r"seqs\[1\] has length 3 > max_len=2"):
        pad_batch([[1], [1, 2, 3]], max_len=2)
    with pytest.raises(ValueError, match=r"seqs is empty"):
        pad_batch([])


def _check_batches(batches, ell, max_tokens, n):
    flat = np.concatenate(batches)
    np.testing.assert_array_equal(np.sort(flat), np.arange(n))  # every index exactly once
    for b in batches:
        cost = len(b) * max(int(ell[b].max()), 1)
        assert cost <= max_tokens or len(b) == 1


def test_bucket_batches_invariants():
    rng = np.random.default_rng(0)
    ell = rng.integers(1, 60, size=1000)
    ell[5] = 500  # longer than the budget: a batch of its own
    batches = bucket_batches(ell, max_tokens=256, seed=1)
    _check_batches(batches, ell, 256, 1000)
    assert any(b.tolist() == [5] for b in batches)
    # Bucketing keeps padding small compared with random batches.
    waste = sum(len(b) * ell[b].max() - ell[b].sum() for b in batches)
    assert waste < 0.1 * ell.sum()


def test_bucket_batches_deterministic_and_shuffled():
    ell = np.random.default_rng(0).integers(1, 30, size=300)
    a = bucket_batches(ell, 100, seed=5)
    b = bucket_batches(ell, 100, seed=5)
    assert [x.tolist() for x in a] == [x.tolist() for x in b]
    c = bucket_batches(ell, 100, seed=6)
    assert [x.tolist() for x in a] != [x.tolist() for x in c]
    sorted_batches = bucket_batches(ell, 100, shuffle=False)
    maxima = [ell[x].max() for x in sorted_batches]
    assert maxima == sorted(maxima)


def test_bucket_batches_tuple_lengths_and_max_batch_size():
    src = np.array([1, 10, 2, 2, 3, 1])
    tgt = np.array([9, 1, 2, 2, 3, 1])
    ell = np.maximum(src, tgt)
    batches = bucket_batches((src, tgt), max_tokens=20, seed=0, max_batch_size=2)
    _check_batches(batches, ell, 20, 6)
    assert all(len(b) <= 2 for b in batches)
    with pytest.raises(ValueError, match=r"max_tokens=0; expected a positive integer"):
        bucket_batches(src, 0)
    with pytest.raises(ValueError, match=r"expected one length per example"):
        bucket_batches((src, tgt[:3]), 10)
    assert bucket_batches(np.array([], dtype=np.int64), 10) == []


# --------------------------------------------------------------------------- loaders: fixtures


def _write_gz(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8", newline="") as f:
        f.write(text)


def test_default_data_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    assert default_data_dir() == tmp_path


def test_load_multi30k_fixture(tmp_path):
    _write_gz(tmp_path / "multi30k" / "test_2016_flickr.de.gz", "Ein Hund läuft.\nZwei Katzen\n")
    _write_gz(tmp_path / "multi30k" / "test_2016_flickr.en.gz", "A dog runs.\r\nTwo cats\n")
    pairs = load_multi30k("test", data_dir=tmp_path)
    assert pairs == [("Ein Hund läuft.", "A dog runs."), ("Zwei Katzen", "Two cats")]
    assert load_multi30k("test", data_dir=tmp_path, src_lang="en", tgt_lang="de")[1] == ("Two cats", "Zwei Katzen")


def test_load_multi30k_line_mismatch(tmp_path):
    _write_gz(tmp_path / "multi30k" / "val.de.gz", "a\nb\n")
    _write_gz(tmp_path / "multi30k" / "val.en.gz", "a\n")
    with pytest.raises(ValueError, match=r"val\.de\.gz has 2 lines but .*val\.en\.gz has 1"):
        load_multi30k("val", data_dir=tmp_path)


def test_load_multi30k_errors(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match=r"train\.de\.gz.*NUMPYTRANSFORMER_DATA.*multi30k/dataset.*data/task1/raw"):
        load_multi30k("train", data_dir=tmp_path)
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match=r"nowhere.*val\.de\.gz"):
        load_multi30k("val")
    with pytest.raises(ValueError, match=r"split='dev'; expected one of"):
        load_multi30k("dev", data_dir=tmp_path)


IMDB_FIXTURE = (
    "review,sentiment,split,id,rating,orig_path\n"
    '"Great film.<br /><br />Loved it, &amp; ""more""",positive,train,0,9,train/pos/0_9.txt\n'
    '"Dull.\nVery dull.",negative,train,1,2,train/neg/1_2.txt\n'
    "Fine,positive,test,2,7,test/pos/2_7.txt\n"
)


def test_load_imdb_fixture(tmp_path):
    _write_gz(tmp_path / "imdb" / "imdb.csv.gz", IMDB_FIXTURE)
    texts, labels = load_imdb("train", data_dir=tmp_path)
    assert texts == ['Great film.<br /><br />Loved it, &amp; "more"', "Dull.\nVery dull."]
    assert labels.dtype == np.int64 and labels.tolist() == [1, 0]
    texts, _ = load_imdb("train", data_dir=tmp_path, clean=True)
    assert texts == ['Great film. Loved it, & "more"', "Dull. Very dull."]
    texts, labels = load_imdb("test", data_dir=tmp_path)
    assert texts == ["Fine"] and labels.tolist() == [1]


def test_load_imdb_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"found none of .*imdb/imdb\.csv\.gz, .*imdb/aclImdb, .*aclImdb\. "
                                                 r"Pass --data-dir .*NUMPYTRANSFORMER_DATA.*"
                                                 r"ai\.stanford\.edu/~amaas/data/sentiment.*aclImdb_v1\.tar\.gz"):
        load_imdb("train", data_dir=tmp_path)
    with pytest.raises(ValueError, match=r"split='val'; expected 'train' or 'test'"):
        load_imdb("val", data_dir=tmp_path)
    _write_gz(tmp_path / "imdb" / "imdb.csv.gz", "review,sentiment,split\nok,meh,train\n")
    with pytest.raises(ValueError, match=r"sentiment 'meh'; expected 'positive' or 'negative'"):
        load_imdb("train", data_dir=tmp_path)


def test_damaged_data_files_are_one_error_naming_the_file(tmp_path, monkeypatch):
    """Not gzip, cut short, not UTF-8: each is a NumpyTransformerError (one line on the command line)
    that names the file and what it should be, not a traceback."""
    from numpytransformer.datasets.shakespeare import load_text
    from numpytransformer.errors import NumpyTransformerError

    m30k = tmp_path / "multi30k"
    m30k.mkdir()
    (m30k / "val.de.gz").write_bytes(b"Zwei Hunde\n")  # not compressed
    _write_gz(m30k / "val.en.gz", "Two dogs\n")
    with pytest.raises(NumpyTransformerError, match=r"val.de.gz cannot be read \(BadGzipFile.*expected gzip-compressed"):
        load_multi30k("val", data_dir=tmp_path)
    whole = gzip.compress("Zwei Hunde\n".encode() * 1000)
    (m30k / "val.de.gz").write_bytes(whole[:len(whole) // 2])  # cut short
    with pytest.raises(NumpyTransformerError, match=r"val.de.gz cannot be read \(EOFError"):
        load_multi30k("val", data_dir=tmp_path)
    (tmp_path / "imdb").mkdir()
    (tmp_path / "imdb" / "imdb.csv.gz").write_bytes(gzip.compress("review,sentiment,split\nTrès bon,positive,train\n"
                                                                  .encode("latin-1")))
    with pytest.raises(NumpyTransformerError, match=r"imdb.csv.gz cannot be read \(UnicodeDecodeError.*UTF-8 CSV"):
        load_imdb("train", data_dir=tmp_path)
    (tmp_path / "tinyshakespeare").mkdir()
    (tmp_path / "tinyshakespeare" / "input.txt").write_bytes("Très bien\n".encode("latin-1"))
    with pytest.raises(NumpyTransformerError, match=r"input.txt cannot be read \(UnicodeDecodeError"):
        load_text(tmp_path)
    monkeypatch.setenv(DATA_ENV, "~nosuchuser_xyz/data")
    with pytest.raises(NumpyTransformerError, match="NUMPYTRANSFORMER_DATA ~nosuchuser_xyz/data"):
        default_data_dir()


#: (split, folder, file name, text) of a tiny extracted aclImdb_v1.tar.gz; id 10 sorts after 2 as a number.
ACL_FILES = [
    ("train", "pos", "10_7.txt", "Fourth positive."),
    ("train", "pos", "2_9.txt", "Third: great.<br /><br />Really."),
    ("train", "pos", "0_10.txt", "First, caf\u00e9 &amp; more"),
    ("train", "pos", "1_8.txt", "Second positive."),
    ("train", "neg", "1_1.txt", "Second negative."),
    ("train", "neg", "0_2.txt", "First negative,\nwith a line break."),
    ("test", "pos", "0_8.txt", "Fine"),
    ("test", "neg", "0_3.txt", "Not fine"),
]


def _write_acl(folder: Path) -> None:
    for split, sub, name, text in ACL_FILES:
        (folder / split / sub).mkdir(parents=True, exist_ok=True)
        (folder / split / sub / name).write_bytes(text.encode("utf-8"))
    # What the archive holds besides the labelled reviews, which the loader must skip.
    (folder / "train" / "unsup").mkdir()
    (folder / "train" / "unsup" / "0_0.txt").write_text("No label.")
    (folder / "train" / "labeledBow.feat").write_text("0:9 1:2\n")
    (folder / "train" / "urls_pos.txt").write_text("http://www.imdb.com/title/tt0453418/usercomments\n")
    (folder / "imdb.vocab").write_text("the\n")


@pytest.mark.parametrize("where", ["aclImdb", "imdb/aclImdb"])
def test_load_imdb_from_the_extracted_archive(tmp_path, where):
    _write_acl(tmp_path / where)
    texts, labels = load_imdb("train", data_dir=tmp_path)
    # Positive reviews by numeric id, then negative ones: the order of imdb.csv.gz.
    assert texts == ["First, caf\u00e9 &amp; more", "Second positive.", "Third: great.<br /><br />Really.",
                     "Fourth positive.", "First negative,\nwith a line break.", "Second negative."]
    assert labels.dtype == np.int64 and labels.tolist() == [1, 1, 1, 1, 0, 0]
    assert load_imdb("train", data_dir=tmp_path, clean=True)[0][2] == "Third: great. Really."
    texts, labels = load_imdb("test", data_dir=tmp_path)
    assert texts == ["Fine", "Not fine"] and labels.tolist() == [1, 0]


def test_load_imdb_folder_and_csv_agree_and_the_csv_wins(tmp_path):
    folder_only, csv_only = tmp_path / "a", tmp_path / "b"
    _write_acl(folder_only / "aclImdb")
    rows = ["review,sentiment,split,id,rating,orig_path"]
    for split in ("train", "test"):
        texts, labels = load_imdb(split, data_dir=folder_only)
        for text, label in zip(texts, labels):
            quoted = text.replace('"', '""')
            rows.append(f'"{quoted}",{"positive" if label else "negative"},{split},0,0,x')
    _write_gz(csv_only / "imdb" / "imdb.csv.gz", "\n".join(rows) + "\n")
    for split in ("train", "test"):
        a, b = load_imdb(split, data_dir=folder_only), load_imdb(split, data_dir=csv_only)
        assert a[0] == b[0] and np.array_equal(a[1], b[1])
    # With both layouts present, the CSV is read.
    _write_gz(folder_only / "imdb" / "imdb.csv.gz", IMDB_FIXTURE)
    assert load_imdb("test", data_dir=folder_only)[0] == ["Fine"]


def test_load_imdb_folder_errors(tmp_path):
    _write_acl(tmp_path / "aclImdb")
    (tmp_path / "aclImdb" / "train" / "pos" / "review.txt").write_text("?")
    with pytest.raises(ValueError, match=r"review\.txt is not named <id>_<rating>\.txt"):
        load_imdb("train", data_dir=tmp_path)
    for f in (tmp_path / "aclImdb" / "test" / "neg").iterdir():
        f.unlink()
    (tmp_path / "aclImdb" / "test" / "neg").rmdir()
    with pytest.raises(FileNotFoundError, match=r"test/neg is missing; expected the extracted archive's layout "
                                                r"aclImdb/\{train,test\}/\{pos,neg\}/<id>_<rating>\.txt"):
        load_imdb("test", data_dir=tmp_path)


def test_clean_review():
    assert clean_review("a<br />b<br/>c<BR>d  e\n f") == "a b c d e f"
    assert clean_review("x &lt;3 &#8230; &quot;y&quot;") == 'x <3 … "y"'


def test_train_val_split_stratified_deterministic():
    texts = [f"t{i}" for i in range(200)]
    labels = np.array([1] * 150 + [0] * 50)
    tr_x, tr_y, va_x, va_y = train_val_split(texts, labels, val_fraction=0.2, seed=0)
    assert len(va_x) == 40 and va_y.sum() == 30  # 20 % of each class
    assert sorted(tr_x + va_x) == sorted(texts) and not set(tr_x) & set(va_x)
    for x, y in zip(tr_x + va_x, np.concatenate([tr_y, va_y])):
        assert y == labels[int(x[1:])]
    again = train_val_split(texts, labels, val_fraction=0.2, seed=0)
    assert again[0] == tr_x and again[2] == va_x
    with pytest.raises(ValueError, match=r"val_fraction=1\.5"):
        train_val_split(texts, labels, val_fraction=1.5)
    with pytest.raises(ValueError, match=r"one label per text"):
        train_val_split(texts, labels[:10])


# --------------------------------------------------------------------------- loaders: real data


def _real_data_dir():
    root = default_data_dir()
    if root is None:
        pytest.skip(f"real data not found: set {DATA_ENV} or provide ../shared/data")
    return root


def test_multi30k_real():
    root = _real_data_dir()
    if not (root / "multi30k" / "val.de.gz").is_file():
        pytest.skip(f"Multi30K not found under {root}")
    expected = {"train": 29000, "val": 1014, "test": 1000}
    for split, n in expected.items():
        pairs = load_multi30k(split)
        assert len(pairs) == n
        assert all(de and en and "\n" not in de + en for de, en in pairs)
    assert load_multi30k("val")[1] == (
        "Ein Mann schläft in einem grünen Raum auf einem Sofa.",
        "A man sleeping in a green room on a couch.",
    )


def test_imdb_real():
    root = _real_data_dir()
    if not (root / "imdb" / "imdb.csv.gz").is_file():
        pytest.skip(f"IMDB not found under {root}")
    texts, labels = load_imdb("test")
    assert len(texts) == 25000 and labels.shape == (25000,)
    assert labels.sum() == 12500
    assert any("<br />" in t for t in texts[:200])
