"""Time one training step of numpytransformer beside PyTorch at its best, phase by phase.

One step, on every side, is timed in three phases (and their sum, the step):

* **forward**: the model's forward pass and the loss (label smoothing 0.1, padding ignored);
* **backward**: ``zero_grad`` and the backward pass;
* **optimiser**: clipping the global gradient norm to 1.0, then Adam with the Noam schedule.

The sides:

* ``numpy`` (float32): ``Transformer.forward``, ``cross_entropy``, ``zero_grad``, ``backward``,
  ``clip_grad_norm``, ``Adam.step`` with ``NoamSchedule(d_model, 4000)``.
* ``torch`` (eager, float32): embeddings scaled by sqrt(D) plus a fixed sinusoidal table,
  ``nn.Transformer(..., batch_first=True)`` with the key-padding masks and a causal mask,
  ``nn.Linear(D, V)``, ``F.cross_entropy(..., ignore_index=0, label_smoothing=0.1)``,
  ``loss.backward()``, ``clip_grad_norm_(..., foreach=True)``,
  ``Adam(betas=(0.9, 0.98), eps=1e-9, fused=True)`` (the fused CPU kernel), the same Noam
  schedule through ``LambdaLR``, ``zero_grad(set_to_none=True)``.
* ``compile``: the same PyTorch model and optimiser, with the forward and the loss in one
  ``torch.compile``-d function (inductor; its backward is compiled by AOTAutograd).
  ``nn.Transformer`` adds a final LayerNorm to each stack that the post-LN numpy model
  has not; it costs little.

Fairness on a shared machine: each side runs in its own long-lived worker process (its own
thread pool, its own peak RSS), all with the same thread count (``OPENBLAS_NUM_THREADS`` /
``OMP_NUM_THREADS`` and ``torch.set_num_threads``). After each side's warm-up (compilation
included), the parent asks them in turn for a block of steps, A B C, then C B A, ... for
``--rounds`` rounds, so that the machine's drift hits every side alike; a short pause
between blocks lets a pool's spinning threads go to sleep. Reported: the median and the
10th-90th percentile range of each phase over all steps, and the ratio numpy/torch as the
median (and 10-90% range) of the per-round ratios of block medians, a paired estimate.
The float32 GEMM peak (a 2048 x 2048 x 2048 ``a @ b``) is measured inside the numpy worker
in every round too, so that the share of the peak that a step reaches compares two figures
taken under the same load.

Usage::

    python benchmarks/bench_step.py                                # translation and reversal, 1 thread
    python benchmarks/bench_step.py --threads 1 2 --rounds 15 --json benchmarks/results/bench_step.json
    python benchmarks/bench_step.py --no-compile --config reversal  # skip torch.compile
    python benchmarks/bench_step.py --config translation --profile   # cProfile of the numpy step
    python benchmarks/bench_step.py --side numpy --before /tmp/old    # this library against an older one
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional

# numpy and torch are imported inside the workers only: the thread settings must be in the
# environment before the import, and the parent must stay small (Linux carries a process's
# ru_maxrss across exec into its children).

PAD, BOS, EOS, FIRST_ID = 0, 1, 2, 4
MARKER = "@@RESULT@@ "
PHASES = ("forward", "backward", "optimiser", "step")
SIDES = ("numpy", "torch", "compile", "before")  # before: numpy with the library of --before DIR
CLOCKS = ("wall", "cpu")


@dataclass(frozen=True)
class BenchConfig:
    """One model size and one batch: ``B`` sentences padded to ``T`` (source and target)."""

    D: int
    L: int
    H: int
    F: int
    V: int
    B: int
    T: int
    dropout: float = 0.1
    norm_first: bool = False  # pre-LN (the reversal recipe) or post-LN (the paper)
    length_spread: int = 6  # lengths are uniform in [T - spread, T]
    max_len: int = 64


CONFIGS: Dict[str, BenchConfig] = {
    # The Multi30K translation model's size (d_ff 1024, as in every recorded run), post-LN.
    "translation": BenchConfig(D=256, L=3, H=8, F=1024, V=8000, B=64, T=24),
    "medium": BenchConfig(D=128, L=2, H=4, F=512, V=8000, B=64, T=24),
    # `train reverse`: d64, 2+2 layers, 4 heads, d_ff 256, pre-LN, no dropout, 24 symbols.
    "reversal": BenchConfig(D=64, L=2, H=4, F=256, V=24, B=128, T=20, dropout=0.0, norm_first=True),
}


def train_step_flops(c: BenchConfig, S: Optional[int] = None, T: Optional[int] = None) -> float:
    """Matmul FLOPs of one training step, counted on the padded shapes (what is computed).

    A GEMM of (M, K) by (K, N) costs 2MKN FLOPs. With B sentences, source length S,
    target length T, width D, FFN width F, vocabulary V and L layers per stack, the
    forward pass costs

    .. math::

        \\text{fwd} = L\\,[\\underbrace{8BSD^2}_{Q,K,V,O} + \\underbrace{4BSDF}_{\\text{FFN}}
                       + \\underbrace{4BS^2D}_{QK^\\top,\\,PV}]
                    + L\\,[\\underbrace{8BTD^2 + 4BT^2D}_{\\text{self-attn}}
                       + \\underbrace{4BTD^2 + 4BSD^2 + 4BTSD}_{\\text{cross-attn}}
                       + \\underbrace{4BTDF}_{\\text{FFN}}]
                    + \\underbrace{2BTDV}_{\\text{output}}

    (encoder, decoder, output projection; the embeddings are gathers, not GEMMs) and a
    training step costs ``3 * fwd``: the backward of each GEMM is two GEMMs of the same
    size, one for the input gradient and one for the weight gradient. Softmax, LayerNorm,
    dropout, the loss and Adam are not counted.
    """
    B, D, F, V, L = c.B, c.D, c.F, c.V, c.L
    S = c.T if S is None else S
    T = c.T if T is None else T
    encoder = L * (8 * B * S * D * D + 4 * B * S * D * F + 4 * B * S * S * D)
    decoder = L * (8 * B * T * D * D + 4 * B * T * T * D
                   + 4 * B * T * D * D + 4 * B * S * D * D + 4 * B * T * S * D
                   + 4 * B * T * D * F)
    output = 2 * B * T * D * V
    return 3.0 * (encoder + decoder + output)


def make_batch(c: BenchConfig, seed: int = 0):
    """(src, tgt_in, tgt_out) int64 arrays (B, T), right-padded with 0, ids in [4, V).

    Each source and target length is uniform in [T - spread, T]; a target of n tokens
    y_1..y_{n-1} gives ``tgt_in = BOS y_1..y_{n-1}`` and ``tgt_out = y_1..y_{n-1} EOS``.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    lo = max(c.T - c.length_spread, 2)
    src = np.zeros((c.B, c.T), dtype=np.int64)
    tgt_in = np.zeros((c.B, c.T), dtype=np.int64)
    tgt_out = np.zeros((c.B, c.T), dtype=np.int64)
    for b in range(c.B):
        n_src, n_tgt = rng.integers(lo, c.T + 1, size=2)
        src[b, :n_src] = rng.integers(FIRST_ID, c.V, size=n_src)
        words = rng.integers(FIRST_ID, c.V, size=n_tgt - 1)
        tgt_in[b, :n_tgt] = np.concatenate([[BOS], words])
        tgt_out[b, :n_tgt] = np.concatenate([words, [EOS]])
    return src, tgt_in, tgt_out


