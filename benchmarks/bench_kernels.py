"""The kernels under a training step, NumPy beside PyTorch: where the step's gap comes from.

``bench_step.py`` times whole steps; this times what they are made of, on one thread, in
CPU time, the two sides interleaved (numpy block, torch block, ... for ``--rounds`` rounds;
the figure is the median of the blocks' means):

1. **GEMMs.** Every matrix product of a training step of the reversal and the translation
   model, forward and backward (``dx = dy W^T`` and ``dW = x^T dy`` for each forward
   product), as ``np.matmul`` (the OpenBLAS of NumPy's wheel) and ``torch.mm``/``torch.bmm``
   (MKL), weighted by how often a step runs each shape.
2. **Element-wise work** on a reversal activation (128, 20, 64): a plain sum, a product with a
   (64,) vector broadcast along the rows (``x * gamma``, as LayerNorm and every bias add do),
   a subtraction of a per-row value (``x - mean``), LayerNorm's forward and a softmax.
3. **Adam and the loss** at translation size: ``Adam.step`` over the model's 11.7 M
   parameters against ``torch.optim.Adam(fused=True)``, and ``cross_entropy`` (label smoothing
   0.1, its gradient included) over (64, 24, 8000) logits against ``F.cross_entropy`` and its backward.
4. **The GEMM-peak budget.** A step at 75% of the float32 GEMM peak may take
   ``FLOPs / (0.75 * peak)``; with its GEMMs at the speed measured in 1, what is left for
   everything else is printed beside what NumPy's optimiser and loss alone take.

Usage::

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 python benchmarks/bench_kernels.py --rounds 7
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench_step import CONFIGS, GEMM_N, BenchConfig, gemm_times, train_step_flops  # noqa: E402

torch.set_num_threads(1)


def paired(numpy_fn, torch_fn, rounds: int, target_s: float = 0.02):
    """Median per-call CPU time (ms) of each side, in interleaved blocks of equal length."""
    numpy_fn(), torch_fn()  # warm up
    t0 = time.process_time()
    numpy_fn()
    n = max(1, int(target_s / max(time.process_time() - t0, 1e-6)))
    times = {"numpy": [], "torch": []}
    for r in range(rounds):
        for side in (("numpy", "torch") if r % 2 == 0 else ("torch", "numpy")):
            fn = numpy_fn if side == "numpy" else torch_fn
            t0 = time.process_time()
            for _ in range(n):
                fn()
            times[side].append((time.process_time() - t0) / n * 1e3)
    return statistics.median(times["numpy"]), statistics.median(times["torch"])


def step_gemms(c: BenchConfig):
    """``(count, M, K, N)`` of the forward products of one step (rows M = B*T, source and target
    alike), and ``(count, batch, T, d, T)`` of the attention products QK^T and PV."""
    M, D, F, V, L = c.B * c.T, c.D, c.F, c.V, c.L
    dense = [(L, M, D, 3 * D), (L, M, D, D), (L, M, D, F), (L, M, F, D),  # encoder: QKV, out, FFN
             (L, M, D, 3 * D), (3 * L, M, D, D), (L, M, D, 2 * D),  # decoder: QKV; out, cross Q, cross out; cross KV
             (L, M, D, F), (L, M, F, D), (1, M, D, V)]  # decoder FFN; the output projection
    attention = [(3 * L, c.B * c.H, c.T, D // c.H, c.T)]  # encoder self, decoder self and cross
    return dense, attention


def bench_gemms(c: BenchConfig, rounds: int):
    """Total GEMM time of one step, each side, and the rows of the table."""
    rng = np.random.default_rng(0)
    rows, total = [], {"numpy": 0.0, "torch": 0.0}
    dense, attention = step_gemms(c)
    for count, M, K, N in dense:
        x, W, dy = (rng.standard_normal(s, dtype=np.float32) for s in ((M, K), (K, N), (M, N)))
        tx, tW, tdy = map(torch.from_numpy, (x, W, dy))
        # forward x W; backward dy W^T and x^T dy: three products of the same FLOPs
        n_ms, t_ms = paired(lambda: (x @ W, dy @ W.T, x.T @ dy),
                            lambda: (torch.mm(tx, tW), torch.mm(tdy, tW.t()), torch.mm(tx.t(), tdy)), rounds)
        rows.append((f"{count} x ({M}, {K}) @ ({K}, {N}), fwd+bwd", n_ms, t_ms))
        total["numpy"] += count * n_ms
        total["torch"] += count * t_ms
    for count, G, T, d, S in attention:
        q, k, v = (rng.standard_normal((G, n, d), dtype=np.float32) for n in (T, S, S))
        p = rng.random((G, T, S), dtype=np.float32)
        tq, tk, tv, tp = map(torch.from_numpy, (q, k, v, p))
        kT, vT, pT = (a.transpose(0, 2, 1) for a in (k, v, p))
        tkT, tvT, tpT = (a.transpose(1, 2) for a in (tk, tv, tp))
        # forward Q K^T, P V; backward dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q (q and p stand in for dO, dS)
        n_ms, t_ms = paired(lambda: (q @ kT, p @ v, q @ vT, pT @ q, p @ k, pT @ q),
                            lambda: (torch.bmm(tq, tkT), torch.bmm(tp, tv), torch.bmm(tq, tvT), torch.bmm(tpT, tq),
                                     torch.bmm(tp, tk), torch.bmm(tpT, tq)), rounds)
        rows.append((f"{count} x ({G}, {T}, {d}) @ ({G}, {d}, {S}) and back", n_ms, t_ms))
        total["numpy"] += count * n_ms
        total["torch"] += count * t_ms
    return total, rows


def bench_elementwise(rounds: int):
    """Element-wise kernels on a reversal activation (128, 20, 64) and its attention weights."""
    from numpytransformer.core.fast import layernorm_forward, softmax  # the forms the library runs by default

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((2, 128, 20, 64), dtype=np.float32)
    gamma, beta = rng.standard_normal((2, 64), dtype=np.float32)
    mu = x.mean(axis=-1, keepdims=True)
    s = rng.standard_normal((128, 4, 20, 20), dtype=np.float32)
    tx, ty, tg, tb, tmu, ts = map(torch.from_numpy, (x, y, gamma, beta, mu, s))
    cases = [("x + y (no broadcast)", lambda: x + y, lambda: tx + ty),
             ("x * gamma (a (64,) vector along the rows)", lambda: x * gamma, lambda: tx * tg),
             ("x - mean (a value per row of 64)", lambda: x - mu, lambda: tx - tmu),
             ("LayerNorm forward (layernorm_forward / F.layer_norm)", lambda: layernorm_forward(x, gamma, beta),
              lambda: torch.nn.functional.layer_norm(tx, (64,), tg, tb)),
             ("softmax over (128, 4, 20, 20)", lambda: softmax(s), lambda: torch.softmax(ts, -1))]
    return [(name, *paired(f, g, rounds)) for name, f, g in cases]


def bench_adam(rounds: int):
    """One optimiser step over the translation model's parameters, each side."""
    from numpytransformer import Adam, Transformer, TransformerConfig

    c = CONFIGS["translation"]
    model = Transformer(TransformerConfig(src_vocab_size=c.V, tgt_vocab_size=c.V, d_model=c.D, n_heads=c.H,
                                          n_layers=c.L, d_ff=c.F, max_len=c.max_len, dtype="float32"))
    params = model.parameters()
    grads = {k: np.random.default_rng(1).standard_normal(p.shape, dtype=np.float32) * 1e-3 for k, p in params.items()}
    opt = Adam(params, lr=1e-4)
    tparams = [torch.from_numpy(p.copy()).requires_grad_() for p in params.values()]
    for tp, g in zip(tparams, grads.values()):
        tp.grad = torch.from_numpy(g.copy())
    topt = torch.optim.Adam(tparams, lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)
    n = sum(p.size for p in params.values())
    return n, paired(lambda: opt.step(grads), topt.step, rounds)


