"""Character-level Tiny Shakespeare: our NumPy GPT beside a PyTorch reference, in one run.

The reference is nanoGPT's published CPU recipe for ``shakespeare_char``, written here
from its description (not copied): 4 layers, 4 heads, 128 wide, context 64, batch 12,
2,000 iterations, no dropout; GPT-2 blocks (pre-LN, GELU MLP 4x, no biases), learned
positions, tied output; AdamW (lr 1e-3, betas 0.9/0.99, weight decay 0.1 on matrices),
100 warm-up iterations then a cosine decay to 1e-4, gradient clipping at 1.0.

Our side is :class:`numpytransformer.nn.gpt.TransformerLM` trained the way ``train lm --tokenization
char`` trains it: Adam (betas 0.9/0.98, no weight decay) with the Noam schedule and clipping at
1.0, with a recipe of its own (:data:`NP_DEFAULTS`, changed by ``--np "key=value ..."``; repeat
``--np`` to run several of ours against one reference). Each of our sides trains for as
long as the reference took for its 2,000 iterations (or ``--np-seconds``).

All sides train in the same process, in alternating slices of ``--slice`` seconds, so that
the load of a shared machine falls on all alike; only training time is counted. Validation
loss is measured the same way for both, at the end: the mean cross-entropy in nats per
character over the whole validation split (the last 10% of input.txt) cut into
non-overlapping windows of the model's context, every position predicted.

Usage::

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/bench_lm.py --threads 1
    python benchmarks/bench_lm.py --threads 1 --np "layers=4 lr_factor=0.6" --np ""   # two of ours
    python benchmarks/bench_lm.py --sides none --np "block=128" --kv-tokens 500   # the KV-cache timing only
"""
from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from numpytransformer.nn.config import TransformerConfig  # noqa: E402
from numpytransformer.datasets.shakespeare import load_text, split_text  # noqa: E402
from numpytransformer.nn.gpt import TransformerLM  # noqa: E402
from numpytransformer.core.losses import cross_entropy  # noqa: E402
from numpytransformer.training.optim import Adam, NoamSchedule, clip_grad_norm  # noqa: E402
from numpytransformer.nn.sampling import generate  # noqa: E402


def random_windows(data: np.ndarray, block: int, batch: int, rng: np.random.Generator):
    """``batch`` random windows of ``block + 1`` ids: inputs and the next ids."""
    starts = rng.integers(0, len(data) - block - 1, size=batch)
    w = np.stack([data[s:s + block + 1] for s in starts])  # (B, block+1)
    return w[:, :-1], w[:, 1:]


def val_windows(data: np.ndarray, block: int):
    """Non-overlapping windows covering ``data``: (N, block) inputs and targets."""
    n = (len(data) - 1) // block
    x = data[:n * block].reshape(n, block)
    y = data[1:n * block + 1].reshape(n, block)
    return x, y


