"""One grading function per exercise: the test suite's gradient checks and property tests.

Every check imports the code under test from the ``numpytransformer`` package this
module belongs to, i.e. the student's copy when run from a student edition's folder.
Gradients are compared with float64 centred differences
(:func:`numpytransformer.gradcheck.numerical_gradient`); tolerances are the test
suite's: 1e-7 for smooth operations, 1e-5 near kinks and masks and for whole layers.

A check calls methods of a :class:`Grader`, which stops at the first measurement out of
tolerance with a :class:`CheckFailed` naming the tensor, the error and the case.
"""
from __future__ import annotations

import math
import re
import traceback
import warnings
from pathlib import Path
from typing import Callable, Dict, NamedTuple, Optional

import numpy as np

from .catalog import BY_ID

__all__ = ["SMOOTH_TOL", "KINK_TOL", "CHECKS", "Grader", "CheckFailed", "Result", "run_check"]

SMOOTH_TOL = 1e-7
KINK_TOL = 1e-5
#: Forward values computed two ways in float64 (the student's and a plain reference).
VALUE_TOL = 1e-12
PAD = 0


class CheckFailed(Exception):
    """A measurement out of tolerance or a violated property; the message is the hint."""


def fmt_tol(tol: float) -> str:
    """``1e-07`` -> ``1e-7``."""
    if tol == 0:
        return "0"
    text = f"{tol:.0e}"
    mantissa, exponent = text.split("e")
    return f"{mantissa}e{int(exponent)}"


class Grader:
    """Measures one exercise; remembers the measurement closest to its tolerance."""

    def __init__(self) -> None:
        self.worst = None  # (value / tolerance, kind, value, tolerance)

    def fail(self, message: str) -> None:
        raise CheckFailed(message)

    def require(self, condition, message: str) -> None:
        if not condition:
            self.fail(message)

    def record(self, kind: str, value: float, tol: float) -> None:
        """Note a measurement that passed, for the summary line."""
        ratio = value / tol if tol > 0 else (0.0 if value == 0 else math.inf)
        if self.worst is None or ratio > self.worst[0]:
            self.worst = (ratio, kind, value, tol)

    def array(self, name: str, value, shape, case: str, hint: str = "", sequence: bool = False) -> np.ndarray:
        """``value`` as a finite float64 array of the given shape, or a failure saying what is wrong.

        A tuple or list is refused (a backward returning one tensor too many, say), unless ``sequence``.
        """
        hint = f"; {hint}" if hint else ""
        if value is None or (not sequence and isinstance(value, (tuple, list))):
            what = "None" if value is None else f"a {type(value).__name__} of {len(value)}"
            self.fail(f"{name} is {what}; expected one array of shape {tuple(shape)} [{case}]")
        try:
            a = np.asarray(value)
        except Exception:  # an object numpy cannot turn into an array
            self.fail(f"{name} is a {type(value).__name__}, not an array [{case}]")
        if a.dtype.kind not in "biuf":
            self.fail(f"{name} has dtype {a.dtype}; expected numbers [{case}]")
        if a.shape != tuple(shape):
            self.fail(f"{name} has shape {a.shape}, expected {tuple(shape)} [{case}]")
        if not np.all(np.isfinite(a)):
            self.fail(f"{name} contains NaN or inf [{case}]{hint}")
        return a.astype(np.float64)

    def gradient(self, name: str, analytic, numeric: np.ndarray, tol: float, case: str) -> None:
        """A backward pass's gradient against finite differences (relative error, absolute
        for a gradient that is zero, as :mod:`numpytransformer.gradcheck` does)."""
        from ..gradcheck import ZERO_ATOL, rel_error

        a = self.array(name, analytic, numeric.shape, case)
        if np.max(np.abs(numeric), initial=0.0) < ZERO_ATOL:
            kind, err = "absolute error", float(np.max(np.abs(a - numeric), initial=0.0))
        else:
            kind, err = "relative error", rel_error(a, numeric)
        if not err < tol:
            self.fail(f"{name}: {kind} {err:.1e} (tolerance {fmt_tol(tol)}) [{case}]")
        self.record(kind, err, tol)

    def close(self, name: str, actual, expected, tol: float, case: str, relative: bool = False,
              hint: str = "") -> None:
        """Values against a reference: max abs difference (or relative error), with the worst index."""
        expected = np.asarray(expected, dtype=np.float64)
        a = self.array(name, actual, expected.shape, case, hint, sequence=isinstance(actual, list))
        diff = np.abs(a - expected)
        if relative:
            scale = max(np.max(np.abs(a), initial=0.0), np.max(np.abs(expected), initial=0.0))
            kind, err = "relative error", float(np.max(diff, initial=0.0) / scale) if scale else 0.0
        else:
            kind, err = "abs difference", float(np.max(diff, initial=0.0))
        if not err <= tol:
            where = ""
            if diff.ndim:
                idx = np.unravel_index(int(np.argmax(diff)), diff.shape)
                where = (f" at index {list(map(int, idx))} (got {a[idx]:.6g}, "
                         f"expected {expected[idx]:.6g})")
            label = "max abs difference" if kind == "abs difference" else kind
            self.fail(f"{name}: {label} {err:.1e}{where} (tolerance {fmt_tol(tol)}) [{case}]"
                      + (f"; {hint}" if hint else ""))
        self.record(kind, err, tol)

    def summary(self) -> str:
        if self.worst is None or self.worst[2] == 0:
            return "passed (every value exact)"
        _, kind, value, tol = self.worst
        return f"passed (largest {kind} {value:.1e}, tolerance {fmt_tol(tol)})"


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _shape_text(**arrays) -> str:
    return ", ".join(f"{k} {tuple(np.shape(v))}" for k, v in arrays.items())


