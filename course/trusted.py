"""The grader's trusted core: its numerical gradient, its error measure and its test cases.

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
    """Centred differences of ``sum(f() * dout)`` with respect to ``x``, perturbed in place."""
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


def random_segments():
    """A few BLEU segments drawn with the salt (none for the public cases): counts nobody has seen."""
    if not SALT:
        return []
    r, words = rng(70), "a b c d e".split()
    return [(" ".join(r.choice(words, size=r.integers(3, 10))),
             [" ".join(r.choice(words, size=r.integers(3, 10))) for _ in range(int(r.integers(1, 3)))])
            for _ in range(3)]


def shapes(**arrays) -> str:
    return ", ".join(f"{k} {tuple(np.shape(v))}" for k, v in arrays.items())


class Case(NamedTuple):
    """One call of an exercise's functions, and how its result is judged."""

    name: str  # printed with every failure: shapes, mask, options
    inputs: Dict[str, np.ndarray]  # float arrays the gradients are taken with respect to
    static: Dict[str, Any]  # the other arguments (ids, masks, options)
    wrt: Tuple[Optional[str], ...] = ()  # the name of each value the backward returns; None: not checked
    tol: float = SMOOTH_TOL
    seed: int = 0  # of the random dout
    #: "numeric": the gradients are compared with finite differences of the grader's own forward;
    #: "library": with the grader's own library (where finite differences say nothing: at a kink, a pad row)
    reference: str = "numeric"


# --------------------------------------------------------------------------- #
# What each exercise calls: (probe kind, module, function names); a "pair" may name several pairs
# --------------------------------------------------------------------------- #

PROBES: Dict[str, Tuple[str, str, Tuple[str, ...]]] = {
    "1.1": ("pair", "core.linear", ("linear_forward", "linear_backward")),
    "1.2": ("pair", "core.relu", ("relu_forward", "relu_backward")),
    "2.1": ("pair", "core.losses", ("softmax_cross_entropy_forward", "softmax_cross_entropy_backward")),
    "3.1": ("pair", "core.embedding", ("embedding_forward", "embedding_backward")),
    "3.2": ("table", "core.positional", ("sinusoidal_encoding",)),
    "4.1": ("attention", "core.attention", ("attention_forward",)),
    "4.2": ("pair", "core.attention", ("attention_forward", "attention_backward")),
    "5.1": ("heads", "core.multihead", ("split_heads", "merge_heads")),
    "5.2": ("pair", "core.multihead", ("multihead_attention_forward", "multihead_attention_backward")),
    "6.1": ("pair", "core.layernorm", ("layernorm_forward", "layernorm_backward")),
    "6.2": ("pair", "core.feedforward", ("ffn_forward", "ffn_backward")),
    "7.1": ("encoder_layer", "nn.blocks", ("EncoderLayer",)),
    "8.1": ("noam", "training.optim", ("NoamSchedule",)),
    "8.2": ("adam", "training.optim", ("Adam",)),
    "8.3": ("clip", "training.optim", ("clip_grad_norm",)),
    "10.1": ("bleu", "text.bleu", ("_segment_stats", "corpus_bleu", "bleu_tokens")),
    "12.1": ("pair", "core.positional", ("learned_positional_forward", "learned_positional_backward")),
}


def attention_masks() -> Dict[str, Optional[np.ndarray]]:
    """Masks for B=2, T=S=4, built with plain NumPy (padding (B,1,1,S), causal (1,1,T,T))."""
    ids = np.array([[1, 2, 3, PAD], [4, 5, PAD, PAD]])
    pad = (ids != PAD)[:, None, None, :]
    causal = np.tril(np.ones((4, 4), dtype=bool))[None, None]
    full = np.broadcast_to(causal & pad, (2, 1, 4, 4)).copy()
    full[0, 0, 1, :] = False  # query 1 of batch 0 may attend to nothing
    return {"no mask": None, "padding mask": pad, "causal mask": causal, "padding + causal mask": causal & pad,
            "padding + causal mask with a fully masked row": full}


