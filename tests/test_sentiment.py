"""Sentiment classification: truncation, settings checks, splits, batching, throughput, resume,
the task's interface, the command line end to end on a synthetic IMDB file (always runs), and
a tiny model and the bag-of-words baseline on a few hundred real reviews (skipped without the
data)."""
import csv
import gzip
import io
import json
import re
import sys

import numpy as np
import pytest

from numpytransformer.baselines import evaluate, train_bow_logreg
from numpytransformer.cli import main
from numpytransformer.datasets.imdb import load_imdb
from numpytransformer.tasks.sentiment import (UNK, SentimentSettings, SentimentTask, _sample_exactly,
                                              _stratified_pick, truncate_ids)
from numpytransformer.trainer import TrainConfig, Trainer, without_timing
from test_training import _cfg, _epochs, _Interrupting, _losses, _quiet

POS = ["great", "wonderful", "superb", "delight", "loved", "brilliant"]
NEG = ["awful", "boring", "terrible", "waste", "hated", "dull"]
FILLER = ["the", "film", "movie", "plot", "actor", "scene", "was", "a", "and", "story", "director", "music",
          "it", "this", "of", "ending", "cast", "i"]
FORMAT = re.compile(r"^(positive|negative) (0|1)\.\d\d$")
TINY = dict(max_tokens=32, vocab_size=200, d_model=16, n_heads=2, n_layers=1, d_ff=32, batch_tokens=512, dropout=0.0)


def synthetic_review(rng, label: int) -> str:
    """Filler words with two or three sentiment words of the label, and a ``<br />`` as in IMDB."""
    words = list(rng.choice(FILLER, rng.integers(6, 20)))
    for _ in range(rng.integers(2, 4)):
        words.insert(rng.integers(0, len(words) + 1), rng.choice(POS if label else NEG))
    cut = len(words) // 2
    return " ".join(words[:cut]).capitalize() + ".<br /><br />" + " ".join(words[cut:]) + "."


def write_imdb_csv(root, reviews):
    """``root/imdb/imdb.csv.gz`` in the real file's format from ``{split: [(text, label), ...]}``."""
    (root / "imdb").mkdir(parents=True)
    with gzip.open(root / "imdb" / "imdb.csv.gz", "wt", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["review", "sentiment", "split", "id", "rating", "orig_path"])
        for split, rows in reviews.items():
            for i, (text, label) in enumerate(rows):
                w.writerow([text, ["negative", "positive"][label], split, i, 8 if label else 2,
                            f"{split}/{['neg', 'pos'][label]}/{i}_0.txt"])
    return root


@pytest.fixture(scope="module")
def synthetic_dir(tmp_path_factory):
    """A folder holding imdb/imdb.csv.gz in the real file's format: 400 training and 200 test reviews."""
    rng = np.random.default_rng(0)
    reviews = {split: [(synthetic_review(rng, i % 2), i % 2) for i in range(n)]
               for split, n in (("train", 400), ("test", 200))}
    return write_imdb_csv(tmp_path_factory.mktemp("data"), reviews)


@pytest.fixture(scope="module")
def marked_dir(tmp_path_factory):
    """Every review starts with a word of its own ("zq<split><i>"), and training reviews 0-19
    appear twice (as reviews 200-219), as IMDB repeats a few reviews."""
    rng = np.random.default_rng(1)
    train = [(f"zqtrain{i} " + synthetic_review(rng, i % 2), i % 2) for i in range(200)]
    test = [(f"zqtest{i} " + synthetic_review(rng, i % 2), i % 2) for i in range(100)]
    return write_imdb_csv(tmp_path_factory.mktemp("marked"), {"train": train + train[:20], "test": test})


def fit(task, epochs, tmp_path, lr_factor=2.0):
    model = task.build_model()
    cfg = TrainConfig(epochs=epochs, lr_factor=lr_factor, warmup=50, label_smoothing=0.0, log_every=10 ** 9)
    trainer = Trainer(model, task, cfg, tmp_path, log=lambda msg: None)
    metrics = trainer.fit()
    return model, metrics


# ---- truncation ------------------------------------------------------------------------------
def test_truncation_head_and_head_plus_tail():
    ids = list(range(10))
    assert truncate_ids(ids, 4, "head") == [0, 1, 2, 3]
    assert truncate_ids(ids, 4, "head+tail") == [0, 1, 8, 9]
    assert truncate_ids(ids, 5, "head+tail") == [0, 1, 2, 8, 9]  # the odd token goes to the head
    assert truncate_ids(ids, 1, "head+tail") == [0]
    assert truncate_ids(ids, 10, "head+tail") == ids and truncate_ids(ids[:3], 8, "head") == [0, 1, 2]
    with pytest.raises(ValueError, match="truncate must be"):
        truncate_ids(ids, 4, "tail")


