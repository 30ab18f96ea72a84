"""Greedy decoding of Multi30K validation sentences with and without the KV cache.

``greedy_decode(..., use_cache=True)`` keeps each decoder self-attention's keys and
values, so a step runs one position; ``use_cache=False`` re-runs the whole prefix every
step. Both must give identical outputs; the script asserts it and reports the speed-up.

With ``--checkpoint DIR`` the trained model and its vocabularies are used. Without one,
a randomly initialised model of the translation size (d_model 256, 3+3 layers, 8 heads,
d_ff 1024) with a word vocabulary built from Multi30K train stands in: its outputs are
garbage but the timing is real. An untrained model rarely emits EOS, so both runs then
decode every sentence to the maximum length ``int(1.5 * S) + 10`` (S the batch's padded
source length, capped by the model's ``max_len``), the worst case for the uncached run.

Sentences are sorted by length and decoded in batches of ``--batch-size``.

Usage::

    python benchmarks/bench_decode.py                          # random model, 1000 sentences
    python benchmarks/bench_decode.py --checkpoint runs/multi30k --n 1000 --json decode.json
    python benchmarks/bench_decode.py --n 50 --threads 1       # a quick check
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import List, Optional

PAD, BOS, EOS, UNK = 0, 1, 2, 3


def build_task_and_model(checkpoint: Optional[str], data_dir: Optional[str]):
    """(task, model, description), the model in eval mode (no dropout while decoding)."""
    if checkpoint:
        from numpytransformer.cli import load_for_inference

        task, model, path = load_for_inference(checkpoint, data_dir)
        if not hasattr(task, "encode_src"):
            raise SystemExit(f"{path} is not a translation checkpoint (its task has no source sentences)")
        return task, model, f"checkpoint {path}"
    from numpytransformer.tasks.translate import TranslateSettings, TranslationTask

    settings = TranslateSettings(dataset="multi30k", src_lang="de", tgt_lang="en", tokenizer="word",
                                 d_model=256, n_heads=8, n_layers=3, d_ff=1024, dropout=0.1, dtype="float32")
    task = TranslationTask(settings, data_dir=data_dir)
    model = task.build_model()
    model.eval()
    return task, model, "randomly initialised model (outputs are garbage, timings are real)"


def make_batches(src_ids: List, batch_size: int, model_max_len: int):
    """Sort by length, cut into batches: a list of (indices, padded src (B, S), max output length)."""
    import numpy as np

    from numpytransformer.datasets import pad_batch

    order = sorted(range(len(src_ids)), key=lambda i: len(src_ids[i]))
    batches = []
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        src = pad_batch([src_ids[i] if len(src_ids[i]) else np.array([UNK]) for i in idx], PAD)
        max_out = min(int(src.shape[1] * 1.5) + 10, model_max_len)
        batches.append((idx, src, max_out))
    return batches


def decode_all(model, batches, n: int, use_cache: bool):
    """(outputs in the input's order, seconds, decoder steps summed over batches)."""
    from numpytransformer.decoding import greedy_decode

    outputs: List[Optional[List[int]]] = [None] * n
    steps = 0
    t0 = time.perf_counter()
    for idx, src, max_out in batches:
        hyps = greedy_decode(model, src, max_out, bos_id=BOS, eos_id=EOS, use_cache=use_cache)
        steps += min(max_out, max(len(h) for h in hyps) + 1)
        for i, h in zip(idx, hyps):
            outputs[i] = h
    return outputs, time.perf_counter() - t0, steps


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", metavar="DIR", help="a translation checkpoint or run directory "
                   "(default: a randomly initialised translation-size model)")
    p.add_argument("--n", type=int, default=1000, help="first N validation sentences (default %(default)s)")
    p.add_argument("--batch-size", type=int, default=100, help="sentences per batch (default %(default)s)")
    p.add_argument("--data-dir", default=None,
                   help="folder holding multi30k/ (default: $NUMPYTRANSFORMER_DATA, else <repo>/../shared/data)")
    p.add_argument("--threads", type=int, default=None,
                   help="OpenBLAS threads (sets OPENBLAS_NUM_THREADS; default: the environment's)")
    p.add_argument("--json", metavar="PATH", help="write the results and the machine's facts here")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.n < 1 or args.batch_size < 1:
        raise SystemExit("--n and --batch-size must be positive")
    if args.threads is not None:  # before NumPy is first imported
        os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)

    import numpy as np

    from bench_step import machine_facts
    from numpytransformer.datasets import load_multi30k

    task, model, what = build_task_and_model(args.checkpoint, args.data_dir)
    src_lang = getattr(getattr(task, "s", None), "src_lang", "de")
    pairs = load_multi30k("val", args.data_dir)  # (de, en)
    sentences = [de if src_lang == "de" else en for de, en in pairs[:args.n]]
    src_ids = [task.encode_src(s) for s in sentences]
    batches = make_batches(src_ids, args.batch_size, model.cfg.max_len)
    facts = {**machine_facts(), "numpy": np.__version__}
    cfg = model.cfg
    print(f"{what}: d_model {cfg.d_model}, {cfg.n_layers}+{cfg.n_decoder_layers} layers, {cfg.n_heads} heads, "
          f"d_ff {cfg.d_ff}, vocab {cfg.src_vocab_size}->{cfg.tgt_vocab_size}, {cfg.dtype}")
    print(f"{len(sentences)} validation sentences ({src_lang}), {len(batches)} batches of up to {args.batch_size}; "
          f"OpenBLAS threads {os.environ.get('OPENBLAS_NUM_THREADS', 'default')}; "
          f"load average {facts['loadavg_at_start'][0]:.2f} on {facts['cpu_count']} CPUs", flush=True)

    # One small untimed batch, so that neither run pays for first-call costs.
    decode_all(model, make_batches(src_ids[:8], 8, cfg.max_len), 8, use_cache=True)
    results = {}
    for use_cache in (True, False):
        outputs, seconds, steps = decode_all(model, batches, len(src_ids), use_cache)
        results[use_cache] = outputs
        tokens = sum(len(h) for h in outputs)
        at_max = sum(len(h) >= max_out for idx, _, max_out in batches for h in (outputs[i] for i in idx))
        results[("stats", use_cache)] = {"seconds": seconds, "decoder_steps": steps, "output_tokens": tokens,
                                         "sentences_at_max_len": at_max,
                                         "ms_per_sentence": 1e3 * seconds / len(src_ids),
                                         "tokens_per_s": tokens / seconds}
        print(f"  {'with' if use_cache else 'without'} cache: {seconds:.2f} s", flush=True)

    same = [a == b for a, b in zip(results[True], results[False])]
    cached, uncached = results[("stats", True)], results[("stats", False)]
    speedup = uncached["seconds"] / cached["seconds"]
    print()
    print(f"{'KV cache':<9} {'time s':>8} {'ms/sentence':>12} {'out tok/s':>10} {'tokens':>8} {'at max len':>11}")
    for name, st in (("with", cached), ("without", uncached)):
        print(f"{name:<9} {st['seconds']:8.2f} {st['ms_per_sentence']:12.1f} {st['tokens_per_s']:10.0f} "
              f"{st['output_tokens']:8d} {st['sentences_at_max_len']:11d}")
    print(f"speed-up of the KV cache: {speedup:.2f}x; identical outputs: {sum(same)}/{len(same)}")
    mean_len = np.mean([len(h) for h in results[True]])
    print(f"mean output length {mean_len:.1f} tokens (tokens counted without BOS/EOS)")
    if args.json:
        doc = {"machine": facts, "model": what, "config": cfg.to_dict(), "n_sentences": len(src_ids),
               "batch_size": args.batch_size, "with_cache": cached, "without_cache": uncached,
               "speedup": speedup, "identical_outputs": all(same)}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
        print(f"wrote {args.json}")
    if not all(same):
        first = same.index(False)
        raise AssertionError(f"{len(same) - sum(same)} of {len(same)} outputs differ with and without the cache "
                             f"(first: sentence {first}: {results[True][first]} vs {results[False][first]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
