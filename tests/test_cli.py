"""The command line end to end on a tiny run: train, predict (argument and stdin), eval,
attention, translate, and one-line errors instead of tracebacks."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from numpytransformer.cli import main


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "rev"
    code = main(["train", "reverse", "--n-symbols", "6", "--max-len", "6", "--n-train", "400", "--n-val", "40",
                 "--n-test", "40", "--d-model", "16", "--d-ff", "32", "--layers", "1", "--epochs", "1",
                 "--out", str(out)])
    assert code == 0
    return out


def test_train_writes_a_run(run_dir, capsys):
    assert (run_dir / "best" / "checkpoint.json").is_file()
    assert (run_dir / "last" / "checkpoint.json").is_file()
    assert (run_dir / "history.json").is_file()


def test_predict_argument_and_stdin_keep_order(run_dir, capsys, monkeypatch):
    assert main(["predict", "--checkpoint", str(run_dir), "3 5 4 2 1"]) == 0
    one = capsys.readouterr().out.strip().splitlines()
    assert len(one) == 1
    import io
    monkeypatch.setattr(sys, "stdin", io.StringIO("1 2 3\n4 5\n6\n"))
    assert main(["predict", "--checkpoint", str(run_dir), "--beam", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3


@pytest.mark.parametrize("argv, message", [
    (["predict", "--checkpoint", "{run}", "3 x"], "unknown token 'x'"),
    (["predict", "--checkpoint", "{run}", "3 99"], "unknown symbol 99"),
    (["predict", "--checkpoint", "{run}", "1 2 3 4 5 6 1"], "longer than max_len=6"),
    (["predict", "--checkpoint", "{run}/missing", "1 2"], "does not exist"),
    (["eval", "--checkpoint", "{run}", "--n", "0"], "--n must be at least 1, got 0"),
    (["eval", "--checkpoint", "{run}", "--seed", "-1"], "--seed must be 0 or more, got -1"),
    (["eval", "--checkpoint", "{run}", "--beam", "0"], "--beam must be at least 1"),
    (["predict", "--checkpoint", "{run}", "1 2", "--beam", "0"], "--beam must be at least 1 (1: greedy), got 0"),
    (["predict", "--checkpoint", "{run}", "1 2", "--beam", "-3"], "--beam must be at least 1 (1: greedy), got -3"),
    (["attention", "--checkpoint", "{run}", "1 2", "--out", "{run}/a.txt"], "--out {run}/a.txt: expected an image"),
    # PGF is a matplotlib format, but writing it needs LaTeX: refused up front, not a traceback.
    (["attention", "--checkpoint", "{run}", "1 2", "--out", "{run}/a.pgf"], "--out {run}/a.pgf: expected an image"),
    # Training options name the flags the user typed, not the settings' field names.
    (["train", "reverse", "--accum", "0", "--out", "{run}/new"], "--accum must be at least 1, got 0"),
    (["train", "reverse", "--clip", "-1", "--out", "{run}/new"], "--clip must be positive (0: off), got -1.0"),
    (["train", "reverse", "--clip", "nan", "--out", "{run}/new"], "--clip must be positive (0: off), got nan"),
    (["train", "reverse", "--max-minutes", "-1", "--out", "{run}/new"],
     "--max-minutes must be positive (0: no limit), got -1.0"),
    (["train", "reverse", "--out", "{run}/history.json"], "is a file; expected a run directory"),
    (["train", "reverse", "--resume", "--out", "{run}/new"], "--resume: --out {run}/new holds no run"),
])
def test_bad_arguments_give_one_line_errors(run_dir, capsys, argv, message):
    argv = [a.replace("{run}", str(run_dir)) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message.replace("{run}", str(run_dir)) in err
    assert not (run_dir / "new").exists()  # nothing is created by a command that fails to start
    assert len(err.strip().splitlines()) == 1


def test_zero_turns_clipping_and_the_time_budget_off():
    from numpytransformer.cli import _train_config, build_parser
    from numpytransformer.tasks.sentiment import SENTIMENT_TRAIN

    args = build_parser().parse_args(["train", "sentiment", "--clip", "0", "--max-minutes", "0"])
    cfg = _train_config(args, SENTIMENT_TRAIN)
    assert cfg.clip_norm is None and cfg.max_minutes is None
    assert SENTIMENT_TRAIN.clip_norm == 1.0 and SENTIMENT_TRAIN.max_minutes == 16  # the recipe is unchanged


def test_resume_without_out_names_the_default(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "reverse", "--resume"]) == 2
    assert capsys.readouterr().err == ("error: --resume: --out runs/reverse (the default) holds no run to continue "
                                       "(no last/checkpoint.json)\n")
    assert not (tmp_path / "runs").exists()


def test_training_into_an_existing_run_needs_resume(run_dir, capsys):
    assert main(["train", "reverse", "--epochs", "1", "--out", str(run_dir)]) == 2
    assert "--resume" in capsys.readouterr().err


def test_a_closed_pipe_is_not_an_error(run_dir, tmp_path):
    """``predict ... | head -n 1``: the reader leaves early; exit 0 with nothing on stderr."""
    lines = tmp_path / "in.txt"
    lines.write_text("1 2 3\n" * 20000)
    with open(lines) as stdin:
        p = subprocess.Popen([sys.executable, "-m", "numpytransformer", "predict", "--checkpoint", str(run_dir)],
                             stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        first = p.stdout.readline()
        p.stdout.close()  # as head does after its line
        err = p.stderr.read()
        assert p.wait(timeout=120) == 0
    assert len(first.split()) >= 1 and err == b""


def test_a_closed_pipe_stops_training_with_an_error_and_a_checkpoint(tmp_path):
    """``train ... | head``: the run cannot report, so it stops (exit 141, 128 + SIGPIPE), saves
    last/ first, and --resume completes it."""
    out = tmp_path / "run"
    argv = ["train", "reverse", "--n-symbols", "6", "--max-len", "6", "--n-train", "400", "--n-val", "40",
            "--n-test", "40", "--d-model", "16", "--d-ff", "32", "--layers", "1", "--epochs", "3",
            "--log-every", "1", "--out", str(out)]
    p = subprocess.Popen([sys.executable, "-m", "numpytransformer", *argv], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    while True:  # read up to the first progress line
        line = p.stdout.readline()
        if line == b"":  # the run ended without one: fail with what it said, rather than hang
            p.wait(timeout=60)
            pytest.fail(f"no progress line; exit {p.returncode}, stderr: {p.stderr.read().decode()}")
        if b" update " in line:
            break
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=300) == 141
    assert err == f"error: training stopped because its output was closed; continue with --resume --out {out}\n"
    meta = json.loads((out / "last" / "checkpoint.json").read_text())
    assert meta["epoch"] < 3 and meta["step"] >= 1
    assert main(argv + ["--resume"]) == 0
    assert len(json.loads((out / "history.json").read_text())["epochs"]) == 3


TINY_RUN = ["train", "reverse", "--n-symbols", "6", "--max-len", "6", "--n-train", "200", "--n-val", "20",
            "--n-test", "20", "--d-model", "16", "--d-ff", "32", "--layers", "1", "--epochs", "2"]


def _pipe_closes_at(monkeypatch, prefix, stop=BrokenPipeError(32, "Broken pipe"), then_closed=False):
    """Make every print of the trainer and the command line raise BrokenPipeError from the
    first line that starts with ``prefix`` on, as when the reader of ``train ... |`` leaves
    (or raise ``stop`` once there, e.g. a KeyboardInterrupt: Ctrl-C at that line, and with
    ``then_closed`` a closed pipe after it, as Ctrl-C stops ``| tee`` too)."""
    import builtins

    import numpytransformer.cli as cli_module
    import numpytransformer.trainer as trainer_module

    closed = []

    def printing(*args, **kwargs):
        if kwargs.get("file", sys.stdout) is not sys.stdout:  # stderr stays open
            return builtins.print(*args, **kwargs)
        if closed and (isinstance(stop, BrokenPipeError) or then_closed):
            raise BrokenPipeError(32, "Broken pipe")
        if args and str(args[0]).startswith(prefix):
            closed.append(True)
            raise stop
        builtins.print(*args, **kwargs)

    for module in (cli_module, trainer_module):
        monkeypatch.setattr(module, "print", printing, raising=False)


@pytest.mark.parametrize("prefix", ["epoch 2 done", "throughput:", "trained ", "final (test split"])
def test_a_closed_pipe_after_training_finished_is_not_an_error(tmp_path, capsys, monkeypatch, prefix):
    """The reader leaves at the last epoch's line or later: every checkpoint is saved and there
    is nothing to resume, so the run exits 0 without the "stopped ... --resume" message."""
    _pipe_closes_at(monkeypatch, prefix)
    out = tmp_path / "run"
    assert main(TINY_RUN + ["--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and prefix not in captured.out and "epoch 1 done" in captured.out
    assert len(json.loads((out / "history.json").read_text())["epochs"]) == 2
    assert json.loads((out / "last" / "checkpoint.json").read_text())["epoch"] == 2
    assert (out / "best" / "checkpoint.json").is_file() and (out / "curves.png").is_file()


def test_a_closed_pipe_after_a_time_budget_stop_says_resume(tmp_path, capsys, monkeypatch):
    """Stopped by --max-minutes, the run has epochs left: a pipe closed at the note, or at the
    report after it, is a run cut short (--resume continues it), and the curves are written."""
    _pipe_closes_at(monkeypatch, "stopping: the time budget")
    out = tmp_path / "run"
    assert main(TINY_RUN + ["--epochs", "3", "--max-minutes", "0.00001", "--out", str(out)]) == 141
    assert capsys.readouterr().err.endswith(f"continue with --resume --out {out}\n")
    assert json.loads((out / "last" / "checkpoint.json").read_text())["epoch"] == 1
    assert (out / "curves.png").is_file()


def test_resuming_a_finished_run_counts_only_its_own_updates(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    assert main(TINY_RUN + ["--out", str(out)]) == 0
    per_epoch = json.loads((out / "last" / "checkpoint.json").read_text())["step"] // 2
    capsys.readouterr()
    assert main(TINY_RUN + ["--epochs", "3", "--resume", "--out", str(out)]) == 0
    assert f"trained {per_epoch} updates in " in capsys.readouterr().out
    assert main(TINY_RUN + ["--epochs", "3", "--resume", "--out", str(out)]) == 0
    assert "trained 0 updates in " in capsys.readouterr().out
    # Nothing is left to do, so a reader that leaves during set-up costs nothing either.
    _pipe_closes_at(monkeypatch, "training settings")
    assert main(TINY_RUN + ["--epochs", "3", "--resume", "--out", str(out)]) == 0
    assert capsys.readouterr().err == ""


def test_ctrl_c_at_the_last_epochs_line_leaves_a_complete_run(tmp_path, capsys, monkeypatch):
    _pipe_closes_at(monkeypatch, "epoch 2 done", stop=KeyboardInterrupt())
    out = tmp_path / "run"
    assert main(TINY_RUN + ["--out", str(out)]) == 130
    captured = capsys.readouterr()
    assert f"interrupted after the last epoch: {out} is complete" in captured.out and "--resume" not in captured.out
    assert (out / "curves.png").is_file()


@pytest.mark.parametrize("prefix", ["epoch 1 done", "epoch 2 done"])
def test_ctrl_c_in_train_piped_to_tee_is_an_interrupt(tmp_path, capsys, monkeypatch, prefix):
    """Ctrl-C reaches the whole pipeline, so the trainer's note finds the pipe closed: still 130."""
    _pipe_closes_at(monkeypatch, prefix, stop=KeyboardInterrupt(), then_closed=True)
    out = tmp_path / "run"
    assert main(TINY_RUN + ["--out", str(out)]) == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_a_damaged_run_is_refused_even_with_the_output_closed(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    assert main(TINY_RUN + ["--out", str(out)]) == 0
    weights = next((out / "last").glob("weights-*.npz"))
    weights.write_bytes(weights.read_bytes()[:-10])
    capsys.readouterr()
    _pipe_closes_at(monkeypatch, "")  # the very first line
    assert main(TINY_RUN + ["--epochs", "3", "--resume", "--out", str(out)]) == 2
    assert "is damaged" in capsys.readouterr().err


@pytest.mark.parametrize("prefix, code", [("[2/2]", 141), ("# Reversal ablation", 0)])
def test_a_sweep_is_cut_short_by_a_closed_pipe_unless_it_is_done(tmp_path, capsys, monkeypatch, prefix, code):
    """Closed before the last run: 141; closed at the report, with every run and sweep.md
    written: 0."""
    _pipe_closes_at(monkeypatch, prefix)
    out = tmp_path / "sw"
    assert main(["sweep", "--layers", "1", "2", "--epochs", "1", "--n-train", "50", "--out", str(out)]) == code
    captured = capsys.readouterr()
    assert prefix not in captured.out and "[1/2]" in captured.out  # the pipe closed where asked
    assert (out / "sweep.md").is_file() == (code == 0)
    assert ("the sweep stopped" in captured.err) == (code == 141)


def test_a_closed_pipe_stops_a_sweep_with_an_error(tmp_path):
    """``sweep ... | head -n 1``: the sweep has not run; exit 141, and rerunning continues it."""
    p = subprocess.Popen([sys.executable, "-m", "numpytransformer", "sweep", "--layers", "1", "2", "--epochs", "1",
                          "--n-train", "50", "--out", str(tmp_path / "sw")], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env={k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"})
    first = p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=300) == 141, err
    assert b"runs of 1 epochs" in first
    assert err == ("error: the sweep stopped because its output was closed; run the same command again to "
                   "continue (finished runs are kept)\n")


TINY_TRANSLATE = ["train", "translate", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--layers", "1",
                  "--epochs", "1"]


@pytest.mark.parametrize("argv, prefix, saved", [
    (TINY_RUN, "training settings", False), (TINY_RUN, "epoch 1 done", True),
    (TINY_TRANSLATE, "building the numbers vocabularies", False),  # printed before training is set up
])
def test_a_closed_pipe_before_training_finished_is_an_error(tmp_path, capsys, monkeypatch, argv, prefix, saved):
    _pipe_closes_at(monkeypatch, prefix)
    out = tmp_path / "run"
    assert main(argv + ["--out", str(out)]) == 141
    then = f"continue with --resume --out {out}" if saved else "nothing was saved"
    assert capsys.readouterr().err == f"error: training stopped because its output was closed; {then}\n"
    assert (out / "last" / "checkpoint.json").is_file() == saved


def test_attention_without_matplotlib_says_what_to_install(run_dir, tmp_path, capsys, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    assert main(["attention", "--checkpoint", str(run_dir), "1 2", "--out", str(tmp_path / "a.png")]) == 2
    assert capsys.readouterr().err == "error: plots need matplotlib: pip install matplotlib\n"


def test_a_plot_that_cannot_be_written_names_the_file(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from numpytransformer.plotting import plot_attention

    def needs_a_program(self, *args, **kwargs):
        raise RuntimeError("this format needs a program that is not installed")

    monkeypatch.setattr(Figure, "savefig", needs_a_program)
    path = tmp_path / "a.eps"
    maps, labels = {"enc": np.full((1, 2, 2), 0.5)}, {"enc": (["a", "b"], ["a", "b"])}
    with pytest.raises(ValueError, match=f"could not write {re.escape(str(path))}: this format needs a program"):
        plot_attention(maps, labels, path)


def test_eval_and_attention(run_dir, tmp_path, capsys):
    assert main(["eval", "--checkpoint", str(run_dir), "--n", "50"]) == 0
    assert "exact_match" in capsys.readouterr().out
    png = tmp_path / "attn.png"
    assert main(["attention", "--checkpoint", str(run_dir), "3 5 4 2 1", "--out", str(png)]) == 0
    assert png.stat().st_size > 1000


def test_translate_numbers_end_to_end(tmp_path, capsys, monkeypatch):
    out = tmp_path / "mt"
    assert main(["train", "translate", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--layers", "1",
                 "--epochs", "1", "--out", str(out)]) == 0
    capsys.readouterr()
    import io
    monkeypatch.setattr(sys, "stdin", io.StringIO("seven\n\ntwenty-one\n"))
    assert main(["translate", "--checkpoint", str(out)]) == 0
    lines = capsys.readouterr().out.split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[3] == ""  # an empty line gives an empty line


def test_help_is_clear():
    for argv in (["--help"], ["train", "reverse", "--help"], ["train", "translate", "--help"],
                 ["predict", "--help"], ["eval", "--help"], ["attention", "--help"], ["translate", "--help"]):
        r = subprocess.run([sys.executable, "-m", "numpytransformer", *argv], capture_output=True, text=True)
        assert r.returncode == 0 and "usage:" in r.stdout