def _pair(g: Grader, forward, backward, inputs: Dict[str, np.ndarray], wrt, tol: float, case: str,
          seed: int = 0, **static) -> tuple:
    """check_pair of :mod:`gradcheck`, one gradient at a time, with a hint for each failure."""
    from ..gradcheck import numerical_gradient

    # The backward gets its own copies of dout and the inputs: one that writes into them must
    # not change the reference it is checked against.
    pristine = {k: np.array(v, copy=True) for k, v in inputs.items()}
    out, cache = forward(**{k: v.copy() for k, v in pristine.items()}, **static)
    dout = _rng(seed).standard_normal(np.shape(out))
    grads = backward(dout.copy(), cache)
    if not isinstance(grads, tuple):
        grads = (grads,)
    # Copies, in case a returned array shares memory with an input that the finite differences perturb.
    grads = tuple(gr.copy() if isinstance(gr, np.ndarray) else gr for gr in grads)
    inputs = {k: v.copy() for k, v in pristine.items()}
    if len(grads) != len(wrt):
        names = ", ".join("d" + n if n else "None" for n in wrt)
        g.fail(f"backward returned {len(grads)} value(s), expected {len(wrt)}: {names} [{case}]")
    for name, analytic in zip(wrt, grads):
        if name is None:
            continue
        numeric = numerical_gradient(lambda _: forward(**inputs, **static)[0], inputs[name], dout)
        g.gradient("d" + name, analytic, numeric, tol, case)
    return grads


# --------------------------------------------------------------------------- #
# Masks shared by the attention checks (B=2, T=S=4), as in tests/test_gradients.py
# --------------------------------------------------------------------------- #

def _attention_masks() -> Dict[str, Optional[np.ndarray]]:
    from ..attention import causal_mask, padding_mask

    ids = np.array([[1, 2, 3, PAD], [4, 5, PAD, PAD]])
    pad, causal = padding_mask(ids, PAD), causal_mask(4)
    full = np.broadcast_to(causal & pad, (2, 1, 4, 4)).copy()
    full[0, 0, 1, :] = False  # query 1 of batch 0 may attend to nothing
    return {"no mask": None, "padding mask": pad, "causal mask": causal, "padding + causal mask": causal & pad,
            "padding + causal mask with a fully masked row": full}


CHECKS: Dict[str, Callable[[Grader], None]] = {}


def exercise(exercise_id: str):
    def register(fn):
        CHECKS[exercise_id] = fn
        return fn
    return register


# --------------------------------------------------------------------------- #
# Lesson 1
# --------------------------------------------------------------------------- #

@exercise("1.1")
def check_linear_backward(g: Grader) -> None:
    from ..linear import linear_backward, linear_forward

    for seed, x_shape, w_shape in ((1, (2, 3, 4), (4, 5)), (2, (5, 3), (3, 2)), (3, (1, 2, 6), (6, 1))):
        r = _rng(seed)
        inputs = {"x": r.standard_normal(x_shape), "W": r.standard_normal(w_shape),
                  "b": r.standard_normal(w_shape[1])}
        _pair(g, linear_forward, linear_backward, inputs, ["x", "W", "b"], SMOOTH_TOL,
              _shape_text(x=inputs["x"], W=inputs["W"]), seed)


@exercise("1.2")
def check_relu_backward(g: Grader) -> None:
    from ..relu import relu_backward, relu_forward

    for seed, shape in ((2, (2, 3, 4)), (3, (7,))):
        # Every |x| > 1e-3, far from the kink compared with the step h = 1e-5.
        r = _rng(seed)
        x = r.choice([-1.0, 1.0], size=shape) * r.uniform(1e-3, 3.0, size=shape)
        _pair(g, relu_forward, relu_backward, {"x": x}, ["x"], KINK_TOL, _shape_text(x=x), seed)
    x = np.array([-2.0, 0.0, 3.0, 0.0])
    _, cache = relu_forward(x)
    dx = g.array("dx", relu_backward(np.ones(4), cache), (4,), "x = [-2, 0, 3, 0]")
    g.require(np.all(dx[[1, 3]] == 0), f"dx at x == 0 is {dx[1]:g}; the kink's convention is 0 (x > 0 only)")


