"""Ablation sweeps on sequence reversal: which design choice matters most?

A sweep trains one reversal model per setting and scores each on the same held-out test
sequences. By default it varies **one factor at a time** around a base setting (the
classic ablation: every other choice stays at the base value), so each factor's effect
is read off on its own; ``grid=True`` trains every combination instead.

Every run gets the same number of updates (``epochs``), not the same wall time, so a
deeper or wider model is not penalised for being slower; the table records each run's
time as well. Results go to ``out_dir``: ``sweep.json`` (every run, its settings and
metrics), ``sweep.md`` (a Markdown table), ``sweep.csv`` and ``sweep.png`` (test token
accuracy against each factor's values).

    python -m numpytransformer sweep --layers 1 2 3 4 --heads 1 2 4 8 --out runs/sweep
"""
from __future__ import annotations

import csv
import dataclasses
import io
import itertools
import json
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from .checkpoint import atomic_write_text
from .tasks.reverse import DEFAULT_TRAIN, ReversalTask, ReverseSettings
from .trainer import Trainer, TrainConfig

__all__ = ["FACTORS", "sweep_settings", "run_sweep", "factor_effects", "write_report"]

#: The factors a sweep can vary: name -> (where it lives, the field it sets).
FACTORS = {
    "layers": ("model", "n_layers"),
    "heads": ("model", "n_heads"),
    "d_model": ("model", "d_model"),
    "warmup": ("train", "warmup"),
}


def sweep_settings(base_model: ReverseSettings, base_train: TrainConfig, grid: Dict[str, Sequence],
                   full_grid: bool = False) -> List[dict]:
    """The runs of a sweep, each ``{"name", "factors", "model", "train"}``.

    One factor at a time: the base run first, then, for each factor, each value that
    differs from the base. ``full_grid``: every combination of the values.
    """
    for name, values in grid.items():
        if name not in FACTORS:
            raise ValueError(f"unknown sweep factor {name!r}: expected one of {', '.join(FACTORS)}")
        if not values:
            raise ValueError(f"sweep factor {name!r} has no values")
        for v in values:
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"sweep factor {name!r}: values must be positive integers, got {v!r}")

    def base_value(name):
        where, field = FACTORS[name]
        return getattr(base_model if where == "model" else base_train, field)

    if full_grid:
        names = list(grid)
        combos = [dict(zip(names, values)) for values in itertools.product(*(grid[n] for n in names))]
    else:
        combos = [{}]
        for name, values in grid.items():
            combos += [{name: v} for v in values if v != base_value(name)]

    runs = []
    for combo in combos:
        model_changes = {FACTORS[n][1]: v for n, v in combo.items() if FACTORS[n][0] == "model"}
        train_changes = {FACTORS[n][1]: v for n, v in combo.items() if FACTORS[n][0] == "train"}
        model = dataclasses.replace(base_model, **model_changes)
        if model.d_model % model.n_heads:
            raise ValueError(f"sweep run {combo}: d_model {model.d_model} is not divisible by "
                             f"{model.n_heads} heads")
        factors = {n: combo.get(n, base_value(n)) for n in FACTORS}
        name = "base" if not combo else "-".join(f"{n}{v}" for n, v in combo.items())
        runs.append({"name": name, "factors": factors, "model": model,
                     "train": dataclasses.replace(base_train, **train_changes)})
    return runs