def test_task_truncates_a_known_review(synthetic_dir):
    text = "It starts slowly , but the ending made it a masterpiece . 9/10"
    for mode, expected in (("head", ["it", "starts", "slowly", ","]), ("head+tail", ["it", "starts", "/", "10"])):
        task = SentimentTask(SentimentSettings(truncate=mode, max_tokens=4), data_dir=synthetic_dir)
        assert task.tokens(text) == expected
    # What a reviewer concludes with survives head+tail: "9/10" is tokenized "9" "/" "10".
    task = SentimentTask(SentimentSettings(truncate="head+tail", max_tokens=6), data_dir=synthetic_dir)
    assert task.tokens(text)[-3:] == ["9", "/", "10"]


# ---- settings are checked before any data is read ----------------------------------------------------
@pytest.mark.parametrize("bad, message", [
    (dict(vocab_size=4), r"--vocab-size must be at least 5 \(the 4 special tokens"),
    (dict(d_model=30, n_heads=4), r"--d-model 30 must be divisible by --heads 4"),
    (dict(batch_tokens=100, max_tokens=128), r"--batch-tokens 100 is less than one review of --max-tokens 128"),
    (dict(batch_tokens=128, max_tokens=128, pooling="first"), r"expected at least 129"),
    (dict(max_batch_size=0), r"--max-batch-size must be at least 1, got 0"),
    (dict(min_freq=0), r"--min-freq must be at least 1, got 0"),
    (dict(max_tokens=0), r"--max-tokens must be at least 1, got 0"),
    (dict(n_heads=0), r"--heads must be at least 1, got 0"),
    (dict(n_layers=0), r"--layers must be at least 1, got 0"),
    (dict(seed=-1), r"--seed must be at least 0, got -1"),
    (dict(vocab_size=100.5), r"--vocab-size must be a whole number, got 100\.5"),
    (dict(dropout=1.0), r"--dropout must be a number in \[0, 1\), got 1\.0"),
    (dict(val_fraction=0.0), r"--val-fraction must be a number in \(0, 1\), got 0\.0"),
    (dict(val_fraction=float("nan")), r"--val-fraction must be a number in \(0, 1\), got nan"),
    (dict(pooling="max"), r"--pooling must be one of mean, first; got 'max'"),
    (dict(n_train=10, val_fraction=0.05), r"--val-fraction 0\.05 of the --n-train 10 reviews gives 5 training "
                                          r"and 0 validation reviews of each class.*raise --val-fraction"),
    (dict(n_train=100, val_fraction=0.99), r"gives 0 training and 50 validation reviews of each class.*lower "
                                           r"--val-fraction"),
])
def test_bad_settings_name_the_flag_before_reading_data(bad, message, tmp_path):
    # The data folder is empty: an error about a missing file would mean the data was read first.
    with pytest.raises(ValueError, match=message):
        SentimentTask(SentimentSettings(**bad), data_dir=tmp_path)


def test_no_validation_review_of_a_class_is_an_error_once_loaded(synthetic_dir):
    """400 reviews, 200 of each class: a fraction of 0.001 rounds to no validation review."""
    with pytest.raises(ValueError, match=r"--val-fraction 0\.001 of all 400 training reviews gives 200 training "
                                         r"and 0 validation reviews of each class"):
        SentimentTask(SentimentSettings(val_fraction=0.001, **TINY), data_dir=synthetic_dir)


def test_cli_tiny_validation_set_fails_early_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "sentiment", "--n-train", "10", "--val-fraction", "0.05", "--data-dir",
                 str(tmp_path / "no-data"), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1
    assert "--n-train 10" in err and "--val-fraction 0.05" in err
    assert "reading IMDB" not in captured.out and not out.exists()


# ---- splits and vocabulary -------------------------------------------------------------------------
def test_train_and_validation_are_disjoint_and_unseen_words_are_unk(marked_dir):
    task = SentimentTask(SentimentSettings(val_fraction=0.25, min_freq=1, vocab_size=5000, max_tokens=64,
                                           batch_tokens=1024), data_dir=marked_dir)
    all_texts, all_labels = load_imdb("train", marked_dir, clean=True)
    tr_idx, va_idx = task.split_indices("train"), task.split_indices("val")
    (tr_x, tr_y), (va_x, va_y) = task.texts("train"), task.texts("val")
    # By position: no review in both, each set's texts and labels are those of its positions.
    assert not set(tr_idx.tolist()) & set(va_idx.tolist())
    assert tr_x == [all_texts[i] for i in tr_idx] and va_x == [all_texts[i] for i in va_idx]
    assert np.array_equal(tr_y, all_labels[tr_idx]) and np.array_equal(va_y, all_labels[va_idx])
    # By text: the copies of training reviews that the split put into validation were dropped.
    assert not set(tr_x) & set(va_x)
    assert task.n_val_duplicates >= 1  # this seed splits some of the 20 repeated reviews
    assert len(tr_idx) + len(va_idx) + task.n_val_duplicates == 220
    # The vocabulary is the training split's: a word of its own in a validation or test review is <unk>.
    vocab = task.vocab
    assert all(vocab.encode([t.split()[0]])[0] != UNK for t in tr_x)
    for split in ("val", "test"):
        ids, _ = task.split_ids(split)
        texts, _ = task.texts(split)
        assert all(t.split()[0].startswith("zq") for t in texts)
        assert all(x[0] == UNK for x in ids)