# --------------------------------------------------------------------------- #
# Lesson 2
# --------------------------------------------------------------------------- #

@exercise("2.1")
def check_cross_entropy_backward(g: Grader) -> None:
    from ..losses import softmax_cross_entropy_backward as backward
    from ..losses import softmax_cross_entropy_forward as forward

    targets = np.array([[1, 4, 2], [3, PAD, PAD]])
    for eps in (0.0, 0.1):
        for pad_id in (None, PAD):
            logits = _rng(13).standard_normal((2, 3, 5)) * 2
            case = f"logits (2, 3, 5), label_smoothing {eps}, pad_id {pad_id}"
            _pair(g, forward, backward, {"logits": logits}, ["logits"], SMOOTH_TOL, case, 13,
                  targets=targets, pad_id=pad_id, label_smoothing=eps)
    logits = _rng(14).standard_normal((4, 7))
    _pair(g, forward, backward, {"logits": logits}, ["logits"], SMOOTH_TOL,
          "logits (4, 7), label_smoothing 0.2", 14, targets=np.array([0, 6, 3, 3]), label_smoothing=0.2)

    # Pad rows, the all-pad batch, and inplace=False leaving the cache alone.
    logits = _rng(15).standard_normal((2, 3, 5))
    _, cache = forward(logits, targets, PAD, 0.1)
    probs = cache.probs.copy()
    d = g.array("dlogits", backward(1.0, cache), logits.shape, "pad_id 0")
    g.require(np.all(d[targets == PAD] == 0), "dlogits is not zero in rows whose target is the pad id "
                                              "(pad targets contribute nothing to the loss)")
    g.require(np.array_equal(cache.probs, probs), "backward(..., inplace=False) changed cache.probs; "
                                                  "work on d, which is then a copy")
    _, cache = forward(logits, np.full((2, 3), PAD), PAD, 0.1)
    d = g.array("dlogits", backward(1.0, cache), logits.shape, "every target is pad")
    g.require(np.all(d == 0), "dlogits is not zero when every target is pad (the loss is then 0)")


# --------------------------------------------------------------------------- #
# Lesson 3
# --------------------------------------------------------------------------- #

@exercise("3.1")
def check_embedding_backward(g: Grader) -> None:
    from ..embedding import embedding_backward, embedding_forward

    # Repeated ids first: the classic bug is dW[ids] += dout, which keeps only one of them.
    W = np.zeros((4, 2))
    _, cache = embedding_forward(np.array([[2, 2, 2]]), W, 2.0, None)
    dW = g.array("dW", embedding_backward(np.ones((1, 3, 2)), cache), (4, 2), "ids [[2, 2, 2]], scale 2")
    g.require(np.allclose(dW[2], 6.0) and np.all(dW[[0, 1, 3]] == 0),
              f"dW[2] is {dW[2].tolist()}, expected [6.0, 6.0]: id 2 appears 3 times, each adding scale * dout "
              "= 2; repeated ids must accumulate (np.add.at), not overwrite")

    r = _rng(4)
    ids = np.array([[1, 2, 2, PAD], [3, 1, PAD, PAD]])
    for scale in (np.sqrt(3.0), 1.0):
        _pair(g, embedding_forward, embedding_backward, {"W": r.standard_normal((5, 3))}, ["W"], SMOOTH_TOL,
              f"ids (2, 4) with repeats, W (5, 3), scale {scale:.3g}, pad_id None", 4,
              ids=ids, scale=scale, pad_id=None)

    W, dout = r.standard_normal((5, 3)), r.standard_normal((2, 4, 3))
    _, cache = embedding_forward(ids, W, 2.0, pad_id=PAD)
    dW = g.array("dW", embedding_backward(dout, cache), W.shape, "pad_id 0")
    _, plain = embedding_forward(ids, W, 2.0, pad_id=None)
    g.require(np.all(dW[PAD] == 0), "dW[pad_id] is not zero: the pad row must get no gradient")
    g.close("dW (rows other than the pad)", dW[1:], embedding_backward(dout, plain)[1:], VALUE_TOL, "pad_id 0")


