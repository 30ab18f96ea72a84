"""The trainer learns, resumes exactly at epoch boundaries, stops on divergence, and its
checkpoints are safe (atomic, checked, pickle-free)."""
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import numpytransformer
import numpytransformer.training.trainer as trainer_module
from numpytransformer.training.checkpoint import (
    CheckpointError,
    load_checkpoint,
    read_checkpoint_meta,
    save_checkpoint,
)
from numpytransformer.errors import NumpyTransformerError
from numpytransformer.training.settings import ModelSettings
from numpytransformer.tasks.reverse import ReversalTask, ReverseData
from numpytransformer.training.trainer import TrainConfig, Trainer, without_timing

DATA_FIELDS = {f.name for f in dataclasses.fields(ReverseData)}
REAL_PLOT = trainer_module.plot_history


@pytest.fixture(autouse=True)
def _no_curves(monkeypatch):
    """Drawing curves.png costs 0.4 s a run: only the test that looks at it draws it."""
    monkeypatch.setattr(trainer_module, "plot_history", lambda *a, **kw: None)


def _task(**kw):
    """A tiny reversal task: keywords go to ReverseData or ModelSettings by name."""
    s = dict(n_symbols=8, min_len=1, max_len=6, n_train=300, n_val=40, n_test=40, batch_size=64,
             d_model=16, n_heads=2, n_layers=1, d_ff=32, dropout=0.1, seed=0)
    s.update(kw)
    data = ReverseData(**{k: v for k, v in s.items() if k in DATA_FIELDS})
    return ReversalTask(data, ModelSettings(**{k: v for k, v in s.items() if k not in DATA_FIELDS}))


def _cfg(**kw):
    c = dict(epochs=2, warmup=20, lr_factor=1.0, label_smoothing=0.1, log_every=10 ** 6)
    c.update(kw)
    return TrainConfig(**c)


def _quiet(msg):
    pass


def _losses(trainer):
    return [s["loss"] for s in trainer.history["steps"]]


def _epochs(trainer):
    return [without_timing(e) for e in trainer.history["epochs"]]


def _same_weights(a, b):
    for k, v in a.parameters().items():
        np.testing.assert_array_equal(b.parameters()[k], v)


# ---- learning ------------------------------------------------------------------------------
def test_reversal_learns_in_seconds(tmp_path, monkeypatch):
    """The loss falls well below its start and the token accuracy beats chance (1/6) clearly
    (measured: a loss ratio of 0.21 and an accuracy of 0.65, in 2 s)."""
    monkeypatch.setattr(trainer_module, "plot_history", REAL_PLOT)
    task = _task(n_train=1000, n_symbols=6, max_len=5, dropout=0.0)
    trainer = Trainer(task.build_model(), task, _cfg(epochs=6, warmup=40, lr_factor=2.0, label_smoothing=0.0),
                      tmp_path, log=_quiet)
    metrics = trainer.fit()
    losses = _losses(trainer)
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:3])
    assert metrics["token_accuracy"] > 0.45
    assert (tmp_path / "curves.png").stat().st_size > 0
    hist = json.loads((tmp_path / "history.json").read_text())
    assert len(hist["epochs"]) == 6 and len(hist["steps"]) == len(losses) == trainer.optimizer.t


def test_tagger_learns(tmp_path):
    """Encoder only, a prediction per position (measured: accuracy 0.64, chance 1/6)."""
    task = _task(formulation="tagger", n_train=1000, n_symbols=6, max_len=5, dropout=0.0)
    metrics = Trainer(task.build_model(), task, _cfg(epochs=6, warmup=40, lr_factor=2.0, label_smoothing=0.0),
                      tmp_path, log=_quiet).fit()
    assert metrics["token_accuracy"] > 0.45


def test_training_is_deterministic(tmp_path):
    runs = []
    for name in ("a", "b"):
        task = _task()
        trainer = Trainer(task.build_model(), task, _cfg(epochs=1), tmp_path / name, log=_quiet)
        trainer.fit()
        runs.append((_losses(trainer), trainer.model))
    assert runs[0][0] == runs[1][0] and len(runs[0][0]) > 5
    _same_weights(runs[0][1], runs[1][1])


