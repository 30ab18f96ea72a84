"""The command line end to end on tiny runs: train (one generic path for every task),
predict (argument and stdin), eval, attention, translate, resume, the declared flags and
their help, and bad arguments: one line on stderr and exit 2, never a traceback."""
import argparse
import dataclasses
import inspect
import io
import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import numpytransformer.training.trainer as trainer_module
from numpytransformer.cli import build_parser, load_for_inference, main
from numpytransformer.nn.config import TransformerConfig
from numpytransformer.errors import NumpyTransformerError
from numpytransformer.nn.models import TransformerClassifier
from numpytransformer.training.settings import ModelSettings, flag_of, given_values
from numpytransformer.tasks.base import TASKS, task_class
from numpytransformer.tasks.reverse import ReversalTask, ReverseData
from numpytransformer.tasks.translate import TranslationTask
from numpytransformer.training.trainer import TrainConfig

TINY = ["train", "reverse", "--n-symbols", "6", "--max-len", "6", "--n-train", "300", "--n-val", "30",
        "--n-test", "30", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--layers", "1", "--epochs", "1"]
TINY_TRANSLATE = ["train", "translate", "--n-train", "200", "--n-val", "20", "--n-test", "20", "--max-number", "999",
                  "--min-freq", "1", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--layers", "1",
                  "--epochs", "1"]
REAL_PLOT = trainer_module.plot_history


@pytest.fixture(autouse=True)
def _no_curves(monkeypatch):
    """Drawing curves.png costs 0.4 s a run: only the tests that look at it draw it."""
    monkeypatch.setattr(trainer_module, "plot_history", lambda *a, **kw: None)


def _run(argv, capsys):
    """``(exit code, stdout, stderr)`` of ``main(argv)``, argparse's exits included."""
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A one-epoch tiny reversal run, trained through the command line (curves drawn)."""
    out = tmp_path_factory.mktemp("cli") / "rev"
    assert main(TINY + ["--out", str(out)]) == 0
    return out


def test_train_writes_a_run(run_dir, tmp_path, capsys, monkeypatch):
    assert (run_dir / "best" / "checkpoint.json").is_file() and (run_dir / "last" / "checkpoint.json").is_file()
    hist = json.loads((run_dir / "history.json").read_text())
    assert len(hist["epochs"]) == 1 and hist["epochs"][0]["step"] == len(hist["steps"])
    pytest.importorskip("matplotlib")
    assert (run_dir / "curves.png").stat().st_size > 1000
    # What the run prints: the settings actually used (flags over the recipe), then the report.
    monkeypatch.setattr(trainer_module, "plot_history", REAL_PLOT)
    out = tmp_path / "run"
    code, shown, err = _run(TINY + ["--out", str(out)], capsys)
    assert code == 0 and err == ""
    assert "model: d_model=16, n_heads=2, n_layers=1, d_ff=32, dropout=0.0, norm=pre" in shown
    assert "training: epochs=1, lr_factor=0.15, warmup=100" in shown  # the reversal recipe
    assert re.search(r"^final \(test, best checkpoint\): n 30 .*exact_match", shown, re.M)  # --n-test
    assert f"checkpoint: {out / 'best'}   try: python -m numpytransformer predict --checkpoint {out} " in shown
    assert (out / "curves.png").is_file()


def test_predict_argument_and_stdin_keep_order(run_dir, capsys, monkeypatch):
    inputs = ["1 2 3", "4 5", "6", "2 2 3 1 6 5"]
    singles = []
    for text in inputs:
        code, out, err = _run(["predict", "--checkpoint", str(run_dir), text], capsys)
        assert code == 0 and err == "" and len(out.splitlines()) == 1
        singles.append(out.strip())
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(inputs) + "\n"))
    code, out, err = _run(["predict", "--checkpoint", str(run_dir)], capsys)
    assert code == 0 and err == "" and out.splitlines() == singles
    # Windows line ends and a byte-order mark (a file saved by some editors) read the same.
    monkeypatch.setattr(sys, "stdin", io.StringIO("\ufeff" + "\r\n".join(inputs) + "\r\n"))
    code, out, err = _run(["predict", "--checkpoint", str(run_dir)], capsys)
    assert code == 0 and err == "" and out.splitlines() == singles
    # The checkpoint's own file names its checkpoint.
    code, out, err = _run(["predict", "--checkpoint", str(run_dir / "best" / "checkpoint.json"), inputs[0]], capsys)
    assert code == 0 and out.strip() == singles[0]
    # A bad line among many is named by its number.
    monkeypatch.setattr(sys, "stdin", io.StringIO("1 2\n3 9\n"))
    code, out, err = _run(["predict", "--checkpoint", str(run_dir)], capsys)
    assert code == 2 and out == "" and err.startswith("error: line 2: unknown symbol '9'")


def test_an_empty_output_is_printed_not_taken_for_an_empty_input(run_dir, capsys, monkeypatch):
    # A weak model may put EOS first: its answer is an empty line, and the input was fine.
    monkeypatch.setattr(ReversalTask, "predict_ids", lambda self, model, seqs, beam=1: [[] for _ in seqs])
    assert _run(["predict", "--checkpoint", str(run_dir), "3 1"], capsys) == (0, "\n", "")


def test_eval_prints_exact_match_per_length(run_dir, capsys):
    code, out, err = _run(["eval", "--checkpoint", str(run_dir), "--n", "50", "--seed", "3"], capsys)
    assert code == 0 and err == ""
    first, second = out.splitlines()
    assert first.startswith(f"{run_dir / 'best'}: n 50 ") and "token_accuracy" in first and "exact_match" in first
    lengths = re.findall(r"(\d+): [\d.]+%", second)
    assert second.startswith("exact match by length") and lengths == ["1", "2", "3", "4", "5", "6"]
    # The same seed gives the same sample and the same figures.
    assert _run(["eval", "--checkpoint", str(run_dir), "--n", "50", "--seed", "3"], capsys)[1] == out


def test_several_checkpoints_predict_as_one_ensemble(run_dir, tmp_path, capsys):
    """The same model twice is an ensemble whose mean probability is the model's own; members
    with other data settings, or trained on another seed's draw of the data, are refused."""
    ck = str(run_dir)
    for flags, what in ((["--n-val", "40"], "data settings (n_val)"), (["--seed", "1"], "training data")):
        other = str(tmp_path / what.split()[0])
        assert main(TINY + flags + ["--out", other]) == 0
        code, _, err = _run(["eval", "--checkpoint", ck, "--checkpoint", other], capsys)
        assert code == 2 and err.startswith(f"error: --checkpoint {other}: not the same {what}")
    code, single, err = _run(["eval", "--checkpoint", ck, "--n", "40"], capsys)
    code2, twice, err2 = _run(["eval", "--checkpoint", ck, "--checkpoint", ck, "--n", "40"], capsys)
    assert code == code2 == 0 and err == err2 == ""
    assert twice == single.replace(f"{run_dir / 'best'}: ", f"{run_dir / 'best'} and 1 more: ", 1)
    one = _run(["predict", "--checkpoint", ck, "3 1 2"], capsys)
    assert one[0] == 0 and _run(["predict", "--checkpoint", ck, "--checkpoint", ck, "3 1 2"], capsys) == one


def test_attention_writes_a_png(run_dir, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "attn.png"
    code, out, err = _run(["attention", "--checkpoint", str(run_dir), "3 5 4 2 1", "--out", str(png)], capsys)
    assert code == 0 and err == ""
    assert out.endswith(f"wrote {png} (3 attention layers x 2 heads)\n")  # encoder, self and cross
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000


def test_translate_numbers_end_to_end(run_dir, tmp_path, capsys, monkeypatch):
    out = tmp_path / "mt"
    code, shown, err = _run(TINY_TRANSLATE + ["--out", str(out)], capsys)
    assert code == 0 and err == "" and "test_bleu_greedy" in shown
    monkeypatch.setattr(sys, "stdin", io.StringIO("seven\n\ntwenty-one\n"))
    code, shown, err = _run(["translate", "--checkpoint", str(out)], capsys)
    lines = shown.split("\n")
    assert code == 0 and err == "" and len(lines) == 4 and lines[1] == "" and lines[3] == ""
    # A sentence longer than the model reads is cut, with a warning (not silently).
    code, shown, err = _run(["translate", "--checkpoint", str(out), " ".join(["seven"] * 130)], capsys)
    assert code == 0 and len(shown.splitlines()) == 1
    assert err == "warning: line 1 has 130 tokens; only the first 128 are translated\n"
    # translate refuses a checkpoint of another task, and predict runs this one.
    code, shown, err = _run(["predict", "--checkpoint", str(out), "twelve"], capsys)
    assert code == 0 and len(shown.splitlines()) == 1
    # An ensemble's members share one task and vocabulary.
    code, shown, err = _run(["eval", "--checkpoint", str(out), "--checkpoint", str(run_dir)], capsys)
    assert code == 2 and err == (f"error: --checkpoint {run_dir}: not the same task as {out}; the members of an "
                                 "ensemble share their task, data settings, vocabulary and training data\n")
    # A model that puts EOS first answers with an empty line; the input was fine.
    monkeypatch.setattr(TranslationTask, "translate_ids", lambda self, model, src, beam=1: [[] for _ in src])
    assert _run(["translate", "--checkpoint", str(out), "seven"], capsys) == (0, "\n", "")


def test_a_joint_vocabulary_model_saves_loads_averages_and_resumes(tmp_path, capsys):
    """One matrix for source, target and output, through every command that reads a checkpoint."""
    out, avg = tmp_path / "joint", tmp_path / "joint-avg"
    argv = TINY_TRANSLATE[:-1] + ["2", "--joint-vocab", "--tie", "--keep-epochs", "2", "--out", str(out)]
    code, shown, err = _run(argv, capsys)
    assert code == 0 and err == "" and "joint_vocab=True" in shown
    assert _run(["eval", "--checkpoint", str(out), "--beam", "2"], capsys)[0] == 0
    code, shown, _ = _run(["translate", "--checkpoint", str(out), "seven"], capsys)
    assert code == 0 and len(shown.splitlines()) == 1
    assert _run(["average", str(out), "--out", str(avg)], capsys)[0] == 0
    assert _run(["eval", "--checkpoint", str(avg)], capsys)[0] == 0
    code, shown, err = _run(argv[:-2] + ["--epochs", "3", "--out", str(out), "--resume"], capsys)
    assert code == 0 and err == "" and "epoch 3 done" in shown


def test_translate_refuses_a_reversal_checkpoint(run_dir, capsys):
    code, out, err = _run(["translate", "--checkpoint", str(run_dir), "drei"], capsys)
    assert (code, out) == (2, "")
    assert err == f"error: this command needs a translate checkpoint; {run_dir} holds a reverse model (use predict)\n"


def test_generate_on_a_reversal_checkpoint_is_a_one_line_error(run_dir, capsys):
    code, out, err = _run(["generate", "--checkpoint", str(run_dir), "--prompt", "hi"], capsys)
    assert (code, out) == (2, "")
    assert err == "error: generate needs a language-model checkpoint; this one holds a reverse model\n"


# ---- resume and --out ----------------------------------------------------------------------------
def test_resume_without_out_names_the_default(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert _run(["train", "reverse", "--resume"], capsys) == (
        2, "", "error: --resume: --out runs/reverse (the default) holds no run to continue (no last/checkpoint.json)\n")
    assert not (tmp_path / "runs").exists()


def test_training_into_an_existing_run_needs_resume(run_dir, capsys):
    code, out, err = _run(TINY + ["--out", str(run_dir)], capsys)
    assert (code, out) == (2, "")
    assert err == f"error: --out {run_dir} already holds a run: pass --resume to continue it, or choose another --out\n"


def test_resume_continues_and_refuses_changed_model_or_data_flags(run_dir, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(run_dir, out)
    for extra, named in ((["--d-model", "32"], "--d-model"), (["--n-train", "200"], "--n-train"),
                         (["--heads", "4", "--dtype", "float64"], "--heads, --dtype")):
        code, shown, err = _run(["train", "reverse", "--resume", "--out", str(out), *extra], capsys)
        assert (code, shown) == (2, "")
        assert err == (f"error: --resume continues the run as it was; only training options can change "
                       f"(not {named})\n")
    # Training options may change: two more epochs on top of the first.
    code, shown, err = _run(["train", "reverse", "--resume", "--epochs", "3", "--out", str(out)], capsys)
    assert code == 0 and err == ""
    assert f"resumed from {out / 'last'} after epoch 1" in shown and "epochs=3" in shown
    assert len(json.loads((out / "history.json").read_text())["epochs"]) == 3
    # A finished run is refused, in one line, at --epochs and below; the run stays as it was.
    history = (out / "history.json").read_text()
    for epochs in ("3", "2"):
        code, shown, err = _run(["train", "reverse", "--resume", "--epochs", epochs, "--out", str(out)], capsys)
        assert (code, shown) == (2, "")
        assert err == (f"error: --resume: {out / 'last'} holds epoch 3, already at --epochs {epochs}: nothing to "
                       "train; raise --epochs to continue\n")
    assert (out / "history.json").read_text() == history


def test_the_tagger_reads_its_output_off_and_refuses_a_beam(tmp_path, capsys):
    out = tmp_path / "tag"
    code, shown, err = _run(TINY + ["--formulation", "tagger", "--max-len", "3", "--n-train", "100", "--out", str(out)],
                            capsys)
    assert code == 0 and f'predict --checkpoint {out} "3 5 4"' in shown  # a suggestion that fits --max-len 3
    code, shown, err = _run(["predict", "--checkpoint", str(out), "--beam", "2", "1 2"], capsys)
    assert code == 2 and "does not search its output; leave --beam out" in err
    # A checkpoint whose settings this version refuses (an earlier one saved --tie for a tagger) names its file.
    js = out / "best" / "checkpoint.json"
    doc = json.loads(js.read_text())
    doc["task"]["model"]["tie_embeddings"] = True
    js.write_text(json.dumps(doc))
    code, shown, err = _run(["predict", "--checkpoint", str(out / "best"), "1 2"], capsys)
    assert code == 2 and err.startswith(f"error: {js}: this version refuses its model settings (tie_embeddings")


def test_a_new_run_may_replace_what_a_run_killed_in_its_first_save_left(tmp_path, capsys):
    out = tmp_path / "run"
    (out / "best").mkdir(parents=True)
    (out / "last").mkdir()
    (out / ".DS_Store").write_text("")
    assert _run(TINY + ["--out", str(out)], capsys)[0] == 0
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("precious")
    code, shown, err = _run(TINY + ["--out", str(tmp_path / "mine")], capsys)
    assert code == 2 and "holds files but no run (notes.txt)" in err


def test_standard_input_reads_windows_line_ends_and_a_byte_order_mark(monkeypatch):
    from numpytransformer.cli import read_stdin

    monkeypatch.setattr(sys, "stdin", io.StringIO("\ufeffJULIET:\r\nO Romeo\r\n"))
    assert read_stdin() == "JULIET:\nO Romeo\n"


def test_tie_is_refused_by_the_models_without_a_target_embedding(tmp_path, capsys):
    code, out, err = _run(TINY + ["--formulation", "tagger", "--tie", "--out", str(tmp_path / "t")], capsys)
    assert code == 2 and len(err.splitlines()) == 1 and not (tmp_path / "t").exists()
    assert err.startswith("error: tie_embeddings (--tie) shares the target embedding with the output projection; "
                          "a TransformerTagger has no target embedding")
    cfg = TransformerConfig(src_vocab_size=10, n_classes=2, d_model=8, n_heads=2, n_layers=1, d_ff=16,
                            tie_embeddings=True)
    with pytest.raises(NumpyTransformerError, match="a TransformerClassifier has no target embedding"):
        TransformerClassifier(cfg)


def test_resume_refuses_a_checkpoint_without_its_training_settings(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(TINY + ["--out", str(out)]) == 0
    js = out / "last" / "checkpoint.json"
    doc = json.loads(js.read_text())
    del doc["train"]["cooldown"]  # a hand-edited file: no silent default for what the run used
    js.write_text(json.dumps(doc))
    code, shown, err = _run(TINY + ["--epochs", "2", "--out", str(out), "--resume"], capsys)
    assert code == 2 and err == f"error: {js}: field train does not fit (cooldown missing)\n"


def test_ctrl_c_says_how_to_resume(tmp_path, capsys, monkeypatch):
    """Ctrl-C during epoch 2: exit 130, the note names last/ at epoch 1, and --resume finishes."""
    from numpytransformer.training.trainer import Trainer

    real, fired = Trainer.train_step, []

    def interrupted(self, group):
        if self.epoch == 1 and not fired:  # the first update of epoch 2
            fired.append(True)
            raise KeyboardInterrupt
        return real(self, group)

    monkeypatch.setattr(Trainer, "train_step", interrupted)
    out = tmp_path / "run"
    code, shown, err = _run(TINY + ["--epochs", "2", "--out", str(out)], capsys)
    assert (code, err) == (130, "interrupted\n")
    assert f"interrupted: {out / 'last'} holds epoch 1; continue with --resume\n" in shown
    assert json.loads((out / "last" / "checkpoint.json").read_text())["epoch"] == 1
    assert fired
    assert _run(["train", "reverse", "--resume", "--out", str(out)], capsys)[0] == 0
    assert json.loads((out / "last" / "checkpoint.json").read_text())["epoch"] == 2


def test_zero_turns_clipping_and_the_time_budget_off(tmp_path, capsys, monkeypatch):
    """``--clip 0`` calls no clipping; ``--max-minutes 0`` trains every epoch however long they
    take (a clock that jumps an hour at every reading); the recipe's values stay as they were."""
    args = build_parser().parse_args(["train", "reverse", "--clip", "0", "--max-minutes", "0"])
    assert given_values(args, TrainConfig) == {"clip_norm": 0.0, "max_minutes": 0.0}
    recipe = ReversalTask.recipe(ReverseData())[1]

    clipped, clock = [], [0.0]
    real_clip = trainer_module.clip_grad_norm
    monkeypatch.setattr(trainer_module, "clip_grad_norm", lambda g, c: clipped.append(c) or real_clip(g, c))

    def hours():
        clock[0] += 3600.0
        return clock[0]

    monkeypatch.setattr(trainer_module.time, "perf_counter", hours)
    argv = TINY + ["--epochs", "3"]
    assert _run(argv + ["--clip", "0", "--max-minutes", "0", "--out", str(tmp_path / "off")], capsys)[0] == 0
    assert clipped == [] and len(json.loads((tmp_path / "off" / "history.json").read_text())["epochs"]) == 3
    code, shown, _ = _run(argv + ["--clip", "0.5", "--max-minutes", "1", "--out", str(tmp_path / "on")], capsys)
    assert code == 0 and "stopping: the time budget of 1.0 minutes is used up" in shown
    assert clipped and set(clipped) == {0.5}
    assert len(json.loads((tmp_path / "on" / "history.json").read_text())["epochs"]) == 1
    assert ReversalTask.recipe(ReverseData())[1] == recipe


# ---- help ------------------------------------------------------------------------------------------
SETTINGS = [TrainConfig, ModelSettings, *(task_class(name).Data for name in TASKS)]


@pytest.mark.parametrize("cls", SETTINGS, ids=lambda c: c.__name__)
def test_each_flag_is_written_where_its_field_is_declared(cls):
    """Every field of a settings dataclass declares its flag's whole text, which appears in the
    source of the class (a search for it lands there), once; no two fields share a flag."""
    source = inspect.getsource(cls)
    flags = [flag_of(cls, f.name) for f in dataclasses.fields(cls)]
    assert len(set(flags)) == len(flags)
    for f in dataclasses.fields(cls):
        flag = f.metadata["flag"]
        assert re.search(rf"\b{f.name}: .*= option\(\"{flag}\", ", source), f.name
        assert source.count(f'"{flag}"') == 1, flag


@pytest.mark.parametrize("task", list(TASKS))
def test_the_parser_has_exactly_the_declared_flags(task):
    """The flags of ``train TASK`` that set settings are those the dataclasses declare, each setting
    its own field: the fields and the flags cannot drift apart."""
    cls = task_class(task)
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    train = next(a for a in sub.choices["train"]._actions if isinstance(a, argparse._SubParsersAction))
    parser = train.choices[task]
    declared = {flag_of(c, f.name): f"{c.__name__}.{f.name}" for c in (cls.Data, ModelSettings, TrainConfig)
                for f in dataclasses.fields(c)}
    parsed = {a.option_strings[0]: a.dest for a in parser._actions if "." in a.dest}
    assert parsed == declared


@pytest.mark.parametrize("task, shown", [
    ("reverse", ["--heads N", "--d-model N", "--tie, --no-tie", "--formulation {seq2seq,tagger}",
                 "--n-symbols N", "--epochs N", "--accum N", "--clip X", "--resume", "--out OUT"]),
    ("translate", ["--heads N", "--d-model N", "--tie, --no-tie", "--cased, --no-cased", "--dataset {numbers,multi30k}",
                   "--tokenizer {word,bpe}", "--batch-tokens N"]),
    ("sentiment", ["--heads N", "--d-model N", "--tie, --no-tie", "--cased, --no-cased", "--pooling {mean,first}",
                   "--vocab-size N", "--max-tokens N", "--n-test N", "--data-dir DATA_DIR"]),
])
def test_help_lists_the_generated_flags_with_the_recipe_defaults(task, shown, capsys):
    code, out, err = _run(["train", task, "--help"], capsys)
    assert code == 0 and out.startswith("usage:")
    text = " ".join(out.split())  # argparse wraps lines
    assert [flag for flag in shown if flag not in text] == []
    cls = task_class(task)
    model, train_cfg = cls.recipe(cls.Data())  # the defaults shown are the task's recipe
    for line in (f"--d-model N model width (default: {model.d_model})",
                 f"--heads N attention heads (default: {model.n_heads})",
                 f"--lr-factor X multiplier of the Noam schedule (default: {train_cfg.lr_factor})",
                 f"--epochs N passes over the training data (default: {train_cfg.epochs})"):
        assert line in text


def test_recipes_fix_their_updates_not_their_minutes(capsys):
    """No recipe stops on the clock: its result would then depend on the machine's speed.
    Multi30K trains a fixed number of epochs, with a dropout, Noam factor and decay by direction."""
    from numpytransformer.tasks.base import TASKS

    variants = {"translate": [{}, {"dataset": "multi30k", "direction": "de-en"},
                              {"dataset": "multi30k", "direction": "en-de"}],
                "lm": [{}, {"tokenization": "char"}, {"corpus": "embedded"}],
                "reverse": [{}, {"formulation": "tagger"}]}
    for name in TASKS:
        cls = task_class(name)
        for kw in variants.get(name, [{}]):
            train_cfg = cls.recipe(cls.Data(**kw))[1]
            assert train_cfg.max_minutes == 0, (name, kw)
    for direction, epochs, dropout, factor, decay in (("de-en", 28, 0.2, 0.5, 0.0), ("en-de", 28, 0.2, 1.0, 0.2)):
        model_cfg, train_cfg = TranslationTask.recipe(task_class("translate").Data(dataset="multi30k", direction=direction))
        assert (train_cfg.epochs, train_cfg.keep_epochs, train_cfg.cooldown) == (epochs, 5, 0.3)
        assert (train_cfg.lr_factor, train_cfg.weight_decay) == (factor, decay)
        assert model_cfg.tie_embeddings and model_cfg.dropout == dropout
    code, out, _ = _run(["train", "translate", "--help"], capsys)
    text = " ".join(out.split())
    assert code == 0 and "(0: no limit) (default: 0" in text and "a slower machine takes longer" in text


def test_help_states_a_data_dependent_default_as_its_rule(capsys):
    """Not as the value it takes for the default data (the number words'), which would mislead a
    Multi30K user. The values are the recipe's own, so the help cannot drift from it."""
    from numpytransformer.tasks.translate import TranslationTask
    de_en, en_de = TranslationTask.MULTI30K["de-en"], TranslationTask.MULTI30K["en-de"]
    code, out, _ = _run(["train", "translate", "--help"], capsys)
    text = " ".join(out.split()).replace("- ", "-")  # argparse may wrap a line after a hyphen
    assert code == 0 and de_en["word_dropout"] == 0
    assert (f"(default: {en_de['word_dropout']} for multi30k en-de (chosen on the validation split), "
            "0 otherwise)") in text
    assert (f"(default: {de_en['length_penalty']} for multi30k de-en, {en_de['length_penalty']} for en-de (chosen on "
            "the validation split), 0.6 for numbers)") in text


def test_weight_decay_is_the_bpe_lm_recipes_and_multi30k_en_des_alone(capsys):
    """The BPE language model trains with AdamW's decay 0.3 (measured: 1.4978 against 1.5309 without),
    Multi30K en -> de with 0.2 (checked in the test above); the character and embedded recipes, the
    number words and the other tasks keep plain Adam."""
    code, out, _ = _run(["train", "lm", "--help"], capsys)
    assert code == 0 and "(AdamW; 0: plain Adam) (default: 0.3)" in " ".join(out.split())
    lm = task_class("lm")
    assert [lm.recipe(lm.Data(**kw))[1].weight_decay for kw in ({}, {"tokenization": "char"}, {"corpus": "embedded"})] \
        == [0.3, 0.0, 0.0]
    assert TranslationTask.recipe(task_class("translate").Data())[1].weight_decay == 0.0


def test_the_command_line_and_the_library_share_one_set_of_limits():
    """ModelSettings (the flags) takes each limit from config.py, so a model the command line
    accepts is one TransformerConfig builds, and one past a flag's limit is refused by both."""
    import dataclasses

    from numpytransformer.nn.config import DROPOUT_MAX, SEED_MAX, SIZE_LIMITS
    from numpytransformer.training.settings import ModelSettings
    from numpytransformer.tasks.sentiment import SentimentData

    limits = {**SIZE_LIMITS, "dropout": DROPOUT_MAX, "seed": SEED_MAX}
    flags = {f.name: f.metadata for f in dataclasses.fields(ModelSettings)}
    shared = set(ModelSettings().config_fields()) & set(limits)
    assert shared == {"d_model", "n_heads", "n_layers", "d_ff", "dropout", "seed"}
    for name in sorted(shared):
        assert (flags[name]["low"], flags[name]["high"]) == (0 if name in ("dropout", "seed") else 1, limits[name])
        at_limit = ModelSettings(**{"d_model": 256, name: limits[name]})
        TransformerConfig(src_vocab_size=8, **at_limit.config_fields())  # accepted by the library too
        past = limits[name] + (0.001 if name == "dropout" else 1)
        with pytest.raises(NumpyTransformerError, match=f"must be from .* to {limits[name]}, got {past}"):
            ModelSettings(**{name: past})
        with pytest.raises(NumpyTransformerError, match=f"TransformerConfig.{name}"):
            TransformerConfig(src_vocab_size=8, **{**ModelSettings().config_fields(), name: past})
    # a review of --max-tokens tokens, and the <bos> in front of it, fits the model's positions
    max_tokens = {f.name: f.metadata for f in dataclasses.fields(SentimentData)}["max_tokens"]["high"]
    assert max_tokens + 1 == SIZE_LIMITS["max_len"]


def test_help_of_every_command_runs(capsys):
    text = " ".join(_run(["train", "--help"], capsys)[1].split())
    assert "reverse sequence reversal" in text and "translate translation: Multi30K de<->en" in text
    for argv in (["--help"], ["predict", "--help"], ["eval", "--help"], ["attention", "--help"],
                 ["translate", "--help"], ["classify", "--help"], ["generate", "--help"], ["sweep", "--help"]):
        code, out, err = _run(argv, capsys)
        assert code == 0 and out.startswith("usage:") and err == "", argv
    r = subprocess.run([sys.executable, "-m", "numpytransformer", "train", "translate", "--help"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "--d-model N" in r.stdout and "(default: 256)" in r.stdout


# ---- bad arguments --------------------------------------------------------------------------------
# (argv, what the one error line says). "usage" marks argparse's own refusal (its usage and one
# "error:" line naming the argument); every other case is one "error: ..." line from the command.
BAD = [
    (["predict", "--checkpoint", "{run}", "3 99999999999999999999"], "unknown symbol '99999999999999999999'"),
    (["predict", "--checkpoint", "{run}", "3 7"], "unknown symbol '7': symbols are the integers 1..6"),
    (["predict", "--checkpoint", "{run}", "3 x"], "unknown symbol 'x'"),
    (["predict", "--checkpoint", "{run}", "--", "-1"], "unknown symbol '-1'"),
    (["predict", "--checkpoint", "{run}", "1 2 3 4 5 6 1"],
     "the sequence has 7 symbols; this model reverses at most 6"),
    (["predict", "--checkpoint", "{run}", "  "], "the input is empty"),
    (["predict", "--checkpoint", "{run}/missing", "1 2"], "checkpoint '{run}/missing' does not exist"),
    (["predict", "--checkpoint", "{run}/history.json", "1 2"], "holds no checkpoint"),
    (["predict", "--checkpoint", "{run}", "1 2", "--beam", "0"], "usage: argument --beam"),
    (["predict", "--checkpoint", "{run}", "1 2", "--beam", "1001"], "usage: argument --beam: expected a whole number from 1 to 1000"),
    (["train", "reverse", "--max-len", "3", "--n-symbols", "6", "--n-train", "300", "--n-val", "30", "--n-test", "30",
      "--out", "{new}"], "--n-train + --n-val + --n-test is 360 sequences; only 258 distinct ones of --n-symbols 6"),
    (["eval", "--checkpoint", "{run}", "--n", "10000000000"],
     "usage: argument --n: expected 0 (all) or a count up to 10000000, got 10000000000"),
    (["eval", "--checkpoint", "{run}", "--n", "-1"], "usage: argument --n: expected 0 (all) or a count up to 10000000"),
    (["eval", "--checkpoint", "{run}", "--n", "1_0"], "usage: argument --n: expected a whole number, got '1_0'"),
    (["eval", "--checkpoint", "{run}", "--n", "1e3"], "usage: argument --n"),
    (["eval", "--checkpoint", "{run}", "--seed", "1_0"], "usage: argument --seed"),
    (["eval", "--checkpoint", "{run}", "--seed", "-1"], "usage: argument --seed"),
    (["eval", "--checkpoint", "{run}", "--beam", "0"], "usage: argument --beam"),
    (["attention", "--checkpoint", "{run}", "1 2", "--out", "{run}/a.txt"], "--out {run}/a.txt: expected an image"),
    (["attention", "--checkpoint", "{run}", "1 9", "--out", "{run}/a.png"], "unknown symbol '9'"),
    (["generate", "--checkpoint", "{run}", "--tokens", "0"], "usage: argument --tokens"),
    (["train", "reverse", "--heads", "0", "--out", "{new}"], "--heads must be from 1 to 256, got 0"),
    (["train", "reverse", "--heads", "1_0", "--out", "{new}"], "usage: argument --heads: expected a whole number"),
    (["train", "reverse", "--d-model", "0", "--out", "{new}"], "--d-model must be from 1 to 4096, got 0"),
    (["train", "reverse", "--d-model", "30", "--heads", "4", "--out", "{new}"],
     "--d-model 30 must be divisible by --heads 4"),
    (["train", "reverse", "--dropout", "nan", "--out", "{new}"], "--dropout must be a finite number, got nan"),
    (["train", "reverse", "--dropout", "1.5", "--out", "{new}"], "--dropout must be from 0.0 to 0.99, got 1.5"),
    (["train", "reverse", "--dtype", "float16", "--out", "{new}"], "usage: argument --dtype: invalid choice"),
    (["train", "reverse", "--norm", "middle", "--out", "{new}"], "usage: argument --norm: invalid choice"),
    (["train", "reverse", "--epochs", "1_0", "--out", "{new}"], "usage: argument --epochs"),
    (["train", "reverse", "--epochs", "0", "--out", "{new}"], "--epochs must be from 1 to 100000, got 0"),
    (["train", "reverse", "--seed", "-1", "--out", "{new}"], "--seed must be from 0 to 4294967295, got -1"),
    (["train", "reverse", "--accum", "0", "--out", "{new}"], "--accum must be from 1 to 1024, got 0"),
    (["train", "reverse", "--clip", "-1", "--out", "{new}"], "--clip must be at least 0.0, got -1.0"),
    (["train", "reverse", "--clip", "nan", "--out", "{new}"], "--clip must be a finite number, got nan"),
    (["train", "reverse", "--lr-factor", "inf", "--out", "{new}"], "--lr-factor must be a finite number, got inf"),
    (["train", "reverse", "--max-minutes", "-1", "--out", "{new}"], "--max-minutes must be at least 0.0, got -1.0"),
    (["train", "reverse", "--n-symbols", "0", "--out", "{new}"], "--n-symbols must be from 1 to 10000, got 0"),
    (["train", "reverse", "--min-len", "5", "--max-len", "3", "--out", "{new}"],
     "--max-len 3 is less than --min-len 5"),
    (["train", "reverse", "--out", "{run}/history.json"], "is a file; expected a run directory"),
    (["train", "reverse", "--out", "{run}/best"], "--out {run}/best holds files but no run (checkpoint.json, weights-"),
    (["sweep", "--out", "{run}/history.json"], "--out {run}/history.json is a file; expected a folder"),
    (["train", "reverse", "--resume", "--out", "{new}"], "--resume: --out {new} holds no run to continue"),
    (["train", "translate", "--bpe-merges", "-1", "--out", "{new}"], "--bpe-merges must be from 0 to 1000000"),
    (["train", "translate", "--max-number", "99", "--n-train", "200", "--out", "{new}"],
     "--n-train + --n-val + --n-test is 1700 numbers; 0..--max-number 99 holds only 100"),
    (["train", "translate", "--dataset", "wmt", "--out", "{new}"], "usage: argument --dataset: invalid choice"),
    (["train", "translate", "--dataset", "multi30k", "--n-train", "50", "--out", "{new}"],
     "--n-train: for the number words only; Multi30K's splits are fixed"),
    (["train", "sentiment", "--vocab-size", "3", "--out", "{new}"], "--vocab-size must be from 5 to 10000000, got 3"),
    (["train", "sentiment", "--val-fraction", "1", "--out", "{new}"], "--val-fraction must be from 0.001 to 0.999"),
    (["train", "nonsense"], "usage: argument TASK: invalid choice"),
]


@pytest.mark.parametrize("argv, message", BAD, ids=[" ".join(a[:2] + a[-2:-1]) + f"-{i}" for i, (a, _) in
                                                     enumerate(BAD)])
def test_bad_arguments_give_one_line_errors(run_dir, tmp_path, capsys, argv, message):
    new = tmp_path / "new"
    fill = {"{run}": str(run_dir), "{new}": str(new)}
    for k, v in fill.items():
        argv = [a.replace(k, v) for a in argv]
        message = message.replace(k, v)
    code, out, err = _run(argv, capsys)
    assert code == 2 and "Traceback" not in err and out == ""
    if message.startswith("usage: "):  # argparse: its usage, then one error line naming the argument
        assert err.startswith("usage: ") and re.search(r": error: " + re.escape(message[7:]), err.splitlines()[-1])
    else:
        assert err.startswith("error: ") and len(err.splitlines()) == 1 and message in err
    assert not new.exists()  # a command that fails to start creates nothing


def test_errors_reach_the_terminal_without_a_traceback(run_dir):
    """The same refusals from a real process: exit 2 and one line."""
    for argv, line in ((["predict", "--checkpoint", str(run_dir), "3 99999999999999999999"],
                        "error: unknown symbol '99999999999999999999': symbols are the integers 1..6"),
                       (["train", "reverse", "--heads", "0", "--out", str(run_dir / "new")],
                        "error: --heads must be from 1 to 256, got 0")):
        r = subprocess.run([sys.executable, "-m", "numpytransformer", *argv], capture_output=True, text=True,
                           timeout=120)
        assert (r.returncode, r.stdout, r.stderr) == (2, "", line + "\n")


def test_average_of_the_kept_epochs_is_their_mean(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(TINY + ["--epochs", "3", "--keep-epochs", "2", "--out", str(out)]) == 0
    assert sorted(p.name for p in (out / "epochs").iterdir()) == ["002", "003"]  # the oldest is gone
    code, shown, err = _run(["average", str(out / "epochs"), "--out", str(tmp_path / "avg")], capsys)
    assert code == 0 and err == "" and "averaged 2 checkpoints (002, 003)" in shown
    # The run directory stands for its epochs/ (not its average/, best/ and last/).
    code, shown, err = _run(["average", str(out), "--out", str(tmp_path / "avg-run")], capsys)
    assert code == 0 and err == "" and "averaged 2 checkpoints (002, 003)" in shown
    models = []
    for ck in (out / "epochs" / "002", out / "epochs" / "003", tmp_path / "avg"):
        _, model, _ = load_for_inference(str(ck))
        models.append(model.parameters())
    for k, p in models[2].items():
        np.testing.assert_allclose(p, (models[0][k].astype(np.float64) + models[1][k]) / 2, rtol=1e-6, atol=1e-7)
    code, shown, err = _run(["eval", "--checkpoint", str(tmp_path / "avg"), "--n", "20"], capsys)
    assert code == 0 and "exact_match" in shown
    # A second average into the same directory is refused: nothing saved is overwritten.
    code, shown, err = _run(["average", str(out / "epochs"), "--out", str(tmp_path / "avg")], capsys)
    assert code == 2 and "already exists" in err
    # Checkpoints of another run (the same model, other data) are refused, before anything is written.
    other = tmp_path / "other"
    assert main(TINY[:TINY.index("--n-train") + 1] + ["299"] + TINY[TINY.index("--n-train") + 2:]
                + ["--out", str(other)]) == 0
    code, shown, err = _run(["average", str(out / "last"), str(other / "last"), "--out", str(tmp_path / "mix")],
                            capsys)
    assert code == 2 and "average checkpoints of one run" in err and not (tmp_path / "mix").exists()


def test_training_keeps_the_average_only_when_it_validates_better(tmp_path, capsys, monkeypatch):
    """train --keep-epochs: average/ is saved when the mean of the kept epochs validates at
    least as well as best/, and is then what a run directory resolves to; else it is not kept."""
    from numpytransformer.cli import resolve_checkpoint

    real = ReversalTask.validate
    for verdict, score in (("saved as average/", 2.0), ("not kept", -1.0)):
        calls = []

        def validate(self, model):
            calls.append(1)
            metrics = real(self, model)
            # the epochs score 0.5; the average (the validation after the last epoch's) scores `score`
            return {**metrics, "exact_match": 0.5 if len(calls) <= 3 else score}

        monkeypatch.setattr(ReversalTask, "validate", validate)
        out = tmp_path / verdict.split()[0]
        code, shown, err = _run(TINY + ["--epochs", "3", "--keep-epochs", "3", "--out", str(out)], capsys)
        assert code == 0 and err == "" and verdict in shown, shown
        assert (out / "average").is_dir() == (score > 0.5)
        assert resolve_checkpoint(str(out)) == out / ("average" if score > 0.5 else "best")
        assert f"final (test, {'average' if score > 0.5 else 'best'} checkpoint)" in shown
