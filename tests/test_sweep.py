"""The ablation sweep: which runs it makes, that it trains, reports and resumes, and its errors."""
import dataclasses
import json

import pytest

import numpytransformer.training.trainer as trainer_module
from numpytransformer.cli import main
from numpytransformer.errors import NumpyTransformerError
from numpytransformer.training.settings import ModelSettings
from numpytransformer.sweep import default_sweep_train, factor_effects, run_sweep, sweep_settings, write_report
from numpytransformer.tasks.reverse import ReverseData
from numpytransformer.training.trainer import TrainConfig

DATA = ReverseData(n_train=64, n_val=16, n_test=16, max_len=6, n_symbols=6, batch_size=32)
MODEL = ModelSettings(d_model=16, n_heads=2, n_layers=2, d_ff=32)
TRAIN = TrainConfig(epochs=1, warmup=5, log_every=1000)


@pytest.fixture(autouse=True)
def _no_curves(monkeypatch):
    monkeypatch.setattr(trainer_module, "plot_history", lambda *a, **kw: None)


def test_one_at_a_time_varies_one_factor_per_run():
    runs = sweep_settings(DATA, MODEL, TRAIN, {"layers": [1, 2, 3], "heads": [1, 2], "warmup": [5, 50]})
    # layers 2, heads 2 and warmup 5 are the base values: not repeated.
    assert [r["name"] for r in runs] == ["base", "layers1", "layers3", "heads1", "warmup50"]
    assert runs[0]["model"] == MODEL and runs[0]["train"] == TRAIN and all(r["data"] == DATA for r in runs)
    for run in runs[1:]:  # exactly one setting differs from the base
        diff = [k for k in ("model", "train") for f in dataclasses.fields(run[k])
                if getattr(run[k], f.name) != getattr(runs[0][k], f.name)]
        assert len(diff) == 1
    assert runs[1]["model"] == dataclasses.replace(MODEL, n_layers=1)
    assert runs[4]["train"] == dataclasses.replace(TRAIN, warmup=50) and runs[4]["model"] == MODEL
    assert runs[3]["factors"] == {"layers": 2, "heads": 1, "d_model": 16, "warmup": 5}


def test_full_grid_is_every_combination():
    runs = sweep_settings(DATA, MODEL, TRAIN, {"layers": [1, 2], "heads": [1, 2]}, full_grid=True)
    assert sorted((r["factors"]["layers"], r["factors"]["heads"]) for r in runs) == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert len({r["name"] for r in runs}) == 4
    assert all((r["model"].n_layers, r["model"].n_heads) == (r["factors"]["layers"], r["factors"]["heads"])
               for r in runs)


@pytest.mark.parametrize("grid, match", [
    ({"depth": [1]}, "unknown sweep factor 'depth': expected one of layers, heads, d_model, warmup"),
    ({"layers": []}, r"sweep factor 'layers': expected positive integers, got \[\]"),
    ({"layers": [0]}, r"sweep factor 'layers': expected positive integers, got \[0\]"),
    ({"heads": [True]}, r"sweep factor 'heads': expected positive integers"),
    ({"warmup": [2.5]}, r"sweep factor 'warmup': expected positive integers"),
    ({"heads": [3]}, r"sweep run \{'heads': 3\}: --d-model 16 must be divisible by --heads 3"),
    ({"d_model": [10 ** 6]}, r"sweep run \{'d_model': 1000000\}: --d-model must be from 1 to 4096"),
])
def test_bad_grids_are_named(grid, match):
    with pytest.raises(NumpyTransformerError, match=match):
        sweep_settings(DATA, MODEL, TRAIN, grid)


def test_default_sweep_train_is_the_recipe_with_fixed_epochs():
    cfg = default_sweep_train(4)
    assert cfg.epochs == 4 and cfg.max_minutes == 0  # equal updates for every run, no time limit


def test_sweep_trains_reports_and_resumes(tmp_path):
    runs = sweep_settings(DATA, MODEL, TRAIN, {"layers": [1, 2]})
    logs = []
    records = run_sweep(runs, tmp_path, log=logs.append)
    assert [r["name"] for r in records] == ["base", "layers1"]
    assert logs[0].startswith("[1/2] base: layers 2, heads 2")
    for r in records:
        assert 0.0 <= r["token_accuracy"] <= 1.0 and 0.0 <= r["exact_match"] <= 1.0
        assert r["updates"] == 3 and r["parameters"] > 0  # 64 + 16 short sequences, batches of 32
        assert json.loads((tmp_path / r["name"] / "result.json").read_text()) == r
    assert records[0]["parameters"] > records[1]["parameters"]
    md = write_report(records, tmp_path, title="Tiny")
    text = md.read_text()
    assert text.startswith("# Tiny\n") and "| layers1 | 1 | 2 | 16 | 5 |" in text and "- **layers**:" in text
    doc = json.loads((tmp_path / "sweep.json").read_text())
    assert set(doc["effects"]) == {"layers"} and len(doc["runs"]) == 2
    assert (tmp_path / "sweep.csv").read_text().splitlines()[0].startswith("name,layers,heads,d_model,warmup")
    pytest.importorskip("matplotlib")
    assert (tmp_path / "sweep.png").stat().st_size > 0
    # A second call finds the results and trains nothing; a new run is trained alone.
    logs.clear()
    again = run_sweep(runs, tmp_path, log=logs.append)
    assert again == records and logs == ["[1/2] base: already done", "[2/2] layers1: already done"]
    more = sweep_settings(DATA, MODEL, TRAIN, {"layers": [1, 2, 3]})
    logs.clear()
    assert [r["name"] for r in run_sweep(more, tmp_path, log=logs.append)] == ["base", "layers1", "layers3"]
    assert sum("already done" in m for m in logs) == 2
    # A result with this run's settings but no figures is damaged, not a traceback of the report.
    damaged = {k: v for k, v in records[0].items() if k != "token_accuracy"}
    (tmp_path / "base" / "result.json").write_text(json.dumps(damaged))
    with pytest.raises(NumpyTransformerError, match="result.json is damaged: delete it"):
        run_sweep(runs, tmp_path, log=logs.append)


