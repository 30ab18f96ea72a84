"""Grading: run a student's exercise in a separate process, then judge what it returned.

:func:`run_check` starts ``probe.py`` *from this grader's own install* in a fresh Python
process (``python -I``, a time limit) that imports the student's package by path and
records the exercise's outputs on the trusted cases of :mod:`.trusted`. This process never
imports the student's code: it compares those outputs with :mod:`.reference` values (the
grader's own library, or the numbers stored in a student edition), with the error measure
of :mod:`.trusted`, and checks the properties the lessons derive, naming the term that is
most likely missing and where the lesson derives it. Every failing tensor is reported.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Dict, List, NamedTuple, Optional

import numpy as np

from . import probe, reference, trusted
from .catalog import BY_ID
from .trusted import FULLY_MASKED, KINK_TOL, SMOOTH_TOL, VALUE_TOL, grad_error, rel_error

__all__ = ["Grader", "Result", "run_check", "JUDGES", "PROBE_FILE", "DEFAULT_TIMEOUT"]

PROBE_FILE = Path(__file__).resolve().parent / "probe.py"
DEFAULT_TIMEOUT = 60.0  # seconds per exercise; the slowest takes about one
MAX_LINES = 8  # failures printed per exercise


def fmt_tol(tol: float) -> str:
    """``1e-07`` -> ``1e-7``."""
    if tol == 0:
        return "0"
    mantissa, exponent = f"{tol:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def diagnose(a: np.ndarray, e: np.ndarray) -> str:
    """What a wrong array has in common with the right one, if anything simple."""
    if a.shape != e.shape or not np.any(e):
        return ""
    if not np.any(a):
        return "it is all zeros"
    if a.ndim >= 2 and a.shape[-1] == a.shape[-2] and rel_error(a, np.swapaxes(e, -1, -2)) < 1e-6:
        return "it is the transpose of the right one"
    factor = float(np.vdot(a, e) / np.vdot(e, e))
    if rel_error(a, factor * e) < 1e-6:
        return "the sign is flipped" if abs(factor + 1) < 1e-6 else f"it is the right one times {factor:.4g}"
    return ""


class Grader:
    """Collects every failure of one exercise, and the measurement closest to its tolerance."""

    def __init__(self, exercise_id: str) -> None:
        self.exercise = BY_ID[exercise_id]
        self.failures: List[str] = []
        self.worst = None  # (value / tolerance, kind, value, tolerance)
        self._hinted = set()  # a tensor's hint is given with its first failure only

    def fail(self, message: str) -> None:
        if message not in self.failures:
            self.failures.append(message)

    def require(self, condition, message: str) -> bool:
        if not condition:
            self.fail(message)
        return bool(condition)

    def record(self, kind: str, value: float, tol: float) -> None:
        ratio = value / tol if tol > 0 else (0.0 if value == 0 else math.inf)
        if self.worst is None or ratio > self.worst[0]:
            self.worst = (ratio, kind, value, tol)

    def array(self, got: dict, key: str, name: str, shape, case: str) -> Optional[np.ndarray]:
        """The student's value under ``key`` as float64 of ``shape``, or None after noting why not."""
        if key + "#none" in got:
            self.fail(f"{name} is None; expected an array of shape {tuple(shape)} [{case}]")
        elif key + "#type" in got:
            self.fail(f"{name} is {got[key + '#type']}, not an array of numbers [{case}]")
        elif key not in got:
            self.fail(f"{name} was not computed [{case}]")
        elif got[key].shape != tuple(shape):
            self.fail(f"{name} has shape {got[key].shape}, expected {tuple(shape)} [{case}]")
        elif not np.all(np.isfinite(got[key])):
            self.fail(f"{name} contains NaN or inf [{case}]")
        else:
            return got[key].astype(np.float64)
        return None

    def _explain(self, name: str, a, e, hint: str) -> str:
        why = diagnose(a, e)
        if (name, hint) in self._hinted:
            hint = ""
        self._hinted.add((name, hint))
        return "".join(f"; {s}" for s in (why, hint) if s)

    def gradient(self, got: dict, key: str, name: str, numeric: np.ndarray, tol: float, case: str,
                 hint: str = "") -> bool:
        """A gradient against finite differences of the grader's own forward."""
        a = self.array(got, key, name, numeric.shape, case)
        if a is None:
            return False
        kind, err = grad_error(a, numeric)
        if not err < tol:
            self.fail(f"{name}: {kind} {err:.1e} (tolerance {fmt_tol(tol)}) [{case}]{self._explain(name, a, numeric, hint)}")
            return False
        self.record(kind, err, tol)
        return True

    def close(self, got: dict, key: str, name: str, expected, tol: float, case: str, relative: bool = False,
              hint: str = "") -> bool:
        """Values against the grader's: max abs difference (or relative error), and where."""
        e = np.asarray(expected, dtype=np.float64)
        a = self.array(got, key, name, e.shape, case)
        if a is None:
            return False
        diff = np.abs(a - e)
        if relative:
            kind, err = "relative error", rel_error(a, e)
        else:
            kind, err = "abs difference", float(np.max(diff, initial=0.0))
        if not err <= tol:
            where = ""
            if diff.ndim:
                idx = np.unravel_index(int(np.argmax(diff)), diff.shape)
                where = f" at index {list(map(int, idx))} (got {a[idx]:.6g}, expected {e[idx]:.6g})"
            label = "max abs difference" if kind == "abs difference" else kind
            self.fail(f"{name}: {label} {err:.1e}{where} (tolerance {fmt_tol(tol)}) [{case}]"
                      + self._explain(name, a, e, hint))
            return False
        self.record(kind, err, tol)
        return True

    def summary(self) -> str:
        if self.worst is None or self.worst[2] == 0:
            return "passed (every value exact)"
        _, kind, value, tol = self.worst
        return f"passed (largest {kind} {value:.1e}, tolerance {fmt_tol(tol)})"


