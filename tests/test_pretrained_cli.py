"""The commands over Hugging Face directories: ``convert``, ``export`` and ``embed``, against ``transformers``.

A converted checkpoint exported again is loaded by ``transformers`` with the original's outputs;
``embed`` gives sentence-transformers' recipe (BertModel's hidden states, mean over the real
tokens, unit length), cuts at the directory's 256 pieces, and ranks with ``--query``; bad input
is one line. Skips cleanly without ``transformers`` or the packaged MiniLM.
"""
from __future__ import annotations

import io
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from numpytransformer.cli import main  # noqa: E402
from helpers import minilm_directory

SENTENCES = ["A man is eating food.", "The quick brown fox jumps over the lazy dog near the river bank.", "hi",
             "A cat sleeps on the warm sofa all afternoon.", "Stocks fell sharply on Monday."]


@pytest.fixture(scope="module")
def minilm_dir() -> Path:
    return minilm_directory()


def run(monkeypatch, capsys, argv, stdin: str = ""):
    """``(exit status, stdout, stderr)`` of the command line."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    capsys.readouterr()  # what transformers printed before
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def recipe(directory: Path, texts, max_length: int = 256) -> np.ndarray:
    """sentence-transformers' recipe with transformers: BertModel, mean over the real tokens, unit length."""
    tok = transformers.BertTokenizer.from_pretrained(str(directory))
    enc = tok(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        h = transformers.BertModel.from_pretrained(str(directory)).eval()(**enc).last_hidden_state
    m = enc["attention_mask"][..., None].float()
    mean = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(mean, dim=-1).numpy()


# ---- convert and export ---------------------------------------------------------------------------
def test_minilm_convert_export_loads_in_transformers_with_equal_outputs(tmp_path, minilm_dir, monkeypatch, capsys):
    code, out, _ = run(monkeypatch, capsys, ["convert", minilm_dir, "--out", tmp_path / "run"])
    assert code == 0 and (tmp_path / "run" / "last" / "checkpoint.json").is_file()
    assert (tmp_path / "run" / "last" / "tokenizer" / "vocab.txt").is_file()
    code, out, _ = run(monkeypatch, capsys, ["export", tmp_path / "run", "--out", tmp_path / "hf"])
    assert code == 0 and {"config.json", "model.safetensors", "vocab.txt", "tokenizer.json"} <= \
        {p.name for p in (tmp_path / "hf").iterdir()}
    tok = transformers.BertTokenizer.from_pretrained(str(tmp_path / "hf"))  # the kept files still tokenize
    enc = tok(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        ours = transformers.AutoModel.from_pretrained(str(tmp_path / "hf")).eval()(**enc).last_hidden_state
        theirs = transformers.AutoModel.from_pretrained(str(minilm_dir)).eval()(**enc).last_hidden_state
    assert (ours - theirs).abs().max() < 1e-6
    code, _, err = run(monkeypatch, capsys, ["eval", "--checkpoint", tmp_path / "run"])
    assert code == 2 and "converted from a Hugging Face directory" in err and len(err.strip().splitlines()) == 1


def test_gpt2_convert_export_round_trips_and_generate_refuses_it(tmp_path, monkeypatch, capsys):
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=101, n_positions=24)
    ref = transformers.GPT2LMHeadModel(cfg).double().eval()
    ref.save_pretrained(str(tmp_path / "gpt2"))
    assert run(monkeypatch, capsys, ["convert", tmp_path / "gpt2", "--out", tmp_path / "run", "--dtype",
                                     "float64"])[0] == 0
    code, _, err = run(monkeypatch, capsys, ["generate", "--checkpoint", tmp_path / "run", "--prompt", "hi"])
    assert code == 2 and "byte-level BPE" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(monkeypatch, capsys, ["train", "lm", "--out", tmp_path / "run", "--resume"])
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert run(monkeypatch, capsys, ["export", tmp_path / "run", "--out", tmp_path / "hf"])[0] == 0
    back = transformers.GPT2LMHeadModel.from_pretrained(str(tmp_path / "hf"), dtype=torch.float64).eval()
    ids = torch.from_numpy(np.random.default_rng(1).integers(0, 101, (2, 9)))
    with torch.no_grad():
        assert torch.equal(back(input_ids=ids).logits, ref(input_ids=ids).logits)
    code, _, err = run(monkeypatch, capsys, ["convert", tmp_path / "gpt2", "--out", tmp_path / "run"])
    assert code == 2 and "already holds a checkpoint" in err
    code, _, err = run(monkeypatch, capsys, ["export", tmp_path / "run", "--out", tmp_path / "hf"])
    assert code == 2 and "not empty" in err


# ---- embed -----------------------------------------------------------------------------------------
def test_embed_equals_the_sentence_transformers_recipe(tmp_path, minilm_dir, monkeypatch, capsys):
    out = tmp_path / "x.npy"
    code, said, _ = run(monkeypatch, capsys, ["embed", "--model", minilm_dir, "--out", out, "--batch-size", 2],
                        "\n".join(SENTENCES) + "\n")
    assert code == 0 and "mean pooling, normalised" in said
    ours = np.load(out)
    assert ours.dtype == np.float32 and ours.shape == (len(SENTENCES), 384)
    assert np.abs(ours - recipe(minilm_dir, SENTENCES)).max() < 1e-5


def test_embed_cuts_at_256_pieces(tmp_path, minilm_dir, monkeypatch, capsys):
    words = " ".join(f"word{i % 50} river" for i in range(200))  # far beyond 256 pieces
    texts = [words, words + " and then something else entirely", "short"]
    out = tmp_path / "x.npy"
    assert run(monkeypatch, capsys, ["embed", "--model", minilm_dir, "--out", out], "\n".join(texts))[0] == 0
    ours = np.load(out)
    assert np.array_equal(ours[0], ours[1])  # what lies past the cut is not read
    assert np.abs(ours - recipe(minilm_dir, texts, max_length=256)).max() < 1e-5
    assert np.abs(ours[0] - recipe(minilm_dir, texts[:1], max_length=128)[0]).max() > 1e-3  # the cut is at 256


def test_embed_query_ranks_the_related_sentence_first(minilm_dir, monkeypatch, capsys):
    code, out, _ = run(monkeypatch, capsys, ["embed", "--model", minilm_dir, "--query", "Someone is having a meal.",
                                             "--top", 3], "\n".join(SENTENCES))
    lines = out.strip().splitlines()
    assert code == 0 and len(lines) == 3 and lines[0].endswith("A man is eating food.")
    scores = [float(line.split()[0]) for line in lines]
    assert scores == sorted(scores, reverse=True) and scores[0] > 0.5


@pytest.mark.parametrize("case", ["empty stdin", "no modules.json", "gpt2", "out under a file", "out not .npy",
                                  "neither out nor query"])
def test_embed_refuses_bad_input_in_one_line(tmp_path, minilm_dir, monkeypatch, capsys, case):
    model, out, stdin = minilm_dir, tmp_path / "x.npy", "a sentence\n"
    if case == "empty stdin":
        stdin = "\n\n"
    elif case == "no modules.json":
        model = tmp_path / "bert"
        shutil.copytree(minilm_dir, model, ignore=shutil.ignore_patterns("modules.json"))
    elif case == "gpt2":
        model = tmp_path / "gpt2"
        transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=11,
                                                             n_positions=8)).save_pretrained(str(model))
        shutil.copytree(minilm_dir / "1_Pooling", model / "1_Pooling")
        shutil.copy(minilm_dir / "modules.json", model)
    elif case == "out under a file":
        (tmp_path / "file").write_text("")
        out = tmp_path / "file" / "x.npy"
    elif case == "out not .npy":
        out = tmp_path / "x.txt"
    argv = ["embed", "--model", model] + ([] if case == "neither out nor query" else ["--out", out])
    code, said, err = run(monkeypatch, capsys, argv, stdin)
    assert code == 2 and said == "" and len(err.strip().splitlines()) == 1 and err.startswith("error: ")
    expected = {"empty stdin": "no sentences", "no modules.json": "modules.json", "gpt2": "gpt2",
                "out under a file": "cannot write", "out not .npy": ".npy", "neither out nor query": "--query"}[case]
    assert expected in err
    assert not out.exists()