def test_factor_effects_uses_only_runs_that_isolate_the_factor():
    def rec(name, layers, heads, acc):
        return {"name": name, "factors": {"layers": layers, "heads": heads, "d_model": 64, "warmup": 100},
                "token_accuracy": acc}

    effects = factor_effects([rec("base", 2, 4, 0.9), rec("layers1", 1, 4, 0.6), rec("heads1", 2, 1, 0.8),
                              rec("other", 1, 1, 0.1)])  # two factors off base: counts for neither
    assert effects["layers"]["accuracy"] == {1: 0.6, 2: 0.9}
    assert effects["layers"]["spread"] == pytest.approx(0.3)
    assert effects["heads"]["accuracy"] == {1: 0.8, 4: 0.9} and effects["heads"]["spread"] == pytest.approx(0.1)
    assert set(effects) == {"layers", "heads"}  # d_model and warmup never varied


def test_cli_sweep(tmp_path, capsys):
    out = tmp_path / "sw"
    assert main(["sweep", "--grid", "--layers", "1", "--heads", "2", "--d-model", "16", "--epochs", "1", "--n-train",
                 "40", "--out", str(out)]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith(f"1 runs of 1 epochs each, writing to {out}\n")
    assert "| layers1-heads2-d_model16 | 1 | 2 | 16 | 100 |" in shown
    assert "# Reversal ablation (seq2seq, 1 epochs a run)" in shown and (out / "sweep.md").is_file()


@pytest.mark.parametrize("argv, message", [
    (["--epochs", "0"], "argument --epochs: expected a whole number from 1 to 1000000, got 0"),
    (["--epochs", "1_0"], "argument --epochs: expected a whole number"),
    (["--layers", "0"], "argument --layers: expected a whole number from 1 to 1000000, got 0"),
    (["--seed", "-1"], "argument --seed"),
])
def test_cli_sweep_rejects_bad_arguments(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        main(["sweep", *argv, "--out", str(tmp_path / "sw")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err.splitlines()[-1] and "Traceback" not in err
    assert not (tmp_path / "sw").exists()


def test_cli_sweep_with_heads_that_do_not_divide_is_one_line(tmp_path, capsys):
    assert main(["sweep", "--heads", "3", "--epochs", "1", "--out", str(tmp_path / "sw")]) == 2
    err = capsys.readouterr().err
    assert err == "error: sweep run {'heads': 3}: --d-model 64 must be divisible by --heads 3 (each head gets " \
                  "d_model / heads dimensions)\n"


# ---- error bars over seeds (exercise 11.1) ----------------------------------------------------
def test_over_seeds_gives_the_mean_and_its_t_interval():
    import numpy as np

    from numpytransformer.sweep import over_seeds, t_quantile

    calls = []

    def train(seed):
        calls.append(seed)
        return {5: 0.90, 6: 0.94, 7: 0.95}[seed]

    s = over_seeds(train, [7, 5, 6])
    assert calls == [7, 5, 6] and s.values == (0.95, 0.90, 0.94)
    assert abs(s.mean - 0.93) < 1e-15
    std = np.sqrt(((0.95 - 0.93) ** 2 + (0.90 - 0.93) ** 2 + (0.94 - 0.93) ** 2) / 2)  # n - 1 = 2
    assert abs(s.std - std) < 1e-15 and abs(s.sem - std / np.sqrt(3)) < 1e-15
    assert abs(s.high - s.mean - 4.303 * s.sem) < 1e-15 and abs(s.mean - s.low - 4.303 * s.sem) < 1e-15
    assert t_quantile(1) == 12.706 and t_quantile(30) == 2.042


#: scipy.stats.t.ppf(0.975, df), to 6 decimals, for df 1..30 and a few past the table.
T975_SCIPY = {
    1: 12.706205, 2: 4.302653, 3: 3.182446, 4: 2.776445, 5: 2.570582, 6: 2.446912, 7: 2.364624, 8: 2.306004,
    9: 2.262157, 10: 2.228139, 11: 2.200985, 12: 2.178813, 13: 2.160369, 14: 2.144787, 15: 2.13145, 16: 2.119905,
    17: 2.109816, 18: 2.100922, 19: 2.093024, 20: 2.085963, 21: 2.079614, 22: 2.073873, 23: 2.068658, 24: 2.063899,
    25: 2.059539, 26: 2.055529, 27: 2.051831, 28: 2.048407, 29: 2.04523, 30: 2.042272,
    31: 2.039513, 34: 2.032245, 40: 2.021075, 60: 2.000298, 100: 1.983972, 1000: 1.962339,
}


@pytest.mark.parametrize("df", sorted(T975_SCIPY))
def test_t_quantiles_are_students(df):
    from numpytransformer.sweep import t_quantile

    assert abs(t_quantile(df) - T975_SCIPY[df]) < 5e-4


@pytest.mark.parametrize("seeds", [[], [3], [1, 1]])
def test_over_seeds_needs_two_distinct_seeds(seeds):
    from numpytransformer.sweep import over_seeds

    with pytest.raises(NumpyTransformerError, match="^seeds must hold at least two distinct seeds"):
        over_seeds(lambda s: 0.5, seeds)