def current_rss_mb() -> float:
    """Resident set size now, from /proc (Linux); the peak so far where /proc is missing."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return peak_rss_mb()


def peak_rss_mb() -> float:
    """``ru_maxrss`` of this process in MB (the kernel reports KB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def quantile(xs: List[float], q: float) -> float:
    """The q-quantile by linear interpolation between order statistics (q=0.5: the median)."""
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (pos - lo) * (s[hi] - s[lo])


def median(xs: List[float]) -> float:
    return quantile(xs, 0.5)


GEMM_N = 2048


def gemm_times(matmul, reps: int = 3) -> Dict[str, List[float]]:
    """Wall and CPU seconds of ``reps`` float32 (n, n) @ (n, n) products, after one untimed one."""
    matmul()
    times: Dict[str, List[float]] = {"wall": [], "cpu": []}
    for _ in range(reps):
        t0 = clock()
        matmul()
        t1 = clock()
        times["wall"].append(t1[0] - t0[0])
        times["cpu"].append(t1[1] - t0[1])
    return times


# ---- workers: one side, one configuration, one long-lived process ----------------------------
def clock():
    """(wall seconds, this process's CPU seconds): with one thread the CPU time is what the
    step cost, whatever else the machine ran meanwhile; the wall time is what a user waits."""
    return time.perf_counter(), time.process_time()


def phases(*marks) -> dict:
    """{"wall": [forward, backward, optimiser], "cpu": [...]} from four clock() readings."""
    return {kind: [b[i] - a[i] for a, b in zip(marks, marks[1:])] for i, kind in enumerate(("wall", "cpu"))}


def numpy_setup(c: BenchConfig):
    """The model, and ``step()`` doing one training step and returning its phases' seconds."""
    import numpy as np

    from numpytransformer import Adam, NoamSchedule, Transformer, TransformerConfig, clip_grad_norm
    try:  # a --before checkout from before the package was laid out in layers
        from numpytransformer.losses import cross_entropy
    except ImportError:
        from numpytransformer.core.losses import cross_entropy

    src, tgt_in, tgt_out = make_batch(c)
    model = Transformer(TransformerConfig(src_vocab_size=c.V, tgt_vocab_size=c.V, d_model=c.D, n_heads=c.H,
                                          n_layers=c.L, d_ff=c.F, max_len=c.max_len, dropout=c.dropout,
                                          norm_first=c.norm_first, pad_id=PAD, dtype="float32", seed=0))
    opt = Adam(model.parameters(), lr=NoamSchedule(c.D, 4000))
    grads = model.gradients()
    losses = []

    def step():
        t0 = clock()
        logits = model.forward(src, tgt_in)
        loss, dlogits = cross_entropy(logits, tgt_out, pad_id=PAD, label_smoothing=0.1)
        t1 = clock()
        model.zero_grad()
        model.backward(dlogits)
        t2 = clock()
        clip_grad_norm(grads, 1.0)
        opt.step(grads)
        t3 = clock()
        losses.append(loss)
        return phases(t0, t1, t2, t3)

    def check_float32():
        """Every parameter, gradient and optimiser moment, and the logits, stay float32."""
        logits = model.forward(src, tgt_in)
        arrays = {"logits": logits, **model.parameters(), **{"grad " + k: g for k, g in grads.items()},
                  **opt.state_arrays()}
        wrong = sorted(k for k, a in arrays.items() if a.dtype != np.float32)
        if wrong:
            raise AssertionError(f"not float32: {wrong[:5]}")

    return model, step, check_float32, losses, (src, tgt_in, tgt_out)


def torch_setup(c: BenchConfig, threads: int, compiled: bool):
    """The PyTorch model (eager or compiled) and ``step()`` returning its phases' seconds."""
    import math

    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    torch.manual_seed(0)

    class TorchTransformer(nn.Module):
        """Embeddings * sqrt(D) + sinusoidal positions, nn.Transformer, a linear output layer."""

        def __init__(self):
            super().__init__()
            self.src_embed = nn.Embedding(c.V, c.D, padding_idx=PAD)
            self.tgt_embed = nn.Embedding(c.V, c.D, padding_idx=PAD)
            pos = torch.arange(c.max_len, dtype=torch.float32)[:, None]
            inv_freq = torch.exp(torch.arange(0, c.D, 2, dtype=torch.float32) * (-math.log(10000.0) / c.D))
            pe = torch.zeros(c.max_len, c.D)
            pe[:, 0::2] = torch.sin(pos * inv_freq)
            pe[:, 1::2] = torch.cos(pos * inv_freq)
            self.register_buffer("pe", pe)
            self.drop = nn.Dropout(c.dropout)
            self.transformer = nn.Transformer(d_model=c.D, nhead=c.H, num_encoder_layers=c.L,
                                              num_decoder_layers=c.L, dim_feedforward=c.F, dropout=c.dropout,
                                              batch_first=True, norm_first=c.norm_first)
            self.out = nn.Linear(c.D, c.V)
            self.scale = math.sqrt(c.D)

        def embed(self, table, ids):
            return self.drop(table(ids) * self.scale + self.pe[: ids.shape[1]])

        def forward(self, src, tgt_in):
            T = tgt_in.shape[1]
            causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # True: may not attend
            src_pad, tgt_pad = src == PAD, tgt_in == PAD
            h = self.transformer(self.embed(self.src_embed, src), self.embed(self.tgt_embed, tgt_in),
                                 tgt_mask=causal, src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
                                 memory_key_padding_mask=src_pad)
            return self.out(h)

    batch = make_batch(c)
    src, tgt_in, tgt_out = (torch.from_numpy(x) for x in batch)
    model = TorchTransformer()
    model.train()
    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=1.0, betas=(0.9, 0.98), eps=1e-9, fused=True)
    # LambdaLR counts from 0; the Noam schedule counts updates from 1.
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: c.D ** -0.5 * min((s + 1) ** -0.5, (s + 1) * 4000 ** -1.5))

    def forward_loss(src, tgt_in, tgt_out):
        logits = model(src, tgt_in)
        return F.cross_entropy(logits.reshape(-1, c.V), tgt_out.reshape(-1), ignore_index=PAD,
                               label_smoothing=0.1)

    if compiled:
        forward_loss = torch.compile(forward_loss)
    losses = []

    def step():
        t0 = clock()
        loss = forward_loss(src, tgt_in, tgt_out)
        t1 = clock()
        loss.backward()
        t2 = clock()
        nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        t3 = clock()
        losses.append(loss.item())
        return phases(t0, t1, t2, t3)

    return model, step, losses, batch