def test_translation_loss_falls_on_a_few_hundred_pairs(tmp_path):
    """The embedded number-words pair: a few hundred pairs, seconds of training."""
    from numpytransformer.tasks.translate import TranslateData, TranslationTask

    task = TranslationTask(TranslateData(dataset="numbers", n_train=400, n_val=40, n_test=40, max_number=999,
                                         batch_tokens=400, min_freq=1),
                           ModelSettings(d_model=32, n_heads=4, n_layers=1, d_ff=64, dropout=0.0))
    trainer = Trainer(task.build_model(), task, _cfg(epochs=4, warmup=40, label_smoothing=0.0), tmp_path, log=_quiet)
    metrics = trainer.fit()
    losses = _losses(trainer)
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:3])
    assert {"val_loss", "bleu", "sacrebleu"} <= set(metrics)


# ---- exact resume at epoch boundaries ------------------------------------------------------------
def _interrupt_at_log(prefix):
    """A log callback that raises KeyboardInterrupt (once) at the first line starting with
    ``prefix``, as Ctrl-C arriving while that line is written; every line is kept."""
    lines, fired = [], []

    def log(msg):
        lines.append(msg)
        if msg.startswith(prefix) and not fired:
            fired.append(True)
            raise KeyboardInterrupt

    return log, lines


def _three_epochs(**kw):
    """The settings of the resume tests: 3 epochs, weight decay on (a resume must reproduce it too)."""
    return _cfg(epochs=3, weight_decay=0.1, **kw)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """``straight(accum, cooldown)``: a finished uninterrupted 3-epoch run (trained once for each)."""
    runs = {}

    def get(accum, cooldown=0.0):
        if (accum, cooldown) not in runs:
            task = _task()
            runs[accum, cooldown] = Trainer(task.build_model(), task,
                                            _three_epochs(accum_steps=accum, cooldown=cooldown),
                                            tmp_path_factory.mktemp("straight"), log=_quiet)
            runs[accum, cooldown].fit()
        return runs[accum, cooldown]

    return get


@pytest.mark.parametrize("accum, where, cooldown", [(1, "log", 0.0), (2, "batches", 0.0), (2, "log", 0.0),
                                                    (1, "log", 0.5)])
def test_resume_reproduces_the_uninterrupted_run(tmp_path, monkeypatch, straight, accum, where, cooldown):
    """Three epochs straight; then a run interrupted after epoch 1 (Ctrl-C in the epoch's log line,
    or as epoch 2 fetches its batches), continued by a new task, model and trainer from last/:
    the same losses, epoch records and weights, bit for bit. Dropout and weight decay are on, so the
    saved generator state matters; with accum 2 the 5 batches of an epoch make 3 updates, the last of one."""
    straight = straight(accum, cooldown)

    task = _task()
    log, lines = _interrupt_at_log("epoch 1 done")
    if where == "batches":
        real = task.train_batches

        def batches(epoch):
            if epoch == 1:
                raise KeyboardInterrupt
            return real(epoch)

        monkeypatch.setattr(task, "train_batches", batches)
        log = lines.append
    first = Trainer(task.build_model(), task, _three_epochs(accum_steps=accum, cooldown=cooldown), tmp_path / "run",
                    log=log)
    with pytest.raises(KeyboardInterrupt):
        first.fit()
    assert lines[-1] == f"interrupted: {tmp_path / 'run' / 'last'} holds epoch 1; continue with --resume"
    assert read_checkpoint_meta(tmp_path / "run" / "last", for_resume=True)["epoch"] == 1

    task2 = _task()  # a new process builds everything again
    second = Trainer(task2.build_model(), task2, _three_epochs(accum_steps=accum, cooldown=cooldown), tmp_path / "run",
                     log=_quiet)
    second.resume()
    assert second.epoch == 1 and second.optimizer.t == straight.optimizer.t // 3
    second.fit()
    assert len(_losses(second)) == straight.optimizer.t and _losses(second) == _losses(straight)
    assert _epochs(second) == _epochs(straight)
    _same_weights(straight.model, second.model)
    hist = json.loads((tmp_path / "run" / "history.json").read_text())
    assert [without_timing(e) for e in hist["epochs"]] == _epochs(straight)