@exercise("3.2")
def check_sinusoidal_encoding(g: Grader) -> None:
    from ..positional import sinusoidal_encoding

    for max_len, d_model in ((12, 8), (7, 5), (1, 2), (60, 16)):
        expected = np.empty((max_len, d_model))
        for pos in range(max_len):
            for j in range(d_model):
                angle = pos / 10000 ** ((j - j % 2) / d_model)
                expected[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
        case = f"max_len {max_len}, d_model {d_model}"
        pe = sinusoidal_encoding(max_len, d_model)
        g.close("pe", pe, expected, VALUE_TOL, case,
                hint="PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d))")
        g.require(np.asarray(pe).dtype == np.float64, f"pe has dtype {np.asarray(pe).dtype}, expected float64 [{case}]")
    pe32 = sinusoidal_encoding(12, 8, np.float32)
    g.require(getattr(pe32, "dtype", None) == np.float32, "sinusoidal_encoding(..., dtype=np.float32) is not float32")
    g.close("pe (float32)", pe32, sinusoidal_encoding(12, 8).astype(np.float32), 0.0, "max_len 12, d_model 8")


# --------------------------------------------------------------------------- #
# Lesson 4
# --------------------------------------------------------------------------- #

def _reference_attention(q, k, v, mask):
    """Attention row by row, softmax over the allowed keys only; no allowed key: zero weights."""
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    allowed = np.ones(scores.shape, bool) if mask is None else np.broadcast_to(mask, scores.shape)
    weights = np.zeros_like(scores)
    for idx in np.ndindex(*scores.shape[:-1]):
        a = allowed[idx]
        if a.any():
            e = np.exp(scores[idx][a] - scores[idx][a].max())
            weights[idx][a] = e / e.sum()
    return weights @ v, weights


def _attention_cases():
    r = _rng(6)
    for name, mask in _attention_masks().items():
        q, k, v = (r.standard_normal((2, 2, 4, 3)) for _ in range(3))  # (B, H, T, D/H)
        yield name, q, k, v, mask
    from ..attention import padding_mask
    # Cross-attention shapes: T != S and d_v != d_k.
    q, k, v = r.standard_normal((2, 2, 3, 4)), r.standard_normal((2, 2, 5, 4)), r.standard_normal((2, 2, 5, 2))
    yield "no mask, T 3 != S 5", q, k, v, None
    yield "padding mask, T 3 != S 5", q, k, v, padding_mask(np.array([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]]), PAD)


@exercise("4.1")
def check_attention_forward(g: Grader) -> None:
    from ..attention import attention_forward

    for name, q, k, v, mask in _attention_cases():
        case = f"{name}, {_shape_text(q=q, k=k, v=v)}"
        out, cache = attention_forward(q, k, v, mask)
        ref_out, ref_w = _reference_attention(q, k, v, mask)
        allowed = np.ones(ref_w.shape, bool) if mask is None else np.broadcast_to(mask, ref_w.shape)
        has_key = allowed.any(-1)  # (..., T): False in a row whose every key is masked
        hint = ("" if has_key.all() else "a row whose every key is masked gets zero weights and output 0, "
                "never NaN (mask with the finite MASK_VALUE, then zero such rows)")
        w = g.array("weights", cache.weights, ref_w.shape, case, hint)
        out = g.array("out", out, ref_out.shape, case, hint)
        g.require(np.isclose(cache.scale, 1 / np.sqrt(q.shape[-1]), rtol=1e-12, atol=0),
                  f"scale is {cache.scale}, expected 1/sqrt(d_k) = {1 / np.sqrt(q.shape[-1]):.6g} [{case}]")
        g.require(np.all(w[~has_key] == 0) and np.all(out[~has_key] == 0), f"{hint} [{case}]")
        g.require(np.all(w[~allowed] == 0), f"weights are not exactly 0 at masked positions [{case}]")
        if "causal" in name:
            ahead = np.triu(np.ones(w.shape[-2:], bool), k=1)
            g.require(np.all(w[..., ahead] == 0), f"a query attends to a later key [{case}]")
        sums = w.sum(-1)[has_key]
        g.require(np.allclose(sums, 1.0, rtol=0, atol=1e-12),
                  f"a row of weights sums to {sums[np.argmax(np.abs(sums - 1))]:.6g}, not 1 [{case}]")
        g.close("weights", w, ref_w, VALUE_TOL, case)
        g.close("out", out, ref_out, VALUE_TOL, case)

    r = _rng(7)
    q, k, v = (r.standard_normal((1, 2, 4, 3)) for _ in range(3))
    out, cache = attention_forward(q * 1000, k, v, None)
    ref_out, _ = _reference_attention(q * 1000, k, v, None)
    g.close("out", out, ref_out, 1e-9, "scores of size ~1000",
            hint="subtract each row's max before exp (the softmax helper does)")
    out, cache = attention_forward(*(a.astype(np.float32) for a in (q, k, v)), None)
    g.require(np.asarray(out).dtype == np.float32 and np.asarray(cache.weights).dtype == np.float32,
              f"float32 inputs gave out of dtype {np.asarray(out).dtype} and weights of dtype "
              f"{np.asarray(cache.weights).dtype}; keep float32 (training runs in float32): a NumPy float64 "
              "scalar such as np.sqrt(d_k) turns float32 arrays into float64, use q.dtype.type(...) or a Python float")


