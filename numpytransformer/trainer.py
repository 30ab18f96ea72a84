"""A reusable training loop: batches, Adam with the Noam schedule, label smoothing,
gradient clipping and accumulation, validation, progress, history, checkpoints and
exact resume.

The trainer knows nothing about a particular task. A *task* object provides:

- ``train_batches(epoch) -> list``: the epoch's batches, the same for the same seed and epoch;
- ``forward_backward(model, batch, label_smoothing, scale) -> (loss, n_tokens)``: runs
  forward, the loss and backward (gradients scaled by ``scale``), and returns the
  batch's mean loss and how many target tokens it had (or, for a classifier, examples:
  the progress line names them by the task's ``count_unit``, ``"tok"`` if it has none);
- optionally ``input_tokens(batch) -> int``: how many tokens the model read in the batch
  (padding excluded). A task that counts something other than tokens (a classifier
  counts reviews) provides it, and the progress line shows both, e.g.
  ``reviews/s 160 tok/s 38,900``;
- ``validate(model) -> dict``: metrics on the validation split, including
  ``task.selection_metric`` (higher is better) that picks the best checkpoint; a
  metric that is not a finite number (an empty validation set) is an error;
- ``to_dict()``: JSON settings from which the task can be rebuilt;
- optionally ``data_summary() -> dict``: what identifies the data actually read (counts,
  a digest), saved with each checkpoint, and with it ``data_changes(recorded) -> list of
  str``: how the data read now differs from a saved summary; ``resume`` refuses any.

Throughput is measured over the updates only (validation and checkpoints excluded).
Each epoch's record in ``history.json`` holds ``train_time`` (seconds in updates),
``tokens_per_s`` (what the progress line shows as tok/s: the input tokens when the
task reports them, else the counted target tokens) and, for a task with another
``count_unit``, e.g. ``reviews_per_s``; :func:`without_timing` drops them and ``time``
(seconds since ``fit`` started), the parts of a record that vary from run to run.
"""
from __future__ import annotations

import json
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from .checkpoint import atomic_write_text, load_checkpoint, read_checkpoint_meta, save_checkpoint
from .optim import Adam, NoamSchedule, clip_grad_norm

__all__ = ["TrainConfig", "Trainer", "plot_history", "without_timing"]


def _per_s_key(unit: str) -> str:
    """The history key of a count per second: ``"tok"`` -> ``tokens_per_s``, ``"reviews"`` -> ``reviews_per_s``."""
    return "tokens_per_s" if unit == "tok" else f"{unit}_per_s"


def without_timing(record: dict) -> dict:
    """An epoch record without what measures time rather than training (``time``,
    ``train_time``, ``*_per_s``): what two runs of the same settings must agree on."""
    return {k: v for k, v in record.items() if k not in ("time", "train_time") and not k.endswith("_per_s")}