FULLY_MASKED = "padding + causal mask with a fully masked row"


def attention_qkv() -> List[Tuple[str, np.ndarray, np.ndarray, np.ndarray, Optional[np.ndarray]]]:
    """(name, q, k, v, mask): every mask at (B, H, T, D/H) = (2, 2, 4, 3), then T != S and d_v != d_k."""
    r = rng(6)
    out = []
    for name, mask in attention_masks().items():
        q, k, v = (r.standard_normal((2, 2, 4, 3)) for _ in range(3))
        out.append((name, q, k, v, mask))
    q, k, v = r.standard_normal((2, 2, 3, 4)), r.standard_normal((2, 2, 5, 4)), r.standard_normal((2, 2, 5, 2))
    pad5 = (np.array([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]]) != PAD)[:, None, None, :]
    out.append(("no mask, T 3 != S 5", q, k, v, None))
    out.append(("padding mask, T 3 != S 5", q, k, v, pad5))
    return out


def _mha_params(D: int, seed: int) -> Dict[str, np.ndarray]:
    r = rng(seed)
    return {n: r.standard_normal((D, D) if n.startswith("W") else D) * 0.5 for n in MHA_PARAMS}


def _ffn_inputs(x_shape, D_ff):
    D = x_shape[-1]
    for seed in range(12, 100):  # the first seed that puts no ReLU input near its kink
        r = rng(seed)
        inputs = {"x": r.standard_normal(x_shape), "W1": r.standard_normal((D, D_ff)),
                  "b1": r.standard_normal(D_ff), "W2": r.standard_normal((D_ff, D)), "b2": r.standard_normal(D)}
        if np.abs(inputs["x"] @ inputs["W1"] + inputs["b1"]).min() > 1e-3:
            return seed, inputs
    raise AssertionError("no seed keeps the ReLU inputs away from the kink")