@exercise("4.2")
def check_attention_backward(g: Grader) -> None:
    from ..attention import attention_backward, attention_forward

    for name, q, k, v, mask in _attention_cases():
        tol = SMOOTH_TOL if mask is None else KINK_TOL
        _pair(g, attention_forward, attention_backward, {"q": q, "k": k, "v": v}, ["q", "k", "v"], tol,
              f"{name}, {_shape_text(q=q, k=k, v=v)}", 6, mask=mask)
    name = "padding + causal mask with a fully masked row"
    q, k, v = (_rng(8).standard_normal((2, 2, 4, 3)) for _ in range(3))
    out, cache = attention_forward(q, k, v, _attention_masks()[name])
    dq, _, _ = attention_backward(_rng(9).standard_normal(out.shape), cache)
    dq = g.array("dq", dq, q.shape, name)
    g.require(np.all(dq[0, :, 1] == 0), f"dq is not zero for the query that attends to nothing [{name}]")


# --------------------------------------------------------------------------- #
# Lesson 5
# --------------------------------------------------------------------------- #

@exercise("5.1")
def check_split_merge_heads(g: Grader) -> None:
    from ..multihead import merge_heads, split_heads

    for seed, (B, T, D, H) in enumerate(((2, 3, 8, 4), (1, 5, 6, 3), (2, 2, 4, 1), (3, 1, 6, 6))):
        x = _rng(seed).standard_normal((B, T, D))
        Dh = D // H
        heads = np.stack([x[:, :, h * Dh:(h + 1) * Dh] for h in range(H)], axis=1)  # (B, H, T, D/H)
        case = f"x {x.shape}, n_heads {H}"
        hint = "head h holds features [h*D/H, (h+1)*D/H) of every position"
        g.close("split_heads(x, n_heads)", split_heads(x, H), heads, 0.0, case, hint=hint)
        g.close("merge_heads(heads)", merge_heads(heads), x, 0.0, f"heads {heads.shape}",
                hint="merge_heads must undo split_heads")
        g.close("merge_heads(split_heads(x))", merge_heads(split_heads(x, H)), x, 0.0, case)


def _mha_params(D: int, seed: int) -> dict:
    from ..multihead import PARAM_NAMES

    r = _rng(seed)
    return {n: r.standard_normal((D, D) if n.startswith("W") else D) * 0.5 for n in PARAM_NAMES}


@exercise("5.2")
def check_multihead_attention_backward(g: Grader) -> None:
    from ..multihead import PARAM_NAMES, multihead_attention_backward, multihead_attention_forward

    masks = _attention_masks()
    D, H = 6, 2
    for name in ("no mask", "padding + causal mask", "padding + causal mask with a fully masked row"):
        inputs = {"x_q": _rng(7).standard_normal((2, 4, D)), **_mha_params(D, 8)}
        case = f"self-attention, {name}, x (2, 4, {D}), {H} heads"
        grads = _pair(g, multihead_attention_forward, multihead_attention_backward, inputs,
                      ["x_q", None, *PARAM_NAMES], SMOOTH_TOL if name == "no mask" else KINK_TOL, case, 7,
                      x_kv=None, n_heads=H, mask=masks[name])
        g.require(grads[1] is None, f"dx_kv must be None in self-attention (its gradient is part of dx_q) [{case}]")
    for name in ("no mask", "padding mask"):
        r = _rng(9)
        inputs = {"x_q": r.standard_normal((2, 3, D)), "x_kv": r.standard_normal((2, 4, D)), **_mha_params(D, 10)}
        _pair(g, multihead_attention_forward, multihead_attention_backward, inputs,
              ["x_q", "x_kv", *PARAM_NAMES], SMOOTH_TOL if name == "no mask" else KINK_TOL,
              f"cross-attention, {name}, x_q (2, 3, {D}), x_kv (2, 4, {D}), {H} heads", 9,
              n_heads=H, mask=masks[name])


# --------------------------------------------------------------------------- #
# Lesson 6
# --------------------------------------------------------------------------- #

@exercise("6.1")
def check_layernorm_backward(g: Grader) -> None:
    from ..layernorm import layernorm_backward, layernorm_forward

    for seed, shape in ((11, (2, 3, 5)), (12, (4, 6))):
        r = _rng(seed)
        D = shape[-1]
        inputs = {"x": r.standard_normal(shape) * 2 + 1, "gamma": r.standard_normal(D), "beta": r.standard_normal(D)}
        _pair(g, layernorm_forward, layernorm_backward, inputs, ["x", "gamma", "beta"], SMOOTH_TOL,
              f"x {shape}", seed, eps=1e-5)