def test_the_weight_decay_setting_reaches_adam(tmp_path):
    task = _task()
    assert Trainer(task.build_model(), task, _cfg(weight_decay=0.25), tmp_path, log=_quiet).optimizer.weight_decay == 0.25


def test_a_resume_with_another_accum_plans_its_cooldown_anew(tmp_path):
    """Two epochs of 6 updates, resumed to four with --accum 3 (2 updates an epoch) and a
    cool-down over the last 30%: the rate falls over the updates actually left. (Planned for
    4 epochs of 2 updates, the run would have ended its cool-down before it resumed: rate 0.)"""
    task = _task()
    Trainer(task.build_model(), task, _cfg(epochs=2, cooldown=0.3), tmp_path, log=_quiet).fit()
    task2 = _task()
    resumed = Trainer(task2.build_model(), task2, _cfg(epochs=4, cooldown=0.3, accum_steps=3), tmp_path, log=_quiet)
    resumed.resume()
    done = resumed.optimizer.t
    resumed.fit()
    rates = [s["lr"] for s in resumed.history["steps"][done:]]
    assert len(task.train_batches(0)) == 6 and done == 12
    assert len(rates) == 4 and all(r > 0 for r in rates) and rates[-1] < rates[0]


def test_average_is_dropped_when_a_resume_trains_on_and_foreign_folders_are_left(tmp_path):
    """An average/ of earlier epochs is removed (and said so) once a resume trains more epochs, so
    that an interrupted resume leaves best/, not a stale average, in use; a resume that trains
    nothing keeps it. Only epochs/NNN folders count as kept epochs."""
    task = _task()
    Trainer(task.build_model(), task, _cfg(epochs=2), tmp_path, log=_quiet).fit()
    shutil.copytree(tmp_path / "best", tmp_path / "average")  # as if the kept epochs averaged better
    (tmp_path / "epochs" / "notes").mkdir(parents=True)
    lines = []
    nothing = Trainer(task.build_model(), task, _cfg(epochs=2), tmp_path, log=lines.append)
    nothing.resume()
    nothing.fit()
    assert (tmp_path / "average").is_dir() and not any(m.startswith("removed average/") for m in lines)
    on = Trainer(task.build_model(), task, _cfg(epochs=4, keep_epochs=1), tmp_path, log=lines.append)
    on.resume()
    on.fit()
    assert not (tmp_path / "average").exists() and any(m.startswith("removed average/") for m in lines)
    assert sorted(p.name for p in (tmp_path / "epochs").iterdir()) == ["004", "notes"]


def test_ctrl_c_mid_epoch_leaves_last_at_the_last_finished_epoch(tmp_path, monkeypatch, straight):
    """Ctrl-C in the middle of epoch 2: last/ still holds epoch 1 (nothing of epoch 2 is
    saved), the note says how to continue, and resuming redoes epoch 2 from its start."""
    straight = straight(1)
    task = _task()
    real, calls, n = task.loss, [], len(task.train_batches(0))

    def step_loss(*a, **kw):
        calls.append(1)
        if len(calls) == n + 3:  # epoch 1 took n calls and its validation one more: epoch 2, update 2
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(task, "loss", step_loss)
    lines = []
    first = Trainer(task.build_model(), task, _three_epochs(), tmp_path / "run", log=lines.append)
    with pytest.raises(KeyboardInterrupt):
        first.fit()
    assert lines[-1] == f"interrupted: {tmp_path / 'run' / 'last'} holds epoch 1; continue with --resume"
    doc = read_checkpoint_meta(tmp_path / "run" / "last", for_resume=True)
    assert doc["epoch"] == 1 and doc["step"] == n and len(doc["history"]["steps"]) == n

    task2 = _task()
    second = Trainer(task2.build_model(), task2, _three_epochs(), tmp_path / "run", log=_quiet)
    second.resume()
    second.fit()
    assert _losses(second) == _losses(straight)
    _same_weights(straight.model, second.model)


