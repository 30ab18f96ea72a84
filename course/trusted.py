"""The grader's trusted core: its error measure, its test cases and its tolerances.

This module imports nothing but NumPy, the standard library and the tolerances of
``gradcheck.py`` (NumPy only), never the rest of the package it ships in. The grader loads it *by path from its own install* (the teacher's copy) into
the process that runs a student's code, and imports it normally in the grading process,
so a student who edits ``gradcheck.py``, or anything else in their copy, changes
neither the measure nor the cases. ``tests/`` draws its cases from here too: one set.

A case is data (arrays and numbers), not code; the functions named in :data:`PROBES`
are what a case is run through.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

import numpy as np

# The tolerances, defined once in the library's gradcheck.py (NumPy only). Loaded by path, never by
# import: the grader copies its own gradcheck.py beside this file into the student's process, and
# beside the course it is the teacher's library, so a student's edited copy changes nothing.
_HERE = Path(__file__).resolve().parent
_GRADCHECK = _HERE / "gradcheck.py"
if not _GRADCHECK.is_file():
    _GRADCHECK = _HERE.parent / "numpytransformer" / "core" / "gradcheck.py"
_spec = importlib.util.spec_from_file_location("_numpytransformer_grader_gradcheck", _GRADCHECK)
_gradcheck = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_gradcheck)
KINK_TOL, SMOOTH_TOL, ZERO_ATOL = _gradcheck.KINK_TOL, _gradcheck.SMOOTH_TOL, _gradcheck.ZERO_ATOL

VALUE_TOL = 1e-12  # forward values computed two ways in float64
#: A backward's gradients against the teacher's analytic ones (relative). Two correct float64
#: derivations agree to about 1e-15; plain centred differences of the forward (h = 1e-5) reach
#: about 1e-11 to 3e-10 on these cases and fail. Higher-order differences or a complex step on a copy
#: of the forward can pass: the grader cannot tell every numerical gradient from a derivation.
ANALYTIC_TOL = 1e-12
PAD = 0
MHA_PARAMS = ("W_q", "b_q", "W_k", "b_k", "W_v", "b_v", "W_o", "b_o")


def rel_error(a, b) -> float:
    """max |a - b| / max(max |a|, max |b|); 0 for two zero arrays."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    scale = max(float(np.max(np.abs(a), initial=0.0)), float(np.max(np.abs(b), initial=0.0)))
    return float(np.max(np.abs(a - b), initial=0.0)) / scale if scale else 0.0


def grad_error(analytic, numeric) -> Tuple[str, float]:
    """("relative error", e), or ("absolute error", e) for a gradient that is zero up to noise."""
    if np.max(np.abs(numeric), initial=0.0) < ZERO_ATOL:
        return "absolute error", float(np.max(np.abs(np.asarray(analytic, np.float64) - numeric), initial=0.0))
    return "relative error", rel_error(analytic, numeric)


def numerical_gradient(f: Callable[[], Any], x: np.ndarray, dout, h: float = 1e-5) -> np.ndarray:
    """Centred differences of ``sum(f() * dout)`` with respect to ``x``, perturbed in place: what
    ``tests/test_exercises.py`` proves the library's backward passes by, on these cases."""
    grad = np.empty(x.shape)
    for idx in np.ndindex(*x.shape):
        old = x[idx]
        x[idx] = old + h
        plus = float(np.sum(np.asarray(f(), dtype=np.float64) * dout))
        x[idx] = old - h
        minus = float(np.sum(np.asarray(f(), dtype=np.float64) * dout))
        x[idx] = old
        grad[idx] = (plus - minus) / (2 * h)
    return grad


#: 0 draws the public cases (those a student edition's ``reference.npz`` holds). A teacher grading a
#: student's folder draws fresh ones with another salt, so answers copied from that file do not help.
SALT = 0


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng([SALT, seed] if SALT else seed)


def shapes(**arrays) -> str:
    return ", ".join(f"{k} {tuple(np.shape(v))}" for k, v in arrays.items())