@exercise("6.2")
def check_ffn_backward(g: Grader) -> None:
    from ..feedforward import ffn_backward, ffn_forward

    for x_shape, D_ff in (((2, 3, 4), 6), ((5, 4), 3)):
        D = x_shape[-1]
        for seed in range(12, 100):  # the first seed that puts no ReLU input near its kink
            r = _rng(seed)
            inputs = {"x": r.standard_normal(x_shape), "W1": r.standard_normal((D, D_ff)),
                      "b1": r.standard_normal(D_ff), "W2": r.standard_normal((D_ff, D)), "b2": r.standard_normal(D)}
            if np.abs(inputs["x"] @ inputs["W1"] + inputs["b1"]).min() > 1e-3:
                break
        _pair(g, ffn_forward, ffn_backward, inputs, ["x", "W1", "b1", "W2", "b2"], KINK_TOL,
              f"x {x_shape}, d_ff {D_ff}", seed)


# --------------------------------------------------------------------------- #
# Lesson 7
# --------------------------------------------------------------------------- #

@exercise("7.1")
def check_encoder_layer_backward(g: Grader) -> None:
    from ..attention import padding_mask
    from ..gradcheck import check_module
    from ..layers import EncoderLayer
    from ..models import make_rngs

    mask = padding_mask(np.array([[1, 2, 3, PAD], [4, 5, PAD, PAD]]), PAD)
    for norm_first in (False, True):
        case = f"{'pre' if norm_first else 'post'}-LN, dropout 0.2, padding mask, x (2, 4, 6)"
        init_rng, drop_rng = make_rngs(36)
        layer = EncoderLayer(6, 2, 10, 0.2, init_rng, drop_rng, norm_first=norm_first).train()
        r = _rng(37)
        for p in layer.parameters().values():
            p += r.standard_normal(p.shape) * 0.1  # no zero biases or unit gammas hiding a term
        x = _rng(38).standard_normal((2, 4, 6))
        layer.forward(x, mask)
        g.array("dx", layer.backward(np.ones(x.shape)), x.shape, case)
        errors = check_module(layer, [x, mask], ["x", None])
        for name, err in errors.items():
            label = "dx" if name == "x" else f"gradient of {name}"
            if not err < KINK_TOL:
                g.fail(f"{label}: relative error {err:.1e} (tolerance {fmt_tol(KINK_TOL)}) [{case}]")
            g.record("relative error", err, KINK_TOL)


# --------------------------------------------------------------------------- #
# Lesson 8
# --------------------------------------------------------------------------- #

@exercise("8.1")
def check_noam_schedule(g: Grader) -> None:
    from ..optim import NoamSchedule

    for d, w, f in ((512, 4000, 1.0), (64, 10, 2.0)):
        sched = NoamSchedule(d, w, f)
        steps = list(range(1, 4 * w)) if w < 100 else [1, 2, 100, w - 1, w, w + 1, 2 * w, 25 * w]
        got = np.array([float(sched(s)) for s in steps])
        expected = np.array([f * d ** -0.5 * min(s ** -0.5, s * w ** -1.5) for s in steps])
        case = f"d_model {d}, warmup {w}, factor {f}"
        g.close("lr(step) for steps " + (f"1..{4 * w - 1}" if w < 100 else str(steps)), got, expected, 1e-12,
                case, relative=True, hint="lr = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)")
        if w < 100:
            g.require(steps[int(np.argmax(got))] == w,
                      f"the rate peaks at step {steps[int(np.argmax(got))]}, expected at warmup = {w} [{case}]")
        g.close("lr(0)", float(sched(0)), expected[0], 1e-12, case, relative=True)


def _reference_adam(params, grads_per_step, lr, betas, eps):
    """Textbook Adam (Kingma & Ba, Algorithm 1): the states after every step."""
    b1, b2 = betas
    p = {k: v.astype(np.float64) for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(x) for k, x in p.items()}
    states = []
    for t, grads in enumerate(grads_per_step, start=1):
        rate = lr(t) if callable(lr) else lr
        for k in p:
            g = grads[k].astype(np.float64)
            m[k] = b1 * m[k] + (1 - b1) * g
            v[k] = b2 * v[k] + (1 - b2) * g * g
            m_hat, v_hat = m[k] / (1 - b1 ** t), v[k] / (1 - b2 ** t)
            p[k] = p[k] - rate * m_hat / (np.sqrt(v_hat) + eps)
        states.append(({k: x.copy() for k, x in p.items()}, {k: x.copy() for k, x in m.items()},
                       {k: x.copy() for k, x in v.items()}))
    return states


