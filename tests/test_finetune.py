"""Fine-tuning a pretrained BERT-family encoder on sentiment (``train sentiment --init DIR``).

On a tiny random BERT that ``transformers`` saves (2 layers of 32, a vocabulary of the synthetic
reviews' words) and a synthetic IMDB file: the recipe's defaults, the WordPiece head+tail cut, the
gradient of the classifier's loss through the pretrained encoder against finite differences, the
loss falling on a fixed batch, the command line end to end (the checkpoint evaluates and predicts
without the pretrained directory), on one process and on two ranks, and the directories refused in
one line. Skips without ``transformers`` or ``safetensors``.
"""
from __future__ import annotations

import csv
import dataclasses
import gzip
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

import numpytransformer.training.trainer as trainer_module  # noqa: E402
from numpytransformer.cli import main  # noqa: E402
from numpytransformer.core.gradcheck import WHOLE_MODEL_TOL, numerical_gradient_entries, rel_error  # noqa: E402
from numpytransformer.core.losses import cross_entropy  # noqa: E402
from numpytransformer.errors import NumpyTransformerError  # noqa: E402
from numpytransformer.pretrained import PretrainedError, load  # noqa: E402
from numpytransformer.tasks.sentiment import SentimentData, SentimentTask  # noqa: E402
from numpytransformer.training.settings import ModelSettings  # noqa: E402
from numpytransformer.training.trainer import TrainConfig, Trainer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
POS = ["great", "wonderful", "superb", "loved"]
NEG = ["awful", "boring", "terrible", "hated"]
FILLER = ["the", "film", "movie", "plot", "was", "a", "and", "story", "it", "this", "of", "ending"]
PIECES = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", ".", ",", "!", *POS, *NEG, *FILLER, "act", "##or", "##s"]
MPIEXEC = shutil.which("mpiexec") or shutil.which("mpiexec", path=os.path.dirname(sys.executable))


def review(rng, label: int) -> str:
    words = list(rng.choice(FILLER, rng.integers(4, 12)))
    words.insert(rng.integers(0, len(words) + 1), rng.choice(POS if label else NEG))
    return " ".join(words).capitalize() + ".<br /><br />The actors " + rng.choice(POS if label else NEG) + "!"


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory) -> Path:
    """A random BERT of 2 layers of 32, saved by transformers, with a vocab.txt of the reviews' words."""
    directory = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=len(PIECES), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=160, type_vocab_size=2)
    transformers.BertModel(cfg).save_pretrained(str(directory))
    (directory / "vocab.txt").write_text("\n".join(PIECES) + "\n", encoding="utf-8")
    return directory


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """imdb/imdb.csv.gz in the real file's format: 96 training and 40 test reviews."""
    root = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(0)
    (root / "imdb").mkdir()
    with gzip.open(root / "imdb" / "imdb.csv.gz", "wt", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["review", "sentiment", "split", "id", "rating", "orig_path"])
        for split, n in (("train", 96), ("test", 40)):
            for i in range(n):
                w.writerow([review(rng, i % 2), ["negative", "positive"][i % 2], split, i, 8 if i % 2 else 2,
                            f"{split}/{['neg', 'pos'][i % 2]}/{i}_0.txt"])
    return root


@pytest.fixture(autouse=True)
def _no_curves(monkeypatch):
    monkeypatch.setattr(trainer_module, "plot_history", lambda *a, **kw: None)


def make_task(bert_dir, data_dir, dtype="float32", dropout=0.1, **data):
    d = SentimentData(init=str(bert_dir), **{"n_train": 96, "val_fraction": 0.25, **data})
    model, train = SentimentTask.recipe(d)
    model = ModelSettings(**{**model.__dict__, "dtype": dtype, "dropout": dropout})
    return SentimentTask(d, model, data_dir=str(data_dir)), train