class Case(NamedTuple):
    """One call of an exercise's functions, and how its result is judged."""

    name: str  # printed with every failure: shapes, mask, options
    inputs: Dict[str, np.ndarray]  # float arrays the gradients are taken with respect to
    static: Dict[str, Any]  # the other arguments (ids, masks, options)
    wrt: Tuple[Optional[str], ...] = ()  # the name of each value the backward returns; None: not checked
    #: relative error against the grader's library's own backward (0: equal, for gradients that are exactly 0)
    tol: float = ANALYTIC_TOL
    seed: int = 0  # of the random dout


class Call(NamedTuple):
    """One call of an exercise's function (a "calls" probe), and what of its result is judged."""

    name: str  # printed with every failure
    args: Dict[str, Any]  # the keyword arguments (arrays are copied before the call)
    #: label -> where in the result: a path of indices (int), attribute names (str), "isneginf", or
    #: "sorted" (a list of tuples of ints whose order is free, compared in sorted order)
    outputs: Dict[str, Tuple[Any, ...]]
    tol: float = VALUE_TOL
    relative: bool = True


# --------------------------------------------------------------------------- #
# What each exercise calls: (probe kind, module, function names); a "pair" may name several pairs
# --------------------------------------------------------------------------- #

PROBES: Dict[str, Tuple[str, str, Tuple[str, ...]]] = {
    "1.1": ("pair", "core.gelu", ("gelu_forward", "gelu_backward")),
    "1.2": ("pair", "core.gelu", ("gelu_forward", "gelu_backward")),
    "2.1": ("pair", "core.losses", ("softmax_cross_entropy_forward", "softmax_cross_entropy_backward")),
    "3.1": ("calls", "core.rotary", ("rotary_forward",)),
    "3.2": ("pair", "core.rotary", ("rotary_forward", "rotary_backward")),
    "4.1": ("calls", "core.alibi", ("alibi_attention_forward",)),
    "4.2": ("calls", "core.alibi", ("alibi_slopes",)),
    "5.1": ("calls", "core.gqa", ("repeat_kv",)),
    "5.2": ("pair", "core.gqa", ("gqa_forward", "gqa_backward")),
    "6.1": ("pair", "core.rmsnorm", ("rmsnorm_forward", "rmsnorm_backward")),
    "6.2": ("pair", "core.swiglu", ("swiglu_forward", "swiglu_backward")),
    "7.1": ("block", "nn.blocks", ("ParallelBlock",)),
    "7.2": ("block", "nn.blocks", ("ParallelBlock",)),
    "8.1": ("cosine", "training.optim", ("CosineSchedule",)),
    "8.2": ("lion", "training.optim", ("Lion",)),
    "8.3": ("ema", "training.optim", ("EMA",)),
    "9.1": ("calls", "nn.decoding", ("_block_repeats",)),
    "9.2": ("calls", "nn.decoding", ("_ban_early_eos",)),
    "10.1": ("calls", "text.chrf", ("chrf_statistics",)),
    "10.2": ("calls", "text.chrf", ("chrf_from_statistics",)),
    "11.1": ("calls", "sweep", ("paired_bootstrap",)),
    "12.1": ("calls", "nn.sampling", ("min_p_filter",)),
    "12.2": ("gqa_cache", "nn.modules", ("GroupedQueryAttention",)),
    "13.1": ("calls", "training.collectives", ("halving_reduce_scatter",)),
    "13.2": ("calls", "training.collectives", ("doubling_all_gather",)),
}


def attention_masks(T: int = 4) -> Dict[str, Optional[np.ndarray]]:
    """Masks for B=2, T=S (padding (B,1,1,S), causal (1,1,T,T)), built with plain NumPy."""
    lengths = (T - 1, T - 2)
    pad = (np.arange(T)[None, :] < np.array(lengths)[:, None])[:, None, None, :]  # (2, 1, 1, T)
    causal = np.tril(np.ones((T, T), dtype=bool))[None, None]
    full = np.broadcast_to(causal & pad, (2, 1, T, T)).copy()
    full[0, 0, 1, :] = False  # query 1 of batch 0 may attend to nothing
    return {"no mask": None, "causal mask": causal, "padding + causal mask": causal & pad,
            FULLY_MASKED: full}