@exercise("8.2")
def check_adam(g: Grader) -> None:
    from ..optim import Adam

    cases = (("float64, lr 0.01, betas (0.9, 0.98), eps 1e-9", np.float64, 0.01, (0.9, 0.98), 1e-9, 1.0, SMOOTH_TOL),
             ("float64, lr(t) = 0.05 / t, betas (0.8, 0.9), eps 1e-3, gradients ~1e-3", np.float64,
              lambda t: 0.05 / t, (0.8, 0.9), 1e-3, 1e-3, SMOOTH_TOL),
             ("float32, lr 0.01, betas (0.9, 0.98), eps 1e-9", np.float32, 0.01, (0.9, 0.98), 1e-9, 1.0, KINK_TOL))
    for seed, (case, dtype, lr, betas, eps, g_scale, tol) in enumerate(cases):
        r = _rng(50 + seed)
        params = {"W": r.standard_normal((3, 4)).astype(dtype), "b": r.standard_normal(4).astype(dtype)}
        start = {k: p.copy() for k, p in params.items()}
        grads_per_step = [{k: (r.standard_normal(p.shape) * g_scale).astype(dtype) for k, p in params.items()}
                          for _ in range(3)]
        expected = _reference_adam(start, grads_per_step, lr, betas, eps)
        opt = Adam(params, lr=lr, betas=betas, eps=eps)
        live = dict(params)
        for t, (grads, (p_ref, m_ref, v_ref)) in enumerate(zip(grads_per_step, expected), start=1):
            before = {k: p.copy() for k, p in live.items()}
            opt.step(grads)
            for k, p in live.items():
                g.require(opt.params[k] is p, f"Adam replaced params[{k!r}] by a new array; update it in place "
                                              f"(p -= ...), the model holds the original [{case}]")
                g.require(p.dtype == dtype, f"params[{k!r}] changed dtype to {p.dtype} [{case}]")
                g.require(not np.array_equal(p, before[k]), f"params[{k!r}] did not change at step {t}; update "
                                                            f"each parameter in place (p -= ...) [{case}]")
                if dtype == np.float64:
                    # The update itself, not the parameter: an error in it would hide behind |p| ~ 1.
                    prev = start[k] if t == 1 else expected[t - 2][0][k]
                    g.close(f"the update of {k} at step {t}", p - before[k], p_ref[k] - prev, tol,
                            case, relative=True, hint="m_hat = m / (1 - b1^t), v_hat = v / (1 - b2^t), "
                                                      "p -= lr * m_hat / (sqrt(v_hat) + eps)")
                else:
                    g.close(f"{k} after step {t}", p, p_ref[k], tol, case, relative=True)
                g.close(f"m[{k!r}] after step {t}", opt.m[k], m_ref[k], tol, case, relative=True,
                        hint="self.m holds the first moment b1 * m + (1 - b1) * g, not bias-corrected")
                g.close(f"v[{k!r}] after step {t}", opt.v[k], v_ref[k], tol, case, relative=True,
                        hint="self.v holds the second moment b2 * v + (1 - b2) * g^2, not bias-corrected")


@exercise("8.3")
def check_clip_grad_norm(g: Grader) -> None:
    from ..optim import clip_grad_norm

    r = _rng(60)
    original = {"W": r.standard_normal((3, 4)) * 3, "b": r.standard_normal(4),
                "E": r.standard_normal((2, 3)).astype(np.float32)}
    norm = math.sqrt(sum(float(np.sum(x.astype(np.float64) ** 2)) for x in original.values()))
    for factor in (0.25, 2.0):
        max_norm = norm * factor
        case = f"global norm {norm:.4g}, max_norm {max_norm:.4g}"
        grads = {k: x.copy() for k, x in original.items()}
        live = dict(grads)
        returned = clip_grad_norm(grads, max_norm)
        g.close("the returned norm", float(returned), norm, KINK_TOL, case, relative=True,
                hint="return the global norm before clipping, sqrt of the sum of every squared entry")
        for k, x in live.items():
            g.require(grads[k] is x, f"grads[{k!r}] was replaced by a new array; scale it in place (g *= ...), "
                                     f"the model holds the original [{case}]")
            g.require(x.dtype == original[k].dtype, f"grads[{k!r}] changed dtype to {x.dtype} [{case}]")
        if factor < 1:
            for k, x in live.items():
                g.close(f"clipped grads[{k!r}]", x, original[k] * (max_norm / norm), KINK_TOL, case, relative=True,
                        hint="every gradient is scaled by the same max_norm / norm")
            after = math.sqrt(sum(float(np.sum(x.astype(np.float64) ** 2)) for x in live.values()))
            g.close("the global norm after clipping", after, max_norm, KINK_TOL, case, relative=True)
        else:
            for k, x in live.items():
                g.require(np.array_equal(x, original[k]), f"grads[{k!r}] changed although the norm is below "
                                                          f"max_norm [{case}]")


# --------------------------------------------------------------------------- #
# Lesson 10
# --------------------------------------------------------------------------- #

