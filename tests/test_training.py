"""The trainer learns, resumes exactly, and its checkpoints are safe."""
import json
import os

import numpy as np
import pytest

from numpytransformer.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from numpytransformer.tasks.reverse import ReversalTask, ReverseSettings
from numpytransformer.trainer import TrainConfig, Trainer, without_timing


def _task(**kw):
    s = dict(n_symbols=8, min_len=1, max_len=8, n_train=600, n_val=60, n_test=60, batch_size=64,
             d_model=32, n_heads=4, n_layers=1, d_ff=64, dropout=0.1, seed=0)
    s.update(kw)
    return ReversalTask(ReverseSettings(**s))


def _cfg(**kw):
    c = dict(epochs=2, warmup=20, lr_factor=1.0, label_smoothing=0.1, log_every=10 ** 6)
    c.update(kw)
    return TrainConfig(**c)


def _quiet(msg):
    pass


def _losses(trainer):
    return [s["loss"] for s in trainer.history["steps"]]


def test_reversal_learns_in_seconds(tmp_path):
    """A tiny model: the loss falls well below its start and accuracy beats chance (1/8) clearly."""
    task = _task(n_train=3000, n_layers=2, dropout=0.0, max_len=6)
    model = task.build_model()
    trainer = Trainer(model, task, _cfg(epochs=6, warmup=60, label_smoothing=0.0), tmp_path, log=_quiet)
    metrics = trainer.fit()
    losses = _losses(trainer)
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:3])
    assert metrics["token_accuracy"] > 0.4  # chance is 1/8 per token
    assert (tmp_path / "curves.png").stat().st_size > 0
    hist = json.loads((tmp_path / "history.json").read_text())
    assert len(hist["epochs"]) == 6 and len(hist["steps"]) == len(losses)


def test_tagger_learns(tmp_path):
    task = _task(formulation="tagger", n_train=2000, n_layers=2, dropout=0.0, max_len=6)
    model = task.build_model()
    metrics = Trainer(model, task, _cfg(epochs=5, warmup=40, label_smoothing=0.0), tmp_path, log=_quiet).fit()
    assert metrics["token_accuracy"] > 0.35


def test_training_is_deterministic(tmp_path):
    runs = []
    for name in ("a", "b"):
        task = _task()
        trainer = Trainer(task.build_model(), task, _cfg(epochs=1), tmp_path / name, log=_quiet)
        trainer.fit()
        runs.append(_losses(trainer))
    assert runs[0] == runs[1]


def _epochs(trainer):
    return [without_timing(e) for e in trainer.history["epochs"]]


@pytest.mark.parametrize("accum", [1, 3])  # 10 batches an epoch: with 3, the last group holds one
def test_resume_reproduces_the_uninterrupted_losses(tmp_path, accum):
    """Train 2 epochs straight; train 1, save, rebuild everything from disk, train 1 more: same losses."""
    task = _task()
    straight = Trainer(task.build_model(), task, _cfg(epochs=2, accum_steps=accum), tmp_path / "straight",
                       log=_quiet)
    straight.fit()

    first = Trainer(task.build_model(), task, _cfg(epochs=1, accum_steps=accum), tmp_path / "resumed", log=_quiet)
    first.fit()
    task2 = _task()  # a fresh task and model, as a new process would build them
    second = Trainer(task2.build_model(), task2, _cfg(epochs=2, accum_steps=accum), tmp_path / "resumed",
                     log=_quiet)
    second.resume()
    second.fit()
    assert _losses(second) == _losses(straight)
    assert _epochs(second) == _epochs(straight)
    for k, v in straight.model.parameters().items():
        np.testing.assert_array_equal(second.model.parameters()[k], v)


class _Interrupting:
    """Wraps a task and raises KeyboardInterrupt at a given batch, as Ctrl-C would."""

    def __init__(self, task, at_call):
        self.task, self.at_call, self.calls = task, at_call, 0
        self.selection_metric = task.selection_metric

    def __getattr__(self, name):
        return getattr(self.task, name)

    def forward_backward(self, *a, **kw):
        self.calls += 1
        if self.calls == self.at_call:
            raise KeyboardInterrupt
        return self.task.forward_backward(*a, **kw)


def test_resume_after_an_interrupt_mid_epoch(tmp_path):
    task = _task()
    straight = Trainer(task.build_model(), task, _cfg(accum_steps=2), tmp_path / "straight", log=_quiet)
    straight.fit()

    # Interrupt inside an accumulation group: the save rolls back to the last update.
    wrapped = _Interrupting(_task(), at_call=6)
    t1 = Trainer(wrapped.task.build_model(), wrapped, _cfg(accum_steps=2), tmp_path / "run", log=_quiet)
    with pytest.raises(KeyboardInterrupt):
        t1.fit()
    task2 = _task()
    t2 = Trainer(task2.build_model(), task2, _cfg(accum_steps=2), tmp_path / "run", log=_quiet)
    t2.resume()
    t2.fit()
    assert _losses(t2) == _losses(straight)
    assert _epochs(t2) == _epochs(straight)