def _text(got: dict, key: str) -> str:
    return str(got[key]) if key in got else ""


# --------------------------------------------------------------------------- #
# What each tensor of a backward pass is, for the hints
# --------------------------------------------------------------------------- #

HINTS: Dict[str, Dict[str, str]] = {
    "1.1": {"dx": "dx = dout W^T, reshaped like x", "dW": "dW = x^T dout with every leading axis flattened into rows",
            "db": "db = dout summed over every leading axis (all rows), not just the first"},
    "1.2": {"dx": "dx = dout where x > 0 and 0 elsewhere (also at x == 0)"},
    "2.1": {"dlogits": "dlogits = dloss * (p - q) / N, q = (1 - eps) onehot(y) + eps / V, N the non-pad targets"},
    "3.1": {"dW": "dW[v] = scale * sum of dout over the positions whose id is v (np.add.at: repeats accumulate)"},
    "4.2": {"dv": "dV = P^T dO", "dq": "dQ = c dS K with dS = P * (dP - rowsum(dP * P)) and dP = dO V^T",
            "dk": "dK = c dS^T Q"},
    "5.2": {"db_k": "the key bias's gradient is 0: it shifts a whole row of scores, which softmax ignores "
                    "(lesson 5 §5, 'A bias that does nothing')",
            "dx_q": "in self-attention x feeds the q, k and v projections: the three gradients add"},
    "6.1": {"dgamma": "dgamma = dout * x_hat summed over every leading axis",
            "dbeta": "dbeta = dout summed over every leading axis",
            "dx": "dx = (dx_hat - mean(dx_hat) - x_hat * mean(dx_hat * x_hat)) / sqrt(var + eps), dx_hat = dout * gamma"},
    "6.2": {"dx": "back through W2, then the ReLU's mask, then W1", "db1": "db1 is taken after the ReLU's mask"},
    "12.3": {"dlogits": "the same softmax cross-entropy gradient as lesson 2, scored against the next id"},
    "12.1": {"dx": "the addition hands dout through: dx = dout",
             "dP": "dP[offset + t] = dout[:, t] summed over the batch; rows the forward did not read are 0"},
}


