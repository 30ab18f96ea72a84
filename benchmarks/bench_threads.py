"""How many BLAS threads should the sentiment classifier train with?

Times one training update of the sentiment recipe's model (``SentimentTask.recipe``: one
encoder layer, d_model 64, 4 heads, d_ff 128, a 10,000-word vocabulary, dropout 0.3, and
the data settings' region embedding) on
batches of the shapes its length buckets produce (8,192 tokens: 16 x 512, 32 x 256,
64 x 128), once with each thread count. Each thread count runs in its own subprocess, one
after the other, because OpenBLAS reads ``OPENBLAS_NUM_THREADS`` when NumPy is imported.

    python benchmarks/bench_threads.py                 # 1 and 2 threads, 20 updates a shape
    python benchmarks/bench_threads.py --threads 1 2 --steps 40 --json out.json

An update is what the trainer does: forward, cross-entropy, zero_grad, backward, clipping
and Adam. The figures are the median update time per shape, and the reviews and the
tokens per second over all three shapes (every batch is full, so its tokens are B x T,
none of them padding: the trainer's tok/s counts the same, real tokens).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

SHAPES = [(16, 512), (32, 256), (64, 128)]


def worker(steps: int, warmup: int) -> dict:
    import numpy as np

    from numpytransformer.nn.config import TransformerConfig
    from numpytransformer.core.losses import cross_entropy
    from numpytransformer.nn.models import TransformerClassifier
    from numpytransformer.training.optim import Adam, clip_grad_norm
    from numpytransformer.tasks.sentiment import SentimentData, SentimentTask

    data = SentimentData()
    settings = SentimentTask.recipe(data)[0]
    model = TransformerClassifier(TransformerConfig(
        src_vocab_size=data.vocab_size, max_len=data.max_tokens + 1, pad_id=0, n_classes=2, pooling=data.pooling,
        region=data.region, **settings.config_fields()))
    model.train()
    opt = Adam(model.parameters(), lr=1e-4)
    rng = np.random.default_rng(0)
    out = {}
    for B, T in SHAPES:
        x = rng.integers(4, data.vocab_size, size=(B, T))
        y = rng.integers(0, 2, size=B)
        times = []
        for i in range(warmup + steps):
            start = time.perf_counter()
            logits = model.forward(x)
            _, dlogits = cross_entropy(logits, y)
            model.zero_grad()
            model.backward(dlogits)
            grads = model.gradients()
            clip_grad_norm(grads, 1.0)
            opt.step(grads)
            if i >= warmup:
                times.append(time.perf_counter() - start)
        out[f"{B}x{T}"] = float(np.median(times))
    seconds = sum(out[f"{B}x{T}"] for B, T in SHAPES)
    out["reviews_per_s"] = sum(B for B, _ in SHAPES) / seconds
    out["tokens_per_s"] = sum(B * T for B, T in SHAPES) / seconds
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.steps, args.warmup)))
        return 0
    results = {}
    for n in args.threads:
        env = dict(os.environ, OPENBLAS_NUM_THREADS=str(n), OMP_NUM_THREADS=str(n))
        proc = subprocess.run([sys.executable, __file__, "--worker", "--steps", str(args.steps),
                               "--warmup", str(args.warmup)], env=env, capture_output=True, text=True, check=True)
        results[n] = json.loads(proc.stdout.strip().splitlines()[-1])
        r = results[n]
        print(f"{n} thread(s): " + ", ".join(f"{k} {1000 * r[k]:.0f} ms" for k in r if not k.endswith("_per_s"))
              + f"; {r['reviews_per_s']:.0f} reviews/s, {r['tokens_per_s']:,.0f} tok/s", flush=True)
    if len(results) > 1:
        first = args.threads[0]
        for n in args.threads[1:]:
            print(f"{n} threads / {first}: {results[n]['tokens_per_s'] / results[first]['tokens_per_s']:.2f}x "
                  "the tokens (and reviews) per second")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": results, "steps": args.steps}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