#: (hypothesis, references, clipped matches per order, hypothesis n-grams per order), counted by hand.
_SEGMENTS = (
    # Papineni et al.'s example: "the" counts at most twice, its largest count in one reference.
    ("the the the the the the the", ["the cat is on the mat", "there is a cat on the mat"],
     [2, 0, 0, 0], [7, 6, 5, 4]),
    ("the cat sat on the mat", ["the cat is on the mat"], [5, 3, 1, 0], [6, 5, 4, 3]),
    # "b" occurs 3 times: clipped to 2 (its count in the first reference), not 2 + 1 summed over references.
    ("b b b a", ["b b a", "b a"], [3, 2, 1, 0], [4, 3, 2, 1]),
    ("x y", ["a b c"], [0, 0, 0, 0], [2, 1, 0, 0]),
    ("", ["a b"], [0, 0, 0, 0], [0, 0, 0, 0]),
)


@exercise("10.1")
def check_bleu_counts(g: Grader) -> None:
    from ..bleu import _segment_stats, bleu_tokens, corpus_bleu

    for hyp, refs, correct, total in _SEGMENTS:
        case = f"hypothesis {hyp!r}, references {refs}"
        _, _, got_correct, got_total = _segment_stats(hyp.split(), [r.split() for r in refs], True)
        g.require(list(got_total) == total, f"total (hypothesis n-grams of orders 1-4) is {list(got_total)}, "
                                            f"expected {total} [{case}]")
        g.require(list(got_correct) == correct,
                  f"correct (clipped matches of orders 1-4) is {list(got_correct)}, expected {correct} [{case}]; "
                  "each n-gram matches at most as often as it occurs in the one reference where it is most frequent")

    # One segment with matches at every order: p = 5/6, 3/5, 2/4, 1/3 and equal lengths, so
    # BLEU = 100 * (5/6 * 3/5 * 2/4 * 1/3) ** (1/4) = 100 * (1/12) ** (1/4) in both flavours.
    hyp, ref = "the cat sat on the mat", "the cat sat on a mat"
    expected = 100 * (1 / 12) ** 0.25
    case = f"hypothesis {hyp!r}, reference {ref!r}"
    g.close("corpus_bleu score", corpus_bleu([hyp], [ref]).score, expected, 1e-9, case)
    g.close("bleu_tokens score", bleu_tokens([hyp.split()], [ref.split()]).score, expected, 1e-9, case)

    # Two segments: correct = [5+3, 3+2, 1+1, 0+0], total = [6+3, 5+2, 4+1, 3+0], c = 9, r = 6 + 4.
    # No 4-gram matches, so sacreBLEU's smoothing makes p4 = 100 / (2 * 3); BP = exp(1 - 10/9).
    hyps = ["the cat sat on the mat", "a dog barks"]
    refs = ["the cat is on the mat", "a dog barks loudly"]
    p = [800 / 9, 500 / 7, 40.0, 100 / 6]
    bp = math.exp(1 - 10 / 9)
    case = f"hypotheses {hyps}, references {refs}"
    result = corpus_bleu(hyps, refs)
    g.close("corpus_bleu precisions", result.precisions, p, 1e-9, case)
    g.close("corpus_bleu score", result.score, bp * math.exp(sum(map(math.log, p)) / 4), 1e-9, case)


# --------------------------------------------------------------------------- #
# Running a check
# --------------------------------------------------------------------------- #

class Result(NamedTuple):
    exercise_id: str
    status: str  # "passed", "not implemented", "failed"
    detail: str  # the text after "... "

    @property
    def line(self) -> str:
        return f"{self.exercise_id} {BY_ID[self.exercise_id].function} ... {self.detail}"


_EXERCISE_IN_MESSAGE = re.compile(r"Exercise (\d+\.\d+)\b")


def _where(exc: BaseException) -> str:
    """``file:line`` of the innermost frame in the package under test (not in this checker)."""
    here = Path(__file__).resolve().parent
    pkg = here.parent
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = Path(frame.filename).resolve()
        if pkg in path.parents and here not in path.parents:
            return f" (at {path.relative_to(pkg.parent).as_posix()}:{frame.lineno})"
    return ""


def run_check(exercise_id: str) -> Result:
    """Run one exercise's check and say how it went."""
    g = Grader()
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            CHECKS[exercise_id](g)
    except CheckFailed as e:
        return Result(exercise_id, "failed", f"FAILED: {e}")
    except NotImplementedError as e:
        m = _EXERCISE_IN_MESSAGE.search(str(e))
        if m and m.group(1) != exercise_id:
            return Result(exercise_id, "not implemented", f"not yet implemented (needs Exercise {m.group(1)} first)")
        return Result(exercise_id, "not implemented", "not yet implemented")
    except Exception as e:  # the student's code raised: report it, on one line
        message = " ".join(str(e).split())
        return Result(exercise_id, "failed", f"FAILED: {type(e).__name__}: {message}{_where(e)}")
    return Result(exercise_id, "passed", g.summary())
