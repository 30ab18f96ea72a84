"""Ablation sweeps on sequence reversal: which design choice matters most?

By default a sweep varies **one factor at a time** around a base setting, every other choice
staying at the base, so that each factor's effect is read off on its own; ``full_grid``
trains every combination instead. Every run gets the same number of updates (not the same
time: each run's seconds are recorded) and is scored on the same test sequences.

    python -m numpytransformer sweep --layers 1 2 3 4 --heads 1 2 4 8 --out runs/sweep
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import time
from pathlib import Path
from typing import Callable, Dict, List, NamedTuple, Sequence

import numpy as np

from .files import atomic_write
from .errors import NumpyTransformerError
from .training.settings import ModelSettings
from .tasks.reverse import ReversalTask, ReverseData
from .training.trainer import Trainer, TrainConfig

__all__ = ["FACTORS", "DEFAULT_GRID", "sweep_settings", "run_sweep", "factor_effects", "write_report",
           "default_sweep_train", "SeedSummary", "t_quantile", "over_seeds", "BootstrapComparison",
           "paired_bootstrap"]

#: The factors a sweep can vary: name -> (which settings, the field it sets).
FACTORS = {"layers": ("model", "n_layers"), "heads": ("model", "n_heads"), "d_model": ("model", "d_model"),
           "warmup": ("train", "warmup")}
#: What each run's ``result.json`` records of the trained model (besides its settings).
MEASURES = ("parameters", "updates", "seconds", "token_accuracy", "exact_match")
#: The values the ``sweep`` command tries when none are given.
DEFAULT_GRID = {"layers": [1, 2, 3, 4], "heads": [1, 2, 4, 8], "d_model": [32, 64, 128], "warmup": [25, 100, 400]}


def default_sweep_train(epochs: int) -> TrainConfig:
    """The reversal recipe with a fixed number of epochs and no time limit."""
    return dataclasses.replace(ReversalTask.recipe(ReverseData())[1], epochs=epochs, max_minutes=0, log_every=10 ** 6)


def sweep_settings(data: ReverseData, base_model: ModelSettings, base_train: TrainConfig, grid: Dict[str, Sequence],
                   full_grid: bool = False) -> List[dict]:
    """The runs of a sweep, each ``{"name", "factors", "data", "model", "train"}``.

    One factor at a time: the base run first, then, for each factor, each value that
    differs from the base. ``full_grid``: every combination of the values.
    """
    base = {"model": base_model, "train": base_train}
    for name, values in grid.items():
        if name not in FACTORS:
            raise NumpyTransformerError(f"unknown sweep factor {name!r}: expected one of {', '.join(FACTORS)}")
        if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
            raise NumpyTransformerError(f"sweep factor {name!r}: expected positive integers, got {values!r}")
    at_base = {n: getattr(base[where], field) for n, (where, field) in FACTORS.items()}
    if full_grid:
        combos = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    else:
        combos = [{}] + [{n: v} for n, values in grid.items() for v in values if v != at_base[n]]
    runs = []
    for combo in combos:
        changed = {where: {FACTORS[n][1]: v for n, v in combo.items() if FACTORS[n][0] == where} for where in base}
        try:
            settings = {where: dataclasses.replace(base[where], **changed[where]) for where in base}
        except NumpyTransformerError as e:
            raise NumpyTransformerError(f"sweep run {combo}: {e}") from None
        runs.append({"name": "-".join(f"{n}{v}" for n, v in combo.items()) or "base", "data": data,
                     "factors": {n: combo.get(n, at_base[n]) for n in FACTORS}, **settings})
    return runs


def run_sweep(runs: List[dict], out_dir, log: Callable[[str], None] = print) -> List[dict]:
    """Train and score every run; returns one record per run (also in its ``result.json``).

    A run whose directory already holds a result is not trained again, so an interrupted
    sweep continues where it stopped.
    """
    records = []
    for i, run in enumerate(runs):
        done, head = Path(out_dir) / run["name"] / "result.json", f"[{i + 1}/{len(runs)}] {run['name']}:"
        settings = {k: dataclasses.asdict(run[k]) for k in ("data", "model", "train")}
        if done.exists():
            try:
                record = json.loads(done.read_text())
            except ValueError:
                record = None
            same = isinstance(record, dict) and all(record.get(k) == v for k, v in settings.items())
            if record is None or same and not all(type(record.get(k)) in (int, float) for k in MEASURES):
                raise NumpyTransformerError(f"{done} is damaged: delete it to train that run again")
            if same:
                records.append({**record, "name": run["name"], "factors": run["factors"]})
                log(f"{head} already done")
                continue
            log(f"{head} {done} holds other settings; training again")
        log(f"{head} " + ", ".join(f"{k} {v}" for k, v in run["factors"].items()))
        task = ReversalTask(run["data"], run["model"])
        model = task.build_model()
        trainer = Trainer(model, task, run["train"], done.parent, log=lambda msg: None)
        start = time.perf_counter()
        trainer.fit()
        seconds = time.perf_counter() - start
        test = task.metrics(model, task.splits[2])  # the final weights: every run has the same updates
        record = {"name": run["name"], "factors": run["factors"], "parameters": model.num_parameters(),
                  "updates": trainer.optimizer.t, "seconds": round(seconds, 1),
                  "token_accuracy": test["token_accuracy"], "exact_match": test["exact_match"],
                  **settings}
        atomic_write(done, json.dumps(record, indent=1))
        log(f"    token accuracy {record['token_accuracy']:.4f}, exact match {record['exact_match']:.4f}, "
            f"{record['parameters']:,} parameters, {seconds:.0f} s")
        records.append(record)
    return records


def factor_effects(records: List[dict]) -> Dict[str, dict]:
    """For each factor that varied: token accuracy by value, and its spread (max - min).

    In a one-at-a-time sweep, only runs where every *other* factor is at the base
    value count, so each spread is that factor's own effect.
    """
    base = next((r["factors"] for r in records if r["name"] == "base"), None)
    effects = {}
    for name in FACTORS:
        by_value = {}
        for r in records:
            if base is None or all(r["factors"][o] == base[o] for o in FACTORS if o != name):
                by_value.setdefault(r["factors"][name], []).append(r["token_accuracy"])
        if len(by_value) < 2:
            continue
        acc = {v: sum(a) / len(a) for v, a in sorted(by_value.items())}
        effects[name] = {"accuracy": acc, "spread": max(acc.values()) - min(acc.values())}
    return effects


#: Student's t at 0.975 (a two-sided 95% interval) for 1..30 degrees of freedom.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


#: The normal's 0.975 quantile, which Student's t approaches as its degrees of freedom grow.
_Z975 = 1.959963984540054


def t_quantile(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom.

    Up to 30 from the table; past it from the first terms of the expansion of t about the
    normal's quantile z (Abramowitz and Stegun 26.7.5), within 1e-4 at df = 31 and closer beyond:

    .. math:: t_{0.975,\\,\\nu} \\approx z + \\frac{z^3 + z}{4\\nu} + \\frac{5z^5 + 16z^3 + 3z}{96\\nu^2}
    """
    if isinstance(df, bool) or not isinstance(df, (int, np.integer)) or df < 1:
        raise NumpyTransformerError(f"df must be a whole number >= 1, got {df!r}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


class SeedSummary(NamedTuple):
    """One measure over n training seeds: its values, and the error bar of their mean."""

    values: tuple  # the measure of each seed, in the order of the seeds
    mean: float
    std: float  # the sample standard deviation (n - 1 in the denominator)
    sem: float  # the standard error of the mean
    low: float  # the 95% confidence interval of the mean, from Student's t
    high: float


def over_seeds(train: Callable[[int], float], seeds: Sequence[int]) -> SeedSummary:
    """Run ``train(seed)`` once for each seed, in order, and summarise what it returns.

    A single run says nothing about how much a result owes to its seed. Over n seeds the
    mean :math:`\\bar x` has standard error :math:`s / \\sqrt{n}` (s the sample standard
    deviation), and, for roughly normal results, :math:`\\bar x \\pm t_{0.975,\\,n-1}\\, s / \\sqrt{n}`
    is a 95% confidence interval for the mean over all seeds (lesson 11).

    Parameters
    ----------
    train : function of one int seed -> a float (a test accuracy, a loss)
    seeds : at least two distinct ints

    Returns
    -------
    SeedSummary
    """
    seeds = list(seeds)
    if len(seeds) < 2 or len(set(seeds)) != len(seeds):
        raise NumpyTransformerError(f"seeds must hold at least two distinct seeds (an error bar needs two runs), "
                                    f"got {seeds!r}")
    values = np.array([float(train(seed)) for seed in seeds])
    n = len(values)
    mean = values.mean()
    std = values.std(ddof=1)
    sem = std / np.sqrt(n)
    half = t_quantile(n - 1) * sem
    return SeedSummary(tuple(values.tolist()), float(mean), float(std), float(sem), float(mean - half),
                       float(mean + half))


class BootstrapComparison(NamedTuple):
    """Two systems compared on resamples of one test set (:func:`paired_bootstrap`)."""

    delta: float  # metric(A) - metric(B) on the test set itself
    win_rate: float  # the share of resamples on which A scores strictly higher than B
    low: float  # the percentile interval of the difference over the resamples (95% by default)
    high: float


def paired_bootstrap(stats_a, stats_b, metric: Callable[[np.ndarray], float], n: int = 1000, seed: int = 0,
                     level: float = 0.95) -> BootstrapComparison:
    """Is system A better than system B on this test set, or did it draw lucky sentences?

    Paired bootstrap resampling (Koehn, 2004): draw S sentences with replacement from the S of the
    test set, the *same* draw for both systems, and score both on it; repeat n times. The share
    of draws that A wins estimates how sure one may be that A is better (A wins at least 95% of
    them: better "at 95%"), and the middle ``level`` of the differences is an interval for
    :math:`\\Delta = \\text{metric}(A) - \\text{metric}(B)`:

    .. math:: \\Delta^{*}_j = \\text{metric}\\Big(\\sum_{i \\in I_j} a_i\\Big)
              - \\text{metric}\\Big(\\sum_{i \\in I_j} b_i\\Big),\\qquad I_j \\sim \\mathcal{U}\\{1..S\\}^S

    The metric reads statistics summed over sentences, so corpus-level measures that are not
    means of sentence scores (BLEU, chrF) resample correctly. Where lesson 11's
    :func:`over_seeds` measures the spread due to the training seed, this measures the spread due
    to the choice of test sentences: a sibling of its t-interval.

    Parameters
    ----------
    stats_a, stats_b : array (S, ...)
        Each system's sufficient statistics per sentence (such as
        :func:`~numpytransformer.text.chrf.chrf_statistics`), row i for sentence i of both.
    metric : function of the summed statistics (...) -> float
        Such as :func:`~numpytransformer.text.chrf.chrf_from_statistics`; for a mean of sentence
        scores, rows ``(score, 1)`` and ``metric = lambda s: s[0] / s[1]``.
    n : int
        Resamples, from 1 to 1,000,000.
    seed : int
        Seed of the draws: the same seed, the same answer.
    level : float
        Coverage of the interval, in (0, 1).

    Returns
    -------
    BootstrapComparison
    """
    a, b = np.asarray(stats_a), np.asarray(stats_b)
    if a.ndim < 1 or len(a) < 1 or a.shape != b.shape or a.dtype.kind not in "iuf" or b.dtype.kind not in "iuf":
        raise NumpyTransformerError(f"stats_a and stats_b must be arrays of numbers of the same shape (sentences, "
                                    f"...), one row per sentence, got shapes {a.shape} and {b.shape}")
    if not callable(metric):
        raise NumpyTransformerError(f"metric must be a function of the summed statistics, got {type(metric).__name__}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= 10 ** 6:
        raise NumpyTransformerError(f"n must be a whole number of resamples from 1 to 1,000,000, got {n!r}")
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise NumpyTransformerError(f"level must be a number in (0, 1), got {level!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise NumpyTransformerError(f"seed must be a whole number >= 0, got {seed!r}")
    rng = np.random.default_rng(seed)
    S = len(a)
    ### BEGIN SOLUTION 11.1: n resamples (each rows = rng.integers(0, S, size=S), one draw for both systems), the differences of the metric, the share A wins, the percentile interval and delta
    deltas = np.empty(n)
    for j in range(n):
        rows = rng.integers(0, S, size=S)  # S sentences drawn with replacement: one draw for both systems
        deltas[j] = metric(a[rows].sum(axis=0)) - metric(b[rows].sum(axis=0))
    win_rate = float(np.mean(deltas > 0))
    low, high = np.quantile(deltas, [(1 - level) / 2, (1 + level) / 2])
    delta = float(metric(a.sum(axis=0)) - metric(b.sum(axis=0)))
    ### END SOLUTION
    return BootstrapComparison(delta, win_rate, float(low), float(high))


def write_report(records: List[dict], out_dir, title: str = "Reversal ablation") -> Path:
    """``sweep.json``, ``sweep.csv``, ``sweep.md`` and ``sweep.png`` (test token accuracy
    against each factor's values) in ``out_dir``; returns the .md path."""
    out_dir = Path(out_dir)
    effects = factor_effects(records)
    atomic_write(out_dir / "sweep.json", json.dumps({"runs": records, "effects": effects}, indent=1))
    cols = list(FACTORS) + list(MEASURES)
    rows = [[r["name"]] + [r["factors"][c] if c in FACTORS else r[c] for c in cols] for r in records]
    atomic_write(out_dir / "sweep.csv", "".join(",".join(map(str, row)) + "\n" for row in [["name"] + cols] + rows))

    def cell(col, value) -> str:
        if col in ("token_accuracy", "exact_match"):
            return f"{100 * value:.2f}%"
        return f"{value:,}" if col in ("parameters", "updates") else str(value)

    lines = [f"# {title}", "", "| run | " + " | ".join(cols) + " |", "|" + " --- |" * (len(cols) + 1)]
    lines += ["| " + " | ".join([row[0]] + [cell(c, v) for c, v in zip(cols, row[1:])]) + " |" for row in rows]
    if effects:
        lines += ["", "Spread of test token accuracy (max - min over the factor's values, others at base):", ""]
        for name, e in sorted(effects.items(), key=lambda kv: -kv[1]["spread"]):
            vals = ", ".join(f"{v}: {100 * a:.2f}%" for v, a in e["accuracy"].items())
            lines.append(f"- **{name}**: {100 * e['spread']:.2f} points ({vals})")
    md = out_dir / "sweep.md"
    atomic_write(md, "\n".join(lines) + "\n")

    if effects:
        from .training.plotting import new_figure

        fig = new_figure(figsize=(3.2 * len(effects), 3.0))
        axes = fig.subplots(1, len(effects), squeeze=False)[0]
        for ax, (name, e) in zip(axes, effects.items()):
            ax.plot([str(v) for v in e["accuracy"]], [100 * a for a in e["accuracy"].values()], "o-")
            ax.set(xlabel=name, ylim=(0, 101))
            ax.grid(alpha=0.3)
        axes[0].set_ylabel("test token accuracy (%)")
        fig.suptitle(title)
        fig.tight_layout()
        fig.savefig(out_dir / "sweep.png", dpi=110)
    return md