FULLY_MASKED = "padding + causal mask with a fully masked row"


def _gqa_params(D: int, H: int, H_kv: int, seed: int) -> Dict[str, np.ndarray]:
    r, d_kv = rng(seed), H_kv * (D // H)
    widths = {"q": D, "k": d_kv, "v": d_kv, "o": D}
    out = {}
    for name in "qkvo":
        out["W_" + name] = r.standard_normal((D, widths[name])) * 0.5
        out["b_" + name] = r.standard_normal(widths[name]) * 0.5
    return out


def pair_cases(exercise_id: str) -> List[Case]:
    """The forward/backward calls of a "pair" exercise."""
    c: List[Case] = []
    if exercise_id in ("1.1", "1.2"):
        approximate = exercise_id == "1.2"
        for seed, shape, scale in ((1, (2, 3, 4), 1.0), (2, (7,), 3.0), (3, (3, 5), 0.3)):
            x = rng(seed).standard_normal(shape) * scale
            c.append(Case(f"x {shape}, |x| ~ {scale:g}, approximate {approximate}", {"x": x},
                          {"approximate": approximate}, ("x",), ANALYTIC_TOL, seed))
        x = np.array([-6.0, -3.0, -0.5, 0.0, 0.5, 3.0, 6.0])
        c.append(Case(f"x = {x.tolist()}, approximate {approximate}", {"x": x}, {"approximate": approximate}, ("x",),
                      ANALYTIC_TOL, 4))
    elif exercise_id == "2.1":
        targets = np.array([[1, 4, 2], [3, PAD, PAD]])
        for z_loss, eps, pad_id in ((0.1, 0.0, None), (0.1, 0.0, PAD), (0.5, 0.1, PAD), (0.3, 0.2, None)):
            c.append(Case(f"logits (2, 3, 5), z_loss {z_loss}, label_smoothing {eps}, pad_id {pad_id}",
                          {"logits": rng(13).standard_normal((2, 3, 5)) * 2},
                          {"targets": targets, "pad_id": pad_id, "label_smoothing": eps, "z_loss": z_loss},
                          ("logits",), ANALYTIC_TOL, 13))
        c.append(Case("logits (4, 7) shifted by +6 (log Z ~ 8), z_loss 0.01", {"logits": rng(14).standard_normal((4, 7)) + 6},
                      {"targets": np.array([0, 6, 3, 3]), "pad_id": None, "label_smoothing": 0.0, "z_loss": 0.01},
                      ("logits",), ANALYTIC_TOL, 14))
        c.append(Case("every target is pad, z_loss 0.1", {"logits": rng(15).standard_normal((2, 3, 5))},
                      {"targets": np.full((2, 3), PAD), "pad_id": PAD, "label_smoothing": 0.0, "z_loss": 0.1},
                      ("logits",), 0.0, 15))
    elif exercise_id == "3.2":
        for seed, shape, start in ((5, (2, 2, 4, 6), 0), (6, (3, 8), 5), (7, (1, 3, 5, 4), 17)):
            x = rng(seed).standard_normal(shape)
            positions = np.arange(start, start + shape[-2])
            c.append(Case(f"x {shape}, positions {start}..{start + shape[-2] - 1}", {"x": x}, {"positions": positions},
                          ("x",), ANALYTIC_TOL, seed))
    elif exercise_id == "5.2":
        D, H = 8, 4
        for seed, (H_kv, positions, mask_name) in enumerate(((1, None, "no mask"), (2, "rotary", "causal mask"),
                                                            (4, "alibi", "padding + causal mask"),
                                                            (2, None, FULLY_MASKED)), start=30):
            inputs = {"x": rng(seed).standard_normal((2, 4, D)), **_gqa_params(D, H, H_kv, seed + 10)}
            c.append(Case(f"x (2, 4, {D}), {H} heads, n_kv_heads {H_kv}, positions {positions}, {mask_name}", inputs,
                          {"n_heads": H, "n_kv_heads": H_kv, "mask": attention_masks()[mask_name],
                           "positions": positions}, ("x", *MHA_PARAMS),
                          ANALYTIC_TOL, seed))
    elif exercise_id == "6.1":
        for seed, shape, eps in ((11, (2, 3, 5), 1e-5), (12, (4, 6), 1e-5), (13, (3, 4), 0.0)):
            r = rng(seed)
            inputs = {"x": r.standard_normal(shape) * 2 + 1, "gamma": r.standard_normal(shape[-1])}
            c.append(Case(f"x {shape}, eps {eps:g}", inputs, {"eps": eps}, ("x", "gamma"), ANALYTIC_TOL, seed))
    elif exercise_id == "6.2":
        for seed, (x_shape, D_ff) in enumerate((((2, 3, 4), 6), ((5, 4), 3)), start=16):
            r, D = rng(seed), x_shape[-1]
            inputs = {"x": r.standard_normal(x_shape), "W1": r.standard_normal((D, D_ff)) * 0.7,
                      "V": r.standard_normal((D, D_ff)) * 0.7, "W2": r.standard_normal((D_ff, D)) * 0.7}
            c.append(Case(f"x {x_shape}, d_ff {D_ff}", inputs, {}, ("x", "W1", "V", "W2"), ANALYTIC_TOL, seed))
    else:
        raise KeyError(f"exercise {exercise_id} is not a forward/backward pair")
    return c


# ---- the "calls" exercises: one function, its values compared with the library's ------------------
def mean_metric(stats) -> float:
    """A mean of sentence scores, from summed rows (score, 1)."""
    return float(stats[0] / stats[1])


def f1_metric(stats) -> float:
    """An F1 from summed (matched, hypothesis, reference) counts: not a mean of sentence scores."""
    return float(2 * stats[0] / (stats[1] + stats[2])) if stats[1] + stats[2] else 0.0


def _chunks(N: int, seed: int, garbage: bool = False) -> Tuple[str, List[List[np.ndarray]]]:
    """A case's name, and N ranks' vectors each cut into N chunks, chunk i of a drawn size (1 to 4 entries,
    one size on every rank). ``garbage``: only rank r's chunk r is drawn as usual, the others are far off
    (large values), as an all-gather may find them and must not read them."""
    r = rng(seed)
    sizes = r.integers(1, 5, size=N)
    ranks = [[r.standard_normal(int(n)) for n in sizes] for _ in range(N)]
    if garbage:
        for q in range(N):
            for i in range(N):
                if i != q:
                    ranks[q][i] = 1e6 * (1 + r.random(int(sizes[i])))
    name = (f"{N} rank{'s' if N > 1 else ''}, chunk sizes {', '.join(map(str, sizes))}"
            + (", garbage outside rank r's chunk r" if garbage else ""))
    return name, ranks


def _text(r: np.random.Generator, words: int) -> str:
    return " ".join("".join(r.choice(list("abcde"), size=int(r.integers(1, 6)))) for _ in range(words))


def call_cases(exercise_id: str) -> List[Call]:
    """The calls of a "calls" exercise."""
    c: List[Call] = []
    if exercise_id == "3.1":
        for seed, shape, start in ((5, (2, 2, 4, 6), 0), (6, (3, 8), 5), (7, (1, 3, 5, 4), 17)):
            x = rng(seed).standard_normal(shape)
            c.append(Call(f"x {shape}, positions {start}..{start + shape[-2] - 1}",
                          {"x": x, "positions": np.arange(start, start + shape[-2])}, {"out": (0,)}))
        c.append(Call("x (2, 4), positions [3, 0, 9, 1] (not in order)",
                      {"x": rng(8).standard_normal((4, 4)), "positions": np.array([3, 0, 9, 1])}, {"out": (0,)}))
    elif exercise_id == "4.1":
        from_masks = attention_masks(5)
        slopes = np.sort(rng(19).uniform(0.05, 1.0, size=4))[::-1]  # any slopes: the bias is what 4.1 checks
        for seed, name in enumerate(from_masks, start=20):
            r = rng(seed)
            q, k, v = (r.standard_normal((2, 4, 5, 3)) for _ in range(3))
            c.append(Call(f"q, k, v (2, 4, 5, 3), {name}", {"q": q, "k": k, "v": v, "slopes": slopes,
                                                           "mask": from_masks[name]},
                          {"out": (0,), "weights": (1, "weights")}, 1e-10))
        r = rng(25)
        q, k, v = r.standard_normal((2, 4, 2, 3)), r.standard_normal((2, 4, 5, 3)), r.standard_normal((2, 4, 5, 3))
        causal = (np.arange(5)[None, :] <= (3 + np.arange(2))[:, None])[None, None]  # (1, 1, 2, 5)
        c.append(Call("q (2, 4, 2, 3) at positions 3..4 (offset 3), k, v (2, 4, 5, 3), causal mask",
                      {"q": q, "k": k, "v": v, "slopes": slopes, "mask": causal, "offset": 3},
                      {"out": (0,), "weights": (1, "weights")}, 1e-10))
    elif exercise_id == "4.2":
        r = rng(18)
        for H in (1, *sorted(r.choice(np.arange(2, 33), size=4, replace=False).tolist())):
            c.append(Call(f"n_heads {H}", {"n_heads": H}, {"slopes": ()}, 1e-14))
    elif exercise_id == "5.1":
        for seed, (shape, group) in enumerate((((2, 1, 3, 4), 4), ((1, 2, 5, 3), 2), ((2, 3, 2, 2), 1)), start=26):
            c.append(Call(f"x {shape}, group {group}", {"x": rng(seed).standard_normal(shape), "group": group},
                          {"out": ()}, 0.0))
    elif exercise_id == "9.1":
        r = rng(40)
        seqs = np.array([[1, 4, 5, 4, 5, 4, 3, 4], [1, 3, 3, 3, 3, 6, 5, 3], [1, 6, 5, 4, 3, 6, 5, 2]])
        for n in (1, 2, 3, 4):
            c.append(Call(f"3 hypotheses of 7 tokens after BOS, vocabulary 8, n {n}",
                          {"logits": r.standard_normal((3, 8)), "seqs": seqs, "n": n}, {"banned": ("isneginf",)}, 0.0))
        fresh = np.concatenate([np.ones((4, 1), np.int64), r.integers(3, 6, size=(4, 9))], axis=1)
        c.append(Call("4 hypotheses of 9 tokens drawn from 3 ids, n 2",
                      {"logits": r.standard_normal((4, 6)), "seqs": fresh, "n": 2}, {"banned": ("isneginf",)}, 0.0))
        c.append(Call("a hypothesis of BOS alone, n 2", {"logits": r.standard_normal((1, 5)), "seqs": np.array([[1]]),
                                                          "n": 2}, {"banned": ("isneginf",)}, 0.0))
    elif exercise_id == "9.2":
        r = rng(48)
        lengths = [int(m) for m in r.integers(1, 7, size=3)]
        # Steps before a least length, at it and after it; then the option off.
        steps = [("t before min_len", int(r.integers(0, m)), m) for m in lengths]
        steps += [("t at min_len", m, m) for m in lengths[:2]]
        steps += [("t after min_len", m + int(r.integers(1, 4)), m) for m in lengths[2:]]
        steps += [("min_len 0, off", int(r.integers(0, 4)), 0)]
        for where, t, min_len, eos_id in [(*step, int(r.integers(0, 6))) for step in steps]:
            c.append(Call(f"{where}: step t {t}, min_len {min_len}, eos_id {eos_id}, logits (3, 6)",
                          {"logits": r.standard_normal((3, 6)), "t": t, "min_len": min_len, "eos_id": eos_id},
                          {"banned": ("isneginf",)}, 0.0))
    elif exercise_id == "10.1":
        fixed = (("the cat", "the cat", 6), ("aaaa", "aa", 3), ("a b", "abcdef", 6), ("", "abc", 2),
                 ("abcdefgh", "hgfedcba", 4))
        for hyp, ref, order in fixed:
            c.append(Call(f"hypothesis {hyp!r}, reference {ref!r}, char_order {order}",
                          {"hypothesis": hyp, "reference": ref, "char_order": order}, {"stats": ()}, 0.0))
        r = rng(41)
        for _ in range(3):
            hyp, ref = _text(r, 4), _text(r, 5)
            c.append(Call(f"hypothesis {hyp!r}, reference {ref!r}, char_order 6",
                          {"hypothesis": hyp, "reference": ref, "char_order": 6}, {"stats": ()}, 0.0))
    elif exercise_id == "10.2":
        r = rng(42)
        h = r.integers(1, 20, size=6)
        rr = r.integers(1, 20, size=6)
        m = np.minimum(h, rr) - r.integers(0, 3, size=6).clip(0, None)
        stats = np.stack([h, rr, np.maximum(m, 0)], axis=1)
        lacking = stats.copy()
        lacking[4:, 0] = 0  # the hypothesis is shorter than 5 characters
        for name, s, beta in (("6 orders", stats, 2.0), ("6 orders", stats, 1.0),
                              ("orders 5 and 6 lacking in the hypothesis", lacking, 2.0),
                              ("no match at all", np.stack([h, rr, 0 * h], axis=1), 2.0),
                              ("every order lacking", np.zeros((6, 3), np.int64), 2.0)):
            c.append(Call(f"stats {name}, beta {beta:g}", {"stats": s, "beta": beta}, {"chrF": ()}, 1e-12))
    elif exercise_id == "11.1":
        r = rng(43)
        scores = np.stack([r.random(12), np.ones(12)], axis=1)
        other = np.stack([r.random(12) * 0.9, np.ones(12)], axis=1)
        counts_a = np.stack([r.integers(0, 5, 9), r.integers(5, 9, 9), r.integers(5, 9, 9)], axis=1)
        counts_b = np.stack([r.integers(0, 4, 9), counts_a[:, 1], counts_a[:, 2]], axis=1)
        fields = {f: (f,) for f in ("delta", "win_rate", "low", "high")}
        for name, a, b, metric, n, seed, level in (
                ("12 sentence scores, mean metric, n 200, seed 3, level 0.95", scores, other, mean_metric, 200, 3, 0.95),
                ("9 sentences of (matched, hyp, ref) counts, F1 metric, n 300, seed 0, level 0.9", counts_a, counts_b,
                 f1_metric, 300, 0, 0.9),
                ("one sentence, n 20, seed 7, level 0.5", scores[:1], other[:1], mean_metric, 20, 7, 0.5)):
            c.append(Call(name, {"stats_a": a, "stats_b": b, "metric": metric, "n": n, "seed": seed, "level": level},
                          fields, 1e-12))
    elif exercise_id == "12.1":
        r = rng(44)
        drawn = r.dirichlet(np.ones(8))
        for name, probs, p in (("8 drawn probabilities", drawn, 0.1), ("8 drawn probabilities", drawn, 0.5),
                               ("8 drawn probabilities", drawn, 0.0), ("8 drawn probabilities", drawn, 1.0),
                               ("[0.4, 0.2, 0.2, 0.1, 0.1, 0.0] (ties at the threshold)",
                                np.array([0.4, 0.2, 0.2, 0.1, 0.1, 0.0]), 0.5),
                               ("[1.0]", np.array([1.0]), 0.3)):
            c.append(Call(f"probs {name}, p {p:g}", {"probs": probs, "p": p}, {"out": ()}, 1e-12))
    elif exercise_id in ("13.1", "13.2"):
        cases = [(1, 45, False), (2, 46, False), (4, 47, False), (8, 48, False)]
        if exercise_id == "13.2":  # only rank r's chunk r may be read
            cases.append((4, 49, True))
        for N, seed, garbage in cases:
            name, ranks = _chunks(N, seed, garbage)
            c.append(Call(name, {"chunks_per_rank": ranks}, {"chunks": (0,), "messages": (1, "sorted")}, 1e-12))
    else:
        raise KeyError(f"exercise {exercise_id} is not a calls exercise")
    return c


# ---- 7.1 and 7.2: the parallel block; 8.1, 8.2: the schedule and the optimiser; 12.2: the KV cache -------
#: Two blocks: dropout on with a padding mask, then dropout off with a causal + padding mask.
BLOCKS = (dict(d_model=6, n_heads=2, d_ff=10, dropout=0.2, mask="padding", seed=36, param_seed=37, x_seed=38,
               dout_seed=39),
          dict(d_model=8, n_heads=4, d_ff=12, dropout=0.0, mask="padding + causal", seed=40, param_seed=41,
               x_seed=42, dout_seed=43))


def layer_params(names_shapes, seed: int) -> Dict[str, np.ndarray]:
    """Parameter values from the names and shapes alone (no zero bias, no unit gain)."""
    r = rng(seed)
    return {name: (1.0 + 0.1 * r.standard_normal(shape) if name.endswith("gamma") else 0.4 * r.standard_normal(shape))
            for name, shape in sorted(names_shapes)}


def block_inputs(spec: dict):
    """x (2, 4, D) and the block's mask."""
    x = rng(spec["x_seed"]).standard_normal((2, 4, spec["d_model"]))
    pad = (np.array([[1, 2, 3, PAD], [4, 5, PAD, PAD]]) != PAD)[:, None, None, :]
    causal = np.tril(np.ones((4, 4), dtype=bool))[None, None]
    return x, (pad if spec["mask"] == "padding" else pad & causal)


def cosine_cases():
    """(peak, warmup, min_ratio, total, steps) of the cosine schedules: two runs that decay after the
    rise, one that ends at the end of its rise, one that ends before it, one whose floor is its peak."""
    r = rng(49)
    out = []
    for kind in ("decay", "decay", "ends at warmup", "ends in the rise", "flat floor"):
        peak = float(r.integers(1, 10)) * 10.0 ** int(r.integers(-4, 1))
        warmup = int(r.integers(1, 12))
        total = {"ends at warmup": warmup, "ends in the rise": max(1, warmup - int(r.integers(1, 6)))}.get(
            kind, warmup + int(r.integers(5, 60)))
        min_ratio = 1.0 if kind == "flat floor" else float(r.choice([0.0, 0.1, 0.25, 0.5]))
        edges = {0, 1, warmup, warmup + 1, total, total + 1, total + 50}
        steps = sorted(edges | {int(s) for s in r.integers(0, total + 5, size=6)})
        out.append((peak, warmup, min_ratio, total, tuple(steps)))
    return out


def lion_cases():
    """(name, dtype, lr (a number, or "0.05/t"), betas, weight_decay, params, gradients of 3 steps, tolerance)."""
    specs = (("float64, lr 0.01, betas (0.9, 0.99)", np.float64, 0.01, (0.9, 0.99), 0.0, SMOOTH_TOL),
             ("float64, lr(t) = 0.05 / t, betas (0.8, 0.95), weight_decay 0.1", np.float64, "0.05/t", (0.8, 0.95),
              0.1, SMOOTH_TOL),
             ("float32, lr 0.01, betas (0.9, 0.99)", np.float32, 0.01, (0.9, 0.99), 0.0, KINK_TOL))
    out = []
    for seed, (name, dtype, lr, betas, wd, tol) in enumerate(specs):
        r = rng(50 + seed)
        params = {"W": r.standard_normal((3, 4)).astype(dtype), "b": r.standard_normal(4).astype(dtype)}
        grads = [{k: r.standard_normal(p.shape).astype(dtype) for k, p in params.items()} for _ in range(3)]
        out.append((name, dtype, lr, betas, wd, params, grads, tol))
    return out


#: 8.3: (decay, dtype) of the averages, each updated with three sets of weights
EMA_CASES = ((0.9, np.float64), (0.5, np.float64), (0.999, np.float32))


def ema_case(seed: int, dtype):
    """The weights an average starts from, then the three sets it is updated with."""
    r = rng(seed)
    start = {"W": r.standard_normal((3, 4)).astype(dtype), "b": r.standard_normal(4).astype(dtype)}
    return start, [{k: r.standard_normal(p.shape).astype(dtype) for k, p in start.items()} for _ in range(3)]


#: 12.2: (n_kv_heads, the lengths of the chunks fed one after another through the KV cache)
GQA_CACHE_RUNS = ((1, (3, 1, 2)), (2, (1, 1, 1, 1)), (4, (2, 3)))
GQA_CACHE = dict(d_model=8, n_heads=4, seed=60, x_seed=61)