# ---- the PyTorch reference ----------------------------------------------------------------
def torch_side(args, train, val, vocab):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    D, H, L, T = 128, 4, 4, 64

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(D, bias=False)
            self.qkv = nn.Linear(D, 3 * D, bias=False)
            self.proj = nn.Linear(D, D, bias=False)
            self.ln2 = nn.LayerNorm(D, bias=False)
            self.fc = nn.Linear(D, 4 * D, bias=False)
            self.fc_out = nn.Linear(4 * D, D, bias=False)

        def forward(self, x):
            B, Tx, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(B, Tx, 3, H, D // H).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D/H)
            x = x + self.proj(a.transpose(1, 2).reshape(B, Tx, D))
            return x + self.fc_out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, D)
            self.pos = nn.Embedding(T, D)
            self.blocks = nn.ModuleList([Block() for _ in range(L)])
            self.ln_f = nn.LayerNorm(D, bias=False)
            for name, p in self.named_parameters():
                if p.dim() == 2:  # GPT-2's initialisation; residual projections scaled by depth
                    std = 0.02 / math.sqrt(2 * L) if name.endswith(("proj.weight", "fc_out.weight")) else 0.02
                    nn.init.normal_(p, 0.0, std)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
            for b in self.blocks:
                x = b(x)
            return self.ln_f(x) @ self.tok.weight.T  # tied output projection

    model = GPT()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.99))
    iters, warm, lr_max, lr_min = 2000, 100, 1e-3, 1e-4

    def lr_at(it):
        if it < warm:
            return lr_max * (it + 1) / (warm + 1)
        r = (it - warm) / (iters - warm)
        return lr_min + 0.5 * (1 + math.cos(math.pi * r)) * (lr_max - lr_min)

    rng = np.random.default_rng(args.seed + 1)
    state = {"it": 0, "time": 0.0, "loss": float("nan")}

    def step():
        x, y = random_windows(train, T, 12, rng)
        t0 = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = lr_at(state["it"])
        logits = model(torch.from_numpy(x))
        loss = F.cross_entropy(logits.reshape(-1, vocab), torch.from_numpy(y).reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        state["time"] += time.perf_counter() - t0
        state["it"] += 1
        state["loss"] = float(loss.detach())
        return state["it"] >= iters

    def evaluate():
        x, y = val_windows(val, T)
        total = 0.0
        with torch.no_grad():
            for i in range(0, len(x), 64):
                lg = model(torch.from_numpy(x[i:i + 64]))
                total += float(F.cross_entropy(lg.reshape(-1, vocab), torch.from_numpy(y[i:i + 64]).reshape(-1),
                                               reduction="sum"))
        return total / y.size

    return state, step, evaluate, {"tokens_per_iter": 12 * T, "iters": iters}


# ---- our NumPy model ----------------------------------------------------------------------
#: Our side's default: the recipe measured best at the reference's time (benchmarks/RESULTS.md): two blocks
#: instead of four, 32 windows of 64 instead of 12, and a Noam peak of about 7e-3.
NP_DEFAULTS = dict(iters=10 ** 9, batch=32, block=64, d=128, heads=4, layers=2, ff=512, dropout=0.0,
                   positions="learned", lr_factor=0.8, warmup=100)


def parse_spec(text: str) -> dict:
    """``"lr_factor=0.6 batch=32"`` -> the numpy side's settings (NP_DEFAULTS overridden)."""
    spec = dict(NP_DEFAULTS)
    for item in text.split():
        key, value = item.split("=")
        if key not in spec:
            raise SystemExit(f"unknown numpy setting {key!r}: expected one of {', '.join(spec)}")
        spec[key] = type(spec[key])(value) if not isinstance(spec[key], float) else float(value)
    return spec


def numpy_side(args, spec, train, val, vocab, time_limit):
    cfg = TransformerConfig(src_vocab_size=vocab, d_model=spec["d"], n_heads=spec["heads"], n_layers=spec["layers"],
                            d_ff=spec["ff"], max_len=spec["block"], dropout=spec["dropout"], dtype="float32",
                            seed=args.seed, norm_first=True, tie_embeddings=True, positions=spec["positions"])
    model = TransformerLM(cfg).train()
    params, grads = model.parameters(), model.gradients()
    opt = Adam(params, lr=NoamSchedule(spec["d"], spec["warmup"], spec["lr_factor"]))
    rng = np.random.default_rng(args.seed + 2)
    state = {"it": 0, "time": 0.0, "loss": float("nan")}

    def step():
        x, y = random_windows(train, spec["block"], spec["batch"], rng)
        t0 = time.perf_counter()
        loss, dlogits = cross_entropy(model.forward(x), y)
        model.backward(dlogits)
        clip_grad_norm(grads, 1.0)
        opt.step(grads)
        model.zero_grad()
        state["time"] += time.perf_counter() - t0
        state["it"] += 1
        state["loss"] = float(loss)
        return state["it"] >= spec["iters"] or state["time"] >= time_limit()

    def evaluate():
        model.eval()
        x, y = val_windows(val, spec["block"])
        total = 0.0
        for i in range(0, len(x), 64):
            loss, _ = cross_entropy(model.forward(x[i:i + 64]), y[i:i + 64])
            total += loss * y[i:i + 64].size
        model.train()
        return total / y.size

    return state, step, evaluate, {"tokens_per_iter": spec["batch"] * spec["block"], "model": model}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data-dir", default=None)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--slice", type=float, default=5.0, help="seconds of one side before switching")
    p.add_argument("--sides", default="torch,numpy")
    p.add_argument("--np", action="append", default=[],
                   help='one numpy side, e.g. "lr_factor=0.6 batch=32 layers=2" (repeat for more; see NP_DEFAULTS)')
    p.add_argument("--np-seconds", type=float, default=0.0,
                   help="training time of each numpy side (0: the torch side's time, once it is done)")
    p.add_argument("--kv-tokens", type=int, default=500,
                   help="tokens generated with and without the KV cache to time it (0: skip)")
    p.add_argument("--sample", type=int, default=300, help="characters sampled from our model at the end")
    args = p.parse_args(argv)

    text = load_text(args.data_dir)
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    train_text, val_text = split_text(text)
    train = np.array([stoi[c] for c in train_text], dtype=np.int64)
    val = np.array([stoi[c] for c in val_text], dtype=np.int64)
    print(f"# bench_lm {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC} on {platform.node()} "
          f"({os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}), threads {args.threads}, "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}")
    print("# " + " ".join(sys.argv))
    sides = {}
    if "torch" in args.sides.split(","):
        sides["torch"] = torch_side(args, train, val, len(chars))

    def time_limit():
        if args.np_seconds > 0:
            return args.np_seconds
        if "torch" not in sides:
            raise SystemExit("--np-seconds is needed without the torch side")
        torch_state = sides["torch"][0]
        return torch_state["time"] if torch_state["it"] >= 2000 else float("inf")

    specs = (args.np or [""]) if "numpy" in args.sides.split(",") else []
    for i, text in enumerate(specs):
        sides[f"numpy{i}"] = numpy_side(args, parse_spec(text), train, val, len(chars), time_limit)
        print(f"# numpy{i}: {parse_spec(text)}")
    running = dict(sides)
    while running:  # alternate slices until every side is done
        for name in list(running):
            state, step, _, info = running[name]
            end = time.perf_counter() + args.slice
            done = step()
            while not done and time.perf_counter() < end:
                done = step()
            print(f"{name:6s} it {state['it']:5d}  train loss {state['loss']:.3f}  time {state['time']:6.1f} s",
                  flush=True)
            if done:
                del running[name]
    for name, (state, _, evaluate, info) in sides.items():
        v = evaluate()
        tok_s = state["it"] * info["tokens_per_iter"] / state["time"]
        print(f"RESULT {name:6s} iters {state['it']}  train time {state['time']:.1f} s  tokens/s {tok_s:,.0f}  "
              f"val loss {v:.4f} nats/char")
    if "numpy0" in sides and args.sample:
        model = sides["numpy0"][3]["model"].eval()
        ids = generate(model, [stoi["\n"]], args.sample, temperature=0.8, top_k=40, seed=0)
        print("SAMPLE numpy0 (temperature 0.8, top-k 40):\n" + "".join(chars[i] for i in ids))
    if args.kv_tokens:
        if "numpy0" in sides:
            model, spec = sides["numpy0"][3]["model"], parse_spec(specs[0])
        else:  # the speed does not depend on the weights: an untrained model of the first --np
            spec = parse_spec(args.np[0] if args.np else "")
            model = numpy_side(args, spec, train, val, len(chars), lambda: 0.0)[3]["model"]
        kv_cache_speed(model, spec, args.kv_tokens, stoi["\n"])


def kv_cache_speed(model, spec, n, start_id):
    """Time ``n`` generated tokens with and without the KV cache (best of 3 each); check they agree."""
    best = {}
    for use_cache in (True, False):
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            ids = generate(model, [start_id], n, temperature=0.8, top_k=40, seed=0, use_cache=use_cache)
            times.append(time.perf_counter() - t0)
        best[use_cache] = (min(times), ids)
    assert best[True][1] == best[False][1], "cached and uncached generation differ"
    (tc, _), (tf, _) = best[True], best[False]
    print(f"RESULT kv-cache {n} tokens, context {spec['block']}, {spec['layers']} layers of {spec['d']}: "
          f"cached {tc:.2f} s ({n / tc:,.0f} tok/s), uncached {tf:.2f} s ({n / tf:,.0f} tok/s), "
          f"speed-up {tf / tc:.1f}x, same tokens")


if __name__ == "__main__":
    main()