def _pair_properties(g: Grader, eid: str, pre: str, i: int, case: trusted.Case, got: dict) -> None:
    """The properties each lesson derives, checked on the student's own gradients."""
    name, sec = case.name, g.exercise.section
    if eid == "2.1":
        d = got.get(f"{pre}c{i}.dlogits")
        if d is None:
            return
        targets, pad_id = case.static["targets"], case.static["pad_id"]
        d = d.reshape(targets.size, -1)
        valid = np.ones(targets.size, bool) if pad_id is None else targets.ravel() != pad_id
        sums = np.abs(d[valid].sum(-1)).max(initial=0.0)
        g.require(sums < 1e-10 * max(1.0, np.abs(d).max()),
                  f"rows of dlogits do not sum to 0 (largest |row sum| {sums:.1e}) [{name}]: p and q are both "
                  f"distributions, so each row of p - q sums to 0; is q's eps/V term or its 1 - eps missing? ({sec})")
        g.require(np.all(d[~valid] == 0), f"dlogits is not zero in rows whose target is the pad id [{name}]: pad "
                                          f"targets are not in the loss, so they get no gradient ({sec})")
        g.require(not _text(got, f"{pre}c{i}.cache_changed"),
                  f"backward changed the cache ({_text(got, f'{pre}c{i}.cache_changed')}) [{name}]; "
                  "work on d, which is a copy")
    elif eid == "3.1":
        d = got.get(f"{pre}c{i}.dW")
        if d is not None and case.static["pad_id"] is not None:
            g.require(np.all(d[case.static["pad_id"]] == 0),
                      f"dW[pad_id] is not zero [{name}]: the pad row gets no gradient ({sec})")
    elif eid == "4.2":
        dk, dq = got.get(f"{pre}c{i}.dk"), got.get(f"{pre}c{i}.dq")
        if dk is not None and dk.shape == case.inputs["k"].shape:
            s = np.abs(dk.sum(-2)).max()
            g.require(s < 1e-8 * max(1.0, np.abs(dk).max()),
                      f"dk summed over the keys is not 0 (largest {s:.1e}) [{name}]: each row of dS must sum to 0, "
                      f"as softmax ignores a shift of a whole row; is the -rowsum(dP * P) term missing? ({sec})")
        if dq is not None and FULLY_MASKED in case.name:
            g.require(np.all(dq[0, :, 1] == 0), f"dq is not zero for the query that attends to nothing [{name}]: "
                                                f"its output is the constant 0 (lesson 4 §6, 'Masks')")
    elif eid == "5.2" and case.static.get("x_kv", 0) is None:
        g.require(f"{pre}c{i}.dNone#none" in got, f"dx_kv must be None in self-attention (its gradient is part of dx_q) "
                                             f"[{name}]")
    elif eid == "6.1" and case.static["eps"] == 0:
        dx = got.get(f"{pre}c{i}.dx")
        if dx is None or dx.shape != case.inputs["x"].shape:
            return
        x = case.inputs["x"]
        x_hat = (x - x.mean(-1, keepdims=True)) / x.std(-1, keepdims=True)
        scale = max(1e-300, np.abs(dx).max())
        s = np.abs(dx.sum(-1)).max() / scale
        g.require(s < 1e-8, f"rows of dx do not sum to 0 (relative {s:.1e}) [{name}]: with eps = 0, dx is orthogonal "
                            f"to 1 (shifting x's row changes nothing); is the -mean(dx_hat) term, the path through "
                            f"the mean, missing? ({sec})")
        o = np.abs((dx * x_hat).sum(-1)).max() / scale
        g.require(o < 1e-8, f"dx is not orthogonal to x_hat (relative {o:.1e}) [{name}]: with eps = 0, scaling x's "
                            f"row changes nothing; is the -x_hat * mean(dx_hat * x_hat) term, the path through the "
                            f"variance, missing? ({sec})")
    elif eid == "12.1":
        dP = got.get(f"{pre}c{i}.dP")
        if dP is not None and dP.shape == case.inputs["P"].shape:
            used = np.zeros(len(dP), bool)
            used[case.static["offset"]:case.static["offset"] + case.inputs["x"].shape[1]] = True
            g.require(np.all(dP[~used] == 0), f"dP is not zero in rows the forward did not read [{name}] ({sec})")


