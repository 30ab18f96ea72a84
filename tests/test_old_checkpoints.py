"""A checkpoint written before the newer options existed still loads and predicts.

The field lists below are those of the previous checkpoint layout (format 7), written out
literally: a checkpoint holds exactly them, and the fields added since (a model's activation,
norm, key/value heads, block kind, ...; training's optimiser, schedule, EMA; sentiment's
``--init``) are filled in as they were then.
"""
from __future__ import annotations

import json

import pytest

from numpytransformer.cli import main

OLD_CONFIG = {"causal", "d_ff", "d_model", "dropout", "dtype", "layernorm_eps", "max_len", "n_classes",
              "n_decoder_layers", "n_heads", "n_layers", "norm_first", "pad_id", "pooling", "positions", "region",
              "scale_embeddings", "seed", "share_embeddings", "src_vocab_size", "tgt_vocab_size", "tie_embeddings"}
OLD_TRAIN = {"accum_steps", "clip_norm", "cooldown", "epochs", "keep_epochs", "label_smoothing", "log_every",
             "lr_factor", "max_minutes", "warmup", "weight_decay"}
OLD_REVERSE_DATA = {"batch_size", "formulation", "max_len", "min_len", "n_symbols", "n_test", "n_train", "n_val"}


def _as_old(folder):
    for which in ("best", "last"):
        path = folder / which / "checkpoint.json"
        doc = json.loads(path.read_text())
        doc["config"] = {k: v for k, v in doc["config"].items() if k in OLD_CONFIG}
        doc["train"] = {k: v for k, v in doc["train"].items() if k in OLD_TRAIN}
        doc["task"]["data"] = {k: v for k, v in doc["task"]["data"].items() if k in OLD_REVERSE_DATA}
        path.write_text(json.dumps(doc))


def test_an_old_reversal_checkpoint_predicts_evaluates_and_resumes(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "reverse", "--epochs", "1", "--n-train", "64", "--n-val", "16", "--n-test", "16",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["predict", "--checkpoint", str(out), "3 5 4 2 1"]) == 0
    expected = capsys.readouterr().out
    _as_old(out)
    assert main(["predict", "--checkpoint", str(out), "3 5 4 2 1"]) == 0
    assert capsys.readouterr().out == expected
    assert main(["eval", "--checkpoint", str(out), "--n", "8"]) == 0
    assert main(["train", "reverse", "--resume", "--epochs", "2", "--n-train", "64", "--n-val", "16",
                 "--n-test", "16", "--out", str(out)]) == 0


def test_a_missing_old_field_is_refused_in_one_line(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "reverse", "--epochs", "1", "--n-train", "64", "--n-val", "16", "--n-test", "16",
                 "--out", str(out)]) == 0
    path = out / "best" / "checkpoint.json"
    doc = json.loads(path.read_text())
    del doc["config"]["d_model"]
    path.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["predict", "--checkpoint", str(out / "best"), "3 5 4 2 1"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "d_model" in err[0], err