def test_ctrl_c_during_an_update_finishes_the_update_first(tmp_path, monkeypatch):
    """SIGINT arriving inside Adam's step is held until the update is whole; the saved state
    then resumes to exactly the uninterrupted run."""
    import os
    import signal

    from numpytransformer.optim import Adam

    task = _task()
    straight = Trainer(task.build_model(), task, _cfg(), tmp_path / "straight", log=_quiet)
    straight.fit()

    real_step = Adam.step
    calls = {"n": 0}

    def step_with_ctrl_c(self, grads):
        calls["n"] += 1
        if calls["n"] == 4:
            os.kill(os.getpid(), signal.SIGINT)  # arrives mid-update
        return real_step(self, grads)

    monkeypatch.setattr(Adam, "step", step_with_ctrl_c)
    t1 = Trainer(_task().build_model(), _task(), _cfg(), tmp_path / "run", log=_quiet)
    with pytest.raises(KeyboardInterrupt):
        t1.fit()
    assert t1.optimizer.t == 4  # the interrupted update was completed, not half-applied
    monkeypatch.setattr(Adam, "step", real_step)
    task2 = _task()
    t2 = Trainer(task2.build_model(), task2, _cfg(), tmp_path / "run", log=_quiet)
    t2.resume()
    t2.fit()
    assert _losses(t2) == _losses(straight)


def test_checkpoint_round_trip_and_no_pickle(tmp_path):
    task = _task()
    model = task.build_model()
    save_checkpoint(tmp_path / "ck", model, {"task": task.to_dict(), "step": 7})
    files = sorted(p.name for p in (tmp_path / "ck").iterdir())
    assert files == ["checkpoint.json", "weights-00000007.npz"]
    with np.load(tmp_path / "ck" / files[1], allow_pickle=False) as z:
        assert set(z.files) == set(model.parameters())
    other = _task().build_model()
    for p in other.parameters().values():
        p[...] = 0
    load_checkpoint(tmp_path / "ck", other)
    for k, v in model.parameters().items():
        np.testing.assert_array_equal(other.parameters()[k], v)


def test_config_mismatch_is_a_clear_error(tmp_path):
    model = _task().build_model()
    save_checkpoint(tmp_path / "ck", model, {"step": 1})
    bigger = _task(d_model=64).build_model()
    with pytest.raises(CheckpointError, match="different config.*d_model"):
        load_checkpoint(tmp_path / "ck", bigger)


def test_damaged_weights_are_detected(tmp_path):
    model = _task().build_model()
    save_checkpoint(tmp_path / "ck", model, {"step": 1})
    npz = next((tmp_path / "ck").glob("weights-*.npz"))
    data = bytearray(npz.read_bytes())
    data[len(data) // 2] ^= 0xFF
    npz.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="damaged"):
        load_checkpoint(tmp_path / "ck", _task().build_model())


def test_an_interrupted_save_leaves_the_previous_checkpoint_whole(tmp_path, monkeypatch):
    """Kill the save between writing the new arrays and renaming the new JSON."""
    task = _task()
    model = task.build_model()
    save_checkpoint(tmp_path / "ck", model, {"step": 1})
    before = {k: v.copy() for k, v in model.parameters().items()}
    for p in model.parameters().values():
        p += 1.0

    real_replace = os.replace

    def dying_replace(src, dst):
        if str(dst).endswith("checkpoint.json"):
            raise KeyboardInterrupt("power cut")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", dying_replace)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path / "ck", model, {"step": 2})
    monkeypatch.setattr(os, "replace", real_replace)

    fresh = _task().build_model()
    doc = load_checkpoint(tmp_path / "ck", fresh)
    assert doc["step"] == 1
    for k, v in before.items():
        np.testing.assert_array_equal(fresh.parameters()[k], v)
    assert not list((tmp_path / "ck").glob("*.tmp"))


def test_translation_loss_falls_on_a_few_hundred_pairs(tmp_path):
    """The embedded number-words pair: a few hundred pairs, seconds of training."""
    from numpytransformer.tasks.translate import TranslateSettings, TranslationTask

    task = TranslationTask(TranslateSettings(dataset="numbers", n_train=400, n_val=40, n_test=40, max_number=999,
                                             batch_tokens=400, d_model=32, n_heads=4, n_layers=1, d_ff=64,
                                             dropout=0.0, min_freq=1))
    model = task.build_model()
    trainer = Trainer(model, task, _cfg(epochs=4, warmup=40, label_smoothing=0.0), tmp_path, log=_quiet)
    trainer.fit()
    losses = _losses(trainer)
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:3])


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
    lines.clear()
    trainer = Trainer(task.build_model(), task, _cfg(epochs=1, max_minutes=1e-6), tmp_path / "whole", log=lines.append)
    trainer.fit()
    assert len(trainer.history["epochs"]) == 1 and not any(line.startswith("stopping:") for line in lines)
