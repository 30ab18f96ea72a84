"""The training loop.

The update, the heart of it, is five lines in :meth:`Trainer.train_step`: forward and
loss, backward, clip, Adam step, zero the gradients. :meth:`Trainer.fit` runs it for every
batch of every epoch, then validates and saves. Everything else (progress lines,
throughput, checkpoints, the history) sits around those lines, not inside them.

A run directory holds ``last/`` (the end of the latest epoch, with the optimiser, for
``--resume``), ``best/`` (the best validation score), ``history.json`` and ``curves.png``; with
``keep_epochs`` N, also ``epochs/NNN/`` for the last N epochs, and ``average/``, their mean,
when it validates at least as well as ``best/`` (see :meth:`Trainer.average_kept`); a resume
that trains on drops an ``average/`` of the epochs before it.
Resuming restarts at the epoch after ``last/`` with the weights, the optimiser and the
dropout generator as they were, so the losses equal an uninterrupted run's.

Given ``comm=world()`` under ``mpiexec -n N`` (as ``train`` does; see
:mod:`numpytransformer.training.parallel`), every rank runs this loop on its shard of each batch, the batch
flags keeping their meaning as the global batch; the gradients are summed before the clip, so
every rank takes the same step. Rank 0 alone validates, logs and writes; the others receive its
metrics. Without ``comm`` a trainer is one process, even under ``mpiexec``.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from .checkpoint import (
    atomic_write,
    average_checkpoints,
    load_checkpoint,
    read_checkpoint_meta,
    save_checkpoint,
)
from ..errors import NumpyTransformerError
from .optim import Adam, NoamSchedule, clip_grad_norm
from .parallel import SingleProcess
from .settings import check_fields, option

__all__ = ["TrainConfig", "Trainer", "kept_epochs", "plot_history", "without_timing"]


@dataclass
class TrainConfig:
    """Optimisation settings. The learning rate follows the Noam schedule
    ``lr_factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)``, and over the last
    ``cooldown`` of the ``epochs`` falls linearly to zero (a run cut short by ``max_minutes``
    may stop before it does)."""

    epochs: int = option(10, "passes over the training data", low=1, high=100_000)
    lr_factor: float = option(1.0, "multiplier of the Noam schedule", low=1e-6, high=100.0)
    warmup: int = option(400, "warm-up updates of the Noam schedule", low=1, high=10 ** 7)
    label_smoothing: float = option(0.1, "label smoothing epsilon", low=0.0, high=0.99)
    clip_norm: float = option(1.0, "clip the global gradient norm to this (0: off)", flag="--clip", low=0.0)
    accum_steps: int = option(1, "batches per update (gradient accumulation)", flag="--accum", low=1, high=1024)
    log_every: int = option(50, "updates between progress lines", low=1)
    max_minutes: float = option(0.0, "stop after the epoch that crosses this many minutes (0: no limit)", low=0.0)
    cooldown: float = option(0.0, "share of the run's updates, at its end, over which the learning rate falls "
                             "linearly to 0 (0: off)", low=0.0, high=1.0)
    weight_decay: float = option(0.0, "decoupled weight decay of the matrices (AdamW; 0: plain Adam)",
                                 low=0.0, high=1.0)
    keep_epochs: int = option(0, "also keep the weights of the last N epochs in OUT/epochs/, for the average "
                              "command (0: off)", low=0, high=1000)

    def __post_init__(self):
        check_fields(self)


def without_timing(record: dict) -> dict:
    """An epoch record without what measures time, nor the number of ranks: what two runs of the
    same settings share."""
    return {k: v for k, v in record.items() if k not in ("time", "train_time", "ranks") and not k.endswith("_per_s")}


def _fmt_time(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 60}m{seconds % 60:02d}s"


class Trainer:
    """Train ``model`` on ``task`` with ``cfg``, writing the run into ``out_dir``; ``comm``: the
    ranks of a data-parallel run (:func:`~numpytransformer.training.parallel.world`), None for one process."""

    def __init__(self, model, task, cfg: TrainConfig, out_dir, log=None, comm=None):
        self.model, self.task, self.cfg = model, task, cfg
        self.comm = SingleProcess() if comm is None else comm
        self.out_dir = Path(out_dir)
        self.noam = NoamSchedule(model.cfg.d_model, cfg.warmup, cfg.lr_factor)
        self.optimizer = Adam(model.parameters(), lr=self.learning_rate, weight_decay=cfg.weight_decay)
        self.total_updates = 0  # the run's length, for the cool-down: planned at each epoch's start
        self.data_summary = task.data_summary()  # recorded in every save: the data is hashed once
        self.history = {"steps": [], "epochs": []}
        self.epoch = self.saved_epoch = 0  # epochs finished, and the one last/ holds
        self.best_score = None  # the best validation score so far: best/ holds that epoch
        self.log = log or (lambda msg: print(msg, flush=True))
        if self.comm.rank:  # one writer: rank 0
            self.log = lambda msg: None

    def learning_rate(self, step: int) -> float:
        """Noam's rate, times a linear fall to zero over the last ``cooldown`` of the updates."""
        if not self.cfg.cooldown:
            return self.noam(step)
        start = self.total_updates * (1 - self.cfg.cooldown)
        fall = min(1.0, (self.total_updates + 1 - step) / (self.total_updates + 1 - start))
        return self.noam(step) * max(fall, 0.0)

    # ---- the update ---------------------------------------------------------------------
    def train_step(self, group) -> tuple:
        """One update from a group of batches: returns (mean loss, targets counted, learning rate)."""
        model, grads, task, comm = self.model, self.model.gradients(), self.task, self.comm
        loss_sum, counted = 0.0, 0
        for batch in group:
            shard = task.shard(batch, comm.rank, comm.size) if comm.size > 1 else batch  # this rank's rows
            if shard is None:
                continue
            loss, n, dlogits = task.train_step_loss(model, shard, self.cfg.label_smoothing)  # forward, loss
            if comm.size > 1:  # the shard's share of the batch's targets: the ranks' sum is the batch's mean
                dlogits *= dlogits.dtype.type(task.target_count(shard) / task.target_count(batch))
            if len(group) > 1:
                dlogits /= dlogits.dtype.type(len(group))  # the update follows the group's mean loss
            model.backward(dlogits)  # backward
            loss_sum, counted = loss_sum + loss * n, counted + n
        loss_sum, counted = comm.sum_gradients(grads, loss_sum, counted)  # allreduce: the batch's gradient
        loss = loss_sum / max(counted, 1)
        if not np.isfinite(loss):
            raise FloatingPointError(f"the loss became {loss}: training diverged; lower --lr-factor or "
                                     "raise --warmup")
        if self.cfg.clip_norm:
            clip_grad_norm(grads, self.cfg.clip_norm)  # clip
        lr = self.optimizer.step(grads)  # Adam step
        model.zero_grad()
        return float(loss), int(counted), lr

    # ---- epochs -------------------------------------------------------------------------
    def fit(self) -> dict:
        """Train until ``cfg.epochs`` (or the time budget); returns the last validation metrics."""
        cfg, start, metrics = self.cfg, time.perf_counter(), {}
        # Sums over the updates only (validation and saving excluded): seconds, targets counted,
        # input tokens, updates; for the run, the epoch (with its loss) and since the last progress line.
        run = Counter()
        writer = self.comm.rank == 0
        if writer and self.epoch < cfg.epochs and (self.out_dir / "average").exists():
            shutil.rmtree(self.out_dir / "average")  # the average of epochs before this resume
            self.log("removed average/: it averages epochs before this resume (with --keep-epochs above 1, the end "
                     "of the run averages again)")
        try:
            while self.epoch < cfg.epochs:
                self.model.train()
                if self.comm.rank:  # rank 0 continues the model's (saved) generator; rank r draws from its own
                    # stream, started again each epoch: a resume (at an epoch's end) on the same N is exact
                    self.model.rng.bit_generator.state = np.random.default_rng(
                        [self.model.cfg.seed, self.comm.rank, self.epoch]).bit_generator.state
                batches = self.task.train_batches(self.epoch)
                # The updates so far and those of the epochs left: a resumed run plans as an
                # uninterrupted one does at the same epoch, even with another --accum.
                self.total_updates = self.optimizer.t + (cfg.epochs - self.epoch) * -(-len(batches) // cfg.accum_steps)
                epoch, window = Counter(), Counter()
                for i in range(0, len(batches), cfg.accum_steps):
                    group = batches[i:i + cfg.accum_steps]
                    t0 = time.perf_counter()
                    loss, counted, lr = self.train_step(group)
                    inputs = sum(map(self.task.input_tokens, group))
                    for meter in (run, epoch, window):
                        meter.update(seconds=time.perf_counter() - t0, count=counted, inputs=inputs, updates=1)
                    epoch.update(loss=loss * counted)
                    t = self.optimizer.t
                    self.history["steps"].append({"step": t, "epoch": self.epoch + 1, "loss": round(loss, 6), "lr": lr})
                    if t % cfg.log_every == 0:
                        left = (cfg.epochs - self.epoch) * len(batches) / cfg.accum_steps - epoch["updates"]
                        eta = run["seconds"] / run["updates"] * left
                        ranks = f" ranks {self.comm.size}" if self.comm.size > 1 else ""
                        self.log(f"epoch {self.epoch + 1}/{cfg.epochs} update {t} loss {loss:.4f} lr {lr:.2e} "
                                 f"{self._rates(window)}{ranks} eta {_fmt_time(eta)}")
                        window.clear()
                self.model.eval()
                metrics = self.comm.bcast(self.task.validate(self.model) if writer else None)  # once, on rank 0
                self._end_epoch(metrics, epoch, time.perf_counter() - start)
                if self.comm.bcast(cfg.max_minutes and self.epoch < cfg.epochs  # rank 0's clock decides for all
                                   and time.perf_counter() - start > 60 * cfg.max_minutes):
                    self.log(f"stopping: the time budget of {cfg.max_minutes} minutes is used up")
                    break
        except KeyboardInterrupt:
            self.log(f"interrupted: {self.out_dir / 'last'} holds epoch {self.saved_epoch}; continue with --resume"
                     if self.saved_epoch else "interrupted before the first epoch was saved: start again")
            raise
        if writer:
            self.average_kept()
            plot_history(self.history, self.out_dir / "curves.png", log=self.log)
        if run["updates"]:
            self.log(f"throughput: {run['updates']:,} updates in {run['seconds']:.1f} s of training (validation "
                     f"excluded): {self._rates(run)}")
        return metrics

    def average_kept(self) -> None:
        """With ``keep_epochs`` > 1, average the kept epochs' weights; save them as ``average/``
        only if they validate at least as well as ``best/``, which they then replace for use."""
        kept = kept_epochs(self.out_dir / "epochs")[-self.cfg.keep_epochs:] if self.cfg.keep_epochs > 1 else []
        if len(kept) < 2:
            return
        final = {k: p.copy() for k, p in self.model.parameters().items()}
        average_checkpoints(kept, self.model)
        self.model.eval()
        name = self.task.selection_metric
        score = self.task.validate(self.model)[name]
        better = score >= self.best_score  # kept epochs exist, so best/ does
        self.log(f"average of the last {len(kept)} epochs: validation {name} {score:.4f}, best epoch's "
                 f"{self.best_score:.4f}: " + ("saved as average/, used from now on" if better else "not kept"))
        if better:
            self.save("average")
        for k, p in self.model.parameters().items():
            p[...] = final[k]

    def _rates(self, meter: Counter) -> str:
        """Targets (and input tokens, where the task counts them) per second of training."""
        s = max(meter["seconds"], 1e-9)
        text = f"{self.task.count_unit}/s {meter['count'] / s:,.0f}"
        return text + (f" tok/s {meter['inputs'] / s:,.0f}" if meter["inputs"] else "")

    def _end_epoch(self, metrics: dict, meter: Counter, elapsed: float) -> None:
        """Check the numbers, record the epoch, save best/ (if better), last/ and the history."""
        train_loss = meter["loss"] / max(meter["count"], 1)
        bad = {k: v for k, v in {"train_loss": train_loss, **metrics}.items() if not np.isfinite(v)}
        if bad:  # a diverged model can keep a finite accuracy: every number is checked
            shown = ", ".join(f"{k} {v}" for k, v in bad.items())
            raise FloatingPointError(f"{shown} after epoch {self.epoch + 1}: the model diverged (or the validation "
                                     "set is empty); no checkpoint saved for this epoch")
        self.epoch += 1
        s, unit = max(meter["seconds"], 1e-9), self.task.count_unit
        record = {"epoch": self.epoch, "step": self.optimizer.t, "train_loss": train_loss, "time": round(elapsed, 2),
                  "train_time": round(meter["seconds"], 2),
                  "tokens_per_s": round((meter["inputs"] or meter["count"]) / s, 1), "ranks": self.comm.size}
        if unit != "tok":
            record[f"{unit}_per_s"] = round(meter["count"] / s, 1)
        if meter["inputs"]:
            record["input_tokens"] = meter["inputs"]
        self.history["epochs"].append({**record, **metrics})
        score = metrics[self.task.selection_metric]
        better = self.best_score is None or score >= self.best_score  # a tie goes to the later, longer-trained epoch
        if better:
            self.best_score = float(score)
        if self.comm.rank == 0:  # one writer: the other ranks hold the same weights
            self._write_epoch(better)
        shown = " ".join(f"{k} {v:.4f}" for k, v in metrics.items())
        self.log(f"epoch {self.epoch} done: train_loss {train_loss:.4f} {shown} [{_fmt_time(elapsed)}]")

    def _write_epoch(self, better: bool) -> None:
        """Save best/ (if ``better``), last/ and the kept epochs, and write the history."""
        if better:
            self.save("best")
        self.save("last")
        self.saved_epoch = self.epoch
        if self.cfg.keep_epochs:  # for checkpoint averaging: OUT/epochs/007, the oldest beyond N removed
            self.save(f"epochs/{self.epoch:03d}")
            for old in kept_epochs(self.out_dir / "epochs")[:-self.cfg.keep_epochs]:
                shutil.rmtree(old)
        atomic_write(self.out_dir / "history.json", json.dumps(self.history, indent=1))

    # ---- saving and resuming --------------------------------------------------------------
    def save(self, which: str) -> Path:
        """Save into ``out_dir/which``; ``last/`` also holds the optimiser, for resuming."""
        meta = {"task": self.task.to_dict(), "data": self.data_summary, "train": dataclasses.asdict(self.cfg),
                "step": self.optimizer.t, "epoch": self.epoch, "best_score": self.best_score, "history": self.history}
        return save_checkpoint(self.out_dir / which, self.model, meta, self.optimizer if which == "last" else None)

    def resume(self, doc: Optional[dict] = None) -> None:
        """Continue from ``out_dir/last``: weights, optimiser, dropout generator, epoch, history.
        ``doc``: its ``checkpoint.json``, when the caller has already read and checked it."""
        path = self.out_dir / "last"
        doc = doc or read_checkpoint_meta(path, for_resume=True)
        mine = self.task.to_dict()
        diff = sorted(k for k in ("name", "data", "model", "state") if doc["task"].get(k) != mine.get(k))
        if diff:
            raise NumpyTransformerError(f"cannot resume {path}: it was trained with other task settings "
                                        f"({', '.join(diff)})")
        if doc["data"] != self.data_summary:
            raise NumpyTransformerError(f"cannot resume {path}: the data read now is not the data it was trained on "
                                        f"({doc['data']} then, {self.data_summary} now); start a new run")
        load_checkpoint(path, self.model, self.optimizer, doc=doc)
        self.epoch = self.saved_epoch = doc["epoch"]
        self.history, self.best_score = doc["history"], doc["best_score"]
        self.log(f"resumed from {path} after epoch {self.epoch}, update {self.optimizer.t}")


def kept_epochs(folder) -> list:
    """The checkpoints that ``keep_epochs`` keeps in ``folder`` (a run's ``epochs/``), oldest first:
    its subfolders named by an epoch number, in numeric order."""
    folder = Path(folder)
    epochs = [p for p in folder.iterdir() if p.name.isdigit()] if folder.is_dir() else []
    return sorted(epochs, key=lambda p: int(p.name))


def plot_history(history: dict, path, log=print) -> None:
    """Loss and learning-rate curves as a PNG (skipped, with a note, without matplotlib)."""
    from .plotting import new_figure

    try:
        fig = new_figure(figsize=(10, 3.5))
    except NumpyTransformerError:
        log("matplotlib is not installed: no curves.png (pip install matplotlib)")
        return
    steps, epochs = history["steps"], history["epochs"]
    ax1, ax2 = fig.subplots(1, 2)
    updates = [s["step"] for s in steps]
    ax1.plot(updates, [s["loss"] for s in steps], lw=0.8, label="train (per update, label-smoothed)")
    if epochs and "val_loss" in epochs[0]:
        ax1.plot([e["step"] for e in epochs], [e["val_loss"] for e in epochs], "o-", label="validation (no smoothing)")
    ax1.set(xlabel="update", ylabel="loss", yscale="log")
    ax1.legend()
    ax2.plot(updates, [s["lr"] for s in steps])
    ax2.set(xlabel="update", ylabel="learning rate (Noam)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