def run_sweep(runs: List[dict], out_dir, log: Callable[[str], None] = print) -> List[dict]:
    """Train and score every run; returns one record per run (also kept in ``sweep.json``).

    A run whose directory already holds a result is not trained again, so an
    interrupted sweep continues where it stopped.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    records = []
    for i, run in enumerate(runs):
        run_dir = out_dir / run["name"]
        done = run_dir / "result.json"
        if done.exists():
            records.append(json.loads(done.read_text()))
            log(f"[{i + 1}/{len(runs)}] {run['name']}: already done")
            continue
        log(f"[{i + 1}/{len(runs)}] {run['name']}: " + ", ".join(f"{k} {v}" for k, v in run["factors"].items()))
        task = ReversalTask(run["model"])
        model = task.build_model()
        trainer = Trainer(model, task, run["train"], run_dir, log=lambda msg: None)
        start = time.perf_counter()
        trainer.fit()
        seconds = time.perf_counter() - start
        # Scored with the final weights: every run gets the same number of updates.
        test = task.final_report(model)
        record = {"name": run["name"], "factors": run["factors"], "parameters": model.num_parameters(),
                  "updates": trainer.optimizer.t, "seconds": round(seconds, 1),
                  "token_accuracy": test["token_accuracy"], "exact_match": test["exact_match"],
                  "model": dataclasses.asdict(run["model"]), "train": dataclasses.asdict(run["train"])}
        atomic_write_text(done, json.dumps(record, indent=1))
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
        rows = [r for r in records
                if base is None or all(r["factors"][o] == base[o] for o in FACTORS if o != name)]
        by_value = {}
        for r in rows:
            by_value.setdefault(r["factors"][name], []).append(r["token_accuracy"])
        if len(by_value) < 2:
            continue
        acc = {v: sum(a) / len(a) for v, a in sorted(by_value.items())}
        effects[name] = {"accuracy": acc, "spread": max(acc.values()) - min(acc.values())}
    return effects


def write_report(records: List[dict], out_dir, title: str = "Reversal ablation") -> Path:
    """``sweep.json``, ``sweep.csv``, ``sweep.md`` and ``sweep.png`` in ``out_dir``; returns the .md path."""
    out_dir = Path(out_dir)
    effects = factor_effects(records)
    atomic_write_text(out_dir / "sweep.json", json.dumps({"runs": records, "effects": {
        k: {"accuracy": {str(v): a for v, a in e["accuracy"].items()}, "spread": e["spread"]}
        for k, e in effects.items()}}, indent=1))

    cols = list(FACTORS) + ["parameters", "updates", "seconds", "token_accuracy", "exact_match"]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["name"] + cols)
    for r in records:
        w.writerow([r["name"]] + [r["factors"][c] if c in FACTORS else r[c] for c in cols])
    atomic_write_text(out_dir / "sweep.csv", buf.getvalue())

    lines = [f"# {title}", "", "| run | " + " | ".join(cols) + " |", "|" + " --- |" * (len(cols) + 1)]
    for r in records:
        cells = [str(r["factors"][c]) if c in FACTORS else f"{r[c]:,}" if isinstance(r[c], int)
                 else f"{100 * r[c]:.2f}%" if c in ("token_accuracy", "exact_match") else str(r[c]) for c in cols]
        lines.append(f"| {r['name']} | " + " | ".join(cells) + " |")
    if effects:
        lines += ["", "Spread of test token accuracy (max - min over the factor's values, others at base):", ""]
        for name, e in sorted(effects.items(), key=lambda kv: -kv[1]["spread"]):
            vals = ", ".join(f"{v}: {100 * a:.2f}%" for v, a in e["accuracy"].items())
            lines.append(f"- **{name}**: {100 * e['spread']:.2f} points ({vals})")
    md = out_dir / "sweep.md"
    atomic_write_text(md, "\n".join(lines) + "\n")

    if effects:
        from .plotting import new_figure

        fig = new_figure(figsize=(3.2 * len(effects), 3.0))
        axes = fig.subplots(1, len(effects), squeeze=False)
        for ax, (name, e) in zip(axes[0], effects.items()):
            xs = list(e["accuracy"])
            ax.plot(range(len(xs)), [100 * a for a in e["accuracy"].values()], "o-")
            ax.set_xticks(range(len(xs)), [str(x) for x in xs])
            ax.set_xlabel(name)
            ax.set_ylim(0, 101)
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel("test token accuracy (%)")
        fig.suptitle(title)
        fig.tight_layout()
        fig.savefig(out_dir / "sweep.png", dpi=110)
    return md


def default_sweep_train(epochs: int) -> TrainConfig:
    """The reversal recipe with a fixed number of epochs and no time limit."""
    return dataclasses.replace(DEFAULT_TRAIN, epochs=epochs, max_minutes=None, log_every=10 ** 6)


def main_sweep(grid: Dict[str, Sequence[int]], out_dir, epochs: int, full_grid: bool = False,
               base: Optional[ReverseSettings] = None, log: Callable[[str], None] = print) -> Path:
    """What ``python -m numpytransformer sweep`` runs: every run, then the report; returns
    the path of ``sweep.md`` (the command prints it)."""
    runs = sweep_settings(base or ReverseSettings(), default_sweep_train(epochs), grid, full_grid)
    log(f"{len(runs)} runs of {epochs} epochs each, writing to {out_dir}")
    records = run_sweep(runs, out_dir, log)
    md = write_report(records, out_dir, title=f"Reversal ablation ({runs[0]['model'].formulation}, "
                                               f"{epochs} epochs a run)")
    return md