def test_ctrl_c_before_the_first_epoch_says_nothing_was_saved(tmp_path):
    log, lines = _interrupt_at_log("")  # the very first line
    task = _task()
    trainer = Trainer(task.build_model(), task, _cfg(log_every=1), tmp_path / "run", log=log)
    with pytest.raises(KeyboardInterrupt):
        trainer.fit()
    assert lines[-1] == "interrupted before the first epoch was saved: start again"
    assert not (tmp_path / "run" / "last").exists()


def test_resume_refuses_other_task_settings(tmp_path):
    task = _task()
    Trainer(task.build_model(), task, _cfg(epochs=1), tmp_path, log=_quiet).fit()
    other = _task(n_train=500)
    with pytest.raises(NumpyTransformerError,
                       match=r"cannot resume .*last: it was trained with other task settings \(data\)"):
        Trainer(other.build_model(), other, _cfg(), tmp_path, log=_quiet).resume()


# ---- the time budget and divergence ---------------------------------------------------------------
def test_the_time_budget_stops_after_the_epoch_that_crosses_it(tmp_path):
    """A budget that the first epoch already uses up: training stops after it, and says so;
    when that epoch is the last anyway, nothing is said (nothing was cut short)."""
    task = _task(n_train=200)
    lines = []
    trainer = Trainer(task.build_model(), task, _cfg(epochs=3, max_minutes=1e-6), tmp_path / "cut", log=lines.append)
    trainer.fit()
    assert len(trainer.history["epochs"]) == 1
    assert [line for line in lines if line.startswith("stopping:")] == [
        "stopping: the time budget of 1e-06 minutes is used up"]
    assert read_checkpoint_meta(tmp_path / "cut" / "last")["epoch"] == 1
    lines.clear()
    trainer = Trainer(task.build_model(), task, _cfg(epochs=1, max_minutes=1e-6), tmp_path / "whole", log=lines.append)
    trainer.fit()
    assert len(trainer.history["epochs"]) == 1 and not any(line.startswith("stopping:") for line in lines)


def test_a_non_finite_loss_stops_training_before_any_checkpoint(tmp_path, monkeypatch):
    task = _task()
    real = task.loss

    def nan_at_step_3(logits, targets, smoothing, calls=[]):
        calls.append(1)
        loss, n, dlogits = real(logits, targets, smoothing)
        return (float("nan") if len(calls) == 3 else loss), n, dlogits

    monkeypatch.setattr(task, "loss", nan_at_step_3)
    trainer = Trainer(task.build_model(), task, _cfg(), tmp_path, log=_quiet)
    with pytest.raises(FloatingPointError, match="the loss became nan: training diverged"):
        trainer.fit()
    assert trainer.optimizer.t == 2  # the NaN update was not applied
    assert not (tmp_path / "best").exists() and not (tmp_path / "last").exists()


@pytest.mark.parametrize("bad", [{"exact_match": float("nan")}, {"val_loss": float("inf")}])
def test_a_non_finite_validation_metric_stops_training_before_best(tmp_path, monkeypatch, bad):
    """A diverged model can keep a finite accuracy: every number is checked before saving."""
    task = _task()
    real = task.validate
    monkeypatch.setattr(task, "validate", lambda model: {**real(model), **bad})
    trainer = Trainer(task.build_model(), task, _cfg(), tmp_path, log=_quiet)
    name, value = next(iter(bad.items()))
    with pytest.raises(FloatingPointError, match=f"{name} {value} after epoch 1: the model diverged"):
        trainer.fit()
    assert not (tmp_path / "best").exists() and not (tmp_path / "last").exists()
    assert trainer.epoch == 0


# ---- checkpoints ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A one-epoch tiny run: (its trainer, its run directory)."""
    out = tmp_path_factory.mktemp("run")
    task = _task()
    trainer = Trainer(task.build_model(), task, _cfg(epochs=1), out, log=_quiet)
    trainer.fit()
    return trainer, out