def pair_cases(exercise_id: str) -> List[Case]:
    """The forward/backward calls of a "pair" exercise."""
    c: List[Case] = []
    if exercise_id == "1.1":
        for seed, x_shape, w_shape in ((1, (2, 3, 4), (4, 5)), (2, (5, 3), (3, 2)), (3, (1, 2, 6), (6, 1))):
            r = rng(seed)
            inputs = {"x": r.standard_normal(x_shape), "W": r.standard_normal(w_shape), "b": r.standard_normal(w_shape[1])}
            c.append(Case(shapes(x=inputs["x"], W=inputs["W"]), inputs, {}, ("x", "W", "b"), SMOOTH_TOL, seed))
    elif exercise_id == "1.2":
        for seed, shape in ((2, (2, 3, 4)), (3, (7,))):
            r = rng(seed)  # every |x| > 1e-3: far from the kink compared with the step h = 1e-5
            x = r.choice([-1.0, 1.0], size=shape) * r.uniform(1e-3, 3.0, size=shape)
            c.append(Case(shapes(x=x), {"x": x}, {}, ("x",), KINK_TOL, seed))
        c.append(Case("x = [-2, 0, 3, 0] (at the kink)", {"x": np.array([-2.0, 0.0, 3.0, 0.0])}, {}, ("x",),
                      0.0, 4, "library"))
    elif exercise_id == "2.1":
        targets = np.array([[1, 4, 2], [3, PAD, PAD]])
        for eps in (0.0, 0.1):
            for pad_id in (None, PAD):
                c.append(Case(f"logits (2, 3, 5), label_smoothing {eps}, pad_id {pad_id}",
                              {"logits": rng(13).standard_normal((2, 3, 5)) * 2},
                              {"targets": targets, "pad_id": pad_id, "label_smoothing": eps}, ("logits",), SMOOTH_TOL, 13))
        c.append(Case("logits (4, 7), label_smoothing 0.2", {"logits": rng(14).standard_normal((4, 7))},
                      {"targets": np.array([0, 6, 3, 3]), "pad_id": None, "label_smoothing": 0.2},
                      ("logits",), SMOOTH_TOL, 14))
        c.append(Case("every target is pad", {"logits": rng(15).standard_normal((2, 3, 5))},
                      {"targets": np.full((2, 3), PAD), "pad_id": PAD, "label_smoothing": 0.1}, ("logits",), 0.0, 15,
                      "library"))
    elif exercise_id == "3.1":
        c.append(Case("ids [[2, 2, 2]], scale 2 (one id three times)", {"W": np.zeros((4, 2))},
                      {"ids": np.array([[2, 2, 2]]), "scale": 2.0, "pad_id": None}, ("W",), SMOOTH_TOL, 3))
        ids = np.array([[1, 2, 2, PAD], [3, 1, PAD, PAD]])
        r = rng(4)
        for scale in (np.sqrt(3.0), 1.0):
            c.append(Case(f"ids (2, 4) with repeats, W (5, 3), scale {scale:.3g}, pad_id None",
                          {"W": r.standard_normal((5, 3))}, {"ids": ids, "scale": scale, "pad_id": None},
                          ("W",), SMOOTH_TOL, 4))
        c.append(Case("ids (2, 4) with repeats, W (5, 3), scale 2, pad_id 0", {"W": r.standard_normal((5, 3))},
                      {"ids": ids, "scale": 2.0, "pad_id": PAD}, ("W",), VALUE_TOL, 5, "library"))
    elif exercise_id == "4.2":
        for name, q, k, v, mask in attention_qkv():
            c.append(Case(f"{name}, {shapes(q=q, k=k, v=v)}", {"q": q, "k": k, "v": v}, {"mask": mask},
                          ("q", "k", "v"), SMOOTH_TOL if mask is None else KINK_TOL, 6))
    elif exercise_id == "5.2":
        masks = attention_masks()
        D, H = 6, 2
        for name in ("no mask", "padding + causal mask", FULLY_MASKED):
            c.append(Case(f"self-attention, {name}, x (2, 4, {D}), {H} heads",
                          {"x_q": rng(7).standard_normal((2, 4, D)), **_mha_params(D, 8)},
                          {"x_kv": None, "n_heads": H, "mask": masks[name]}, ("x_q", None, *MHA_PARAMS),
                          SMOOTH_TOL if name == "no mask" else KINK_TOL, 7))
        for name in ("no mask", "padding mask"):
            r = rng(9)
            c.append(Case(f"cross-attention, {name}, x_q (2, 3, {D}), x_kv (2, 4, {D}), {H} heads",
                          {"x_q": r.standard_normal((2, 3, D)), "x_kv": r.standard_normal((2, 4, D)), **_mha_params(D, 10)},
                          {"n_heads": H, "mask": masks[name]}, ("x_q", "x_kv", *MHA_PARAMS),
                          SMOOTH_TOL if name == "no mask" else KINK_TOL, 9))
    elif exercise_id == "6.1":
        for seed, shape, eps in ((11, (2, 3, 5), 1e-5), (12, (4, 6), 1e-5), (13, (3, 4), 0.0)):
            r = rng(seed)
            D = shape[-1]
            inputs = {"x": r.standard_normal(shape) * 2 + 1, "gamma": r.standard_normal(D), "beta": r.standard_normal(D)}
            c.append(Case(f"x {shape}, eps {eps:g}", inputs, {"eps": eps}, ("x", "gamma", "beta"), SMOOTH_TOL, seed))
    elif exercise_id == "6.2":
        for x_shape, D_ff in (((2, 3, 4), 6), ((5, 4), 3)):
            seed, inputs = _ffn_inputs(x_shape, D_ff)
            c.append(Case(f"x {x_shape}, d_ff {D_ff}", inputs, {}, ("x", "W1", "b1", "W2", "b2"), KINK_TOL, seed))
    elif exercise_id == "12.1":
        for seed, (B, T, D, max_len, offset) in ((20, (2, 3, 4, 5, 0)), (21, (3, 2, 4, 6, 3))):
            r = rng(seed)
            c.append(Case(f"x ({B}, {T}, {D}), P ({max_len}, {D}), offset {offset}",
                          {"x": r.standard_normal((B, T, D)), "P": r.standard_normal((max_len, D))},
                          {"offset": offset}, ("x", "P"), SMOOTH_TOL, seed))
    elif exercise_id in _MORE_PAIRS:
        c.extend(_MORE_PAIRS[exercise_id]())
    else:
        raise KeyError(f"exercise {exercise_id} is not a forward/backward pair")
    return c