def bench_loss(rounds: int):
    """The loss and its gradient over the translation step's logits (64, 24, 8000), each side."""
    from numpytransformer.core.losses import cross_entropy

    c = CONFIGS["translation"]
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((c.B, c.T, c.V), dtype=np.float32)
    y = rng.integers(0, c.V, (c.B, c.T))
    tl, ty = torch.from_numpy(logits.reshape(-1, c.V)).requires_grad_(), torch.from_numpy(y.reshape(-1))

    def torch_loss():
        tl.grad = None
        torch.nn.functional.cross_entropy(tl, ty, ignore_index=0, label_smoothing=0.1).backward()

    return paired(lambda: cross_entropy(logits, y, pad_id=0, label_smoothing=0.1), torch_loss, rounds)


def gemm_peak(rounds: int) -> float:
    """GFLOP/s of the float32 (GEMM_N, GEMM_N) product ``bench_step.py`` calls the peak, median CPU time."""
    a, b = np.random.default_rng(0).standard_normal((2, GEMM_N, GEMM_N), dtype=np.float32)
    c = np.empty_like(a)
    return 2 * GEMM_N ** 3 / statistics.median(gemm_times(lambda: np.matmul(a, b, out=c), rounds)["cpu"]) / 1e9


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7, help="interleaved blocks per side and kernel")
    args = p.parse_args()
    print(f"numpy {np.__version__}, torch {torch.__version__}, 1 thread, CPU time, median of {args.rounds} "
          f"interleaved blocks a side; load {os.getloadavg()[0]:.2f}", flush=True)
    gemm_ms = {}
    for name in ("reversal", "translation"):
        total, rows = bench_gemms(CONFIGS[name], args.rounds)
        gemm_ms[name] = total
        print(f"\n== the GEMMs of a {name} step ({CONFIGS[name]}) ==")
        print(f"{'shape':52s} {'numpy ms':>9s} {'torch ms':>9s} {'ratio':>6s}")
        for shape, n_ms, t_ms in rows:
            print(f"{shape:52s} {n_ms:9.3f} {t_ms:9.3f} {n_ms / t_ms:6.2f}")
        print(f"{'a whole step, weighted by count':52s} {total['numpy']:9.2f} {total['torch']:9.2f} "
              f"{total['numpy'] / total['torch']:6.2f}", flush=True)
    print("\n== element-wise work at reversal size ==")
    print(f"{'kernel':52s} {'numpy us':>9s} {'torch us':>9s} {'ratio':>6s}")
    for name, n_ms, t_ms in bench_elementwise(args.rounds):
        print(f"{name:52s} {1e3 * n_ms:9.1f} {1e3 * t_ms:9.1f} {n_ms / t_ms:6.2f}", flush=True)
    n, (n_ms, t_ms) = bench_adam(args.rounds)
    print(f"\n== Adam over the translation model's {n:,} parameters ==\nnumpy Adam.step {n_ms:.1f} ms, "
          f"torch fused Adam {t_ms:.1f} ms, ratio {n_ms / t_ms:.2f}")
    l_ms, tl_ms = bench_loss(args.rounds)
    print(f"\n== the loss and its gradient over (64, 24, 8000) logits ==\nnumpy cross_entropy {l_ms:.1f} ms, "
          f"torch F.cross_entropy + backward {tl_ms:.1f} ms, ratio {l_ms / tl_ms:.2f}")
    peak = gemm_peak(2 * args.rounds)
    flops = train_step_flops(CONFIGS["translation"])
    budget = flops / (0.75 * peak * 1e9) * 1e3
    rest = budget - gemm_ms["translation"]["numpy"]
    print(f"\n== the 75%-of-peak budget at translation size ==\nGEMM peak {peak:.1f} GFLOP/s; a step's "
          f"{flops / 1e9:.2f} GFLOP at 75% of it: {budget:.0f} ms a step. Its GEMMs take {gemm_ms['translation']['numpy']:.0f} "
          f"ms in NumPy ({flops / gemm_ms['translation']['numpy'] / 1e6 / peak:.0%} of the peak), leaving {rest:.0f} ms for "
          f"everything else; NumPy's Adam and loss alone take {n_ms:.0f} + {l_ms:.0f} ms "
          f"(PyTorch's fused kernels {t_ms:.0f} + {tl_ms:.0f} ms).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