def test_checkpoint_round_trip_and_no_pickle(run):
    trainer, out = run
    step = trainer.optimizer.t
    def names(which):  # array files are named by step and digest: weights-00000006-1a2b3c4d.npz
        return sorted(re.sub(r"-[0-9a-f]{8}\.npz$", ".npz", p.name) for p in (out / which).iterdir())

    assert names("best") == ["checkpoint.json", f"weights-{step:08d}.npz"]
    assert names("last") == ["checkpoint.json", f"optimizer-{step:08d}.npz", f"weights-{step:08d}.npz"]
    for npz in list(out.glob("*/*.npz")):
        with np.load(npz, allow_pickle=False) as z:  # pickled object arrays would fail here
            assert all(z[k].dtype != object for k in z.files)
    (weights,) = (out / "best").glob(f"weights-{step:08d}-*.npz")
    with np.load(weights, allow_pickle=False) as z:
        assert set(z.files) == set(trainer.model.parameters())
    other = _task().build_model()
    for p in other.parameters().values():
        p[...] = 0
    doc = load_checkpoint(out / "best", other)
    assert doc["step"] == step and doc["epoch"] == 1 and doc["task"] == trainer.task.to_dict()
    _same_weights(trainer.model, other)


def test_a_save_that_would_not_load_is_refused_before_anything_is_written(run, tmp_path):
    trainer, out = run
    meta = {k: v for k, v in read_checkpoint_meta(out / "best").items()
            if k in ("task", "data", "train", "step", "epoch", "best_score", "history")}
    model = trainer.model
    for bad_meta, message in (({**meta, "step": np.int64(3)}, "meta field step must be a whole number >= 0"),
                              ({**meta, "best_score": np.float32(0.5)}, "meta: field best_score has the wrong type"),
                              ({**meta, "history": {"note": np.float32(1)}}, "meta holds a value JSON cannot write"),
                              ({k: v for k, v in meta.items() if k != "task"}, "meta: field task is missing")):
        with pytest.raises(CheckpointError, match=message):
            save_checkpoint(tmp_path / "ck", model, bad_meta)
        assert not (tmp_path / "ck").exists()
    nan_model = _task().build_model()
    next(iter(nan_model.parameters().values()))[0] = np.nan
    with pytest.raises(CheckpointError, match="holds NaN or infinite values"):
        save_checkpoint(tmp_path / "ck", nan_model, meta)
    assert not (tmp_path / "ck").exists()


def test_no_pickle_in_the_package():
    """No module imports pickle (or a pickling library) or loads arrays with allow_pickle=True."""
    root = Path(numpytransformer.__file__).parent
    bad = re.compile(r"^\s*(import|from)\s+(pickle|cPickle|dill|joblib|shelve|marshal)\b|allow_pickle\s*=\s*True"
                     r"|torch\.(save|load)\(", re.M)
    found = [str(p.relative_to(root)) for p in root.rglob("*.py") if bad.search(p.read_text(encoding="utf-8"))]
    assert found == [] and len(list(root.rglob("*.py"))) > 20


def test_config_mismatch_is_a_clear_error(run, tmp_path):
    bigger = _task(d_model=32).build_model()
    with pytest.raises(CheckpointError, match=r"checkpoint\.json: field config differs from the model's \(d_model"):
        load_checkpoint(run[1] / "best", bigger)