def attention_forward_cases():
    """(name, q, k, v, mask) for exercise 4.1: every mask, T != S, scores of size ~1000."""
    cases = [(f"{name}, {shapes(q=q, k=k, v=v)}", q, k, v, mask) for name, q, k, v, mask in attention_qkv()]
    r = rng(7)
    q, k, v = (r.standard_normal((1, 2, 4, 3)) for _ in range(3))
    cases.append(("scores of size ~1000", q * 1000, k, v, None))
    return cases


TABLE_SIZES = ((12, 8), (7, 5), (1, 2), (60, 16))
HEAD_SHAPES = ((2, 3, 8, 4), (1, 5, 6, 3), (2, 2, 4, 1), (3, 1, 6, 6))  # (B, T, D, H)
NOAM_CASES = ((512, 4000, 1.0, (1, 2, 100, 3999, 4000, 4001, 8000, 100000)), (64, 10, 2.0, tuple(range(0, 40))))


def adam_cases():
    """(name, dtype, lr (a number, or "0.05/t"), betas, eps, params, gradients of 3 steps, tolerance)."""
    specs = (("float64, lr 0.01, betas (0.9, 0.98), eps 1e-9", np.float64, 0.01, (0.9, 0.98), 1e-9, 1.0, SMOOTH_TOL),
             ("float64, lr(t) = 0.05 / t, betas (0.8, 0.9), eps 1e-3, gradients ~1e-3", np.float64, "0.05/t",
              (0.8, 0.9), 1e-3, 1e-3, SMOOTH_TOL),
             ("float32, lr 0.01, betas (0.9, 0.98), eps 1e-9", np.float32, 0.01, (0.9, 0.98), 1e-9, 1.0, KINK_TOL))
    out = []
    for seed, (name, dtype, lr, betas, eps, g_scale, tol) in enumerate(specs):
        r = rng(50 + seed)
        params = {"W": r.standard_normal((3, 4)).astype(dtype), "b": r.standard_normal(4).astype(dtype)}
        grads = [{k: (r.standard_normal(p.shape) * g_scale).astype(dtype) for k, p in params.items()} for _ in range(3)]
        out.append((name, dtype, lr, betas, eps, params, grads, tol))
    return out


def clip_case():
    """Gradients (one of them float32, global norm about 10.8) and two max_norm: one clips, one does not."""
    r = rng(60)
    grads = {"W": r.standard_normal((3, 4)) * 3, "b": r.standard_normal(4), "E": r.standard_normal((2, 3)).astype(np.float32)}
    return grads, (2.5, 40.0)


#: (hypothesis, references, clipped matches per order, hypothesis n-grams per order), counted by hand.
SEGMENTS = (
    # Papineni et al.'s example: "the" counts at most twice, its largest count in one reference.
    ("the the the the the the the", ["the cat is on the mat", "there is a cat on the mat"], [2, 0, 0, 0], [7, 6, 5, 4]),
    ("the cat sat on the mat", ["the cat is on the mat"], [5, 3, 1, 0], [6, 5, 4, 3]),
    # "b" occurs 3 times: clipped to 2 (its count in the first reference), not 2 + 1 summed over references.
    ("b b b a", ["b b a", "b a"], [3, 2, 1, 0], [4, 3, 2, 1]),
    ("x y", ["a b c"], [0, 0, 0, 0], [2, 1, 0, 0]),
    ("", ["a b"], [0, 0, 0, 0], [0, 0, 0, 0]),
)
#: Corpora scored whole: (hypotheses, references), one reference per hypothesis.
CORPORA = ((["the cat sat on the mat"], ["the cat sat on a mat"]),
           (["the cat sat on the mat", "a dog barks"], ["the cat is on the mat", "a dog barks loudly"]))

