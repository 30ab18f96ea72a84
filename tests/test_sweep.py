"""The ablation sweep: which runs it makes, that it trains and reports, and its errors."""
import json

import pytest

from numpytransformer.cli import main
from numpytransformer.sweep import factor_effects, run_sweep, sweep_settings, write_report
from numpytransformer.tasks.reverse import ReverseSettings
from numpytransformer.trainer import TrainConfig

BASE = ReverseSettings(n_train=64, n_val=16, n_test=16, max_len=6, n_symbols=6, batch_size=32, d_model=16,
                       n_heads=2, d_ff=32)
TRAIN = TrainConfig(epochs=1, warmup=5, log_every=1000)


def test_one_at_a_time_varies_one_factor_per_run():
    runs = sweep_settings(BASE, TRAIN, {"layers": [1, 2, 3], "heads": [1, 2], "warmup": [5, 50]})
    names = [r["name"] for r in runs]
    # layers 2, heads 2 and warmup 5 are the base values: not repeated.
    assert names == ["base", "layers1", "layers3", "heads1", "warmup50"]
    assert runs[1]["model"].n_layers == 1 and runs[1]["model"].n_heads == 2
    assert runs[4]["train"].warmup == 50 and runs[4]["model"] == BASE


def test_full_grid_is_every_combination():
    runs = sweep_settings(BASE, TRAIN, {"layers": [1, 2], "heads": [1, 2]}, full_grid=True)
    assert sorted((r["factors"]["layers"], r["factors"]["heads"]) for r in runs) == [(1, 1), (1, 2), (2, 1), (2, 2)]


@pytest.mark.parametrize("grid, match", [
    ({"depth": [1]}, "unknown sweep factor 'depth'"),
    ({"layers": []}, "has no values"),
    ({"layers": [0]}, "positive integers"),
    ({"heads": [3]}, "not divisible by 3 heads"),
])
def test_bad_grids_are_named(grid, match):
    with pytest.raises(ValueError, match=match):
        sweep_settings(BASE, TRAIN, grid)


def test_sweep_trains_reports_and_resumes(tmp_path):
    runs = sweep_settings(BASE, TRAIN, {"layers": [1, 2]})
    records = run_sweep(runs, tmp_path, log=lambda m: None)
    assert [r["name"] for r in records] == ["base", "layers1"]
    for r in records:
        assert 0.0 <= r["token_accuracy"] <= 1.0 and r["updates"] == 2
    md = write_report(records, tmp_path)
    assert "| layers1 | 1 |" in md.read_text()
    doc = json.loads((tmp_path / "sweep.json").read_text())
    assert set(doc["effects"]) == {"layers"}
    assert (tmp_path / "sweep.png").stat().st_size > 0 and (tmp_path / "sweep.csv").exists()
    # A second call finds the results and trains nothing.
    logs = []
    again = run_sweep(runs, tmp_path, log=logs.append)
    assert again == records and all("already done" in m for m in logs)


def test_factor_effects_uses_only_runs_that_isolate_the_factor():
    rec = lambda name, layers, heads, acc: {"name": name, "factors": {"layers": layers, "heads": heads,
                                            "d_model": 64, "warmup": 100}, "token_accuracy": acc}
    effects = factor_effects([rec("base", 2, 4, 0.9), rec("layers1", 1, 4, 0.6), rec("heads1", 2, 1, 0.8)])
    assert effects["layers"]["accuracy"] == {1: 0.6, 2: 0.9}
    assert effects["layers"]["spread"] == pytest.approx(0.3)
    assert effects["heads"]["spread"] == pytest.approx(0.1)


def test_cli_sweep_rejects_bad_epochs(capsys):
    assert main(["sweep", "--epochs", "0", "--out", "unused"]) == 2
    assert "--epochs must be at least 1" in capsys.readouterr().err