def judge_pair(g: Grader, eid: str, got: dict, exp: dict) -> None:
    hints = HINTS.get(eid, {})
    names = trusted.PROBES[eid][2]
    for j in range(len(names) // 2):
        pre = probe.pair_prefix(j)
        for i, case in enumerate(trusted.pair_cases(eid)):
            label = (f"{names[2 * j + 1]}, " if len(names) > 2 else "") + case.name
            count = int(got[f"{pre}c{i}.count"]) if f"{pre}c{i}.count" in got else -1
            if count != len(case.wrt):
                wanted = ", ".join("d" + n if n else "None" for n in case.wrt)
                g.fail(f"backward returned {count} value(s), expected {len(case.wrt)}: {wanted} [{label}]")
                continue
            g.close(got, f"{pre}c{i}.out", "the forward's out", exp[f"{pre}c{i}.out"], 1e-10, label, relative=True,
                    hint="the forward is not the library's: it must stay as it was")
            for name in case.wrt:
                if name is None:
                    continue
                key, hint = f"{pre}c{i}.d{name}", hints.get("d" + name, "")
                if case.reference == "numeric":
                    g.gradient(got, key, "d" + name, exp[key], case.tol, label, hint)
                else:
                    g.close(got, key, "d" + name, exp[key], case.tol, label, hint=hint)
            _pair_properties(g, eid, pre, i, case._replace(name=label), got)
    if eid == "1.2":
        dx = got.get("c2.dx")
        if dx is not None and dx.shape == (4,):
            g.require(np.all(dx[[1, 3]] == 0), f"dx at x == 0 is {dx[1]:g}; the kink's convention is 0 (x > 0 only)")
    if eid == "3.1":
        dW, right = got.get("c0.dW"), exp["c0.dW"]
        # A multiple of the right row is a factor (the scale), which the relative error already names.
        if dW is not None and dW.shape == right.shape and not np.allclose(dW[2], right[2]) and (
                not np.any(dW[2]) or not np.allclose(dW[2] * (right[2] @ right[2]), right[2] * (dW[2] @ right[2]))):
            g.fail(f"dW[2] is {np.round(dW[2], 4).tolist()}, expected {np.round(right[2], 4).tolist()}: id 2 appears "
                   "3 times, each adding scale * dout; repeated ids must accumulate (np.add.at), not overwrite "
                   "(lesson 3 §3)")


def judge_table(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, (max_len, d_model) in enumerate(trusted.TABLE_SIZES):
        case = f"max_len {max_len}, d_model {d_model}"
        g.close(got, f"c{i}.pe", "pe", exp[f"c{i}.pe"], VALUE_TOL, case,
                hint="PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d)) (lesson 3 §5)")
        g.require(_text(got, f"c{i}.dtype") == "float64", f"pe has dtype {_text(got, f'c{i}.dtype')}, expected "
                                                          f"float64 [{case}]")
    g.require(_text(got, "f32.dtype") == "float32", "sinusoidal_encoding(..., dtype=np.float32) is not float32")
    g.close(got, "f32.pe", "pe (float32)", exp["f32.pe"], 0.0, "max_len 12, d_model 8",
            hint="compute the table in float64, then cast it")


def judge_attention(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, (case, q, k, v, mask) in enumerate(trusted.attention_forward_cases()):
        weights = exp[f"c{i}.weights"]
        allowed = np.ones(weights.shape, bool) if mask is None else np.broadcast_to(mask, weights.shape)
        has_key = allowed.any(-1)
        hint = ("" if has_key.all() else "a row whose every key is masked gets zero weights and output 0, never NaN "
                "(mask with the finite MASK_VALUE, then zero such rows; lesson 4 §4)")
        large = "1000" in case
        w = g.array(got, f"c{i}.weights", "weights", weights.shape, case + (f"; {hint}" if hint else ""))
        g.close(got, f"c{i}.scale", "scale", exp[f"c{i}.scale"], 1e-12, case, relative=True,
                hint="scale = 1/sqrt(d_k), d_k the last axis of q (lesson 4 §2)")
        if w is not None and not large:
            g.require(np.all(w[~allowed] == 0), f"weights are not exactly 0 at masked positions [{case}] (lesson 4 §3)")
            sums = w.sum(-1)[has_key]
            g.require(np.allclose(sums, 1.0, rtol=0, atol=1e-12),
                      f"a row of weights sums to {sums[np.argmax(np.abs(sums - 1))]:.6g}, not 1 [{case}]: "
                      "normalise over the allowed keys")
            g.close(got, f"c{i}.weights", "weights", weights, VALUE_TOL, case, hint=hint)
        g.close(got, f"c{i}.out", "out", exp[f"c{i}.out"], 1e-9 if large else VALUE_TOL, case, relative=large,
                hint="subtract each row's max before exp (the softmax helper does)" if large else hint)
    g.require(_text(got, "f32.dtypes") == "float32 float32",
              f"float32 inputs gave out and weights of dtypes {_text(got, 'f32.dtypes')}; keep float32 (training runs "
              "in float32): a NumPy float64 scalar such as np.sqrt(d_k) turns float32 arrays into float64, use "
              "q.dtype.type(...) or a Python float")


def judge_heads(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, (B, T, D, H) in enumerate(trusted.HEAD_SHAPES):
        g.close(got, f"c{i}.split", "split_heads(x, n_heads)", exp[f"c{i}.split"], 0.0, f"x ({B}, {T}, {D}), {H} heads",
                hint="head h holds features [h*D/H, (h+1)*D/H) of every position (lesson 5 §2)")
        g.close(got, f"c{i}.merge", "merge_heads(heads)", exp[f"c{i}.merge"], 0.0, f"heads ({B}, {H}, {T}, {D // H})",
                hint="merge_heads must undo split_heads")
        g.close(got, f"c{i}.roundtrip", "merge_heads(split_heads(x))", exp[f"c{i}.roundtrip"], 0.0,
                f"x ({B}, {T}, {D}), {H} heads")


def judge_noam(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, (d, w, f, steps) in enumerate(trusted.NOAM_CASES):
        case = f"d_model {d}, warmup {w}, factor {f}, steps {steps[0]}..{steps[-1]}"
        ok = g.close(got, f"c{i}.lr", "lr(step)", exp[f"c{i}.lr"], 1e-12, case, relative=True,
                     hint="lr = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), step 0 counted as 1 "
                          "(lesson 8 §3)")
        lr = got.get(f"c{i}.lr")
        if not ok and lr is not None and lr.shape == (len(steps),) and w < 100:
            peak = steps[int(np.argmax(lr))]
            g.require(peak == w, f"the rate peaks at step {peak}, expected at warmup = {w} [{case}]")


def judge_adam(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, (case, dtype, _, _, _, params, _, tol) in enumerate(trusted.adam_cases()):
        for t in (1, 2, 3):
            for k in params:
                key = f"c{i}.t{t}.{k}"
                g.require(bool(got.get(key + ".same", False)),
                          f"Adam replaced params[{k!r}] by a new array; update it in place (p -= ...), the model "
                          f"holds the original [{case}]")
                p = got.get(key + ".p")
                if p is not None:
                    g.require(p.dtype == dtype, f"params[{k!r}] changed dtype to {p.dtype} [{case}]")
                if dtype == np.float64:
                    # The update, not the parameter: an error in it would hide behind |p| ~ 1.
                    prev_got = params[k] if t == 1 else got.get(f"c{i}.t{t - 1}.{k}.p")
                    prev_exp = params[k] if t == 1 else exp[f"c{i}.t{t - 1}.{k}.p"]
                    if p is not None and prev_got is not None and p.shape == prev_got.shape:
                        g.close({"u": p - prev_got}, "u", f"the update of {k} at step {t}", exp[key + ".p"] - prev_exp,
                                tol, case, relative=True, hint="m_hat = m / (1 - b1^t), v_hat = v / (1 - b2^t), "
                                                               "p -= lr * m_hat / (sqrt(v_hat) + eps) (lesson 8 §2)")
                else:
                    g.close(got, key + ".p", f"{k} after step {t}", exp[key + ".p"], tol, case, relative=True)
                g.close(got, key + ".m", f"m[{k!r}] after step {t}", exp[key + ".m"], tol, case, relative=True,
                        hint="self.m holds the first moment b1 * m + (1 - b1) * g, not bias-corrected")
                g.close(got, key + ".v", f"v[{k!r}] after step {t}", exp[key + ".v"], tol, case, relative=True,
                        hint="self.v holds the second moment b2 * v + (1 - b2) * g^2, not bias-corrected")


def judge_clip(g: Grader, eid: str, got: dict, exp: dict) -> None:
    grads, max_norms = trusted.clip_case()
    for i, max_norm in enumerate(max_norms):
        case = f"max_norm {max_norm}"
        g.close(got, f"c{i}.norm", "the returned norm", exp[f"c{i}.norm"], KINK_TOL, case, relative=True,
                hint="return the global norm before clipping, the square root of the sum of every squared entry "
                     "(lesson 8 §4)")
        for k, original in grads.items():
            g.require(bool(got.get(f"c{i}.{k}.same", False)), f"grads[{k!r}] was replaced by a new array; scale it "
                                                              f"in place (g *= ...), the model holds the original [{case}]")
            a = got.get(f"c{i}.{k}")
            if a is not None:
                g.require(a.dtype == original.dtype, f"grads[{k!r}] changed dtype to {a.dtype} [{case}]")
            g.close(got, f"c{i}.{k}", f"grads[{k!r}] after clipping", exp[f"c{i}.{k}"], KINK_TOL, case, relative=True,
                    hint="every gradient is scaled by the same max_norm / norm, and only if norm > max_norm")


def judge_bleu(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, (hyp, refs, correct, total) in enumerate(trusted.SEGMENTS):
        case = f"hypothesis {hyp!r}, references {refs}"
        g.close(got, f"s{i}.total", "total (hypothesis n-grams of orders 1-4)", total, 0.0, case)
        g.close(got, f"s{i}.correct", "correct (clipped matches of orders 1-4)", correct, 0.0, case,
                hint="each n-gram matches at most as often as it occurs in the one reference where it is most "
                     "frequent (lesson 10 §4)")
    for i, (hyps, refs) in enumerate(trusted.CORPORA):
        case = f"hypotheses {hyps}, references {refs}"
        for key, label in (("score", "corpus_bleu score"), ("precisions", "corpus_bleu precisions"),
                           ("tokens_score", "bleu_tokens score")):
            g.close(got, f"k{i}.{key}", label, exp[f"k{i}.{key}"], 1e-9, case)
    # By hand: p = 5/6, 3/5, 2/4, 1/3 and equal lengths, so BLEU = 100 * (1/12) ** (1/4) in both flavours.
    g.close(got, "k0.score", "corpus_bleu score", 100 * (1 / 12) ** 0.25, 1e-9, "by hand: " + str(trusted.CORPORA[0]))
    for i, (hyp, refs) in enumerate(trusted.random_segments()):
        case = f"hypothesis {hyp!r}, references {refs}"
        for key in ("total", "correct"):
            g.close(got, f"r{i}.{key}", key, exp[f"r{i}.{key}"], 0.0, case)


def judge_encoder_layer(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, norm_first in enumerate((False, True)):
        case = f"{'pre' if norm_first else 'post'}-LN, dropout 0.2, padding mask, x (2, 4, 6)"
        g.close(got, f"c{i}.out", "the forward's out", exp[f"c{i}.out"], 1e-10, case, relative=True,
                hint="the forward is not the library's: it must stay as it was")
        for key in sorted(k for k in exp if k.startswith(f"c{i}.d")):
            name = key.split(".", 1)[1]
            label = name if name == "dx" else f"gradient of {name[1:]}"
            g.gradient(got, key, label, exp[key], KINK_TOL, case,
                       "back through ffn_sublayer with the FFN's backward, then self_attn_sublayer with "
                       "self-attention's; each Residual adds its input's gradient to the sublayer's (lesson 7 §1)"
                       if name == "dx" else "")


# --------------------------------------------------------------------------- #
# The back half of the course: 7.2, 9.1, 9.2, 11.1, 12.2 (12.3 is a "pair", judged by judge_pair)
# --------------------------------------------------------------------------- #

def judge_decoder_layer(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, norm_first in enumerate((False, True)):
        case = (f"{'pre' if norm_first else 'post'}-LN, dropout 0.2, causal + padding masks, x (2, 4, 6), "
                "memory (2, 5, 6)")
        if f"c{i}.count" in got:
            g.fail(f"DecoderLayer.backward returned {int(got[f'c{i}.count'])} value(s), expected 2: (dx, dmemory) "
                   f"[{case}]")
            continue
        g.close(got, f"c{i}.out", "the forward's out", exp[f"c{i}.out"], 1e-10, case, relative=True,
                hint="the forward is not the library's: it must stay as it was")
        for key in sorted(k for k in exp if k.startswith(f"c{i}.d")):
            name = key.split(".", 1)[1]
            label = name if name in ("dx", "dmemory") else f"gradient of {name[1:]}"
            hint = {"dmemory": "the memory reaches the layer only through cross-attention's keys and values, so its "
                               "gradient is what cross_attn_sublayer's backward hands back beside dx (lesson 7 §2)",
                    "dx": "post-LN: through the LayerNorm first, then the residual and the sublayer add; pre-LN: dout "
                          "reaches x unchanged, plus the LayerNorm's backward of the sublayer's (lesson 6 §4)"}
            g.gradient(got, key, label, exp[key], KINK_TOL, case, hint.get(name, ""))


def _token_rows(got: dict, exp: dict, key: str, name: str, g: Grader, case: str) -> None:
    """Decoded token lists against the reference's, sentence by sentence."""
    a, e = got.get(f"{key}.tokens"), exp[f"{key}.tokens"]
    lengths, right = got.get(f"{key}.lengths"), exp[f"{key}.lengths"]
    if a is None or a.shape != e.shape or lengths is None or lengths.shape != right.shape:
        g.fail(f"{name} did not return one token list per sentence ({len(right)} sentences) [{case}]")
        return
    for b in range(len(e)):
        if not np.array_equal(a[b], e[b]) or lengths[b] != right[b]:
            first = int(np.argmax(a[b] != e[b])) if not np.array_equal(a[b], e[b]) else int(min(lengths[b], right[b]))
            g.fail(f"{name}, sentence {b}: {a[b][a[b] >= 0].tolist()} (length {int(lengths[b])}), expected "
                   f"{e[b][e[b] >= 0].tolist()} (length {int(right[b])}); first difference at step {first} [{case}]")
    g.record("tokens different", 0.0, 0.0)


def judge_greedy(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, (max_len, use_cache) in enumerate(trusted.GREEDY_RUNS):
        case = f"{len(exp[f'c{i}.lengths'])} sentences, max_len {max_len}, use_cache {use_cache}"
        _token_rows(got, exp, f"c{i}", "greedy_decode", g, case)
    if any("greedy_decode" in f for f in g.failures):
        g.fail("the stand-in model keeps the prefix in each layer's cache (under 'k' and 'v'): with use_cache, feed "
               "only the last token at position t; a sentence that produced EOS goes on with EOS and stops counting; "
               f"stop when every sentence is done ({g.exercise.section})")


def judge_beam(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, (max_len, K, alpha) in enumerate(trusted.BEAM_RUNS):
        case = f"{len(exp[f'c{i}.lengths'])} sentences, max_len {max_len}, beam_size {K}, length_penalty {alpha}"
        _token_rows(got, exp, f"c{i}", "beam_search", g, case)
    if any("beam_search" in f for f in g.failures):
        g.fail("a finished beam extends only with EOS at no cost; the K best of the K*V candidates give each new "
               "beam its parent (index // V) and token (index % V); lengths count tokens before EOS; every layer's "
               f"cache, 'k' and 'v', is reordered by the parents ({g.exercise.section})")


def judge_seeds(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, seeds in enumerate(trusted.SEED_LISTS):
        case = f"{len(seeds)} seeds"
        calls = got.get(f"c{i}.calls")
        g.require(calls is not None and calls.tolist() == list(seeds),
                  f"train was called with seeds {None if calls is None else calls.tolist()}, expected each of "
                  f"{list(seeds)} once, in order [{case}]")
        g.close(got, f"c{i}.values", "values", exp[f"c{i}.values"], 0.0, case, hint="one value per seed, in order")
        g.close(got, f"c{i}.mean", "mean", exp[f"c{i}.mean"], 1e-12, case, relative=True)
        values = np.asarray(exp[f"c{i}.values"])
        std = got.get(f"c{i}.std")
        if std is not None and std.shape == () and abs(std - values.std()) < 1e-12 * values.std():
            g.fail(f"std is the population standard deviation (divided by n) [{case}]: over a few seeds the sample "
                   f"standard deviation divides by n - 1 (ddof=1)")
        g.close(got, f"c{i}.std", "std", exp[f"c{i}.std"], 1e-12, case, relative=True)
        g.close(got, f"c{i}.sem", "sem", exp[f"c{i}.sem"], 1e-12, case, relative=True,
                hint="the standard error of the mean is std / sqrt(n)")
        low, high, mean = got.get(f"c{i}.low"), got.get(f"c{i}.high"), got.get(f"c{i}.mean")
        if low is not None and high is not None and mean is not None and low.shape == high.shape == mean.shape == ():
            g.require(low <= mean <= high and abs((mean - low) - (high - mean)) <= 1e-12 * max(1.0, abs(mean)),
                      f"the interval [{float(low):.6g}, {float(high):.6g}] is not centred on the mean "
                      f"{float(mean):.6g} [{case}]")
        for key in ("low", "high"):
            g.close(got, f"c{i}.{key}", key, exp[f"c{i}.{key}"], 1e-12, case, relative=True,
                    hint="mean -/+ t_quantile(n - 1) * sem: Student's t, not the normal's 1.96, for few seeds "
                         f"({g.exercise.section})")


def judge_sampling(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, (z, temperature, top_k, top_p) in enumerate(trusted.sampling_cases()):
        case = f"logits {np.round(z, 2).tolist()}, temperature {temperature}, top_k {top_k}, top_p {top_p}"
        g.close(got, f"c{i}.probs", "next_token_probs", exp[f"c{i}.probs"], 1e-12, case,
                hint="p_i proportional to exp(z_i / tau) (temperature 0: all mass on the argmax), then the top-k cut, "
                     "then the top-p cut, each renormalised; ties go to the lower id "
                     f"({g.exercise.section})")
    for i, probs in enumerate(trusted.SAMPLE_PROBS):
        case = f"probs {probs.tolist()}"
        g.close(got, f"k{i}", "top_k_filter(probs, 2)", exp[f"k{i}"], 1e-12, case)
        g.close(got, f"p{i}", "top_p_filter(probs, 0.6)", exp[f"p{i}"], 1e-12, case,
                hint="keep a token while the mass ranked above it is below p: the most likely one is always kept")
        draws = g.array(got, f"s{i}.draws", f"{trusted.DRAWS} draws of sample_from", (trusted.DRAWS,), case)
        if draws is None:
            continue
        if not g.require(np.all((draws >= 0) & (draws < probs.size) & (draws == np.round(draws))),
                         f"sample_from returned something other than an id in [0, {probs.size}) [{case}]"):
            continue
        counts = np.bincount(draws.astype(np.int64), minlength=probs.size)
        g.require(np.all(counts[probs == 0] == 0), f"sample_from drew an id of probability 0 "
                                                   f"({np.flatnonzero((probs == 0) & (counts > 0)).tolist()}) [{case}]")
        # With a fixed generator the counts are fixed too; 5 binomial standard deviations is far beyond chance.
        n = trusted.DRAWS
        sd = np.sqrt(n * probs * (1 - probs))
        worst = int(np.argmax(np.abs(counts - n * probs) - 5 * sd))
        g.require(np.all(np.abs(counts - n * probs) <= 5 * sd + 1),
                  f"sample_from drew id {worst} {counts[worst]} times in {n}, expected about {n * probs[worst]:.0f} "
                  f"(5 standard deviations: {5 * sd[worst]:.0f}) [{case}]: draw each id with its probability")
        g.record("frequency deviation (in standard deviations)",
                 float(np.max(np.abs(counts - n * probs) / np.maximum(sd, 1e-300), where=sd > 0, initial=0.0)), 5.0)
        g.require(np.array_equal(got.get(f"s{i}.again"), draws[:20]),
                  f"sample_from gave other ids from a generator of the same seed [{case}]: draw with rng, the "
                  f"generator passed in, and nothing else")


JUDGES_MORE: Dict[str, Callable[[Grader, str, dict, dict], None]] = {
    "decoder_layer": judge_decoder_layer, "greedy": judge_greedy, "beam": judge_beam, "seeds": judge_seeds,
    "sampling": judge_sampling}


JUDGES: Dict[str, Callable[[Grader, str, dict, dict], None]] = {
    "pair": judge_pair, "table": judge_table, "attention": judge_attention, "heads": judge_heads, "noam": judge_noam,
    "adam": judge_adam, "clip": judge_clip, "bleu": judge_bleu, "encoder_layer": judge_encoder_layer, **JUDGES_MORE}


# --------------------------------------------------------------------------- #
# Running a check
# --------------------------------------------------------------------------- #

class Result(NamedTuple):
    exercise_id: str
    status: str  # "passed", "not implemented", "failed"
    detail: str  # the text after "... "
    failures: tuple = ()  # every failing measurement, the first one also in detail

    @property
    def line(self) -> str:
        head = f"{self.exercise_id} {BY_ID[self.exercise_id].function} ... {self.detail}"
        more = [f"    also: {f}" for f in self.failures[1:MAX_LINES]]
        if len(self.failures) > MAX_LINES:
            more.append(f"    ... and {len(self.failures) - MAX_LINES} more")
        return "\n".join([head, *more])


_EXERCISE_IN_MESSAGE = re.compile(r"Exercise (\d+\.\d+)\b")


def _probe(exercise_id: str, student_root: Path, timeout: float, tmp: Path, salt: int):
    """Run probe.py on the student's package; (status dict, outputs dict)."""
    outputs, status_path = tmp / "outputs.npz", tmp / "status.json"
    # The student's process gets copies of the two trusted files, not a path into the grader's install.
    for name in ("probe.py", "trusted.py"):
        shutil.copyfile(PROBE_FILE.parent / name, tmp / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = [sys.executable, "-I", str(tmp / "probe.py"), str(student_root), exercise_id, str(outputs),
           str(status_path), str(salt)]
    try:
        proc = subprocess.run(cmd, cwd=tmp, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout)  # no terminal: a breakpoint() or input() fails at once
    except subprocess.TimeoutExpired:
        return {"status": "timeout"}, {}
    try:
        status = json.loads(status_path.read_text(encoding="utf-8"))
        with np.load(outputs, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    except Exception:  # the process died before writing, or wrote something unreadable
        tail = " ".join((proc.stderr or "").strip().splitlines()[-1:])
        return {"status": "crashed", "message": f"exit code {proc.returncode}" + (f": {tail}" if tail else "")}, {}
    return status, arrays


def run_check(exercise_id: str, student_root=None, timeout: float = DEFAULT_TIMEOUT, salt: int = 0) -> Result:
    """Grade one exercise of the ``numpytransformer`` package in ``student_root`` (default: this one's).

    ``salt`` 0 uses the public cases; any other draws fresh ones (only a full library, which
    computes its reference values live, can grade those).
    """
    from .fences import package_dir

    if salt and reference.REFERENCE_FILE.is_file():
        raise ValueError("a student edition's grader holds reference values for the public cases only (salt 0)")
    root = Path(student_root).resolve() if student_root is not None else package_dir().parent
    with tempfile.TemporaryDirectory(prefix="nt-grade-") as tmp:
        status, got = _probe(exercise_id, root, timeout, Path(tmp), salt)
    kind = status.get("status")
    if kind == "timeout":
        return Result(exercise_id, "failed", f"FAILED: took longer than {timeout:g} s (the time limit); "
                                             "an endless loop, or a loop over every entry where an array operation "
                                             "would do?")
    if kind == "crashed":
        return Result(exercise_id, "failed", f"FAILED: the check's process died ({status['message']})")
    if kind == "not implemented":
        m = _EXERCISE_IN_MESSAGE.search(status.get("message", ""))
        if m and m.group(1) != exercise_id:
            return Result(exercise_id, "not implemented", f"not yet implemented (needs Exercise {m.group(1)} first)")
        where = f" (the raise at {status['where']})" if status.get("where") else ""  # code above it is not reached
        return Result(exercise_id, "not implemented", "not yet implemented" + where)
    if kind != "ok":
        where = f" (at {status['where']})" if status.get("where") else ""
        return Result(exercise_id, "failed", f"FAILED: {status.get('type', 'Error')}: {status.get('message', '')}{where}")
    g = Grader(exercise_id)
    previous, trusted.SALT = trusted.SALT, salt
    try:
        with np.errstate(all="ignore"):
            JUDGES[trusted.PROBES[exercise_id][0]](g, exercise_id, got, reference.expected(exercise_id))
    finally:
        trusted.SALT = previous
    if g.failures:
        # A broken property names the missing term and the lesson section: the best hint goes first.
        failures = sorted(g.failures, key=lambda f: "missing?" not in f)
        return Result(exercise_id, "failed", f"FAILED: {failures[0]}", tuple(failures))
    return Result(exercise_id, "passed", g.summary())