ENCODER_LAYER = dict(d_model=6, n_heads=2, d_ff=10, dropout=0.2, seed=36, param_seed=37, x_seed=38, dout_seed=39)


def encoder_layer_inputs():
    """x (2, 4, 6) and a padding mask (2, 1, 1, 4)."""
    x = rng(ENCODER_LAYER["x_seed"]).standard_normal((2, 4, ENCODER_LAYER["d_model"]))
    mask = (np.array([[1, 2, 3, PAD], [4, 5, PAD, PAD]]) != PAD)[:, None, None, :]
    return x, mask


# --------------------------------------------------------------------------- #
# The back half of the course: exercises 7.2, 9.1, 9.2, 11.1, 12.2 and 12.3
# --------------------------------------------------------------------------- #

PROBES.update({
    "7.2": ("decoder_layer", "nn.blocks", ("DecoderLayer",)),
    "9.1": ("greedy", "nn.decoding", ("greedy_decode",)),
    "9.2": ("beam", "nn.decoding", ("beam_search",)),
    "11.1": ("seeds", "sweep", ("over_seeds",)),
    "12.2": ("sampling", "nn.sampling", ("next_token_probs", "top_k_filter", "top_p_filter", "sample_from")),
    "12.3": ("pair", "core.losses", ("lm_loss_forward", "lm_loss_backward")),
})

DECODER_LAYER = dict(d_model=6, n_heads=2, d_ff=10, dropout=0.2, seed=41, param_seed=42, x_seed=43, dout_seed=44)


def layer_params(names_shapes, seed: int) -> Dict[str, np.ndarray]:
    """Parameter values from the names and shapes alone (no zero bias, no unit gain)."""
    r = rng(seed)
    return {name: (1.0 + 0.1 * r.standard_normal(shape) if name.endswith("gamma") else 0.4 * r.standard_normal(shape))
            for name, shape in sorted(names_shapes)}


def decoder_layer_inputs():
    """x (2, 4, 6), memory (2, 5, 6), a causal + padding self mask (2, 1, 4, 4), a source padding mask (2, 1, 1, 5)."""
    r = rng(DECODER_LAYER["x_seed"])
    x, memory = r.standard_normal((2, 4, 6)), r.standard_normal((2, 5, 6))
    tgt = np.array([[1, 2, 3, PAD], [4, 5, PAD, PAD]])
    src = np.array([[1, 2, 3, 4, PAD], [5, 6, 7, PAD, PAD]])
    self_mask = np.tril(np.ones((4, 4), dtype=bool))[None, None] & (tgt != PAD)[:, None, None, :]
    return x, memory, self_mask, (src != PAD)[:, None, None, :]


#: 9.1 and 9.2 decode with a stand-in for the encoder-decoder whose logits are a fixed function of the
#: source and of the prefix it reads from the KV cache (probe.decoding_model): decoding is graded on
#: its own, and a cache that is not kept or not reordered changes the output.
DECODING = dict(src_vocab_size=11, tgt_vocab_size=9, width=6, n_layers=2, max_len=12, decay=0.6, seed=80, eos_slope=1.5)
#: (max_len, use_cache) of the greedy runs; (max_len, beam_size, length_penalty) of the beam runs. Strong
#: length penalties make a beam's length decide its rank, so that fresh cases (a salt) still catch a length
#: counted wrong.
GREEDY_RUNS = ((9, True), (9, False), (3, True))
BEAM_RUNS = ((9, 1, 0.0), (9, 3, 0.6), (9, 4, 0.0), (6, 2, 1.0), (9, 3, 2.0), (9, 4, 1.0))


