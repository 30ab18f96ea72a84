"""Data-parallel training throughput: one process with 2 BLAS threads against 2 MPI ranks with
one thread each, the same global batch, side by side.

For each recipe, each side runs in its own subprocess (``python`` with OPENBLAS_NUM_THREADS=2, or
``mpiexec -n 2 python`` with 1), ``--rounds`` times in the order A B, B A, ... so that the
machine's drift hits both alike. A run times ``--steps`` updates of :meth:`Trainer.train_step`
(forward and loss of the rank's shard, backward, the allreduce, clipping, Adam) after
``--warmup`` untimed ones; the time inside the allreduce (packing the flat buffer included) is
timed apart, and so is the wait for the slower rank before it (a barrier, in this benchmark
only). Reported: target tokens per second (non-pad targets of the global batch, per second
of updates; the median over rounds), the speed-up over the 2-thread process, the allreduce's
time and share of a step, and the wait. A third side, one process with one thread, shows what
each kind of parallelism gains over a single core.

The recipes, at their shapes:

* ``reversal``: ``train reverse``'s task and recipe (d64, 2+2 layers, pre-LN, 128 sequences of
  1-20 symbols a batch), on its own generated data.
* ``translation``: the Multi30K model without tied embeddings (d256, 3+3 layers, 8 heads, d_ff 512,
  post-LN, dropout 0.1) with the cased-BPE vocabularies' sizes (5,044 and 4,919), on random token
  ids in batches of the recipe's 3,000-token budget (120 sentence pairs padded to 25 tokens, lengths
  10-25).
* ``lm``: the language model recipe's first model (d128, 2 pre-LN blocks, tied embeddings, learned positions),
  a 565-token vocabulary (Tiny Shakespeare's BPE with 500 merges), 16 windows of 128 tokens, on
  random ids.

Usage::

    python benchmarks/bench_parallel.py                     # the measurement: 3 recipes, 3 rounds
    python benchmarks/bench_parallel.py --steps 2 --warmup 1 --rounds 1   # a smoke run
    python benchmarks/bench_parallel.py --recipes translation --json benchmarks/results/bench_parallel.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

MARKER = "@@RESULT@@ "
RECIPES = ("reversal", "translation", "lm")
# The third side, one thread in one process, is the baseline of both kinds of parallelism: it shows
# how much of the second core the threads already use, which bounds what the ranks can add.
SIDES = {"1 process x 2 threads": (1, 2), "2 ranks x 1 thread": (2, 1), "1 process x 1 thread": (1, 1)}


class Batches:
    """The trainer's view of a task over fixed arrays: a batch is an array of row indices, and
    sharding, the loss and the target count are the :class:`TrainingTask` methods themselves."""

    from numpytransformer.training.trainer import TrainingTask

    shard, noised, loss, target_count, _non_pad = (TrainingTask.shard, TrainingTask.noised, TrainingTask.loss,
                                                   TrainingTask.target_count, TrainingTask._non_pad)

    def __init__(self, inputs: tuple, targets, target_pad):
        self.inputs, self.targets, self.target_pad = inputs, targets, target_pad

    def batch_arrays(self, idx):
        return tuple(x[idx] for x in self.inputs), self.targets[idx]

    def data_summary(self) -> dict:
        return {}


def build(recipe: str):
    """``(model, task, train config, batches)`` of a recipe at its shapes."""
    import numpy as np

    from numpytransformer.nn.config import TransformerConfig
    from numpytransformer.nn.gpt import TransformerLM
    from numpytransformer.nn.models import Transformer
    from numpytransformer.tasks.lm import LanguageModelTask, LMData
    from numpytransformer.tasks.reverse import ReversalTask, ReverseData
    from numpytransformer.tasks.translate import TranslateData, TranslationTask

    rng = np.random.default_rng(0)
    if recipe == "reversal":
        data = ReverseData()
        settings, train = ReversalTask.recipe(data)
        task = ReversalTask(data, settings)
        return task.build_model(), task, train, task.train_batches(0)
    if recipe == "translation":
        settings, train = TranslationTask.recipe(TranslateData())
        V_src, V_tgt, B, T = 5044, 4919, 120, 25
        model = Transformer(TransformerConfig(src_vocab_size=V_src, tgt_vocab_size=V_tgt, max_len=128, pad_id=0,
                                              **settings.config_fields()))
        lengths = rng.integers(10, T + 1, size=(2, 64 * B))
        src = rng.integers(4, V_src, size=(64 * B, T)) * (np.arange(T) < lengths[0][:, None])
        tgt = rng.integers(4, V_tgt, size=(64 * B, T + 1)) * (np.arange(T + 1) < lengths[1][:, None] + 1)
        task = Batches((src, tgt[:, :-1]), tgt[:, 1:], target_pad=0)
        return model, task, train, [np.arange(i, i + B) for i in range(0, 64 * B, B)]
    settings, train = LanguageModelTask.recipe(LMData())
    # the model of the recorded run (RESULTS.md), the recipe's before it grew to d192 with dropout
    settings = dataclasses.replace(settings, d_model=128, n_heads=4, d_ff=512, dropout=0.0)
    V, B, T = 565, 16, 128
    model = TransformerLM(TransformerConfig(src_vocab_size=V, max_len=T, positions="learned",
                                            **settings.config_fields()))
    windows = rng.integers(0, V, size=(64 * B, T + 1))
    task = Batches((windows[:, :-1],), windows[:, 1:], target_pad=None)
    return model, task, train, [np.arange(i, i + B) for i in range(0, 64 * B, B)]


def worker(recipe: str, steps: int, warmup: int) -> None:
    """Time ``steps`` updates on this process (or on each rank, under mpiexec); rank 0 prints."""
    import numpy as np

    from numpytransformer.training.parallel import world
    from numpytransformer.training.trainer import Trainer

    comm = world()
    model, task, train, batches = build(recipe)
    trainer = Trainer(model, task, train, out_dir="/nonexistent", log=lambda msg: None, comm=comm)
    in_allreduce, waiting = [], []
    sum_gradients = comm.sum_gradients

    def timed_sum(*args):  # a barrier first: the wait for the slower rank is timed apart from the sum
        t0 = time.perf_counter()
        if comm.size > 1:
            comm.comm.Barrier()
        t1 = time.perf_counter()
        out = sum_gradients(*args)
        waiting.append(t1 - t0)
        in_allreduce.append(time.perf_counter() - t1)
        return out

    comm.sum_gradients = timed_sum
    seconds, targets = [], 0
    for i in range(warmup + steps):
        batch = batches[i % len(batches)]
        t0 = time.perf_counter()
        trainer.train_step([batch])
        if i >= warmup:
            seconds.append(time.perf_counter() - t0)
            targets += task.target_count(batch)
    if comm.rank == 0:
        print(MARKER + json.dumps({"params": model.num_parameters(), "steps": steps, "step_s": float(np.median(seconds)),
                                   "tokens_per_s": targets / sum(seconds),
                                   "allreduce_s": float(np.median(in_allreduce[warmup:])) if comm.size > 1 else 0.0,
                                   "wait_s": float(np.median(waiting[warmup:])) if comm.size > 1 else 0.0,
                                   "targets_per_batch": targets / steps}), flush=True)


def run_side(recipe: str, ranks: int, threads: int, steps: int, warmup: int) -> dict:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", recipe, "--steps", str(steps),
           "--warmup", str(warmup)]
    if ranks > 1:
        mpiexec = shutil.which("mpiexec") or shutil.which("mpiexec", path=os.path.dirname(sys.executable))
        cmd = [mpiexec or "mpiexec", "-n", str(ranks)] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    line = next((l for l in r.stdout.splitlines() if l.startswith(MARKER)), None)
    if r.returncode or line is None:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return json.loads(line[len(MARKER):])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipes", nargs="+", choices=RECIPES, default=list(RECIPES))
    p.add_argument("--steps", type=int, default=20, help="timed updates per run (default %(default)s)")
    p.add_argument("--warmup", type=int, default=3, help="untimed updates first (default %(default)s)")
    p.add_argument("--rounds", type=int, default=3, help="runs of each side, alternating (default %(default)s)")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    p.add_argument("--worker", choices=RECIPES, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args.worker, args.steps, args.warmup)

    print(f"{args.steps} timed updates after {args.warmup} untimed, {args.rounds} rounds a side; "
          f"{os.cpu_count()} CPUs; {time.strftime('%Y-%m-%d %H:%M:%S')}", flush=True)
    header = (f"{'recipe':<12} {'params':>10} {'targets/batch':>13} {'side':<22} {'step ms':>8} {'tok/s':>8} "
              f"{'speed-up':>8} {'allreduce ms':>12} {'share':>6} {'wait ms':>8}")
    print(header)
    results = {}
    for recipe in args.recipes:
        runs = {side: [] for side in SIDES}
        for k in range(args.rounds):
            for side in (list(SIDES) if k % 2 == 0 else list(reversed(list(SIDES)))):
                runs[side].append(run_side(recipe, *SIDES[side], args.steps, args.warmup))
        base = None
        for side, rs in runs.items():
            tok = statistics.median(r["tokens_per_s"] for r in rs)
            step = statistics.median(r["step_s"] for r in rs)
            ar = statistics.median(r["allreduce_s"] for r in rs)
            wait = statistics.median(r["wait_s"] for r in rs)
            base = base or tok
            results.setdefault(recipe, {})[side] = {"tokens_per_s": tok, "step_s": step, "allreduce_s": ar,
                                                    "allreduce_share": ar / step, "wait_s": wait, "runs": rs}
            print(f"{recipe:<12} {rs[0]['params']:>10,} {rs[0]['targets_per_batch']:>13,.0f} {side:<22} "
                  f"{1000 * step:>8.1f} {tok:>8,.0f} {tok / base:>7.2f}x {1000 * ar:>12.2f} {100 * ar / step:>5.1f}% {1000 * wait:>8.1f}",
                  flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"steps": args.steps, "warmup": args.warmup, "rounds": args.rounds, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
