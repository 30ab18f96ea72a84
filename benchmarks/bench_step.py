"""Time one training step of numpytransformer beside PyTorch, on the same batch.

One step, on both sides:

* numpytransformer (float32): ``model.forward(src, tgt_in)``,
  ``cross_entropy(logits, tgt_out, pad_id=0, label_smoothing=0.1)``, ``model.zero_grad()``,
  ``model.backward(dlogits)``, ``clip_grad_norm(grads, 1.0)``, ``Adam.step(grads)`` with
  ``lr=NoamSchedule(d_model, 4000)``.
* PyTorch (eager, float32): ``zero_grad(set_to_none=True)``, embeddings scaled by sqrt(D)
  plus a fixed sinusoidal table, ``nn.Transformer(..., batch_first=True)`` with the three
  key-padding masks and a causal ``tgt_mask``, ``nn.Linear(D, V)``,
  ``F.cross_entropy(..., ignore_index=0, label_smoothing=0.1)``, ``loss.backward()``,
  ``clip_grad_norm_(1.0)``, ``Adam(betas=(0.9, 0.98), eps=1e-9)`` and the same Noam schedule
  through ``LambdaLR`` (base lr 1.0). ``nn.Transformer`` adds a final LayerNorm to each stack
  that the post-LN numpy model has not; it costs little.

Each framework runs in its own subprocess (``--worker numpy|torch``), one after the other,
so that its peak RSS is its own; both use ``--threads`` threads (default 2): PyTorch through
``torch.set_num_threads``, NumPy's OpenBLAS through ``OPENBLAS_NUM_THREADS``.

Usage::

    python benchmarks/bench_step.py                       # all three configurations
    python benchmarks/bench_step.py --config medium --steps 20 --warmup 3 --json out.json
    python benchmarks/bench_step.py --config translation --profile   # cProfile, numpy side
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

# numpy and torch are imported inside the workers only. The thread settings must be in the
# environment before the import, and the parent must stay small: Linux carries a process's
# ru_maxrss across exec into its children, so a parent that had imported torch would make
# every worker report at least the parent's peak.

PAD, BOS, EOS, FIRST_ID = 0, 1, 2, 4
MARKER = "@@RESULT@@ "


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
    length_spread: int = 6  # lengths are uniform in [T - spread, T]
    max_len: int = 64


CONFIGS: Dict[str, BenchConfig] = {
    "translation": BenchConfig(D=256, L=3, H=8, F=1024, V=8000, B=64, T=24),
    "medium": BenchConfig(D=128, L=2, H=4, F=512, V=8000, B=64, T=24),
    "reversal": BenchConfig(D=64, L=2, H=4, F=256, V=24, B=128, T=20),
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


def median(xs: List[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def time_steps(step, steps: int, warmup: int) -> List[float]:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return times


def gemm_peak_gflops(matmul, n: int = 2048, reps: int = 5) -> float:
    """GFLOP/s of the median of ``reps`` float32 (n, n) @ (n, n) products (after one warm-up)."""
    matmul()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        matmul()
        times.append(time.perf_counter() - t0)
    return 2.0 * n ** 3 / median(times) / 1e9


# ---- workers: one framework, one configuration, one process ---------------------------------
def numpy_setup(c: BenchConfig):
    """The model, the optimiser and a ``step()`` closure doing one full training step."""
    from numpytransformer import Adam, NoamSchedule, Transformer, TransformerConfig, clip_grad_norm
    from numpytransformer.losses import cross_entropy

    src, tgt_in, tgt_out = make_batch(c)
    model = Transformer(TransformerConfig(src_vocab_size=c.V, tgt_vocab_size=c.V, d_model=c.D, n_heads=c.H,
                                          n_layers=c.L, d_ff=c.F, max_len=c.max_len, dropout=0.1, pad_id=PAD,
                                          dtype="float32", seed=0))
    opt = Adam(model.parameters(), lr=NoamSchedule(c.D, 4000))
    grads = model.gradients()
    losses = []

    def step():
        logits = model.forward(src, tgt_in)
        loss, dlogits = cross_entropy(logits, tgt_out, pad_id=PAD, label_smoothing=0.1)
        model.zero_grad()
        model.backward(dlogits)
        clip_grad_norm(grads, 1.0)
        opt.step(grads)
        losses.append(loss)

    return model, step, losses, (src, tgt_in, tgt_out)


def run_numpy_worker(c: BenchConfig, steps: int, warmup: int) -> dict:
    import numpy as np

    model, step, losses, batch = numpy_setup(c)
    setup_rss = current_rss_mb()
    times = time_steps(step, steps, warmup)
    peak = peak_rss_mb()  # read before the GEMM test allocates its own 48 MB
    a = np.random.default_rng(0).standard_normal((2048, 2048), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((2048, 2048), dtype=np.float32)
    peak_gflops = gemm_peak_gflops(lambda: a @ b)
    blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    return {"framework": "numpy", "times": times, "setup_rss_mb": setup_rss, "peak_rss_mb": peak,
            "gemm_peak_gflops": peak_gflops, "n_params": model.num_parameters(),
            "first_loss": losses[0], "last_loss": losses[-1], **batch_facts(batch),
            "threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"), "version": np.__version__,
            "library": f"numpy {np.__version__}, BLAS {blas.get('name')} {blas.get('version')}"}


def torch_setup(c: BenchConfig, threads: int):
    """The PyTorch model and a ``step()`` closure doing one full training step."""
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
            self.drop = nn.Dropout(0.1)
            self.transformer = nn.Transformer(d_model=c.D, nhead=c.H, num_encoder_layers=c.L,
                                              num_decoder_layers=c.L, dim_feedforward=c.F, dropout=0.1,
                                              batch_first=True)
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
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    # LambdaLR counts from 0; the Noam schedule counts updates from 1.
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: c.D ** -0.5 * min((s + 1) ** -0.5, (s + 1) * 4000 ** -1.5))
    losses = []

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, c.V), tgt_out.reshape(-1), ignore_index=PAD,
                               label_smoothing=0.1)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())

    return model, step, losses, batch


def run_torch_worker(c: BenchConfig, steps: int, warmup: int, threads: int) -> dict:
    import torch

    model, step, losses, batch = torch_setup(c, threads)
    setup_rss = current_rss_mb()
    times = time_steps(step, steps, warmup)
    peak = peak_rss_mb()
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    peak_gflops = gemm_peak_gflops(lambda: a @ b)
    blas = next((p.split("=", 1)[1] for p in torch.__config__.show().replace(",", "\n").split()
                 if p.startswith("BLAS_INFO=")), "?")
    return {"framework": "torch", "times": times, "setup_rss_mb": setup_rss, "peak_rss_mb": peak,
            "gemm_peak_gflops": peak_gflops, "n_params": sum(p.numel() for p in model.parameters()),
            "first_loss": losses[0], "last_loss": losses[-1], **batch_facts(batch),
            "threads": str(torch.get_num_threads()), "version": torch.__version__,
            "library": f"torch {torch.__version__}, BLAS {blas}"}


def batch_facts(batch) -> dict:
    """Token counts, and a checksum that shows both workers trained on the same batch."""
    src, _, tgt_out = batch
    return {"batch_checksum": int(sum(int((x * (i + 7)).sum()) for i, x in enumerate(batch))),
            "source_tokens": int((src != PAD).sum()), "target_tokens": int((tgt_out != PAD).sum())}


def worker_main(args) -> None:
    c = CONFIGS[args.config[0]]
    if args.worker == "numpy":
        result = run_numpy_worker(c, args.steps, args.warmup)
    else:
        result = run_torch_worker(c, args.steps, args.warmup, args.threads)
    print(MARKER + json.dumps(result), flush=True)


# ---- the parent: launch the workers, summarise, print ----------------------------------------
def thread_env(threads: int) -> Dict[str, str]:
    env = dict(os.environ)
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[name] = str(threads)
    return env


def run_worker(framework: str, config: str, args) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", framework, "--config", config,
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--threads", str(args.threads)]
    proc = subprocess.run(cmd, env=thread_env(args.threads), stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the {framework} worker for {config!r} failed (exit {proc.returncode}): {' '.join(cmd)}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARKER)]
    if not lines:
        raise RuntimeError(f"the {framework} worker for {config!r} printed no result:\n{proc.stdout}")
    return json.loads(lines[-1][len(MARKER):])


def summarise(name: str, r: dict, flops: float) -> dict:
    med, best, tokens = median(r["times"]), min(r["times"]), r["target_tokens"]
    achieved = flops / med / 1e9
    return {"config": name, "framework": r["framework"], "median_s": med, "min_s": best,
            "target_tokens": tokens, "tokens_per_s": tokens / med, "achieved_gflops": achieved,
            "gemm_peak_gflops": r["gemm_peak_gflops"], "share_of_peak": achieved / r["gemm_peak_gflops"],
            "setup_rss_mb": r["setup_rss_mb"], "peak_rss_mb": r["peak_rss_mb"],
            "n_params": r["n_params"], "first_loss": r["first_loss"], "last_loss": r["last_loss"],
            "threads": r["threads"], "library": r["library"], "times_s": r["times"]}


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
            "loadavg_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}


def print_table(rows: List[dict]) -> None:
    head = (f"{'config':<12} {'framework':<6} {'median ms':>10} {'min ms':>9} {'np/torch':>8} {'tgt tok/s':>10} "
            f"{'GFLOP/s':>8} {'peak':>7} {'share':>6} {'RSS setup MB':>12} {'peak RSS MB':>11}")
    print(head)
    print("-" * len(head))
    by_config: Dict[str, Dict[str, dict]] = {}
    for r in rows:
        by_config.setdefault(r["config"], {})[r["framework"]] = r
    for r in rows:
        pair = by_config[r["config"]]
        ratio = (f"{pair['numpy']['median_s'] / pair['torch']['median_s']:8.2f}"
                 if r["framework"] == "numpy" and "torch" in pair else f"{'':8}")
        print(f"{r['config']:<12} {r['framework']:<6} {1e3 * r['median_s']:10.1f} {1e3 * r['min_s']:9.1f} {ratio} "
              f"{r['tokens_per_s']:10.0f} {r['achieved_gflops']:8.1f} {r['gemm_peak_gflops']:7.1f} "
              f"{100 * r['share_of_peak']:5.1f}% {r['setup_rss_mb']:12.0f} {r['peak_rss_mb']:11.0f}")


def profile_numpy(name: str, threads: int) -> None:
    """cProfile over 5 numpy steps (after one warm-up), the top 20 functions by own time."""
    import cProfile
    import pstats

    os.environ.update({k: v for k, v in thread_env(threads).items() if k.endswith("_NUM_THREADS")})
    _, step, _, _ = numpy_setup(CONFIGS[name])
    step()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(5):
        step()
    prof.disable()
    print(f"== cProfile of 5 numpy training steps, config {name} ({CONFIGS[name]}), top 20 by tottime ==")
    pstats.Stats(prof).sort_stats("tottime").print_stats(20)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", action="append", choices=sorted(CONFIGS),
                   help="configuration to run; repeat for several (default: all three)")
    p.add_argument("--steps", type=int, default=20, help="measured steps (default %(default)s)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up steps, not measured (default %(default)s)")
    p.add_argument("--threads", type=int, default=2,
                   help="threads of both frameworks (torch.set_num_threads, OPENBLAS_NUM_THREADS; default %(default)s)")
    p.add_argument("--framework", action="append", choices=["numpy", "torch"],
                   help="run only this framework (default: both)")
    p.add_argument("--json", metavar="PATH", help="write the results and the machine's facts here")
    p.add_argument("--profile", action="store_true",
                   help="instead of timing, cProfile 5 numpy steps of each chosen config (top 20 by tottime)")
    p.add_argument("--worker", choices=["numpy", "torch"], help=argparse.SUPPRESS)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    args.config = args.config or list(CONFIGS)
    if args.steps < 1 or args.warmup < 0:
        raise SystemExit("--steps must be at least 1 and --warmup at least 0")
    if args.worker:
        worker_main(args)
        return 0
    if args.profile:
        for name in args.config:
            profile_numpy(name, args.threads)
        return 0

    facts = machine_facts()
    frameworks = args.framework or ["numpy", "torch"]
    print(f"{facts['cpu_model'] or facts['processor']}, {facts['cpu_count']} CPUs, load average "
          f"{facts['loadavg_at_start'][0]:.2f}; {args.threads} threads per framework; "
          f"{args.warmup} warm-up + {args.steps} measured steps", flush=True)
    if facts["loadavg_at_start"] and facts["loadavg_at_start"][0] > 0.5 * (facts["cpu_count"] or 1):
        print("warning: the machine is busy; with other processes on the cores, multi-threaded BLAS "
              "steps can be many times slower than on an idle machine: these timings are not final", flush=True)
    rows, libraries = [], {}
    for name in args.config:
        c = CONFIGS[name]
        flops = train_step_flops(c)
        print(f"[{name}] D={c.D} L={c.L}+{c.L} H={c.H} F={c.F} V={c.V} batch {c.B}x{c.T}: "
              f"{flops / 1e9:.2f} GFLOP of matmuls per step", flush=True)
        results = {}
        for fw in frameworks:  # one after the other, never concurrently
            results[fw] = r = run_worker(fw, name, args)
            libraries[fw] = r["library"]
            facts[fw] = r["version"]
            rows.append(summarise(name, r, flops))
            print(f"    {fw:<5} params {r['n_params']:,}  loss {r['first_loss']:.3f} -> {r['last_loss']:.3f}  "
                  f"median {1e3 * median(r['times']):.1f} ms  ({r['target_tokens']} target, "
                  f"{r['source_tokens']} source tokens)", flush=True)
        if len({r["batch_checksum"] for r in results.values()}) > 1:
            raise RuntimeError(f"the workers of {name!r} did not train on the same batch")
    print()
    for fw, lib in libraries.items():
        print(f"{fw}: {lib}")
    print("tokens/s counts the non-pad target tokens; GFLOP/s = 3 x forward matmul FLOPs / median step; "
          "peak = float32 2048x2048 GEMM of the same library in the same process; "
          "RSS setup = after imports and model construction, peak RSS = ru_maxrss after training.")
    print()
    print_table(rows)
    if args.json:
        doc = {"machine": facts, "libraries": libraries,
               "settings": {"steps": args.steps, "warmup": args.warmup, "threads": args.threads,
                            "torch_lr": "Noam schedule via LambdaLR (d_model^-0.5, warmup 4000)"},
               "configs": {n: asdict(CONFIGS[n]) for n in args.config}, "results": rows}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