def decoding_sources() -> np.ndarray:
    """Six source sentences (6, 7), padded with 0; ids 1..10."""
    r = rng(DECODING["seed"] + 1)
    lengths = (7, 5, 3, 6, 1, 4)
    src = np.zeros((len(lengths), 7), dtype=np.int64)
    for b, n in enumerate(lengths):
        src[b, :n] = r.integers(1, DECODING["src_vocab_size"], size=n)
    return src


def decoding_tables() -> Dict[str, np.ndarray]:
    """The stand-in's weights: token and source embeddings, and the output projection."""
    r, d, V = rng(DECODING["seed"]), DECODING["width"], DECODING["tgt_vocab_size"]
    tables = {"tok": r.standard_normal((V, d)), "src": r.standard_normal((DECODING["src_vocab_size"], d)) * 0.5,
              "W": r.standard_normal((d, V)) * 1.5, "b": r.standard_normal(V) * 0.3}
    return tables


def decoding_logits(tables, prefix: np.ndarray, memory: np.ndarray) -> np.ndarray:
    """(N, V) logits after the prefix (N, t) of ids: a decaying sum of their embeddings plus the source's;
    EOS (id 2) grows likelier as the prefix grows."""
    t = prefix.shape[1]
    weights = DECODING["decay"] ** np.arange(t - 1, -1, -1)  # the latest id weighs most
    h = np.tensordot(tables["tok"][prefix], weights, axes=([1], [0])) + memory  # (N, d)
    logits = np.tanh(h) @ tables["W"] + tables["b"]
    logits[:, 2] += DECODING["eos_slope"] * (t - 4)
    return logits


def pad_lists(lists, width: int) -> np.ndarray:
    """Token lists as one int array, padded with -1 (a list longer than ``width`` is cut, its length kept apart)."""
    out = np.full((len(lists), width), -1, dtype=np.int64)
    for i, row in enumerate(lists):
        row = list(row)[:width]
        out[i, :len(row)] = row
    return out


#: Seed lists for 11.1 (the last one has 35 seeds: t_quantile goes past its table of 30 degrees of freedom).
SEED_LISTS = ((3, 1, 4), (10, 20), tuple(range(7)), tuple(range(100, 135)))


def fake_training(seed: int) -> float:
    """What 11.1's check trains: a made-up test accuracy that depends on the seed alone."""
    return float(0.8 + 0.05 * rng(1000 + seed).standard_normal())


#: 12.2: (logits, temperature, top_k, top_p) of the distributions next_token_probs must give.
def sampling_cases():
    r = rng(90)
    z = r.standard_normal(8) * 2
    ties = np.array([1.0, 3.0, 3.0, 0.5, 3.0, -1.0])  # three ids share the largest logit
    return [(z, 1.0, None, None), (z, 0.5, 3, None), (z, 2.0, None, 0.7), (z, 0.8, 5, 0.9), (z, 0.0, None, None),
            (z, 1.0, None, 1.0), (z, 1.0, 1, None), (ties, 1.0, 2, None), (ties, 1.0, None, 0.5),
            (np.array([0.0, 1000.0, -1000.0]), 0.01, None, None)]


#: 12.2: distributions (probs that sum to 1) that sample_from draws DRAWS ids from, with a fixed generator.
SAMPLE_PROBS = (np.array([0.5, 0.0, 0.3, 0.2]), np.array([0.05, 0.05, 0.0, 0.6, 0.0, 0.3]), np.array([1.0]),
                np.full(10, 0.1))
DRAWS = 4000


def _lm_loss_cases() -> List[Case]:
    out = []
    for seed, (B, T, V) in ((95, (2, 3, 5)), (96, (1, 4, 7)), (97, (3, 1, 4))):
        r = rng(seed)
        out.append(Case(f"logits ({B}, {T}, {V}), ids ({B}, {T + 1})", {"logits": r.standard_normal((B, T, V)) * 2},
                        {"ids": r.integers(0, V, size=(B, T + 1))}, ("logits",), SMOOTH_TOL, seed))
    return out


_MORE_PAIRS = {"12.3": _lm_loss_cases}