def test_the_recipe_follows_init_and_leaves_the_scratch_classifier_alone(bert_dir):
    scratch = SentimentData()
    assert (scratch.max_tokens, scratch.batch_tokens, scratch.max_batch_size, scratch.val_fraction,
            scratch.n_train, scratch.region) == (512, 8192, 128, 0.1, None, 1)
    assert SentimentTask.recipe(scratch)[1].schedule == "noam"
    d = SentimentData(init=str(bert_dir))
    r = SentimentTask.FINETUNE
    assert (d.max_tokens, d.max_batch_size, d.batch_tokens, d.n_train, d.val_fraction, d.region) == (
        r["max_tokens"], r["max_batch_size"], r["max_batch_size"] * r["max_tokens"], r["n_train"], r["val_fraction"], 0)
    model, train = SentimentTask.recipe(d)
    assert (model.d_model, model.n_heads, model.n_layers, model.d_ff, model.norm) == (32, 4, 2, 64, "post")
    updates = -(-round(r["n_train"] * (1 - r["val_fraction"])) // r["max_batch_size"])
    assert (train.lr, train.weight_decay, train.schedule, train.min_lr_ratio) == (r["lr"], 0.01, "cosine", 1.0)
    assert train.warmup == round(r["warmup_share"] * updates)
    assert train.cooldown == pytest.approx(1 - train.warmup / updates)  # the fall starts where the rise ends


def test_the_rate_rises_then_falls_linearly_to_zero(bert_dir, data_dir):
    task, train = make_task(bert_dir, data_dir)
    n, w = 200, 12
    train = dataclasses.replace(train, warmup=w, cooldown=1 - w / n)
    trainer = Trainer(task.build_model(), task, train, out_dir=None, log=lambda m: None)
    trainer.total_updates = n
    rates = np.array([trainer.learning_rate(s) for s in range(1, n + 1)])
    assert rates[w - 1] == pytest.approx(train.lr)
    assert np.allclose(np.diff(rates[:w]), train.lr / w)  # the rise
    assert np.allclose(np.diff(rates[w:]), np.diff(rates[w:]).mean()) and rates[-1] < train.lr / 100  # the fall


def test_options_of_the_scratch_classifier_and_another_shape_are_refused(bert_dir, data_dir):
    with pytest.raises(NumpyTransformerError, match="--vocab-size, --causal: for a classifier from scratch"):
        SentimentData(init=str(bert_dir), vocab_size=500, causal=True)
    d = SentimentData(init=str(bert_dir))
    with pytest.raises(NumpyTransformerError, match=r"--d-model 64 \(it has 32\): the shape of a fine-tuned model"):
        SentimentTask(d, ModelSettings(d_model=64, n_heads=4, n_layers=2, d_ff=64), data_dir=str(data_dir))
    with pytest.raises(NumpyTransformerError, match="--max-tokens 200: the encoder .* has 160 positions"):
        make_task(bert_dir, data_dir, max_tokens=200)


def test_reviews_are_cut_into_head_and_tail_pieces(bert_dir, data_dir):
    task, _ = make_task(bert_dir, data_dir, max_tokens=10)
    words = [FILLER[i % len(FILLER)] for i in range(30)]
    ids = task.encode(" ".join(words) + "<br />actors")
    wp = task.wordpiece
    assert ids[0] == wp.cls_id and ids[-1] == wp.sep_id and len(ids) == 10
    assert wp.decode(ids[1:-1]) == words[:2] + words[-3:] + ["act", "##or", "##s"]  # a quarter of 8 pieces, then the tail


def test_the_gradient_through_the_pretrained_encoder_equals_finite_differences(bert_dir, data_dir):
    task, train = make_task(bert_dir, data_dir, dtype="float64", dropout=0.0)
    model = task.build_model()
    task.pretrain(model, train, log=lambda m: None)
    ids, labels = task.split_ids("train")
    x = np.zeros((3, max(len(i) for i in ids[:3])), dtype=np.int64)  # [PAD] is 0
    for row, seq in zip(x, ids[:3]):
        row[:len(seq)] = seq
    y = labels[:3]
    model.train()  # dropout 0: the training path, deterministic

    def loss():
        return cross_entropy(model.forward(x), y)[0]

    _, dlogits = cross_entropy(model.forward(x), y)
    model.zero_grad()
    model.backward(dlogits)
    rng = np.random.default_rng(0)
    params, grads = model.parameters(), model.gradients()
    names = ["out.W", "encoder.embedder.embed.W", "encoder.embedder.pos.P", "encoder.embedder.types.W",
             "encoder.embedder.norm.gamma", "encoder.layers.0.self_attn.W_q", "encoder.layers.0.ffn.W1",
             "encoder.layers.1.ffn_sublayer.norm.beta"]
    for name in names:
        p = params[name]
        if name == "encoder.embedder.embed.W":  # the rows the reviews read
            rows = np.unique(x)
            idx = [(int(r), int(c)) for r, c in zip(rng.choice(rows, 8), rng.integers(0, p.shape[1], 8))]
        else:
            idx = [tuple(int(rng.integers(0, n)) for n in p.shape) for _ in range(8)]
        num = numerical_gradient_entries(lambda _: loss(), p, 1.0, idx)
        ana = np.array([grads[name][i] for i in idx])
        assert rel_error(ana, num) < WHOLE_MODEL_TOL, name


def test_the_loss_falls_on_a_fixed_batch(bert_dir, data_dir):
    task, train = make_task(bert_dir, data_dir, dropout=0.0)
    model = task.build_model()
    task.pretrain(model, train, log=lambda m: None)
    # A random encoder learns nothing at the recipe's small rate in 20 updates: a larger one here.
    cfg = TrainConfig(epochs=1, schedule="cosine", lr=1e-3, min_lr_ratio=1.0, warmup=2, weight_decay=0.01,
                      label_smoothing=0.0, log_every=10 ** 6)
    trainer = Trainer(model, task, cfg, out_dir=None, log=lambda m: None)
    trainer.total_updates = 20
    batch = np.arange(16)
    losses = [trainer.train_step([batch])[0] for _ in range(20)]
    assert losses[-1] < 0.5 * losses[0], losses


def _train_args(bert_dir, data_dir, out):
    return ["train", "sentiment", "--init", str(bert_dir), "--data-dir", str(data_dir), "--out", str(out),
            "--n-train", "96", "--val-fraction", "0.25", "--max-tokens", "24", "--lr", "0.001", "--epochs", "2"]


def test_train_eval_and_classify_from_the_command_line(bert_dir, data_dir, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(_train_args(bert_dir, data_dir, run)) == 0
    out = capsys.readouterr().out
    assert "fine-tuning the encoder of" in out and "fresh: out.W, out.b" in out
    assert "schedule=cosine" in out and "weight_decay=0.01" in out and "max_tokens=24" in out
    assert "final (test, best checkpoint): n 40 test_loss" in out
    # The run holds its vocabulary and configuration: it runs without the pretrained directory.
    moved = shutil.move(str(bert_dir), str(tmp_path / "moved"))
    try:
        assert main(["eval", "--checkpoint", str(run), "--data-dir", str(data_dir)]) == 0
        shown = capsys.readouterr().out
        accuracy = float(shown.split("accuracy ")[1].split()[0])
        assert "n 40" in shown and 0.0 <= accuracy <= 1.0
        assert main(["classify", "--checkpoint", str(run), "a wonderful film, loved it"]) == 0
        label, p = capsys.readouterr().out.split()
        assert label in ("positive", "negative") and 0.5 <= float(p) <= 1.0
    finally:
        shutil.move(moved, str(bert_dir))


@pytest.mark.skipif(not MPIEXEC, reason="needs mpiexec (pip install -e \".[mpi]\")")
def test_two_ranks_train_and_share_the_test(bert_dir, data_dir, tmp_path):
    pytest.importorskip("mpi4py")
    env = {k: v for k, v in os.environ.items() if k not in ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    outs = {}
    for ranks in (1, 2):
        run = tmp_path / f"ranks{ranks}"
        cmd = [sys.executable, "-m", "numpytransformer", *_train_args(bert_dir, data_dir, run), "--dropout", "0"]
        r = subprocess.run([MPIEXEC, "-n", "2", *cmd] if ranks == 2 else cmd, capture_output=True, text=True,
                           timeout=120, env=env)
        assert r.returncode == 0, r.stderr
        assert r.stdout.count("final (test") == 1
        outs[ranks] = r.stdout.split("final (test, ")[1].split("\n")[0]
    one, two = (float(outs[k].split("test_loss ")[1].split()[0]) for k in (1, 2))
    assert two == pytest.approx(one, abs=1e-3)  # the same updates, the test shared between the ranks


def test_a_gpt2_or_a_pickled_directory_is_refused_in_one_line(bert_dir, data_dir, tmp_path, capsys):
    gpt2 = tmp_path / "gpt2"
    transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50,
                                                         n_positions=16)).save_pretrained(str(gpt2))
    capsys.readouterr()  # transformers' progress bar
    pickled = tmp_path / "pickled"
    shutil.copytree(bert_dir, pickled)
    (pickled / "model.safetensors").rename(pickled / "pytorch_model.bin")
    for directory, says in ((gpt2, "model_type='gpt2'; the sentiment classifier fine-tunes a BERT-family"),
                            (pickled, "pytorch_model.bin")):
        code = main(["train", "sentiment", "--init", str(directory), "--data-dir", str(data_dir),
                     "--out", str(tmp_path / "never")])
        err = capsys.readouterr().err.strip()
        assert code == 2 and says in err and "\n" not in err, err
        assert not (tmp_path / "never").exists()
    with pytest.raises(PretrainedError):
        load(pickled)