@dataclass
class TrainConfig:
    """Optimisation settings.

    ``lr_factor`` multiplies the Noam schedule
    ``d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)``; ``accum_steps`` batches
    make one update; ``clip_norm`` clips the global gradient norm (None: off);
    ``max_minutes`` stops training after the epoch that crosses it.
    """

    epochs: int = 10
    lr_factor: float = 1.0
    warmup: int = 400
    label_smoothing: float = 0.1
    clip_norm: Optional[float] = 1.0
    accum_steps: int = 1
    log_every: int = 50
    max_minutes: Optional[float] = None

    def __post_init__(self):
        for name in ("epochs", "warmup", "accum_steps", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not self.lr_factor > 0:
            raise ValueError(f"lr_factor must be positive, got {self.lr_factor}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        for name in ("clip_norm", "max_minutes"):
            if getattr(self, name) is not None and not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive (or None: off), got {getattr(self, name)}")


def _fmt_time(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 60}m{seconds % 60:02d}s"


class Trainer:
    """Train ``model`` on ``task``, writing checkpoints and history into ``out_dir``.

    ``out_dir/last`` is the latest checkpoint (with optimiser state, for ``resume``),
    ``out_dir/best`` the one with the best validation score, ``out_dir/history.json``
    the per-update and per-epoch records, ``out_dir/curves.png`` the loss and LR plot.
    """

    def __init__(self, model, task, cfg: TrainConfig, out_dir, log=None):
        self.model, self.task, self.cfg = model, task, cfg
        self.out_dir = Path(out_dir)
        self.schedule = NoamSchedule(model.cfg.d_model, cfg.warmup, cfg.lr_factor)
        self.optimizer = Adam(model.parameters(), lr=self.schedule)
        self.history = {"steps": [], "epochs": []}
        self.epoch, self.batch_index = 0, 0
        self.epoch_loss, self.epoch_tokens = 0.0, 0  # so far in the current epoch
        self.epoch_inputs, self.epoch_seconds = 0, 0.0  # input tokens and seconds in updates, ditto
        self.best_score = -np.inf
        self.log = log if log is not None else (lambda msg: print(msg, file=sys.stdout, flush=True))

    # ---- state --------------------------------------------------------------
    def _meta(self) -> dict:
        return {"task": self.task.to_dict(), "train": asdict(self.cfg), "step": self.optimizer.t,
                "epoch": self.epoch, "batch_index": self.batch_index, "epoch_loss": self.epoch_loss,
                "epoch_tokens": self.epoch_tokens, "epoch_inputs": self.epoch_inputs,
                "epoch_seconds": self.epoch_seconds, "best_score": self.best_score, "history": self.history,
                **({"data": self.task.data_summary()} if hasattr(self.task, "data_summary") else {})}

    def save(self, which: str = "last", rng_state=None) -> Path:
        path = self.out_dir / which
        saved_state = self.model.rng.bit_generator.state
        if rng_state is not None:  # the generator as it was at the last update boundary
            self.model.rng.bit_generator.state = rng_state
        try:
            save_checkpoint(path, self.model, self._meta(),
                            self.optimizer if which == "last" else None)
        finally:
            self.model.rng.bit_generator.state = saved_state
        return path

    def resume(self) -> None:
        """Continue from ``out_dir/last``: weights, optimiser, RNG, position in the epoch, history."""
        path = self.out_dir / "last"
        doc = read_checkpoint_meta(path)
        mine = self.task.to_dict()
        if doc["task"] != mine:
            diff = sorted(k for k in set(doc["task"]) | set(mine) if doc["task"].get(k) != mine.get(k))
            raise ValueError(f"cannot resume {path}: it was trained with different task settings ({', '.join(diff)})")
        if "data" in doc and hasattr(self.task, "data_summary"):  # older checkpoints record no data
            changes = self.task.data_changes(doc["data"])
            if changes:
                raise ValueError(f"cannot resume {path}: the training and validation data are not the ones it "
                                 f"was trained on ({', '.join(changes)}); was the data file changed? Start a new "
                                 "run with another --out")
        load_checkpoint(path, self.model, self.optimizer)
        self.epoch, self.batch_index = doc["epoch"], doc["batch_index"]
        self.epoch_loss, self.epoch_tokens = doc["epoch_loss"], doc["epoch_tokens"]
        # Checkpoints written before throughput was recorded lack these two.
        self.epoch_inputs, self.epoch_seconds = doc.get("epoch_inputs", 0), doc.get("epoch_seconds", 0.0)
        self.best_score = doc["best_score"] if doc["best_score"] is not None else -np.inf
        self.history = doc["history"]
        self.log(f"resumed from {path} at epoch {self.epoch + 1}, update {self.optimizer.t}")

    # ---- training -----------------------------------------------------------
    def fit(self) -> dict:
        """Train until ``cfg.epochs`` (or ``cfg.max_minutes``); returns the last validation metrics."""
        cfg, model, opt = self.cfg, self.model, self.optimizer
        model.train()
        grads = model.gradients()
        start = time.perf_counter()
        metrics = {}
        unit = getattr(self.task, "count_unit", "tok")
        input_tokens = getattr(self.task, "input_tokens", None)
        run = {"updates": 0, "count": 0, "inputs": 0, "seconds": 0.0}  # this call's updates, for the summary
        n_batches = len(self.task.train_batches(self.epoch)) if self.epoch < cfg.epochs else 0
        total_updates = cfg.epochs * -(-max(n_batches, 1) // cfg.accum_steps)
        first_update = opt.t
        boundary_rng = model.rng.bit_generator.state
        out_of_time = False
        try:
            while self.epoch < cfg.epochs:
                batches = self.task.train_batches(self.epoch)
                window_tokens, window_inputs, window_start = 0, 0, time.perf_counter()
                model.zero_grad()
                for g0 in range(self.batch_index, len(batches), cfg.accum_steps):
                    group = batches[g0:g0 + cfg.accum_steps]
                    update_start = time.perf_counter()
                    # Each batch's gradient is scaled by 1/len(group), so an update is the mean over
                    # its batches, also for a shorter last group.
                    losses = [self.task.forward_backward(model, b, cfg.label_smoothing, 1.0 / len(group))
                              for b in group]
                    loss = float(np.mean([l for l, _ in losses]))
                    n_tok = sum(n for _, n in losses)
                    n_in = sum(input_tokens(b) for b in group) if input_tokens is not None else 0
                    with _deferred_interrupt():  # an update is applied whole or not at all
                        if cfg.clip_norm:
                            clip_grad_norm(grads, cfg.clip_norm)
                        lr = opt.step(grads)
                        model.zero_grad()
                        self.batch_index = g0 + len(group)
                        self.epoch_loss += sum(l * n for l, n in losses)
                        self.epoch_tokens += n_tok
                        self.epoch_inputs += n_in
                        seconds = time.perf_counter() - update_start
                        self.epoch_seconds += seconds
                        boundary_rng = model.rng.bit_generator.state
                        self.history["steps"].append({"step": opt.t, "epoch": self.epoch + 1,
                                                      "loss": round(loss, 6), "lr": lr})
                    for key, value in (("updates", 1), ("count", n_tok), ("inputs", n_in), ("seconds", seconds)):
                        run[key] += value
                    window_tokens += n_tok
                    window_inputs += n_in
                    if opt.t % cfg.log_every == 0:
                        now = time.perf_counter()
                        window = max(now - window_start, 1e-9)
                        rates = f"{unit}/s {window_tokens / window:,.0f}"
                        if input_tokens is not None:
                            rates += f" tok/s {window_inputs / window:,.0f}"
                        done_here = opt.t - first_update
                        eta = (now - start) / max(done_here, 1) * max(total_updates - opt.t, 0)
                        self.log(f"epoch {self.epoch + 1}/{cfg.epochs} update {opt.t} loss {loss:.4f} "
                                 f"lr {lr:.2e} {rates} eta {_fmt_time(eta)}")
                        window_tokens, window_inputs, window_start = 0, 0, now
                model.eval()
                metrics = self.task.validate(model)
                model.train()
                with _deferred_interrupt():
                    self._end_epoch(metrics, time.perf_counter() - start)
                if (cfg.max_minutes is not None and self.epoch < cfg.epochs
                        and time.perf_counter() - start > 60 * cfg.max_minutes):
                    out_of_time = True  # noted after the plot: a closed pipe then loses only the note
                    break
        except (KeyboardInterrupt, BrokenPipeError) as stop:
            # Ctrl-C, or the reader of the progress lines went away ("train ... | head"): both
            # land between updates, so the state is whole and --resume continues from it.
            self.save("last", rng_state=boundary_rng)
            atomic_write_text(self.out_dir / "history.json", json.dumps(self.history, indent=1))
            complete = self.epoch >= cfg.epochs  # stopped on the last epoch's line: nothing is lost
            if complete:
                plot_history(self.history, self.out_dir / "curves.png", log=lambda msg: None)
            if isinstance(stop, KeyboardInterrupt):  # a closed pipe has no reader left to tell
                try:  # Ctrl-C in "train | tee" stops the reader too: the interrupt still wins
                    self.log(f"interrupted after the last epoch: {self.out_dir} is complete" if complete else
                             f"interrupted: saved {self.out_dir / 'last'} at update {opt.t}; continue with --resume")
                except BrokenPipeError:
                    pass
            raise
        # Every checkpoint and the history are saved: the plot first, then the notes.
        plot_history(self.history, self.out_dir / "curves.png", log=self.log)
        if out_of_time:
            self.log(f"stopping: the time budget of {cfg.max_minutes} minutes is used up")
        if run["updates"]:
            seconds = max(run["seconds"], 1e-9)
            rates = f"{unit}/s {run['count'] / seconds:,.0f}"
            if input_tokens is not None:
                rates += f" tok/s {run['inputs'] / seconds:,.0f} ({run['inputs']:,} tokens)"
            took = f"{run['seconds']:.1f} s" if run["seconds"] < 60 else _fmt_time(run["seconds"])
            self.log(f"throughput: {run['updates']:,} updates in {took} of training (validation excluded): {rates}")
        return metrics

    def _end_epoch(self, metrics: dict, elapsed: float) -> None:
        """Record the epoch, keep the best checkpoint, save the last one and the history."""
        name = self.task.selection_metric
        score = metrics[name]
        train_loss = self.epoch_loss / max(self.epoch_tokens, 1)
        # A metric can stay finite while the model has diverged (NaN logits give every
        # review the same label: accuracy 0.5), so every number is checked, not just the
        # selection metric; a NaN score would also never beat the best, leaving best/ stale.
        bad = {k: v for k, v in {"train_loss": train_loss, **metrics}.items() if not np.isfinite(v)}
        if bad:
            shown = ", ".join(f"{k} {v}" for k, v in bad.items())
            # Only a validation metric can be NaN for want of validation examples.
            empty = " (or the validation set is empty)" if set(bad) - {"train_loss"} else ""
            raise FloatingPointError(f"{shown} after epoch {self.epoch + 1}: the model diverged{empty}; "
                                     "no checkpoint saved for this epoch")
        self.epoch += 1
        self.batch_index = 0
        unit = getattr(self.task, "count_unit", "tok")
        seconds = max(self.epoch_seconds, 1e-9)
        throughput = {"train_time": round(self.epoch_seconds, 2),
                      _per_s_key(unit): round(self.epoch_tokens / seconds, 1)}
        counts = {}
        if hasattr(self.task, "input_tokens"):
            throughput["tokens_per_s"] = round(self.epoch_inputs / seconds, 1)
            counts["input_tokens"] = self.epoch_inputs  # the same in every run: kept by without_timing
        record = {"epoch": self.epoch, "step": self.optimizer.t, "train_loss": train_loss,
                  "time": round(elapsed, 2), **counts, **throughput, **metrics}
        self.epoch_loss, self.epoch_tokens = 0.0, 0
        self.epoch_inputs, self.epoch_seconds = 0, 0.0
        self.history["epochs"].append(record)
        if score > self.best_score:
            self.save("best")
            self.best_score = score  # only once best/ holds it
        self.save("last")
        atomic_write_text(self.out_dir / "history.json", json.dumps(self.history, indent=1))
        # Saved first, reported second: a failing log (a closed pipe) cannot lose the epoch.
        shown = " ".join(f"{k} {v:.4f}" for k, v in metrics.items())
        self.log(f"epoch {self.epoch} done: train_loss {record['train_loss']:.4f} {shown} "
                 f"[{_fmt_time(record['time'])}]")


class _deferred_interrupt:
    """Hold Ctrl-C (SIGINT) until the block ends, then raise KeyboardInterrupt.

    An update touches every parameter and the optimiser's moments; stopping half-way
    would leave a state that no checkpoint should record.
    """

    def __enter__(self):
        self.hit = False
        self.old = None
        if threading.current_thread() is threading.main_thread():
            self.old = signal.signal(signal.SIGINT, self._handler)
        return self

    def _handler(self, signum, frame):
        self.hit = True

    def __exit__(self, *exc):
        if self.old is not None:
            signal.signal(signal.SIGINT, self.old)
        if self.hit and exc[0] is None:
            raise KeyboardInterrupt
        return False


def plot_history(history: dict, path, log=print) -> Optional[Path]:
    """Loss and learning-rate curves as a PNG (needs matplotlib; skipped with a note without it)."""
    from .plotting import new_figure

    try:
        fig = new_figure(figsize=(10, 3.5))
    except ValueError:
        log("matplotlib is not installed: no curves.png (pip install matplotlib)")
        return None
    steps = [s["step"] for s in history["steps"]]
    ax1, ax2 = fig.subplots(1, 2)
    ax1.plot(steps, [s["loss"] for s in history["steps"]], lw=0.8, label="train (per update, label-smoothed)")
    if history["epochs"] and "val_loss" in history["epochs"][0]:
        ax1.plot([e["step"] for e in history["epochs"]], [e["val_loss"] for e in history["epochs"]], "o-",
                 label="validation (no smoothing)")
    ax1.set_xlabel("update")
    ax1.set_ylabel("loss")
    ax1.set_yscale("log")
    ax1.legend()
    ax2.plot(steps, [s["lr"] for s in history["steps"]])
    ax2.set_xlabel("update")
    ax2.set_ylabel("learning rate (Noam)")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    return path