def test_batches_group_reviews_of_similar_length(synthetic_dir):
    task = SentimentTask(SentimentSettings(**{**TINY, "batch_tokens": 256}), data_dir=synthetic_dir)
    lengths = np.array([len(x) for x in task.split_ids("train")[0]])
    batches = task.train_batches(0)
    assert len(batches) >= 10
    spread_in_batch = np.mean([np.ptp(lengths[idx]) for idx in batches])
    # The same batch sizes filled at random, for comparison.
    shuffled = np.random.default_rng(0).permutation(lengths)
    ends = np.cumsum([len(idx) for idx in batches])
    spread_at_random = np.mean([np.ptp(part) for part in np.split(shuffled, ends[:-1])])
    # The lengths range over 14 tokens: random batches spread over ~12 of them, bucketed ones
    # over less than one.
    assert np.ptp(lengths) >= 10 and spread_at_random >= 0.5 * np.ptp(lengths)
    assert spread_in_batch <= 0.1 * np.ptp(lengths)


# ---- throughput ---------------------------------------------------------------------------------
def test_progress_reports_reviews_and_tokens_per_second(synthetic_dir, tmp_path):
    task = SentimentTask(SentimentSettings(**TINY), data_dir=synthetic_dir)
    lines = []
    trainer = Trainer(task.build_model(), task, _cfg(epochs=1, log_every=2), tmp_path, log=lines.append)
    trainer.fit()
    progress = [line for line in lines if " update " in line]
    assert progress and all(re.search(r" reviews/s [\d,]+ tok/s [\d,]+ eta ", line) for line in progress)
    summary = [line for line in lines if line.startswith("throughput: ")]
    assert len(summary) == 1 and re.match(r"throughput: \d+ updates in [\d.]+ s of training \(validation "
                                          r"excluded\): reviews/s [\d,]+ tok/s [\d,]+ \([\d,]+ tokens\)$",
                                          summary[0])
    epoch = trainer.history["epochs"][0]
    # The epoch's input-token count is recorded, and kept by without_timing (runs agree on it).
    assert epoch["input_tokens"] == sum(len(x) for x in task.split_ids("train")[0])
    assert without_timing(epoch)["input_tokens"] == epoch["input_tokens"]
    ids = task.split_ids("train")[0]
    # Both rates share the epoch's time, so their ratio is the mean review length in tokens.
    assert epoch["tokens_per_s"] / epoch["reviews_per_s"] == pytest.approx(np.mean([len(x) for x in ids]), rel=1e-3)
    assert epoch["train_time"] > 0 and epoch["tokens_per_s"] > 0


def test_reversal_progress_line_is_unchanged(tmp_path):
    from test_training import _task

    lines = []
    task = _task(n_train=200)
    Trainer(task.build_model(), task, _cfg(epochs=1, log_every=1), tmp_path, log=lines.append).fit()
    progress = [line for line in lines if " update " in line]
    assert progress and all(re.search(r" lr \S+ tok/s [\d,]+ eta ", line) for line in progress)
    summary = [line for line in lines if line.startswith("throughput: ")]
    assert len(summary) == 1 and re.match(r"throughput: [\d,]+ updates in [\d.]+ s of training \(validation "
                                          r"excluded\): tok/s [\d,]+$", summary[0])


# ---- the task on the synthetic file --------------------------------------------------------------
@pytest.fixture(scope="module")
def trained(synthetic_dir, tmp_path_factory):
    task = SentimentTask(SentimentSettings(**TINY), data_dir=synthetic_dir)
    model, metrics = fit(task, 4, tmp_path_factory.mktemp("run"))
    return task, model, metrics


def test_synthetic_reviews_are_learned(trained):
    task, model, metrics = trained
    assert set(metrics) == {"val_loss", "accuracy"} and metrics["accuracy"] >= 0.9
    report = task.final_report(model)
    assert report["n"] == 200 and report["test_accuracy"] >= 0.9


def test_batches_are_bucketed_and_deterministic(trained):
    task = trained[0]
    ids = task.split_ids("train")[0]
    a, b = task.train_batches(3), task.train_batches(3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b)) and len(a) == len(b)
    assert sorted(np.concatenate(a).tolist()) == list(range(len(ids)))
    for idx in a:  # padded size within the budget (or a single review)
        assert len(idx) * max(len(ids[i]) for i in idx) <= task.s.batch_tokens or len(idx) == 1


