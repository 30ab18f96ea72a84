"""Greedy and beam decoding of Multi30K validation sentences: numpytransformer beside PyTorch.

Both sides decode the same sentences with the same weights:

* ``numpy``: :func:`numpytransformer.nn.decoding.greedy_decode` and
  :func:`~numpytransformer.nn.decoding.beam_search` (beam 4, length penalty 0.6), which keep each
  decoder layer's self-attention keys and values (the KV cache) and the memory's
  cross-attention keys and values, so a step runs one position.
* ``torch``: a straightforward cached decoder written here in PyTorch (float32, inference
  mode): the numpy model's parameters copied into tensors, the encoder run once, then per
  step one position through each decoder layer with ``F.scaled_dot_product_attention`` over
  the keys and values cached so far, ``F.layer_norm``, ``torch.addmm``; the same greedy and
  beam rules (pad and BOS never generated, finished beams extend with EOS at no cost, GNMT
  length penalty). Outputs agree with numpy's up to float32 rounding of near-ties.

The two sides run in one process, both pinned to ``--threads`` threads, interleaved: numpy
greedy, torch greedy, numpy greedy, ... (``--repeats`` passes of each), then the same for
beam search. Wall and process CPU time are both reported; with one thread on a shared machine
the CPU time is the steadier figure.

With ``--checkpoint DIR`` the trained model and its vocabularies are used. Without one, a
randomly initialised model of the translation size (d_model 256, 3+3 layers, 8 heads,
d_ff 1024) with the vocabularies of the translation task's default Multi30K de->en recipe
(cased BPE) stands in: its outputs are garbage but
the timing is real, and since it rarely emits EOS nearly every sentence runs to the maximum
length ``int(1.5 * S) + 10`` (S the batch's padded source length), the worst case.

``--uncached`` also times numpy's greedy decoding without the KV cache (the whole prefix
re-run every step) and checks that its outputs equal the cached ones.

``--profile`` instead runs one greedy pass of each side under cProfile (process CPU time) and
times one decoding step's projections alone, NumPy's ``linear_forward`` (and a bare
``np.matmul``) against ``torch.addmm``: where the two sides' time goes. It times nothing else
(``--repeats``, ``--beam``, ``--uncached`` and ``--json`` are ignored).

Usage::

    python benchmarks/bench_decode.py --threads 1 --json benchmarks/results/bench_decode.json
    python benchmarks/bench_decode.py --checkpoint runs/de-en --n 1000
    python benchmarks/bench_decode.py --n 50 --repeats 1 --uncached      # a quick check
    python benchmarks/bench_decode.py --n 1000 --profile                 # where the time goes
"""
from __future__ import annotations

import argparse
import json
import math
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
    from numpytransformer.training.settings import ModelSettings
    from numpytransformer.tasks.translate import TranslateData, TranslationTask

    task = TranslationTask(TranslateData(dataset="multi30k", direction="de-en"),
                           ModelSettings(d_model=256, n_heads=8, n_layers=3, d_ff=1024, dropout=0.1,
                                         dtype="float32"), data_dir=data_dir)
    model = task.build_model()
    model.eval()
    return task, model, "randomly initialised model (outputs are garbage, timings are real)"


def make_batches(src_ids: List, batch_size: int, model_max_len: int):
    """Sort by length, cut into batches: a list of (indices, padded src (B, S), max output length)."""
    from numpytransformer.datasets.batching import pad_or_unk

    order = sorted(range(len(src_ids)), key=lambda i: len(src_ids[i]))
    batches = []
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        src = pad_or_unk([src_ids[i] for i in idx], PAD, UNK)
        max_out = min(int(src.shape[1] * 1.5) + 10, model_max_len)
        batches.append((idx, src, max_out))
    return batches