def batch_facts(batch) -> dict:
    """Token counts, and a checksum that shows every worker trained on the same batch."""
    src, _, tgt_out = batch
    return {"batch_checksum": int(sum(int((x * (i + 7)).sum()) for i, x in enumerate(batch))),
            "source_tokens": int((src != PAD).sum()), "target_tokens": int((tgt_out != PAD).sum())}


def worker_main(args) -> None:
    """Set up, warm up, say READY; then serve ``steps K``, ``gemm`` and ``quit`` from stdin."""
    c = CONFIGS[args.config[0]]
    side = args.worker
    t0 = time.perf_counter()
    facts: dict = {"side": side}
    if side in ("numpy", "before"):
        import numpy as np

        model, step, check_float32, losses, batch = numpy_setup(c)
        check_float32()
        facts["n_params"] = model.num_parameters()
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        import numpytransformer

        facts["library"] = (f"numpy {np.__version__}, BLAS {blas.get('name')} {blas.get('version')}, "
                            f"numpytransformer from {os.path.dirname(os.path.dirname(numpytransformer.__file__))}")
        try:
            import threadpoolctl  # optional: which OpenBLAS kernel runs, with how many threads

            facts["threadpool"] = [{k: d.get(k) for k in ("internal_api", "version", "architecture",
                                                          "num_threads", "threading_layer")}
                                   for d in threadpoolctl.threadpool_info()]
        except ImportError:
            facts["threadpool"] = "threadpoolctl not installed"
        a = np.random.default_rng(0).standard_normal((GEMM_N, GEMM_N), dtype=np.float32)
        b = np.random.default_rng(1).standard_normal((GEMM_N, GEMM_N), dtype=np.float32)
        out = np.empty_like(a)

        def matmul():
            np.matmul(a, b, out=out)
    else:
        import torch

        model, step, losses, batch = torch_setup(c, args.threads, compiled=side == "compile")
        facts["n_params"] = sum(p.numel() for p in model.parameters())
        blas = next((p.split("=", 1)[1] for p in torch.__config__.show().replace(",", "\n").split()
                     if p.startswith("BLAS_INFO=")), "?")
        facts["library"] = f"torch {torch.__version__}, BLAS {blas}" + (", torch.compile (inductor)"
                                                                         if side == "compile" else "")
        facts["threads"] = torch.get_num_threads()
        matmul = None
    facts.update(batch_facts(batch))
    for _ in range(args.warmup):
        step()
    facts["setup_and_warmup_s"] = time.perf_counter() - t0
    facts["setup_rss_mb"] = current_rss_mb()
    print(MARKER + json.dumps(facts), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        if cmd[0] == "steps":
            times = [step() for _ in range(int(cmd[1]))]
            reply = {kind: {phase: [t[kind][i] for t in times] for i, phase in enumerate(PHASES[:3])}
                     for kind in CLOCKS}
        elif cmd[0] == "gemm":
            reply = gemm_times(matmul) if matmul is not None else {"wall": [], "cpu": []}
        else:
            reply = {"error": f"unknown command {line!r}"}
        print(MARKER + json.dumps(reply), flush=True)
    print(MARKER + json.dumps({"peak_rss_mb": peak_rss_mb(), "first_loss": losses[0], "last_loss": losses[-1],
                               "steps_run": len(losses)}), flush=True)


# ---- the parent: start the workers, interleave them, summarise --------------------------------
def thread_env(threads: int) -> Dict[str, str]:
    env = dict(os.environ)
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[name] = str(threads)
    return env


class Worker:
    """One side's process, spoken to line by line."""

    def __init__(self, side: str, config: str, threads: int, warmup: int, before: Optional[str] = None):
        self.side = side
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", side, "--config", config,
               "--warmup", str(warmup), "--threads", str(threads)]
        env = thread_env(threads)
        if side == "before":  # an older checkout of the library, imported ahead of the installed one
            env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.abspath(before), env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)
        self.facts = self._read()

    def _read(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith(MARKER):
                return json.loads(line[len(MARKER):])
        raise RuntimeError(f"the {self.side} worker ended without a result (exit {self.proc.wait()})")

    def ask(self, command: str) -> dict:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> dict:
        final = self.ask("quit")
        self.proc.wait()
        return final


def spread(xs: List[float]) -> dict:
    return {"median": median(xs), "p10": quantile(xs, 0.1), "p90": quantile(xs, 0.9), "min": min(xs), "n": len(xs)}


def run_config(name: str, threads: int, sides: List[str], args) -> dict:
    """Start the sides one after another (warm-ups never overlap), then interleave them."""
    c = CONFIGS[name]
    flops = train_step_flops(c)
    print(f"[{name}, {threads} thread{'s' * (threads > 1)}] D={c.D} L={c.L}+{c.L} H={c.H} F={c.F} V={c.V} "
          f"batch {c.B}x{c.T}, {'pre' if c.norm_first else 'post'}-LN, dropout {c.dropout}: "
          f"{flops / 1e9:.2f} GFLOP of matmuls per step", flush=True)
    workers: Dict[str, Worker] = {}
    errors: Dict[str, str] = {}
    for side in sides:
        try:
            workers[side] = Worker(side, name, threads, args.warmup, args.before)
        except RuntimeError as e:
            errors[side] = str(e)
            print(f"    {side}: FAILED: {e}", flush=True)
            continue
        f = workers[side].facts
        print(f"    {side:<8} ready after {f['setup_and_warmup_s']:.1f} s ({args.warmup} warm-up steps); "
              f"{f['library']}", flush=True)
    if len({w.facts["batch_checksum"] for w in workers.values()}) > 1:
        raise RuntimeError(f"the workers of {name!r} did not train on the same batch")
    order = [s for s in sides if s in workers]
    times = {k: {s: {p: [] for p in PHASES} for s in order} for k in CLOCKS}
    gemm: Dict[str, List[float]] = {k: [] for k in CLOCKS}
    load = [os.getloadavg()[0]]
    for r in range(args.rounds):
        if "numpy" in workers:
            reply = workers["numpy"].ask("gemm")
            for k in CLOCKS:
                gemm[k] += reply[k]
            time.sleep(args.pause)
        for side in (order if r % 2 == 0 else order[::-1]):
            reply = workers[side].ask(f"steps {args.block}")
            for k in CLOCKS:
                for p in PHASES[:3]:
                    times[k][side][p] += reply[k][p]
                times[k][side]["step"] += [sum(t) for t in zip(*(reply[k][p] for p in PHASES[:3]))]
            time.sleep(args.pause)
        load.append(os.getloadavg()[0])
        print(f"    round {r + 1}/{args.rounds}: " + ", ".join(
            f"{s} {1e3 * median(times['wall'][s]['step'][-args.block:]):.0f} ms wall "
            f"{1e3 * median(times['cpu'][s]['step'][-args.block:]):.0f} ms CPU" for s in order), flush=True)
    finals = {s: w.close() for s, w in workers.items()}
    result = {"config": name, "threads": threads, "flops_per_step": flops, "errors": errors,
              "loadavg_1min_during": {"min": min(load), "max": max(load), "samples": load}, "sides": {},
              "phases_s": {k: {s: {p: spread(times[k][s][p]) for p in PHASES} for s in order} for k in CLOCKS},
              "raw_s": times}
    for s in order:
        result["sides"][s] = {**workers[s].facts, **finals[s]}
    if gemm["wall"]:
        result["gemm_gflops"], result["numpy_gflops"], result["share_of_gemm_peak"] = {}, {}, {}
        for k in CLOCKS:
            g = [2.0 * GEMM_N ** 3 / t / 1e9 for t in gemm[k]]
            result["gemm_gflops"][k] = {"median": median(g), "p10": quantile(g, 0.1), "p90": quantile(g, 0.9),
                                        "max": max(g), "n": len(g)}
            step = result["phases_s"][k]["numpy"]["step"]["median"]
            result["numpy_gflops"][k] = flops / step / 1e9
            result["share_of_gemm_peak"][k] = result["numpy_gflops"][k] / result["gemm_gflops"][k]["median"]
    # Paired ratios: in each round, numpy's block median over the other side's block median.
    result["ratios"] = {k: {} for k in CLOCKS}
    if "numpy" in order:
        for k in CLOCKS:
            for other in order:
                if other == "numpy":
                    continue
                per_phase = {}
                for p in PHASES + ("forward+backward",):
                    def series(side):
                        t = times[k][side]
                        if p == "forward+backward":
                            return [a + b for a, b in zip(t["forward"], t["backward"])]
                        return t[p]
                    a, b, n = series("numpy"), series(other), args.block
                    paired = [median(a[i:i + n]) / median(b[i:i + n]) for i in range(0, len(a), n)]
                    per_phase[p] = {"ratio_of_medians": median(a) / median(b), "paired_median": median(paired),
                                    "paired_p10": quantile(paired, 0.1), "paired_p90": quantile(paired, 0.9)}
                result["ratios"][k][f"numpy/{other}"] = per_phase
    return result


def print_result(res: dict) -> None:
    sides = list(res["sides"])
    print(f"\n{res['config']}, {res['threads']} thread(s); load average (1 min) during the run "
          f"{res['loadavg_1min_during']['min']:.2f}-{res['loadavg_1min_during']['max']:.2f}")
    for k in CLOCKS:
        head = f"{k + ' time':<17}" + "".join(f"{s + ' ms (p10-p90)':>28}" for s in sides) + \
            "".join(f"{'numpy/' + s:>22}" for s in sides if s != "numpy")
        print(head)
        print("-" * len(head))
        for p in PHASES + ("forward+backward",):
            row = f"{p:<17}"
            for s in sides:
                if p == "forward+backward":
                    row += f"{'':>28}"
                    continue
                st = res["phases_s"][k][s][p]
                row += f"{1e3 * st['median']:>11.1f} ({1e3 * st['p10']:7.1f}-{1e3 * st['p90']:7.1f})"
            for s in sides:
                if s != "numpy" and "numpy" in sides:
                    r = res["ratios"][k][f"numpy/{s}"][p]
                    row += f"{r['paired_median']:>9.2f} ({r['paired_p10']:.2f}-{r['paired_p90']:.2f})"
            print(row)
        if "gemm_gflops" in res:
            g = res["gemm_gflops"][k]
            print(f"float32 GEMM {GEMM_N}^3 (numpy, {k} time): median {g['median']:.1f} GFLOP/s (p10-p90 "
                  f"{g['p10']:.1f}-{g['p90']:.1f}, best {g['max']:.1f}); the numpy step: "
                  f"{res['numpy_gflops'][k]:.1f} GFLOP/s = {100 * res['share_of_gemm_peak'][k]:.1f}% of the median")
        print()
    for s in sides:
        f = res["sides"][s]
        print(f"{s}: {f['n_params']:,} parameters, loss {f['first_loss']:.3f} -> {f['last_loss']:.3f} over "
              f"{f['steps_run']} steps, setup RSS {f['setup_rss_mb']:.0f} MB, peak RSS {f['peak_rss_mb']:.0f} MB")
    for s, e in res["errors"].items():
        print(f"{s}: FAILED: {e}")


def machine_facts() -> dict:
    """CPU, core count, date and load average, for the JSON results (the standard library only)."""
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    return {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "processor": platform.processor(), "cpu_model": cpu, "machine": platform.machine(),
            "cpu_count": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(),
            "loadavg_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            "openblas_env": {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}}


def profile_numpy(name: str, threads: int, steps: int = 5, top: int = 25) -> None:
    """cProfile over ``steps`` numpy steps (after one warm-up), the top functions by own time."""
    import cProfile
    import pstats

    os.environ.update({k: v for k, v in thread_env(threads).items() if k.endswith("_NUM_THREADS")})
    _, step, _, _, _ = numpy_setup(CONFIGS[name])
    step()
    # Process CPU time, not wall time: on a shared machine another process's burst would
    # otherwise be charged to whichever function happened to be running.
    prof = cProfile.Profile(time.process_time)
    prof.enable()
    for _ in range(steps):
        step()
    prof.disable()
    print(f"== cProfile (process CPU time) of {steps} numpy training steps, config {name} ({CONFIGS[name]}), "
          f"{threads} thread(s), top {top} by tottime ==")
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", action="append", choices=sorted(CONFIGS),
                   help="configuration to run; repeat for several (default: translation and reversal)")
    p.add_argument("--threads", type=int, nargs="+", default=[1],
                   help="thread counts to run, each side pinned to it (default %(default)s)")
    p.add_argument("--rounds", type=int, default=10, help="interleaved rounds (default %(default)s)")
    p.add_argument("--block", type=int, default=3, help="steps per side per round (default %(default)s)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up steps per side (default %(default)s)")
    p.add_argument("--pause", type=float, default=0.2, help="seconds of rest between blocks (default %(default)s)")
    p.add_argument("--side", action="append", choices=SIDES, help="run only this side; repeat (default: all)")
    p.add_argument("--no-compile", action="store_true", help="leave out the torch.compile side")
    p.add_argument("--before", metavar="DIR", help="add the side 'before': numpy with the numpytransformer found in "
                   "DIR (e.g. DIR made by `git archive <commit> | tar -x -C DIR`), to time a change A/B")
    p.add_argument("--json", metavar="PATH", help="write the results and the machine's facts here")
    p.add_argument("--profile", action="store_true",
                   help="instead of timing, cProfile 5 numpy steps of each chosen config")
    p.add_argument("--worker", choices=SIDES, help=argparse.SUPPRESS)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    args.config = args.config or ["translation", "reversal"]
    if args.rounds < 1 or args.block < 1 or args.warmup < 1:
        raise SystemExit("--rounds, --block and --warmup must be at least 1")
    if args.worker:
        args.threads = args.threads[0]
        worker_main(args)
        return 0
    if args.profile:
        for name in args.config:
            profile_numpy(name, args.threads[0])
        return 0
    sides = args.side or [s for s in SIDES if not (s == "compile" and args.no_compile) and s != "before"]
    if args.before and "before" not in sides:
        sides.append("before")
    if "before" in sides and not args.before:
        raise SystemExit("--side before needs --before DIR")
    facts = machine_facts()
    print(f"{facts['cpu_model'] or facts['processor']}, {facts['cpu_count']} CPUs, load average "
          f"{' '.join(f'{x:.2f}' for x in facts['loadavg_at_start'])}; threads {args.threads}; "
          f"{args.rounds} rounds of {args.block} steps per side, sides {sides}", flush=True)
    results = []
    for threads in args.threads:
        for name in args.config:
            res = run_config(name, threads, sides, args)
            print_result(res)
            results.append(res)
    facts["loadavg_at_end"] = list(os.getloadavg())
    print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in facts['loadavg_at_end'])}")
    if args.json:
        doc = {"machine": facts, "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
               "settings": {k: getattr(args, k) for k in ("rounds", "block", "warmup", "pause", "threads")},
               "configs": {n: asdict(CONFIGS[n]) for n in args.config}, "results": results}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
