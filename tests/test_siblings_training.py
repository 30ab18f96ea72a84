"""The training siblings: Lion beside Adam, the cosine schedule beside Noam's; both chosen by a flag,
saved and resumed with the run, and older checkpoints still resume as Adam and Noam."""
import json
import math
import shutil

import numpy as np
import pytest

import numpytransformer.training.trainer as trainer_module
from numpytransformer.cli import main
from numpytransformer.errors import NumpyTransformerError
from numpytransformer.tasks.reverse import ReversalTask, ReverseData
from numpytransformer.training.checkpoint import CheckpointError
from numpytransformer.training.optim import Adam, CosineSchedule, Lion, NoamSchedule
from numpytransformer.training.settings import ModelSettings
from numpytransformer.training.trainer import LATER_FIELDS, TrainConfig, Trainer

TINY = ["train", "reverse", "--n-symbols", "6", "--max-len", "6", "--n-train", "300", "--n-val", "30",
        "--n-test", "30", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--layers", "1", "--epochs", "1"]


@pytest.fixture(autouse=True)
def _no_curves(monkeypatch):
    monkeypatch.setattr(trainer_module, "plot_history", lambda *a, **kw: None)


# ---- Lion -------------------------------------------------------------------------------------
def test_lion_two_steps_by_hand():
    """Worked on paper: lr 0.1, betas (0.9, 0.99), weight decay 0.1 (the matrix only). At the second
    step the momentum outvotes the gradient on b[0] (c = 0.009 - 0.005 > 0 though g < 0)."""
    W, b = np.array([[1.0, -2.0], [0.5, 0.0]]), np.array([0.0, 1.0])
    opt = Lion({"W": W, "b": b}, lr=0.1, betas=(0.9, 0.99), weight_decay=0.1)
    assert opt.step({"W": np.array([[0.3, -0.1], [0.0, 2.0]]), "b": np.array([1.0, -1.0])}) == 0.1
    np.testing.assert_allclose(W, [[0.89, -1.88], [0.495, -0.1]], atol=1e-15)
    np.testing.assert_allclose(b, [-0.1, 1.1], atol=1e-15)
    np.testing.assert_allclose(opt.m["W"], [[0.003, -0.001], [0.0, 0.02]], atol=1e-15)
    opt.step({"W": np.array([[-0.3, 0.05], [1.0, -0.1]]), "b": np.array([-0.05, 0.0])})
    np.testing.assert_allclose(W, [[0.9811, -1.9612], [0.39005, -0.199]], atol=1e-14)
    np.testing.assert_allclose(b, [-0.2, 1.2], atol=1e-14)
    assert opt.t == 2


def test_lion_follows_the_papers_update_over_many_steps():
    """torch has no Lion: the update is written out here, from the paper's algorithm, and compared
    over 20 steps of random gradients with a schedule."""
    rng = np.random.default_rng(0)
    params = {"W": rng.standard_normal((3, 4)), "v": rng.standard_normal(4)}
    theirs = {k: p.copy() for k, p in params.items()}
    m = {k: np.zeros_like(p) for k, p in params.items()}
    schedule = NoamSchedule(16, warmup=5)
    opt = Lion(params, lr=schedule, betas=(0.8, 0.95), weight_decay=0.3)
    for t in range(1, 21):
        grads = {k: rng.standard_normal(p.shape) for k, p in params.items()}
        lr = opt.step(grads)
        assert lr == schedule(t)
        for k in theirs:
            decay = 1 - lr * 0.3 if theirs[k].ndim >= 2 else 1.0
            theirs[k] = decay * theirs[k] - lr * np.sign(0.8 * m[k] + 0.2 * grads[k])
            m[k] = 0.95 * m[k] + 0.05 * grads[k]
    for k in params:
        np.testing.assert_allclose(params[k], theirs[k], rtol=0, atol=1e-13)
        np.testing.assert_allclose(opt.m[k], m[k], rtol=0, atol=1e-15)


def test_lion_keeps_float32_and_moves_every_weight_by_lr():
    p = np.zeros(5, dtype=np.float32)
    Lion({"p": p}, lr=0.01).step({"p": np.array([3.0, -1e-6, 0.0, 1e3, -2.0], dtype=np.float32)})
    assert p.dtype == np.float32
    np.testing.assert_array_equal(p, np.float32([-0.01, 0.01, 0.0, -0.01, 0.01]))


@pytest.mark.parametrize("kwargs, message", [
    ({"lr": -1.0}, r"lr must be a finite number in \[0, inf\), got -1.0"),
    ({"betas": (0.9,)}, r"betas must be a pair \(beta1, beta2\), got \(0.9,\)"),
    ({"betas": (0.9, 1.0)}, r"betas\[1\] must be a finite number in \[0, 1\), got 1.0"),
    ({"weight_decay": float("nan")}, r"weight_decay must be a finite number in \[0, inf\), got nan"),
])
def test_lion_refuses_bad_settings_in_one_line(kwargs, message):
    with pytest.raises(NumpyTransformerError, match=f"^{message}$"):
        Lion({"p": np.zeros(2)}, **kwargs)


def test_lion_refuses_gradients_that_do_not_match():
    opt = Lion({"p": np.zeros(2)})
    with pytest.raises(ValueError, match=r"grads\['p'\] has shape \(3,\)"):
        opt.step({"p": np.zeros(3)})
    with pytest.raises(ValueError, match="grads and params must have the same keys; these differ: \\['q'\\]"):
        opt.step({"p": np.zeros(2), "q": np.zeros(2)})


def test_lion_state_round_trips():
    rng = np.random.default_rng(1)
    a = Lion({"p": np.zeros((2, 3))}, lr=0.1)
    a.step({"p": rng.standard_normal((2, 3))})
    b = Lion({"p": np.zeros((2, 3))}, lr=0.1)
    b.load_state_arrays(a.state_arrays(), a.t)
    np.testing.assert_array_equal(b.m["p"], a.m["p"])
    assert b.t == 1 and list(a.state_arrays()) == ["lion.m.p"]
    with pytest.raises(KeyError, match="no entry 'lion.m.p'"):
        b.load_state_arrays({"adam.m.p": np.zeros((2, 3))}, 1)


# ---- the cosine schedule ----------------------------------------------------------------------
def test_cosine_values_at_the_key_steps():
    s = CosineSchedule(peak=1e-3, warmup=10, min_ratio=0.1)
    total = 110
    assert s(1, total) == pytest.approx(1e-4, rel=1e-12)  # a tenth of the way up
    assert s(5, total) == pytest.approx(5e-4, rel=1e-12)
    assert s(10, total) == pytest.approx(1e-3, rel=1e-12)  # the peak, at the end of the warm-up
    assert s(60, total) == pytest.approx(0.55e-3, rel=1e-12)  # half-way down: the mean of peak and floor
    assert s(35, total) == pytest.approx(1e-4 + 0.9e-3 * (1 + math.cos(math.pi / 4)) / 2, rel=1e-12)
    assert s(110, total) == pytest.approx(1e-4, rel=1e-12)  # the floor at the last update
    assert s(500, total) == pytest.approx(1e-4, rel=1e-12)  # and after it
    assert CosineSchedule(1.0, 4, 0.0)(20, 20) == 0.0


def test_cosine_rises_linearly_then_falls_monotonically():
    s = CosineSchedule(peak=2.0, warmup=25, min_ratio=0.05)
    rates = np.array([s(t, 300) for t in range(1, 301)])
    rise, fall = rates[:25], rates[24:]
    np.testing.assert_allclose(np.diff(rise), 2.0 / 25, rtol=1e-12)  # a straight line
    assert np.all(np.diff(fall) < 0) and rates.max() == rates[24] == 2.0
    assert fall.min() == fall[-1] == pytest.approx(0.1)  # the floor, 5% of the peak, at the last update
    # the half cosine is flat at both ends and steepest in the middle
    steps = -np.diff(fall)
    assert steps[0] < steps[len(steps) // 2] > steps[-1]


def test_cosine_refuses_bad_settings_in_one_line():
    for kwargs, message in (({"peak": 0.0, "warmup": 1}, r"peak must be a finite number in \(0, inf\), got 0.0"),
                            ({"peak": 1.0, "warmup": 0}, r"warmup must be an integer >= 1, got 0"),
                            ({"peak": 1.0, "warmup": 1, "min_ratio": 1.5},
                             r"min_ratio must be a finite number in \[0, 1\], got 1.5")):
        with pytest.raises(NumpyTransformerError, match=f"^{message}$"):
            CosineSchedule(**kwargs)
    with pytest.raises(NumpyTransformerError, match="^total must be an integer >= 1, got 0$"):
        CosineSchedule(1.0, 1)(1, 0)


# ---- in the trainer ---------------------------------------------------------------------------
def _task():
    data = ReverseData(n_symbols=8, min_len=1, max_len=6, n_train=300, n_val=40, n_test=40, batch_size=64)
    return ReversalTask(data, ModelSettings(d_model=16, n_heads=2, n_layers=1, d_ff=32, dropout=0.1, seed=0))


def _cfg(**kw):
    c = dict(epochs=3, warmup=5, lr_factor=1.0, label_smoothing=0.1, log_every=10 ** 6, weight_decay=0.1)
    c.update(kw)
    return TrainConfig(**c)


def test_the_flags_choose_the_optimiser_and_the_schedule(tmp_path):
    task = _task()
    plain = Trainer(task.build_model(), task, _cfg(), None)
    assert type(plain.optimizer) is Adam and plain.cfg.schedule == "noam"
    t = Trainer(task.build_model(), task, _cfg(optimizer="lion", schedule="cosine", lr=3e-4, min_lr_ratio=0.2), None)
    assert type(t.optimizer) is Lion and t.optimizer.weight_decay == 0.1
    t.total_updates = 100
    assert t.learning_rate(5) == pytest.approx(3e-4) and t.learning_rate(100) == pytest.approx(6e-5)
    # --lr 0: the cosine peaks where Noam's schedule does
    same = Trainer(task.build_model(), task, _cfg(schedule="cosine"), None)
    same.total_updates = 100
    assert same.learning_rate(5) == pytest.approx(plain.noam(5))


@pytest.mark.parametrize("kwargs, message", [
    ({"optimizer": "sgd"}, "--optimizer must be one of adam, lion, got 'sgd'"),
    ({"schedule": "linear"}, "--schedule must be one of noam, cosine, got 'linear'"),
    ({"schedule": "cosine", "lr": -1.0}, "--lr must be from 0.0 to 10.0, got -1.0"),
    ({"schedule": "cosine", "min_lr_ratio": 2.0}, "--min-lr-ratio must be from 0.0 to 1.0, got 2.0"),
    ({"lr": 1e-3}, r"--lr 0.001 sets the cosine schedule's peak; the Noam schedule's is set by --lr-factor "
                   r"\(or add --schedule cosine\)"),
])
def test_bad_settings_are_one_line(kwargs, message):
    with pytest.raises(NumpyTransformerError, match=f"^{message}$"):
        _cfg(**kwargs)


def test_later_fields_are_the_defaults():
    assert LATER_FIELDS == {k: getattr(TrainConfig(), k) for k in LATER_FIELDS}


@pytest.fixture(scope="module")
def lion_straight(tmp_path_factory):
    task = _task()
    t = Trainer(task.build_model(), task, _cfg(optimizer="lion", schedule="cosine", lr=2e-3, cooldown=0.2),
                tmp_path_factory.mktemp("straight"), log=lambda m: None)
    t.fit()
    return t


def test_a_lion_cosine_run_resumes_exactly(tmp_path, lion_straight):
    """Interrupted after epoch 1 and resumed by a new trainer: the same losses, rates and weights, bit
    for bit; the saved state is Lion's momentum."""
    cfg = _cfg(optimizer="lion", schedule="cosine", lr=2e-3, cooldown=0.2)

    def log(msg):
        if msg.startswith("epoch 1 done"):
            raise KeyboardInterrupt

    task = _task()
    with pytest.raises(KeyboardInterrupt):
        Trainer(task.build_model(), task, cfg, tmp_path, log=log).fit()
    doc = json.loads((tmp_path / "last" / "checkpoint.json").read_text())
    assert doc["optimizer"]["name"] == "lion" and doc["train"]["optimizer"] == "lion"
    task2 = _task()
    again = Trainer(task2.build_model(), task2, cfg, tmp_path, log=lambda m: None)
    again.resume()
    again.fit()
    assert again.history["steps"] == lion_straight.history["steps"]
    rates = [s["lr"] for s in again.history["steps"]]
    assert max(rates) == pytest.approx(2e-3) and rates[-1] < rates[len(rates) // 2]
    for k, p in lion_straight.model.parameters().items():
        np.testing.assert_array_equal(again.model.parameters()[k], p)
    # Lion's state does not go into Adam: one line, naming the optimiser to resume with
    task3 = _task()
    adam = Trainer(task3.build_model(), task3, _cfg(schedule="cosine", lr=2e-3), tmp_path, log=lambda m: None)
    with pytest.raises(CheckpointError, match=r"holds the state of 'lion', not of 'adam': resume with "
                                              r"--optimizer lion$"):
        adam.resume()


# ---- on the command line ----------------------------------------------------------------------
def test_train_reverse_with_lion_and_cosine_then_resume_an_older_run(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(TINY + ["--optimizer", "lion", "--schedule", "cosine", "--lr", "0.002", "--warmup", "2", "--cooldown", "0",
                        "--out", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "optimizer=lion" in shown and "schedule=cosine" in shown and "lr=0.002" in shown
    history = json.loads((out / "history.json").read_text())
    assert max(s["lr"] for s in history["steps"]) == pytest.approx(0.002)

    # A run saved before these flags existed: no optimizer name, no new train fields. It resumes as Adam and Noam.
    old = tmp_path / "old"
    assert main(TINY + ["--out", str(old)]) == 0
    js = old / "last" / "checkpoint.json"
    doc = json.loads(js.read_text())
    del doc["optimizer"]["name"]
    for k in LATER_FIELDS:
        del doc["train"][k]
    js.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["train", "reverse", "--resume", "--epochs", "2", "--out", str(old)]) == 0
    shown = capsys.readouterr().out
    assert f"resumed from {old / 'last'} after epoch 1" in shown and "optimizer=adam" in shown
    assert "schedule=noam" in shown


def test_a_bad_optimizer_flag_is_one_line(tmp_path, capsys):
    try:
        code = main(TINY + ["--optimizer", "sgd", "--out", str(tmp_path / "x")])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and "error: argument --optimizer: invalid choice: 'sgd' (choose from " in err.splitlines()[-1]