def test_predict_text_format_and_empty_lines(trained):
    task, model, _ = trained
    out = task.predict_text(model, ["A great and wonderful film.", "", "   ", "Boring, awful, a waste."])
    assert FORMAT.match(out[0]) and out[0].startswith("positive")
    assert out[1] == "" and out[2] == ""
    assert FORMAT.match(out[3]) and out[3].startswith("negative")
    assert float(out[0].split()[1]) >= 0.5


def test_state_round_trip_classifies_without_the_data(trained, tmp_path):
    task, model, _ = trained
    d = task.to_dict()
    again = SentimentTask.from_dict(d, data_dir=tmp_path / "nothing-here")
    lines = ["superb", "the plot was dull", "i loved it"]
    assert again.predict_text(model, lines) == task.predict_text(model, lines)
    assert again.to_dict() == d


def test_n_test_subsets_the_final_report_but_not_eval(trained, synthetic_dir):
    task, model, _ = trained
    quick = SentimentTask.from_dict({**task.to_dict(), "n_test": 50}, data_dir=synthetic_dir)
    assert quick.final_report(model)["n"] == 50
    assert quick.evaluate_fresh(model)["n"] == 200
    sample = quick.evaluate_fresh(model, n=60, seed=3)
    assert sample["n"] == 60 and sample["split"] == "test"


def test_attention_maps_and_pooled_map(trained):
    task, model, _ = trained
    maps, labels, output = task.attention(model, "A superb film.")
    T = len(task.tokens("A superb film."))
    assert FORMAT.match(output)
    last = maps["encoder.layers.0.self_attn"]
    assert last.shape == (2, T, T)
    # Mean pooling reads every position: the pooled row is the mean of the last map's rows.
    mean_row = last.mean(axis=1, keepdims=True)
    np.testing.assert_allclose(maps["pooled"], mean_row / mean_row.max(axis=2, keepdims=True))
    assert labels["pooled"] == (["mean"], ["a", "superb", "film", "."])
    with pytest.raises(ValueError, match="empty"):
        task.attention(model, " ")


def test_first_pooling_learns_and_its_attention_shows_the_bos_row(synthetic_dir, tmp_path):
    task = SentimentTask(SentimentSettings(**{**TINY, "pooling": "first"}), data_dir=synthetic_dir)
    model, metrics = fit(task, 6, tmp_path)
    assert metrics["accuracy"] >= 0.9
    maps, labels, _ = task.attention(model, "A superb film and a delight.")
    last = maps["encoder.layers.0.self_attn"]  # (H, T, T), <bos> first
    assert labels["pooled"] == (["<bos>"], ["<bos>", "a", "superb", "film", "and", "a", "delight", "."])
    # The classifier reads only the <bos> position: the pooled row is <bos>'s own attention ...
    np.testing.assert_allclose(maps["pooled"], last[:, :1] / last[:, :1].max(axis=2, keepdims=True))
    # ... which is not the mean over all query positions (what the map showed before).
    mean_row = last.mean(axis=1, keepdims=True)
    assert not np.allclose(maps["pooled"], mean_row / mean_row.max(axis=2, keepdims=True), atol=1e-2)


def test_first_pooling_puts_bos_in_front(synthetic_dir):
    task = SentimentTask(SentimentSettings(pooling="first", max_tokens=3), data_dir=synthetic_dir)
    ids = task.encode("a b c d e")
    assert len(ids) == 4 and ids[0] == 1
    assert task.model_config().max_len == 4


def test_bow_baseline_on_synthetic_reviews(synthetic_dir):
    tr_x, tr_y = load_imdb("train", synthetic_dir, clean=True)
    te_x, te_y = load_imdb("test", synthetic_dir, clean=True)
    model = train_bow_logreg(tr_x, tr_y, epochs=20, lr=0.05)
    assert evaluate(model, te_x, te_y)["accuracy"] >= 0.95
    p = model.predict_proba(["superb", "awful"])
    assert p[0] > 0.5 > p[1]


# ---- the command line -------------------------------------------------------------------------------
TINY_FLAGS = ["--max-tokens", "32", "--vocab-size", "200", "--d-model", "16", "--heads", "2", "--layers", "1",
              "--d-ff", "32", "--batch-tokens", "512", "--dropout", "0", "--lr-factor", "2", "--warmup", "50"]