# ---- the PyTorch side --------------------------------------------------------------------------
class TorchDecoder:
    """The numpy model's weights in PyTorch tensors, and a cached greedy and beam decoder."""

    def __init__(self, model):
        import torch

        cfg = model.cfg
        if cfg.positions != "sinusoidal":
            raise SystemExit(f"the torch decoder knows sinusoidal positions only, not {cfg.positions!r}")
        self.torch = torch
        self.cfg = cfg
        self.P = {k: torch.from_numpy(v.copy()) for k, v in model.parameters().items()}
        self.pe = torch.from_numpy(model.decoder.embedder.pos.pe.copy())  # (max_len, D)
        self.scale = math.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0
        self.H, self.D = cfg.n_heads, cfg.d_model
        if cfg.tie_embeddings:
            self.W_out, self.b_out = self.P["decoder.embedder.embed.W"].T.contiguous(), self.P["out.b"]
        else:
            self.W_out, self.b_out = self.P["out.linear.W"], self.P["out.linear.b"]

    # building blocks: x (B, T, D)
    def lin(self, x, W, b):
        return self.torch.addmm(b, x.reshape(-1, x.shape[-1]), W).reshape(*x.shape[:-1], W.shape[1])

    def heads(self, x):
        B, T, _ = x.shape
        return x.view(B, T, self.H, self.D // self.H).transpose(1, 2)  # (B, H, T, D/H)

    def merge(self, x):
        B, H, T, dk = x.shape
        return x.transpose(1, 2).reshape(B, T, H * dk)

    def norm(self, x, prefix):
        F = self.torch.nn.functional
        return F.layer_norm(x, (self.D,), self.P[prefix + ".gamma"], self.P[prefix + ".beta"], self.cfg.layernorm_eps)

    def sublayer(self, x, prefix, f):
        if self.cfg.norm_first:
            return x + f(self.norm(x, prefix))
        return self.norm(x + f(x), prefix)

    def attend(self, q, k, v, mask, prefix):
        F = self.torch.nn.functional
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # mask: True = may attend
        return self.lin(self.merge(out), self.P[prefix + ".W_o"], self.P[prefix + ".b_o"])

    def ffn(self, x, prefix):
        h = self.torch.relu(self.lin(x, self.P[prefix + ".W1"], self.P[prefix + ".b1"]))
        return self.lin(h, self.P[prefix + ".W2"], self.P[prefix + ".b2"])

    def embed(self, ids, which, offset=0):
        x = self.P[f"{which}.embedder.embed.W"][ids] * self.scale
        return x + self.pe[offset:offset + ids.shape[1]]

    def encode(self, src):
        """src (B, S) -> memory (B, S, D) and the key mask (B, 1, 1, S)."""
        P, mask = self.P, (src != self.cfg.pad_id)[:, None, None, :]
        x = self.embed(src, "encoder")
        for i in range(self.cfg.n_layers):
            p = f"encoder.layers.{i}"

            def self_attn(h, p=p):
                q, k, v = (self.heads(self.lin(h, P[f"{p}.self_attn.W_{n}"], P[f"{p}.self_attn.b_{n}"]))
                           for n in "qkv")
                return self.attend(q, k, v, mask, f"{p}.self_attn")
            x = self.sublayer(x, f"{p}.self_attn_sublayer.norm", self_attn)
            x = self.sublayer(x, f"{p}.ffn_sublayer.norm", lambda h, p=p: self.ffn(h, f"{p}.ffn"))
        if self.cfg.norm_first:
            x = self.norm(x, "encoder.final_norm")
        return x, mask

    def start(self, memory):
        """Per decoder layer: the memory's keys and values (computed once) and empty self caches."""
        P = self.P
        caches = []
        for i in range(self.cfg.n_decoder_layers):
            p = f"decoder.layers.{i}.cross_attn"
            caches.append({"ck": self.heads(self.lin(memory, P[p + ".W_k"], P[p + ".b_k"])),
                           "cv": self.heads(self.lin(memory, P[p + ".W_v"], P[p + ".b_v"])), "k": None, "v": None})
        return caches

    def step(self, tokens, position, caches, mask):
        """tokens (B, 1) at ``position`` -> logits (B, V), appending to the self-attention caches."""
        torch, P = self.torch, self.P
        x = self.embed(tokens, "decoder", position)
        for i, c in enumerate(caches):
            p = f"decoder.layers.{i}"

            def self_attn(h, p=p, c=c):
                q, k, v = (self.heads(self.lin(h, P[f"{p}.self_attn.W_{n}"], P[f"{p}.self_attn.b_{n}"]))
                           for n in "qkv")
                if c["k"] is not None:
                    k, v = torch.cat([c["k"], k], dim=2), torch.cat([c["v"], v], dim=2)
                c["k"], c["v"] = k, v
                return self.attend(q, k, v, None, f"{p}.self_attn")  # one new query sees every cached key

            def cross_attn(h, p=p, c=c):
                q = self.heads(self.lin(h, P[f"{p}.cross_attn.W_q"], P[f"{p}.cross_attn.b_q"]))
                return self.attend(q, c["ck"], c["cv"], mask, f"{p}.cross_attn")
            x = self.sublayer(x, f"{p}.self_attn_sublayer.norm", self_attn)
            x = self.sublayer(x, f"{p}.cross_attn_sublayer.norm", cross_attn)
            x = self.sublayer(x, f"{p}.ffn_sublayer.norm", lambda h, p=p: self.ffn(h, f"{p}.ffn"))
        if self.cfg.norm_first:
            x = self.norm(x, "decoder.final_norm")
        logits = self.lin(x[:, -1], self.W_out, self.b_out)  # (B, V)
        logits[:, [self.cfg.pad_id, BOS]] = -math.inf  # never generated, as in numpytransformer
        return logits

    def greedy(self, src_np, max_len):
        torch = self.torch
        with torch.inference_mode():
            src = torch.from_numpy(src_np)
            memory, mask = self.encode(src)
            caches = self.start(memory)
            B = src.shape[0]
            ys = torch.full((B, 1), BOS, dtype=torch.int64)
            done = torch.zeros(B, dtype=torch.bool)
            for t in range(min(max_len, self.cfg.max_len)):
                nxt = self.step(ys[:, -1:], t, caches, mask).argmax(dim=-1)
                nxt = torch.where(done, torch.full_like(nxt, EOS), nxt)
                ys = torch.cat([ys, nxt[:, None]], dim=1)
                done |= nxt == EOS
                if bool(done.all()):
                    break
            return [strip(row[1:], EOS) for row in ys.tolist()]

    def beam(self, src_np, max_len, K=4, length_penalty=0.6):
        torch = self.torch
        with torch.inference_mode():
            src = torch.from_numpy(src_np)
            B = src.shape[0]
            memory, mask = self.encode(src)
            memory, mask = memory.repeat_interleave(K, dim=0), mask.repeat_interleave(K, dim=0)
            caches = self.start(memory)
            scores = torch.full((B, K), -math.inf, dtype=torch.float64)
            scores[:, 0] = 0.0
            seqs = torch.full((B, K, 1), BOS, dtype=torch.int64)
            finished = torch.zeros((B, K), dtype=torch.bool)
            lengths = torch.zeros((B, K), dtype=torch.int64)
            for t in range(min(max_len, self.cfg.max_len)):
                logits = self.step(seqs[:, :, -1].reshape(B * K, 1), t, caches, mask)
                logp = torch.log_softmax(logits.double(), dim=-1).reshape(B, K, -1)
                V = logp.shape[-1]
                logp[finished] = -math.inf
                logp[..., EOS] = torch.where(finished, 0.0, logp[..., EOS])
                cand = (scores[:, :, None] + logp).reshape(B, K * V)
                scores, top = cand.topk(K, dim=1)
                beam, tok = top // V, top % V
                seqs = torch.cat([seqs.gather(1, beam[:, :, None].expand(-1, -1, seqs.shape[2])), tok[:, :, None]], 2)
                was_finished = finished.gather(1, beam)
                lengths = lengths.gather(1, beam) + (~was_finished).long()
                finished = was_finished | (tok == EOS)
                flat = (torch.arange(B)[:, None] * K + beam).reshape(-1)
                for c in caches:
                    c["k"], c["v"] = c["k"][flat], c["v"][flat]
                if bool(finished.all()):
                    break
            final = scores / ((5.0 + lengths) / 6.0) ** length_penalty
            best = final.argmax(dim=1)
            return [strip(seqs[b, best[b], 1:].tolist(), EOS) for b in range(B)]


def strip(row, eos_id: int) -> List[int]:
    """Tokens up to the first EOS, cut as the library cuts them."""
    from numpytransformer.nn.decoding import _strip

    return _strip(row, eos_id)


# ---- timing --------------------------------------------------------------------------------------
def run_pass(decode, batches, n: int):
    """(outputs in the input's order, wall seconds, CPU seconds) of decoding every batch."""
    outputs: List[Optional[List[int]]] = [None] * n
    w0, c0 = time.perf_counter(), time.process_time()
    for idx, src, max_out in batches:
        for i, h in zip(idx, decode(src, max_out)):
            outputs[i] = h
    return outputs, time.perf_counter() - w0, time.process_time() - c0


def summary(xs: List[float]) -> dict:
    s = sorted(xs)
    return {"median": s[len(s) // 2] if len(s) % 2 else 0.5 * (s[len(s) // 2 - 1] + s[len(s) // 2]),
            "min": s[0], "max": s[-1], "n": len(s)}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", metavar="DIR", help="a translation checkpoint or run directory "
                   "(default: a randomly initialised translation-size model)")
    p.add_argument("--n", type=int, default=1000, help="first N validation sentences (default %(default)s)")
    p.add_argument("--batch-size", type=int, default=100, help="sentences per batch (default %(default)s)")
    p.add_argument("--beam", type=int, default=4, help="beam size; 0 skips beam search (default %(default)s)")
    p.add_argument("--repeats", type=int, default=2, help="interleaved greedy passes per side (default %(default)s)")
    p.add_argument("--beam-repeats", type=int, default=1, help="interleaved beam passes per side (default %(default)s)")
    p.add_argument("--data-dir", default=None,
                   help="folder holding multi30k/ (default: $NUMPYTRANSFORMER_DATA, else <repo>/../shared/data)")
    p.add_argument("--threads", type=int, default=1,
                   help="threads of both sides (OPENBLAS_NUM_THREADS, torch.set_num_threads; default %(default)s)")
    p.add_argument("--no-torch", action="store_true", help="numpy only")
    p.add_argument("--uncached", action="store_true", help="also time numpy's greedy decoding without the KV cache")
    p.add_argument("--profile", action="store_true", help="profile one greedy pass per side instead of timing")
    p.add_argument("--json", metavar="PATH", help="write the results and the machine's facts here")
    return p


def profile_sides(sides, batches, n: int, model, top: int = 14) -> None:
    """cProfile of one greedy pass per side, then one decoding step's projections timed alone."""
    import cProfile
    import pstats

    import numpy as np

    from numpytransformer.core.linear import linear_forward

    for side, fns in sides.items():
        prof = cProfile.Profile(time.process_time)
        prof.enable()
        run_pass(fns["greedy"], batches, n)
        prof.disable()
        print(f"== {side}: one greedy pass over {n} sentences, top {top} functions by own CPU time ==")
        pstats.Stats(prof).sort_stats("tottime").print_stats(top)
    # A step projects 100 rows through every decoder weight but the cross-attention's keys and
    # values (computed once per sentence), then through the output layer.
    P = model.parameters()
    names = [k for k, v in P.items() if v.ndim == 2 and (k.startswith("decoder.layers") or k.startswith("out."))
             and not (".cross_attn.W_k" in k or ".cross_attn.W_v" in k)]
    bias_of = {k: k.rsplit(".", 1)[0] + ".b" + k.rsplit(".", 1)[1][1:] for k in names}  # W_q -> b_q, W1 -> b1
    pairs = [(P[k], P[bias_of[k]]) for k in names]
    rng = np.random.default_rng(0)
    rows = {d: rng.standard_normal((100, d)).astype(np.float32) for d in {W.shape[0] for W, _ in pairs}}
    runs = {"numpy linear_forward (matmul, then + b)": lambda: [linear_forward(rows[W.shape[0]], W, b)
                                                               for W, b in pairs],
            "numpy np.matmul alone (no bias)": lambda: [rows[W.shape[0]] @ W for W, _ in pairs]}
    if "torch" in sides:
        import torch

        tp = [(torch.from_numpy(W), torch.from_numpy(b)) for W, b in pairs]
        tx = {d: torch.from_numpy(x) for d, x in rows.items()}
        runs["torch.addmm (bias fused)"] = lambda: [torch.addmm(b, tx[W.shape[0]], W) for W, b in tp]
    print(f"one step's {len(pairs)} projections of 100 rows, median of 7 x 20 repeats, CPU ms:")
    for _ in range(2):  # interleaved twice
        for name, f in runs.items():
            reps = []
            for _ in range(7):
                t0 = time.process_time()
                for _ in range(20):
                    f()
                reps.append((time.process_time() - t0) / 20 * 1e3)
            print(f"  {name:<42} {summary(reps)['median']:.2f}")


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.n < 1 or args.batch_size < 1 or args.repeats < 1 or args.beam_repeats < 1 or args.beam < 0:
        raise SystemExit("--n, --batch-size, --repeats and --beam-repeats must be positive, --beam at least 0")
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # before NumPy is imported
        os.environ[name] = str(args.threads)

    import numpy as np

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_step import machine_facts
    from numpytransformer.datasets import load_multi30k
    from numpytransformer.nn.decoding import beam_search, greedy_decode

    task, model, what = build_task_and_model(args.checkpoint, args.data_dir)
    src_lang = task.data.langs[0] if hasattr(task, "data") else "de"
    pairs = load_multi30k("val", args.data_dir)  # (de, en)
    sentences = [de if src_lang == "de" else en for de, en in pairs[:args.n]]
    src_ids = [task.encode_src(s) for s in sentences]
    batches = make_batches(src_ids, args.batch_size, model.cfg.max_len)
    facts = machine_facts()
    cfg = model.cfg
    sides = {"numpy": {"greedy": lambda src, m: greedy_decode(model, src, m, bos_id=BOS, eos_id=EOS),
                       "beam": lambda src, m: beam_search(model, src, m, beam_size=args.beam, bos_id=BOS,
                                                          eos_id=EOS)}}
    if not args.no_torch:
        import torch

        torch.set_num_threads(args.threads)
        facts["torch"] = torch.__version__
        tdec = TorchDecoder(model)
        sides["torch"] = {"greedy": tdec.greedy, "beam": lambda src, m: tdec.beam(src, m, args.beam)}
    facts["numpy"] = np.__version__
    print(f"{what}: d_model {cfg.d_model}, {cfg.n_layers}+{cfg.n_decoder_layers} layers, {cfg.n_heads} heads, "
          f"d_ff {cfg.d_ff}, vocab {cfg.src_vocab_size}->{cfg.tgt_vocab_size}, {cfg.dtype}")
    print(f"{len(sentences)} validation sentences ({src_lang}), {len(batches)} batches of up to {args.batch_size}; "
          f"{args.threads} thread(s) per side; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"on {facts['cpu_count']} CPUs", flush=True)

    warm = make_batches(src_ids[:8], 8, cfg.max_len)  # first-call costs are paid here, untimed
    for fns in sides.values():
        for kind in fns:
            if kind != "beam" or (args.beam and not args.profile):
                run_pass(fns[kind], warm, 8)
    if args.profile:
        profile_sides(sides, batches, len(src_ids), model)
        return 0
    results, outputs = {}, {}
    for kind in ("greedy", "beam") if args.beam else ("greedy",):
        for r in range(args.repeats if kind == "greedy" else args.beam_repeats):
            for side in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
                out, wall, cpu = run_pass(sides[side][kind], batches, len(src_ids))
                outputs[(side, kind)] = out
                rec = results.setdefault(f"{side} {kind}", {"wall": [], "cpu": []})
                rec["wall"].append(wall)
                rec["cpu"].append(cpu)
                print(f"  {side:<5} {kind:<6} pass {r + 1}: {wall:6.2f} s wall, {cpu:6.2f} s CPU", flush=True)
    if args.uncached:
        out, wall, cpu = run_pass(lambda src, m: greedy_decode(model, src, m, bos_id=BOS, eos_id=EOS,
                                                               use_cache=False), batches, len(src_ids))
        same = sum(a == b for a, b in zip(out, outputs[("numpy", "greedy")]))
        results["numpy greedy, no KV cache"] = {"wall": [wall], "cpu": [cpu], "identical_to_cached": same}
        print(f"  numpy greedy without the KV cache: {wall:.2f} s wall, {cpu:.2f} s CPU; identical outputs "
              f"{same}/{len(out)}", flush=True)

    n = len(src_ids)
    print(f"\n{'':<28} {'wall s':>8} {'sent/s':>8} {'CPU s':>8} {'sent/CPU s':>11} {'out tokens':>10}")
    table = {}
    for name, rec in results.items():
        side, kind = name.split(" ", 1)
        toks = sum(len(h) for h in outputs.get((side, kind.split(",")[0]), []) or [])
        w, c = summary(rec["wall"]), summary(rec["cpu"])
        table[name] = {"wall_s": w, "cpu_s": c, "sentences_per_s_wall": n / w["median"],
                       "sentences_per_cpu_s": n / c["median"], "output_tokens": toks,
                       **{k: v for k, v in rec.items() if k not in ("wall", "cpu")}}
        print(f"{name:<28} {w['median']:8.2f} {n / w['median']:8.1f} {c['median']:8.2f} {n / c['median']:11.1f} "
              f"{toks:10d}")
    agree = {}
    if "torch" in sides:
        for kind in ("greedy", "beam") if args.beam else ("greedy",):
            a, b = outputs[("numpy", kind)], outputs[("torch", kind)]
            agree[kind] = sum(x == y for x, y in zip(a, b))
            rw = table[f"numpy {kind}"]["wall_s"]["median"] / table[f"torch {kind}"]["wall_s"]["median"]
            rc = table[f"numpy {kind}"]["cpu_s"]["median"] / table[f"torch {kind}"]["cpu_s"]["median"]
            table[f"numpy/torch {kind}"] = {"wall": rw, "cpu": rc}
            print(f"{kind}: numpy/torch time {rw:.2f} (wall), {rc:.2f} (CPU); identical outputs {agree[kind]}/{n}")
    mean_len = np.mean([len(h) for h in outputs[("numpy", "greedy")]])
    print(f"mean greedy output length {mean_len:.1f} tokens (without BOS/EOS); load average at the end "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        facts["loadavg_at_end"] = list(os.getloadavg())
        doc = {"machine": facts, "command": " ".join(["python"] + sys.argv), "model": what,
               "config": cfg.to_dict(), "n_sentences": n, "batch_size": args.batch_size, "beam": args.beam,
               "threads": args.threads, "results": table, "identical_outputs": agree,
               "mean_greedy_output_tokens": float(mean_len)}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