def test_damaged_weights_are_detected(run, tmp_path):
    import shutil

    ck = tmp_path / "ck"
    shutil.copytree(run[1] / "best", ck)
    npz = next(ck.glob("weights-*.npz"))
    data = bytearray(npz.read_bytes())
    data[len(data) // 2] ^= 0xFF
    npz.write_bytes(bytes(data))
    model = _task().build_model()
    before = {k: v.copy() for k, v in model.parameters().items()}
    with pytest.raises(CheckpointError, match=f"{re.escape(str(npz))} is damaged \\(its checksum does not match"):
        load_checkpoint(ck, model)
    for k, v in before.items():  # a refused checkpoint leaves the model as it was
        np.testing.assert_array_equal(model.parameters()[k], v)


def _leftovers(path):
    return sorted(p.name for p in Path(path).glob(".*.tmp"))


def test_a_save_killed_mid_write_keeps_the_previous_checkpoint_and_its_leftover_goes(run, tmp_path, monkeypatch):
    """The second atomic write of a save (the optimizer's .npz in last/) dies half-way, as a
    SIGKILL would: its temporary file stays, nothing is cleaned up. The previous checkpoint
    loads whole (its leftover .tmp ignored, and kept: a reader never deletes what a running save
    may be writing), and the next save removes the leftover."""
    import tempfile

    import numpytransformer.training.checkpoint as ckmod

    trainer, out = run
    real_write, calls = ckmod.atomic_write, []

    def killed_on_second_write(path, data):
        calls.append(path)
        if len(calls) == 2:
            fd, _ = tempfile.mkstemp(prefix=f".{Path(path).name}.", suffix=".tmp", dir=Path(path).parent)
            os.write(fd, data[:len(data) // 2])
            os.close(fd)
            raise KeyboardInterrupt("killed")  # no cleanup runs after a SIGKILL
        return real_write(path, data)

    for kind in ("load", "save"):
        run_dir = tmp_path / kind
        import shutil

        shutil.copytree(out, run_dir)
        task = _task()
        t = Trainer(task.build_model(), task, _cfg(epochs=2), run_dir, log=_quiet)
        t.resume()
        for p in t.model.parameters().values():
            p += 1.0  # what the killed save would have written
        t.optimizer.t += 1
        calls.clear()
        monkeypatch.setattr(ckmod, "atomic_write", killed_on_second_write)
        with pytest.raises(KeyboardInterrupt):
            t.save("last")
        monkeypatch.setattr(ckmod, "atomic_write", real_write)
        assert len(calls) == 2 and Path(calls[1]).name.startswith("optimizer-")
        assert len(_leftovers(run_dir / "last")) == 1

        if kind == "load":  # the next load finds the previous checkpoint whole, and leaves the leftover
            fresh = _task()
            again = Trainer(fresh.build_model(), fresh, _cfg(epochs=2), run_dir, log=_quiet)
            again.resume()
            assert again.optimizer.t == trainer.optimizer.t and again.epoch == 1
            _same_weights(trainer.model, again.model)
            assert len(_leftovers(run_dir / "last")) == 1
            again.save("last")
        else:  # the next save tidies up too
            t.save("last")
            fresh = _task().build_model()
            load_checkpoint(run_dir / "last", fresh)
            _same_weights(t.model, fresh)
            # The killed attempt's finished weights file is gone too: only what the JSON names stays.
            doc = read_checkpoint_meta(run_dir / "last")
            names = {f["name"] for f in doc["files"].values()}
            assert sorted(p.name for p in (run_dir / "last").iterdir()) == sorted(names | {"checkpoint.json"})
        assert _leftovers(run_dir / "last") == []


def test_a_sigkill_during_a_save_keeps_the_previous_checkpoint(run, tmp_path):
    """A real SIGKILL, in a child process, while the second file of a save is being written."""
    import shutil

    ck = tmp_path / "ck"
    shutil.copytree(run[1] / "last", ck)
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_training import _task, _cfg, _quiet
        from numpytransformer.training.checkpoint import load_checkpoint, save_checkpoint
        from numpytransformer.training.optim import Adam, NoamSchedule
        import numpytransformer.training.checkpoint as ckmod
        task = _task(); model = task.build_model()
        opt = Adam(model.parameters(), lr=NoamSchedule(16, 20, 1.0))
        meta = load_checkpoint({str(ck)!r}, model, opt)
        for p in model.parameters().values():
            p += 1.0
        opt.t += 5  # five more updates, as the new step says
        calls = []
        real_fsync = os.fsync
        def fsync(fd):
            calls.append(fd)
            if len(calls) == 2:
                os.kill(os.getpid(), signal.SIGKILL)
            return real_fsync(fd)
        os.fsync = fsync
        keep = {{k: meta[k] for k in ("task", "data", "train", "epoch", "best_score", "history")}}
        save_checkpoint({str(ck)!r}, model, {{**keep, "step": meta["step"] + 5}}, opt)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == -9, r.stderr
    assert len(_leftovers(ck)) == 1  # the killed write's temporary file
    model = _task().build_model()
    assert load_checkpoint(ck, model)["step"] == run[0].optimizer.t
    _same_weights(run[0].model, model)
    assert len(_leftovers(ck)) == 1  # a load leaves it (it could be a running save's file) ...
    meta = read_checkpoint_meta(ck)
    save_checkpoint(ck, model, {k: meta[k] for k in ("task", "data", "train", "step", "epoch", "best_score",
                                                     "history")})
    assert _leftovers(ck) == []  # ... and the next save removes it