def test_cli_train_classify_eval(synthetic_dir, tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    assert main(["train", "sentiment", "--data-dir", str(synthetic_dir), *TINY_FLAGS, "--epochs", "4",
                 "--log-every", "5", "--out", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "(0 validation reviews dropped: the same text as a training review)" in shown
    assert ("model: 1 layer, d_model 16, 2 heads, d_ff 32, dropout 0.0, post-LN, float32; vocabulary 35 "
            "(word tokens), max_tokens 32 (head+tail), pooling mean") in shown
    assert re.search(r"update 5 loss \S+ lr \S+ reviews/s [\d,]+ tok/s [\d,]+ eta", shown)
    assert re.search(r"throughput: \d+ updates in .* reviews/s [\d,]+ tok/s [\d,]+", shown)
    assert "final (test split, best checkpoint): n 200 " in shown and "test_accuracy" in shown
    assert f"checkpoint: {out / 'best'}   try: python -m numpytransformer classify --checkpoint" in shown
    assert main(["classify", "--checkpoint", str(out), "A great film, a delight."]) == 0
    line = capsys.readouterr().out.strip()
    assert FORMAT.match(line) and line.startswith("positive")
    monkeypatch.setattr(sys, "stdin", io.StringIO("I hated it, boring.\n<br />\n\nSuperb and brilliant!\n"))
    assert main(["classify", "--checkpoint", str(out)]) == 0
    lines = capsys.readouterr().out.split("\n")
    assert lines[0].startswith("negative") and lines[1] == lines[2] == "" and lines[3].startswith("positive")
    for empty in ("", "<br /><br />", " &nbsp; "):
        assert main(["classify", "--checkpoint", str(out), empty]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.startswith("error: TEXT has no words once cleaned")
        assert len(captured.err.strip().splitlines()) == 1
    assert main(["eval", "--checkpoint", str(out), "--data-dir", str(synthetic_dir)]) == 0
    shown = capsys.readouterr().out
    assert "n 200 " in shown and float(re.search(r"accuracy (\S+)", shown).group(1)) >= 0.9
    assert main(["eval", "--checkpoint", str(out), "--data-dir", str(synthetic_dir), "--n", "-1"]) == 2
    assert "error: --n must be 0 (the whole test split) or positive, got -1" in capsys.readouterr().err
    png = tmp_path / "attn.png"
    assert main(["attention", "--checkpoint", str(out), "A superb film.", "--out", str(png)]) == 0
    assert "(1 attention layer x 2 heads and the pooled row)" in capsys.readouterr().out
    assert png.stat().st_size > 1000
    hist = json.loads((out / "history.json").read_text())
    assert all(e["tokens_per_s"] > e["reviews_per_s"] > 0 for e in hist["epochs"])


def test_cli_missing_checkpoint_suggests_the_right_task(tmp_path, capsys):
    missing = str(tmp_path / "nothing")
    assert main(["classify", "--checkpoint", missing, "Fine."]) == 2
    assert f"train one first: python -m numpytransformer train sentiment --out {missing}" in capsys.readouterr().err
    assert main(["attention", "--checkpoint", missing, "Fine."]) == 2
    assert "train TASK (reverse, translate or sentiment)" in capsys.readouterr().err


def test_cli_reports_the_checkpoint_it_really_loaded(synthetic_dir, tmp_path, capsys, monkeypatch):
    """Should best/ not be written, the final report says it scored last/, not best/."""
    real_save = Trainer.save
    monkeypatch.setattr(Trainer, "save", lambda self, which="last", rng_state=None:
                        real_save(self, which, rng_state) if which == "last" else None)
    out = tmp_path / "run"
    assert main(["train", "sentiment", "--data-dir", str(synthetic_dir), *TINY_FLAGS, "--epochs", "1",
                 "--n-test", "20", "--out", str(out)]) == 0
    shown = capsys.readouterr().out
    assert not (out / "best").exists()
    assert "final (test split, last checkpoint: no best/ was written): n 20 " in shown
    assert f"checkpoint: {out / 'last'} " in shown and "best checkpoint" not in shown


def test_a_nan_validation_score_stops_training_before_a_best_checkpoint(synthetic_dir, tmp_path):
    task = SentimentTask(SentimentSettings(**TINY), data_dir=synthetic_dir)
    monkeypatch_free = type("NanValidation", (), {
        "__getattr__": lambda self, name: getattr(task, name),
        "selection_metric": "accuracy",
        "validate": lambda self, model: {"val_loss": float("nan"), "accuracy": float("nan")}})()
    trainer = Trainer(task.build_model(), monkeypatch_free, _cfg(epochs=1), tmp_path, log=_quiet)
    with pytest.raises(FloatingPointError, match="val_loss nan, accuracy nan after epoch 1: the model diverged"):
        trainer.fit()
    assert not (tmp_path / "best").exists()


def test_a_diverged_model_is_caught_even_when_its_accuracy_looks_finite(synthetic_dir, tmp_path, monkeypatch):
    """NaN weights make every logit NaN; argmax then gives one label, an accuracy of about 0.5.
    The epoch's last update is the one that diverges, so no later batch loss shows it: the
    NaN validation loss stops training before best/ or last/ records the broken model."""
    task = SentimentTask(SentimentSettings(**TINY), data_dir=synthetic_dir)
    model = task.build_model()
    real, n_batches, calls = task.forward_backward, len(task.train_batches(0)), []

    def poisoned(m, *a, **kw):  # the last gradient overflows, as a diverging run's would
        out = real(m, *a, **kw)
        calls.append(1)
        if len(calls) == n_batches:
            for g in m.gradients().values():
                g[...] = np.nan
        return out

    monkeypatch.setattr(task, "forward_backward", poisoned)
    trainer = Trainer(model, task, _cfg(epochs=1, clip_norm=None), tmp_path, log=_quiet)
    with pytest.raises(FloatingPointError, match=r"val_loss nan after epoch 1: the model diverged"):
        trainer.fit()
    assert 0.3 < task.validate(model)["accuracy"] < 0.7  # finite: a check of it alone would pass
    assert not (tmp_path / "best").exists() and not (tmp_path / "last").exists()


def test_a_nan_training_loss_alone_stops_training(synthetic_dir, tmp_path, monkeypatch):
    """Finite validation scores and a NaN training loss: still a diverged run, and the message
    does not blame an empty validation set, which cannot make the training loss NaN."""
    task = SentimentTask(SentimentSettings(**TINY), data_dir=synthetic_dir)
    real = task.forward_backward
    monkeypatch.setattr(task, "forward_backward", lambda m, *a, **kw: (float("nan"), real(m, *a, **kw)[1]))
    trainer = Trainer(task.build_model(), task, _cfg(epochs=1), tmp_path, log=_quiet)
    with pytest.raises(FloatingPointError) as caught:
        trainer.fit()
    assert str(caught.value) == ("train_loss nan after epoch 1: the model diverged; no checkpoint saved for "
                                 "this epoch")
    assert np.isfinite(task.validate(trainer.model)["val_loss"])
    assert not (tmp_path / "best").exists() and not (tmp_path / "last").exists()


def test_resume_of_a_sentiment_run_gives_the_uninterrupted_losses(synthetic_dir, tmp_path):
    """As for reversal (tests/test_training.py): 2 epochs straight equal 1, a fresh process, then 1 more.
    Dropout is on, so the saved random state matters."""
    settings = SentimentSettings(**{**TINY, "dropout": 0.2})
    task = SentimentTask(settings, data_dir=synthetic_dir)
    straight = Trainer(task.build_model(), task, _cfg(epochs=2), tmp_path / "straight", log=_quiet)
    straight.fit()
    first = Trainer(task.build_model(), task, _cfg(epochs=1), tmp_path / "resumed", log=_quiet)
    first.fit()
    task2 = SentimentTask(settings, data_dir=synthetic_dir)  # a new process reads the data again
    second = Trainer(task2.build_model(), task2, _cfg(epochs=2), tmp_path / "resumed", log=_quiet)
    second.resume()
    second.fit()
    assert len(_losses(straight)) > 10 and _losses(second) == _losses(straight)
    assert _epochs(second) == _epochs(straight)
    for k, v in straight.model.parameters().items():
        np.testing.assert_array_equal(second.model.parameters()[k], v)


def test_resume_after_an_interrupt_mid_epoch_of_a_sentiment_run(synthetic_dir, tmp_path):
    """Ctrl-C half-way through epoch 1 (dropout on); a new process resumes to the uninterrupted run."""
    settings = SentimentSettings(**{**TINY, "dropout": 0.2})
    task = SentimentTask(settings, data_dir=synthetic_dir)
    n_batches = len(task.train_batches(0))
    straight = Trainer(task.build_model(), task, _cfg(epochs=2), tmp_path / "straight", log=_quiet)
    straight.fit()
    wrapped = _Interrupting(SentimentTask(settings, data_dir=synthetic_dir), at_call=n_batches // 2)
    first = Trainer(wrapped.task.build_model(), wrapped, _cfg(epochs=2), tmp_path / "run", log=_quiet)
    with pytest.raises(KeyboardInterrupt):
        first.fit()
    assert 0 < first.batch_index < n_batches and first.epoch == 0
    task2 = SentimentTask(settings, data_dir=synthetic_dir)
    second = Trainer(task2.build_model(), task2, _cfg(epochs=2), tmp_path / "run", log=_quiet)
    second.resume()
    second.fit()
    assert _losses(second) == _losses(straight) and _epochs(second) == _epochs(straight)
    for k, v in straight.model.parameters().items():
        np.testing.assert_array_equal(second.model.parameters()[k], v)


def test_resume_refuses_other_data(synthetic_dir, tmp_path):
    """The same settings on a changed data file would pick other reviews: resume says so."""
    task = SentimentTask(SentimentSettings(**TINY), data_dir=synthetic_dir)
    Trainer(task.build_model(), task, _cfg(epochs=1), tmp_path / "run", log=_quiet).fit()
    rng = np.random.default_rng(1)
    changed = write_imdb_csv(tmp_path / "changed", {
        split: [(synthetic_review(rng, i % 2), i % 2) for i in range(n)] for split, n in (("train", 380),
                                                                                          ("test", 200))})
    task2 = SentimentTask.from_dict(task.to_dict(), data_dir=changed)
    again = Trainer(task2.build_model(), task2, _cfg(epochs=2), tmp_path / "run", log=_quiet)
    with pytest.raises(ValueError, match=r"not the ones it was trained on \(train_reviews 360 then, 342 now, "
                                         r"val_reviews 40 then, 38 now, data_sha256 \w+ then, \w+ now, "
                                         r"split_sha256 \w+ then, \w+ now\)"):
        again.resume()
    same = SentimentTask.from_dict(task.to_dict(), data_dir=synthetic_dir)
    Trainer(same.build_model(), same, _cfg(epochs=2), tmp_path / "run", log=_quiet).resume()  # accepted


def test_resume_refuses_reviews_edited_in_place(synthetic_dir, tmp_path):
    """One training review reworded, same label, same position: the same split indices, but
    not the same data, so resume refuses it (the digest covers the texts and labels too)."""
    task = SentimentTask(SentimentSettings(**TINY), data_dir=synthetic_dir)
    Trainer(task.build_model(), task, _cfg(epochs=1), tmp_path / "run", log=_quiet).fit()
    rng = np.random.default_rng(0)  # the synthetic_dir fixture's reviews, with one changed
    reviews = {split: [(synthetic_review(rng, i % 2), i % 2) for i in range(n)]
               for split, n in (("train", 400), ("test", 200))}
    text, label = reviews["train"][int(task.split_indices("train")[0])]
    reviews["train"][int(task.split_indices("train")[0])] = (text + " a dull ending", label)
    edited = SentimentTask.from_dict(task.to_dict(), data_dir=write_imdb_csv(tmp_path / "edited", reviews))
    for split in ("train", "val"):
        np.testing.assert_array_equal(edited.split_indices(split), task.split_indices(split))
    again = Trainer(edited.build_model(), edited, _cfg(epochs=2), tmp_path / "run", log=_quiet)
    with pytest.raises(ValueError, match=r"not the ones it was trained on \(data_sha256 \w+ then, \w+ now\)"):
        again.resume()


def test_resume_accepts_checkpoints_from_before_the_data_digest(synthetic_dir, tmp_path):
    """Runs saved before ``data_sha256`` existed hold one digest, ``split_sha256``: of the
    positions only (dbdd7d3), or of positions, labels and texts (36f842f). Either resumes on
    the same data; another digest, or none at all, is refused."""
    task = SentimentTask(SentimentSettings(**TINY), data_dir=synthetic_dir)
    Trainer(task.build_model(), task, _cfg(epochs=1), tmp_path / "run", log=_quiet).fit()
    meta_file = tmp_path / "run" / "last" / "checkpoint.json"
    doc = json.loads(meta_file.read_text())
    now = doc["data"]
    assert list(now) == ["train_reviews", "val_reviews", "data_sha256", "split_sha256"]
    counts = {"train_reviews": now["train_reviews"], "val_reviews": now["val_reviews"]}
    for old_digest in (now["split_sha256"], now["data_sha256"]):
        meta_file.write_text(json.dumps({**doc, "data": {**counts, "split_sha256": old_digest}}))
        again = Trainer(task.build_model(), task, _cfg(epochs=2), tmp_path / "run", log=_quiet)
        again.resume()  # accepted
        assert again.epoch == 1
    for data, shown in (({**counts, "split_sha256": "0" * 16},
                         r"data_sha256 nothing then, \w+ now, split_sha256 0{16} then, \w+ now\)"),
                        ({}, r"train_reviews nothing then, 360 now, val_reviews nothing then, 40 now, "
                             r"data_sha256 nothing then, \w+ now, split_sha256 nothing then, \w+ now\)")):
        meta_file.write_text(json.dumps({**doc, "data": data}))
        with pytest.raises(ValueError, match=r"not the ones it was trained on \(" + shown):
            Trainer(task.build_model(), task, _cfg(epochs=2), tmp_path / "run", log=_quiet).resume()


def test_random_test_samples_have_exactly_n_reviews(trained):
    task, model, _ = trained
    for n in (1, 3, 7, 199):
        m = task.evaluate_fresh(model, n=n, seed=5)
        assert m["n"] == n and np.isfinite(m["loss"]) and 0 <= m["accuracy"] <= 1


def test_an_odd_sample_of_a_balanced_split_is_not_always_short_of_one_class():
    """The review left over after the even split goes to either class, by the seed."""
    labels = np.array([0, 1] * 50)
    extra = {int(np.bincount(labels[_sample_exactly(labels, 7, seed)]).argmax()) for seed in range(20)}
    assert extra == {0, 1}
    for seed in range(20):
        pick = _sample_exactly(labels, 7, seed)
        assert len(pick) == len(set(pick.tolist())) == 7 and sorted(np.bincount(labels[pick])) == [3, 4]


def test_n_train_and_n_test_select_the_subsets_they_always_have(synthetic_dir):
    """Checkpoints record n_train and n_test, not the reviews they picked: the selection must not
    change between versions, or an old run would resume on other reviews. The expected picks are
    pinned as the released version (fbbe153) made them; each class gives its rounded share."""
    import hashlib

    labels = np.array([0, 1] * 200)
    assert _stratified_pick(labels, 7, 3).tolist() == [245, 238, 284, 301, 198, 234, 335, 57]  # 4 + 4
    assert _stratified_pick(labels, 40, 3).tolist() == [
        37, 367, 157, 252, 399, 238, 217, 284, 68, 162, 373, 262, 48, 169, 324, 219, 151, 270, 283, 301,
        397, 234, 245, 12, 372, 335, 256, 83, 229, 198, 338, 293, 57, 168, 131, 369, 124, 200, 86, 380]
    many = _stratified_pick(labels, 333, 3)
    assert len(many) == 332 and hashlib.sha256(many.astype("<i8").tobytes()).hexdigest()[:16] == "ac88ef04de8099ca"
    unbalanced = np.array([0] * 30 + [1] * 70)
    assert _stratified_pick(unbalanced, 9, 1).tolist() == [56, 16, 46, 89, 38, 36, 7, 21, 78]  # 3 + 6
    assert _stratified_pick(labels, None, 3).tolist() == list(range(400))
    quick = SentimentTask(SentimentSettings(**{**TINY, "n_test": 7}), data_dir=synthetic_dir)
    assert len(quick.texts("test")[1]) == 8  # round(3.5) + round(3.5): within one review per class


def test_training_options_and_out_are_checked_before_the_data_is_read(tmp_path, capsys):
    """IMDB takes half a minute to read: a bad option must not wait for it (the data folder is missing)."""
    missing = str(tmp_path / "no-data")
    for argv, message in ((["--epochs", "0"], "--epochs must be at least 1"),
                          (["--accum", "0"], "--accum must be at least 1"),
                          (["--out", str(tmp_path / "file.txt")], "is a file; expected a run directory")):
        (tmp_path / "file.txt").write_text("x")
        assert main(["train", "sentiment", "--data-dir", missing, "--out", str(tmp_path / "run"), *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and "no-data" not in err
    # With good options the missing data is the error.
    assert main(["train", "sentiment", "--data-dir", missing, "--out", str(tmp_path / "run")]) == 2
    assert "no-data" in capsys.readouterr().err


@pytest.mark.parametrize("argv, expected", [
    (["train", "sentiment", "--help"], ["--data-dir", "aclImdb", "--vocab-size", "--min-freq", "--max-tokens",
                                        "--truncate", "--val-fraction", "--n-train", "--n-test", "--batch-tokens",
                                        "--max-batch-size", "--pooling", "--epochs", "--resume"]),
    (["classify", "--help"], ["--checkpoint", "TEXT", "stdin"]),
])
def test_help_lists_the_options(argv, expected, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    shown = capsys.readouterr().out
    assert e.value.code == 0 and shown.startswith("usage:")
    assert [flag for flag in expected if flag not in shown] == []


# ---- real IMDB reviews ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def imdb_task():
    """1,000 training and 200 validation reviews drawn from the real training split."""
    try:
        task = SentimentTask(SentimentSettings(n_train=1200, val_fraction=1 / 6, max_tokens=64, vocab_size=5000,
                                               d_model=32, n_heads=2, n_layers=1, d_ff=64, batch_tokens=2048))
    except FileNotFoundError as e:
        pytest.skip(f"IMDB is not available: {e}")
    return task


def test_tiny_classifier_beats_chance_on_real_reviews(imdb_task, tmp_path):
    assert len(imdb_task.split_ids("train")[1]) == 1000 and len(imdb_task.split_ids("val")[1]) == 200
    _, metrics = fit(imdb_task, 4, tmp_path)
    # Chance is 0.5 with a standard deviation of 0.035 on 200 reviews; this model reaches ~0.7.
    assert metrics["accuracy"] >= 0.6


def test_bow_baseline_beats_chance_on_real_reviews(imdb_task):
    tr_x, tr_y = imdb_task.texts("train")
    va_x, va_y = imdb_task.texts("val")
    model = train_bow_logreg(tr_x, tr_y, epochs=10)
    assert evaluate(model, va_x, va_y)["accuracy"] >= 0.7
