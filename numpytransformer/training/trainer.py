"""The training loop.

The update, the heart of it, is a handful of lines in :meth:`Trainer.train_step`: forward,
loss, backward, clip, update. :meth:`Trainer.fit` runs it for every batch of every epoch, then
validates, logs and saves. Everything else (progress lines, throughput, checkpoints, the
history) sits in small helpers around those lines, not inside them.

The trainer asks a task for what :class:`TrainingTask` declares: its batches, the model's inputs
and targets of a batch, and its loss. A task with odd needs (the language model's loss per
character) says so by overriding :meth:`TrainingTask.loss`, not the step.

A run directory holds ``last/`` (the end of the latest epoch, with the optimiser, for
``--resume``), ``best/`` (the best validation score), ``history.json`` and ``curves.png``; with
``keep_epochs`` N, also ``epochs/NNN/`` for the last N epochs, and ``average/``, their mean,
when it validates at least as well as ``best/`` (see :meth:`Trainer.average_kept`); a resume
that trains on drops an ``average/`` of the epochs before it. With ``ema`` > 0, also ``ema/``: the
moving average of the weights (:class:`~numpytransformer.training.optim.EMA`) at the end of the
latest epoch, validated then; a resume continues the average from it. A trainer without a run directory
writes nothing (the sentiment task's pretraining).
Resuming restarts at the epoch after ``last/`` with the weights, the optimiser and the
dropout generator as they were, so the losses equal an uninterrupted run's.

Given ``comm=world()`` under ``mpiexec -n N`` (as ``train`` does; see
:mod:`numpytransformer.training.parallel`, the trainer's one door to the ranks), every rank runs
this loop on its share of each batch, the batch flags keeping their meaning as the global batch;
the gradients are summed before the clip, so every rank takes the same step. Rank 0 alone
validates, logs and writes; the others receive its metrics. Without ``comm`` a trainer is one
process, even under ``mpiexec``.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import time
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Dict, Optional, Sequence, Tuple

import numpy as np

from .checkpoint import (
    average_checkpoints,
    load_checkpoint,
    read_checkpoint_meta,
    save_checkpoint,
)
from ..core.losses import cross_entropy
from ..errors import NumpyTransformerError
from ..files import atomic_write
from .optim import EMA, Adam, CosineSchedule, Lion, NoamSchedule, clip_grad_norm
from .parallel import SingleProcess, rank_rows
from .plotting import plot_history
from .settings import check_fields, option

__all__ = ["TrainConfig", "LATER_FIELDS", "TrainingTask", "Trainer", "kept_epochs", "without_timing"]


@dataclass
class TrainConfig:
    """Optimisation settings. The learning rate follows the Noam schedule
    ``lr_factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)`` (or, with ``schedule``
    cosine, a linear rise over ``warmup`` updates to ``lr`` and a half cosine down to
    ``min_lr_ratio * lr`` at the run's end), and over the last ``cooldown`` of the ``epochs``
    falls linearly to zero (a run cut short by ``max_minutes`` may stop before it does)."""

    epochs: int = option("--epochs", 10, "passes over the training data", low=1, high=100_000)
    lr_factor: float = option("--lr-factor", 1.0, "multiplier of the Noam schedule", low=1e-6, high=100.0)
    warmup: int = option("--warmup", 400, "warm-up updates of the Noam schedule", low=1, high=10 ** 7)
    label_smoothing: float = option("--label-smoothing", 0.1, "label smoothing epsilon", low=0.0, high=0.99)
    clip_norm: float = option("--clip", 1.0, "clip the global gradient norm to this (0: off)", low=0.0)
    accum_steps: int = option("--accum", 1, "batches per update (gradient accumulation)", low=1, high=1024)
    log_every: int = option("--log-every", 50, "updates between progress lines", low=1)
    max_minutes: float = option("--max-minutes", 0.0, "stop after the epoch that crosses this many minutes (0: no limit)", low=0.0)
    cooldown: float = option("--cooldown", 0.0, "share of the run's updates, at its end, over which the learning rate falls "
                             "linearly to 0 (0: off)", low=0.0, high=1.0)
    weight_decay: float = option("--weight-decay", 0.0, "decoupled weight decay of the matrices (AdamW; 0: plain Adam)",
                                 low=0.0, high=1.0)
    keep_epochs: int = option("--keep-epochs", 0, "also keep the weights of the last N epochs in OUT/epochs/, for the average "
                              "command (0: off)", low=0, high=1000)
    optimizer: str = option("--optimizer", "adam", "adam, or lion (sign updates, one moment: wants a learning rate "
                            "3 to 10 times smaller)", choices=("adam", "lion"))
    schedule: str = option("--schedule", "noam", "learning-rate schedule: noam (inverse square root), or cosine "
                           "(linear warm-up, then a half cosine to a floor at the run's end)", choices=("noam", "cosine"))
    lr: float = option("--lr", 0.0, "peak learning rate of the cosine schedule (0: the Noam schedule's peak, "
                       "lr-factor * d_model^-0.5 * warmup^-0.5)", low=0.0, high=10.0)
    min_lr_ratio: float = option("--min-lr-ratio", 0.1, "the cosine schedule's floor, as a share of its peak",
                                 low=0.0, high=1.0)
    ema: float = option("--ema", 0.0, "also keep a moving average of the weights with this decay (e.g. 0.999), "
                        "validated at each epoch's end and saved as OUT/ema/ (0: off)", low=0.0, high=0.999999)

    def __post_init__(self):
        check_fields(self)
        if self.lr and self.schedule != "cosine":
            raise NumpyTransformerError(f"--lr {self.lr} sets the cosine schedule's peak; the Noam schedule's is "
                                        "set by --lr-factor (or add --schedule cosine)")


#: The fields of :class:`TrainConfig` that the checkpoints of older runs lack, with the values those
#: runs trained with: absent from a checkpoint, a field means this.
LATER_FIELDS = {"optimizer": "adam", "schedule": "noam", "lr": 0.0, "min_lr_ratio": 0.1, "ema": 0.0}


class TrainingTask(ABC):
    """What the trainer asks of a task: its batches, the model's inputs and targets of a batch, and
    the loss. :class:`~numpytransformer.tasks.base.Task` adds what the command line asks.

    A batch is whatever :meth:`train_batches` lists (rows of a data set, their indices); only the
    task reads it. The loss is a pure function of the logits and the targets; :meth:`shard` and
    :meth:`target_count` split a batch among the ranks of a data-parallel run.
    """

    #: The metric of :meth:`validate` that picks the best checkpoint (higher is better).
    selection_metric: ClassVar[str]
    #: What :meth:`loss` counts, as the progress line names it (tok/s).
    count_unit: ClassVar[str] = "tok"
    #: Targets equal to this id are padding and do not count (None: every target counts).
    target_pad: ClassVar[Optional[int]] = 0

    @abstractmethod
    def train_batches(self, epoch: int) -> Sequence:
        """The batches of one epoch, the same for the same seed and epoch."""

    @abstractmethod
    def batch_arrays(self, batch) -> Tuple[tuple, np.ndarray]:
        """``(model inputs, targets)`` of a training batch."""

    def noised(self, model, inputs: tuple) -> tuple:
        """The model's inputs as a training update reads them: unchanged unless a task's settings
        add noise in training mode, such as word dropout (validation, in eval mode, must read them
        as they are)."""
        return inputs

    def loss(self, logits: np.ndarray, targets: np.ndarray, label_smoothing: float) -> Tuple[float, int, np.ndarray]:
        """``(mean loss, targets counted, dlogits)``: the cross-entropy of the non-pad targets and
        its gradient (see :func:`~numpytransformer.core.losses.cross_entropy`)."""
        loss, dlogits = cross_entropy(logits, targets, pad_id=self.target_pad, label_smoothing=label_smoothing)
        return loss, self._non_pad(targets), dlogits

    def mean_loss(self, model, batches) -> float:
        """Target-weighted mean cross-entropy (no smoothing) over batches, in the model's mode."""
        total, n = 0.0, 0
        for batch in batches:
            inputs, targets = self.batch_arrays(batch)
            loss, k, _ = self.loss(model.forward(*inputs), targets, 0.0)
            total, n = total + loss * k, n + k
        return total / max(n, 1)

    def shard(self, batch, rank: int, size: int):
        """Rank ``rank``'s share of a training batch split among ``size`` ranks for data-parallel
        training (:func:`~numpytransformer.training.parallel.rank_rows`); None when there are none
        (a batch of fewer rows than ranks)."""
        rows = rank_rows(batch, rank, size)
        return rows if len(rows) else None

    def target_count(self, batch) -> int:
        """The targets whose mean loss :meth:`loss` differentiates: the non-pad ones. A
        data-parallel run counts every batch at every update: a task whose batch is padded here
        counts from its lengths instead."""
        return self._non_pad(self.batch_arrays(batch)[1])

    def _non_pad(self, targets: np.ndarray) -> int:
        return targets.size if self.target_pad is None else int((targets != self.target_pad).sum())

    def input_tokens(self, batch) -> int:
        """Tokens the model reads in a batch, for a task whose :attr:`count_unit` is something
        else (reviews): the progress line then shows them per second too. 0: not counted."""
        return 0

    @abstractmethod
    def validate(self, model) -> Dict[str, float]:
        """Metrics on the validation split, :attr:`selection_metric` among them."""

    def data_summary(self) -> dict:
        """What identifies the data read (counts, a digest): ``--resume`` refuses other data.
        A :class:`Trainer` calls it once, when it is built."""
        return {}

    @abstractmethod
    def to_dict(self) -> dict:
        """The task's settings, saved in every checkpoint (JSON)."""


def without_timing(record: dict) -> dict:
    """An epoch record without what measures time, nor the number of ranks: what two runs of the
    same settings share."""
    return {k: v for k, v in record.items() if k not in ("time", "train_time", "ranks") and not k.endswith("_per_s")}


def _fmt_time(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 60}m{seconds % 60:02d}s"


class Trainer:
    """Train ``model`` on ``task`` with ``cfg``, writing the run into ``out_dir`` (None: write
    nothing); ``comm``: the ranks of a data-parallel run
    (:func:`~numpytransformer.training.parallel.world`), None for one process."""

    def __init__(self, model, task: TrainingTask, cfg: TrainConfig, out_dir, log=None, comm=None):
        self.model, self.task, self.cfg = model, task, cfg
        self.comm = SingleProcess() if comm is None else comm
        self.out_dir = None if out_dir is None else Path(out_dir)
        self.writes = self.comm.is_writer and self.out_dir is not None  # one writer: rank 0
        self.noam = NoamSchedule(model.cfg.d_model, cfg.warmup, cfg.lr_factor)
        self.cosine = CosineSchedule(cfg.lr or self.noam(cfg.warmup), cfg.warmup, cfg.min_lr_ratio)
        optimizer = {"adam": Adam, "lion": Lion}[cfg.optimizer]
        self.optimizer = optimizer(model.parameters(), lr=self.learning_rate, weight_decay=cfg.weight_decay)
        self.ema = EMA(model.parameters(), cfg.ema) if cfg.ema else None  # the average of the weights, or none
        self.total_updates = 0  # the run's length, for the cool-down: planned at each epoch's start
        self.data_summary = task.data_summary()  # recorded in every save: the data is hashed once
        self.history = {"steps": [], "epochs": []}
        self.epoch = self.saved_epoch = 0  # epochs finished, and the one last/ holds
        self.best_score = None  # the best validation score so far: best/ holds that epoch
        # Sums over the updates only (validation and saving excluded): seconds, targets counted,
        # input tokens, updates; for the run, the epoch (with its loss) and since the last progress line.
        self.run_meter, self.epoch_meter, self.window_meter = Counter(), Counter(), Counter()
        self.log = log or (lambda msg: print(msg, flush=True))
        if not self.comm.is_writer:
            self.log = lambda msg: None

    def learning_rate(self, step: int) -> float:
        """The schedule's rate (Noam's, or the cosine's over the run's planned updates), times a linear
        fall to zero over the last ``cooldown`` of the updates."""
        rate = self.cosine(step, self.total_updates) if self.cfg.schedule == "cosine" else self.noam(step)
        if not self.cfg.cooldown:
            return rate
        start = self.total_updates * (1 - self.cfg.cooldown)
        fall = min(1.0, (self.total_updates + 1 - step) / (self.total_updates + 1 - start))
        return rate * max(fall, 0.0)

    # ---- the update ---------------------------------------------------------------------
    def train_step(self, group) -> tuple:
        """One update from a group of batches (one, or ``accum_steps`` of them): returns (mean loss,
        targets counted, learning rate). Each batch's gradient is weighted by its share of the
        group, and, under MPI, by this rank's share of the batch's targets (``comm.share``)."""
        model, task, grads = self.model, self.task, self.model.gradients()
        loss_sum, counted = 0.0, 0
        for batch in group:
            part, weight = self.comm.share(task, batch)  # this rank's rows (all of them in one process)
            if part is None:
                continue
            inputs, targets = task.batch_arrays(part)
            logits = model.forward(*task.noised(model, inputs))  # forward
            loss, n, dlogits = task.loss(logits, targets, self.cfg.label_smoothing)  # loss
            dlogits *= weight / len(group)  # the gradient of the group's mean loss (dlogits is ours to scale)
            model.backward(dlogits)  # backward
            loss_sum, counted = loss_sum + loss * n, counted + n
        loss_sum, counted = self.comm.sum_gradients(grads, loss_sum, counted)  # allreduce: the batch's gradient
        loss = loss_sum / max(counted, 1)
        if not np.isfinite(loss):
            raise FloatingPointError(f"the loss became {loss}: training diverged; lower --lr-factor or "
                                     "raise --warmup")
        if self.cfg.clip_norm:
            clip_grad_norm(grads, self.cfg.clip_norm)  # clip
        lr = self.optimizer.step(grads)  # update (Adam, or Lion)
        if self.ema is not None:
            self.ema.update(model.parameters())  # the moving average follows the new weights
        model.zero_grad()
        return float(loss), int(counted), lr

    # ---- epochs -------------------------------------------------------------------------
    def fit(self) -> dict:
        """Train until ``cfg.epochs`` (or the time budget); returns the last validation metrics."""
        self._start, metrics = time.perf_counter(), {}
        self.run_meter.clear()
        self._drop_stale_average()
        try:
            while self.epoch < self.cfg.epochs:
                for group in self._start_epoch():
                    t0 = time.perf_counter()
                    loss, counted, lr = self.train_step(group)
                    self._record_step(group, loss, counted, lr, time.perf_counter() - t0)
                metrics = self._end_epoch()
                if self._out_of_time():
                    break
        except KeyboardInterrupt:
            self.log(f"interrupted: {self.out_dir / 'last'} holds epoch {self.saved_epoch}; continue with --resume"
                     if self.saved_epoch else "interrupted before the first epoch was saved: start again")
            raise
        self._end_run()
        return metrics

    def _drop_stale_average(self) -> None:
        """Remove an ``average/`` of the epochs before this resume: the run trains on past them."""
        if self.writes and self.epoch < self.cfg.epochs and (self.out_dir / "average").exists():
            shutil.rmtree(self.out_dir / "average")
            self.log("removed average/: it averages epochs before this resume (with --keep-epochs above 1, the end "
                     "of the run averages again)")

    def _start_epoch(self) -> list:
        """Training mode, each rank's dropout stream, and the groups of batches of the epoch; plans
        the run's updates for the cool-down."""
        self.model.train()
        self.comm.seed_dropout(self.model, self.epoch)
        batches, accum = self.task.train_batches(self.epoch), self.cfg.accum_steps
        self._epoch_updates = -(-len(batches) // accum)
        # The updates so far and those of the epochs left: a resumed run plans as an
        # uninterrupted one does at the same epoch, even with another --accum.
        self.total_updates = self.optimizer.t + (self.cfg.epochs - self.epoch) * self._epoch_updates
        self.epoch_meter.clear()
        self.window_meter.clear()
        return [batches[i:i + accum] for i in range(0, len(batches), accum)]

    def _record_step(self, group, loss: float, counted: int, lr: float, seconds: float) -> None:
        """Add an update to the meters and the history; a progress line every ``log_every`` updates."""
        inputs = sum(map(self.task.input_tokens, group))
        for meter in (self.run_meter, self.epoch_meter, self.window_meter):
            meter.update(seconds=seconds, count=counted, inputs=inputs, updates=1)
        self.epoch_meter.update(loss=loss * counted)
        t = self.optimizer.t
        self.history["steps"].append({"step": t, "epoch": self.epoch + 1, "loss": round(loss, 6), "lr": lr})
        if t % self.cfg.log_every == 0:
            left = (self.cfg.epochs - self.epoch) * self._epoch_updates - self.epoch_meter["updates"]
            eta = self.run_meter["seconds"] / self.run_meter["updates"] * left
            ranks = f" ranks {self.comm.size}" if self.comm.size > 1 else ""
            self.log(f"epoch {self.epoch + 1}/{self.cfg.epochs} update {t} loss {loss:.4f} lr {lr:.2e} "
                     f"{self._rates(self.window_meter)}{ranks} eta {_fmt_time(eta)}")
            self.window_meter.clear()

    def _out_of_time(self) -> bool:
        """Whether the time budget is used up with epochs left; rank 0's clock decides for all."""
        cfg = self.cfg
        over = self.comm.bcast(bool(cfg.max_minutes) and self.epoch < cfg.epochs
                               and time.perf_counter() - self._start > 60 * cfg.max_minutes)
        if over:
            self.log(f"stopping: the time budget of {cfg.max_minutes} minutes is used up")
        return over

    def _end_run(self) -> None:
        """The average of the kept epochs, the curves, and the run's throughput."""
        if self.writes:
            self.average_kept()
            plot_history(self.history, self.out_dir / "curves.png", log=self.log)
        run = self.run_meter
        if run["updates"]:
            self.log(f"throughput: {run['updates']:,} updates in {run['seconds']:.1f} s of training (validation "
                     f"excluded): {self._rates(run)}")

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

    def _end_epoch(self) -> dict:
        """Validate (once, on rank 0), check the numbers, record the epoch, save best/ (if better),
        last/ and the history, log the epoch's line; returns the validation metrics."""
        self.model.eval()
        metrics = self.comm.bcast(self.task.validate(self.model) if self.comm.is_writer else None)
        meter, elapsed = self.epoch_meter, time.perf_counter() - self._start
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
        if self.ema is not None:
            self.history["epochs"][-1][f"ema_{self.task.selection_metric}"] = self._ema_epoch()
        score = metrics[self.task.selection_metric]
        better = self.best_score is None or score >= self.best_score  # a tie goes to the later, longer-trained epoch
        if better:
            self.best_score = float(score)
        if self.writes:
            self._write_epoch(better)
        shown = " ".join(f"{k} {v:.4f}" for k, v in metrics.items())
        self.log(f"epoch {self.epoch} done: train_loss {train_loss:.4f} {shown} [{_fmt_time(elapsed)}]")
        return metrics

    def _ema_epoch(self) -> float:
        """Validate the moving average of the weights (on rank 0) and save it as ``ema/``; returns its
        score. The model's own weights are back in place afterwards."""
        own = {k: p.copy() for k, p in self.model.parameters().items()}
        self.ema.copy_to(self.model.parameters())
        name = self.task.selection_metric
        score = float(self.comm.bcast(self.task.validate(self.model)[name] if self.comm.is_writer else None))
        if self.writes:
            self.save("ema")
        for k, p in self.model.parameters().items():
            p[...] = own[k]
        self.log(f"moving average of the weights (decay {self.cfg.ema:g}): validation {name} {score:.4f}"
                 + (", saved as ema/" if self.writes else ""))
        return score

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
        if self.ema is not None:
            self._resume_ema(doc["epoch"])
        self.epoch = self.saved_epoch = doc["epoch"]
        self.history, self.best_score = doc["history"], doc["best_score"]
        self.log(f"resumed from {path} after epoch {self.epoch}, update {self.optimizer.t}")

    def _resume_ema(self, epoch: int) -> None:
        """The moving average from ``ema/`` when it holds ``epoch``, as ``last/`` does; else it
        restarts from the weights of ``last/``."""
        path = self.out_dir / "ema"
        saved = read_checkpoint_meta(path)["epoch"] if (path / "checkpoint.json").exists() else None
        if saved != epoch:
            self.log("the moving average of the weights restarts from last/: ema/ "
                     + ("does not exist" if saved is None else f"holds epoch {saved}, not {epoch}"))
            self.ema.load_state_arrays(self.model.parameters())
            return
        own = {k: p.copy() for k, p in self.model.parameters().items()}
        load_checkpoint(path, self.model)  # ema/'s weights pass through the model into the average
        self.ema.load_state_arrays(self.model.parameters())
        for k, p in self.model.parameters().items():
            p[...] = own[k]


def kept_epochs(folder) -> list:
    """The checkpoints that ``keep_epochs`` keeps in ``folder`` (a run's ``epochs/``), oldest first:
    its subfolders named by an epoch number, in numeric order."""
    folder = Path(folder)
    epochs = [p for p in folder.iterdir() if p.name.isdigit()] if folder.is_dir() else []
    return sorted(epochs, key=lambda p: int(p.name))
