"""Grading: run a student's exercise in a separate process, then judge what it returned.

:func:`run_check` starts ``probe.py`` *from this grader's own install* in a fresh Python
process (``python -I``, a time limit) that imports the student's package by path and
records the exercise's outputs on the trusted cases of :mod:`.trusted`. This process never
imports the student's code: it compares those outputs with :mod:`.reference` values (the
grader's own library, or the numbers stored in a student edition), with the error measure
of :mod:`.trusted`, and checks the properties the lessons derive. Every failing tensor is
reported, in the three steps of :mod:`.hints`.

Each exercise is graded on its own: the code of the exercises it depends on (its ``needs``)
runs as the grader's reference code, swapped in by the probe (:func:`reference_swaps`), so a
bug costs only the exercise it is in. Each entry (a tensor in a case: ``dW [x (2, 3, 4), W
(4, 5)]``) is scored on its own, the exercise's points split evenly among its entries.
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

from . import hints, probe, reference, trusted
from .catalog import BY_ID
from .trusted import FULLY_MASKED, KINK_TOL, SMOOTH_TOL, VALUE_TOL, grad_error, rel_error

__all__ = ["Grader", "Failure", "Result", "run_check", "reference_swaps", "depends_on", "grading_order", "Sandbox",
           "sandbox_user", "JUDGES", "PROBE_FILE", "DEFAULT_TIMEOUT"]

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


class Failure(NamedTuple):
    """One failing measurement, told in the grader's three steps (see :mod:`.hints`)."""

    text: str  # step 1: the tensor, the size of its error, the case
    more: str = ""  # step 2: the property it breaks, or a simple relation to the right answer
    formula: str = ""  # step 3: the formula-level hint (from hints.py)
    shown_from: int = 1  # a failed property is told from step 2 on
    first: bool = False  # a broken property names the likely mistake: told before the rest

    def render(self, level: int) -> str:
        if level < self.shown_from:
            return ""
        text = self.text
        for step, part in ((2, self.more), (3, self.formula)):
            if part and level >= step:
                text += f"; {part}"
        return text


OTHER = "other checks"  # the entry of a check that names no tensor and no case


class Grader:
    """Collects every failure of one exercise by entry (a tensor in a case), and the closest call.

    An entry is scored on its own (``results.json`` has one test per entry): it passes when
    it was checked and nothing in it failed.
    """

    def __init__(self, exercise_id: str, level: int = 3) -> None:
        self.exercise = BY_ID[exercise_id]
        self.level = level
        self.entries: Dict[str, List[Failure]] = {}
        self.worst = None  # (value / tolerance, kind, value, tolerance)
        self._hinted = set()  # a tensor's formula is given with its first failure only

    @staticmethod
    def entry(name: str, case: str) -> str:
        return f"{name} [{case}]"

    def touch(self, entry: Optional[str]) -> str:
        entry = entry or OTHER
        self.entries.setdefault(entry, [])
        return entry

    def fail(self, message: str, entry: Optional[str] = None, more: str = "", formula: str = "",
             shown_from: int = 1, first: bool = False) -> None:
        failures = self.entries[self.touch(entry)]
        failure = Failure(message, more, formula, shown_from, first)
        if all(f.text != message for f in failures):
            failures.append(failure)

    def require(self, condition, message: str, entry: Optional[str] = None, more: str = "", formula: str = "",
                shown_from: int = 1, first: bool = False) -> bool:
        self.touch(entry)
        if not condition:
            self.fail(message, entry, more, formula, shown_from, first)
        return bool(condition)

    @property
    def failures(self) -> List[str]:
        """Every failure as told at this grader's step, the likely mistakes first."""
        every = [f for fs in self.entries.values() for f in fs]
        told = [f.render(self.level) for f in sorted(every, key=lambda f: not f.first)]
        return list(dict.fromkeys(t for t in told if t))

    def failed(self) -> bool:
        return any(self.entries.values())

    def record(self, kind: str, value: float, tol: float) -> None:
        ratio = value / tol if tol > 0 else (0.0 if value == 0 else math.inf)
        if self.worst is None or ratio > self.worst[0]:
            self.worst = (ratio, kind, value, tol)

    def array(self, got: dict, key: str, name: str, shape, case: str, entry: Optional[str] = None
              ) -> Optional[np.ndarray]:
        """The student's value under ``key`` as float64 of ``shape``, or None after noting why not."""
        entry = self.touch(entry or self.entry(name, case))
        if key + "#none" in got:
            self.fail(f"{name} is None; expected an array of shape {tuple(shape)} [{case}]", entry)
        elif key + "#type" in got:
            self.fail(f"{name} is {got[key + '#type']}, not an array of numbers [{case}]", entry)
        elif key not in got:
            self.fail(f"{name} was not computed [{case}]", entry)
        elif got[key].shape != tuple(shape):
            self.fail(f"{name} has shape {got[key].shape}, expected {tuple(shape)} [{case}]", entry)
        elif not np.all(np.isfinite(got[key])):
            self.fail(f"{name} contains NaN or inf [{case}]", entry)
        else:
            return got[key].astype(np.float64)
        return None

    def _formula(self, name: str, formula: str) -> str:
        if (name, formula) in self._hinted:
            return ""
        self._hinted.add((name, formula))
        return formula

    def gradient(self, got: dict, key: str, name: str, numeric: np.ndarray, tol: float, case: str,
                 hint: str = "", entry: Optional[str] = None) -> bool:
        """A gradient against the expected one (finite differences of the grader's own forward; a whole
        layer's, its own backward: ``reference.compute``); ``hint`` is told at step 3."""
        entry = entry or self.entry(name, case)
        a = self.array(got, key, name, numeric.shape, case, entry)
        if a is None:
            return False
        kind, err = grad_error(a, numeric)
        if not err < tol:
            self.fail(f"{name}: {kind} {err:.1e} (tolerance {fmt_tol(tol)}) [{case}]", entry, diagnose(a, numeric),
                      self._formula(name, hint))
            return False
        self.record(kind, err, tol)
        return True

    def close(self, got: dict, key: str, name: str, expected, tol: float, case: str, relative: bool = False,
              hint: str = "", entry: Optional[str] = None) -> bool:
        """Values against the grader's: max abs difference (or relative error), and where."""
        entry = entry or self.entry(name, case)
        e = np.asarray(expected, dtype=np.float64)
        a = self.array(got, key, name, e.shape, case, entry)
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
            self.fail(f"{name}: {label} {err:.1e}{where} (tolerance {fmt_tol(tol)}) [{case}]", entry, diagnose(a, e),
                      self._formula(name, hint))
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


def _pair_properties(g: Grader, eid: str, pre: str, i: int, case: trusted.Case, got: dict) -> None:
    """The properties each lesson derives, checked on the student's own gradients."""
    name, sec = case.name, g.exercise.section
    at = (lambda tensor: g.entry(tensor, name))
    if eid == "2.1":
        d = got.get(f"{pre}c{i}.dlogits")
        g.require(not _text(got, f"{pre}c{i}.cache_changed"),
                  f"backward changed the cache ({_text(got, f'{pre}c{i}.cache_changed')}) [{name}]; "
                  "work on d, which is a copy", at("dlogits"))
        if d is None:
            return
        targets, pad_id = case.static["targets"], case.static["pad_id"]
        d = d.reshape(targets.size, -1)
        valid = np.ones(targets.size, bool) if pad_id is None else targets.ravel() != pad_id
        sums = np.abs(d[valid].sum(-1)).max(initial=0.0)
        g.require(sums < 1e-10 * max(1.0, np.abs(d).max()),
                  f"rows of dlogits do not sum to 0 (largest |row sum| {sums:.1e}) [{name}]: adding a constant to a "
                  f"row of logits changes no probability, so the loss cannot change ({sec})", at("dlogits"),
                  formula=hints.formula(eid, "row sums"), shown_from=2, first=True)
        g.require(np.all(d[~valid] == 0), f"dlogits is not zero in rows whose target is the pad id [{name}]: pad "
                                          f"targets are not in the loss, so they get no gradient ({sec})",
                  at("dlogits"), shown_from=2)
    elif eid == "12.3":
        d = got.get(f"{pre}c{i}.dlogits")
        if d is not None and d.shape == case.inputs["logits"].shape:
            sums = np.abs(d.sum(-1)).max(initial=0.0)
            g.require(sums < 1e-10 * max(1.0, np.abs(d).max()),
                      f"rows of dlogits do not sum to 0 (largest |row sum| {sums:.1e}) [{name}]: as in lesson 2, adding "
                      f"a constant to a row of logits changes no probability ({sec})", at("dlogits"),
                      formula=hints.formula(eid, "row sums"), shown_from=2, first=True)
    elif eid == "3.1":
        d = got.get(f"{pre}c{i}.dW")
        if d is not None and case.static["pad_id"] is not None:
            g.require(np.all(d[case.static["pad_id"]] == 0),
                      f"dW[pad_id] is not zero [{name}]: the pad row gets no gradient ({sec})", at("dW"), shown_from=2)
    elif eid == "4.2":
        dk, dq = got.get(f"{pre}c{i}.dk"), got.get(f"{pre}c{i}.dq")
        if dk is not None and dk.shape == case.inputs["k"].shape:
            s = np.abs(dk.sum(-2)).max()
            g.require(s < 1e-8 * max(1.0, np.abs(dk).max()),
                      f"dk summed over the keys is not 0 (largest {s:.1e}) [{name}]: softmax ignores a shift of a "
                      f"whole row of scores, so each row of dS must sum to 0 ({sec})", at("dk"),
                      formula=hints.formula(eid, "row sums"), shown_from=2, first=True)
        if dq is not None and FULLY_MASKED in case.name:
            g.require(np.all(dq[0, :, 1] == 0), f"dq is not zero for the query that attends to nothing [{name}]: "
                                                f"its output is the constant 0 (lesson 4 §6, 'Masks')", at("dq"),
                      shown_from=2)
    elif eid == "5.2" and case.static.get("x_kv", 0) is None:
        g.require(f"{pre}c{i}.dNone#none" in got, f"dx_kv must be None in self-attention (its gradient is part of dx_q) "
                                             f"[{name}]", at("dx_q"))
    elif eid == "6.1" and case.static["eps"] == 0:
        dx = got.get(f"{pre}c{i}.dx")
        if dx is None or dx.shape != case.inputs["x"].shape:
            return
        x = case.inputs["x"]
        x_hat = (x - x.mean(-1, keepdims=True)) / x.std(-1, keepdims=True)
        scale = max(1e-300, np.abs(dx).max())
        s = np.abs(dx.sum(-1)).max() / scale
        g.require(s < 1e-8, f"rows of dx do not sum to 0 (relative {s:.1e}) [{name}]: with eps = 0, shifting x's "
                            f"row changes nothing, so dx is orthogonal to 1 ({sec})", at("dx"),
                  formula=hints.formula(eid, "mean"), shown_from=2, first=True)
        o = np.abs((dx * x_hat).sum(-1)).max() / scale
        g.require(o < 1e-8, f"dx is not orthogonal to x_hat (relative {o:.1e}) [{name}]: with eps = 0, scaling x's "
                            f"row changes nothing ({sec})", at("dx"),
                  formula=hints.formula(eid, "variance"), shown_from=2, first=True)
    elif eid == "12.1":
        dP = got.get(f"{pre}c{i}.dP")
        if dP is not None and dP.shape == case.inputs["P"].shape:
            used = np.zeros(len(dP), bool)
            used[case.static["offset"]:case.static["offset"] + case.inputs["x"].shape[1]] = True
            g.require(np.all(dP[~used] == 0), f"dP is not zero in rows the forward did not read [{name}] ({sec})",
                      at("dP"), shown_from=2)


def judge_pair(g: Grader, eid: str, got: dict, exp: dict) -> None:
    names = trusted.PROBES[eid][2]
    for j in range(len(names) // 2):
        pre = probe.pair_prefix(j)
        for i, case in enumerate(trusted.pair_cases(eid)):
            label = (f"{names[2 * j + 1]}, " if len(names) > 2 else "") + case.name
            entries = [g.touch(g.entry("d" + n, label)) for n in case.wrt if n is not None]
            count = int(got[f"{pre}c{i}.count"]) if f"{pre}c{i}.count" in got else -1
            if count != len(case.wrt):
                wanted = ", ".join("d" + n if n else "None" for n in case.wrt)
                for entry in entries:
                    g.fail(f"backward returned {count} value(s), expected {len(case.wrt)}: {wanted} [{label}]", entry)
                continue
            for entry in entries:  # gradients of another function say nothing
                g.close(got, f"{pre}c{i}.out", "the forward's out", exp[f"{pre}c{i}.out"], 1e-10, label,
                        relative=True, entry=entry)
            for name in case.wrt:
                if name is None:
                    continue
                key, formula = f"{pre}c{i}.d{name}", hints.formula(eid, "d" + name)
                if case.reference == "numeric":
                    g.gradient(got, key, "d" + name, exp[key], case.tol, label, formula)
                else:
                    g.close(got, key, "d" + name, exp[key], case.tol, label, hint=formula)
            _pair_properties(g, eid, pre, i, case._replace(name=label), got)
    if eid == "1.2":
        dx, case = got.get("c2.dx"), trusted.pair_cases("1.2")[2].name
        if dx is not None and dx.shape == (4,):
            g.require(np.all(dx[[1, 3]] == 0), f"dx at x == 0 is {dx[1]:g}; the kink's convention is 0 (x > 0 only)",
                      g.entry("dx", case))
    if eid == "3.1":
        dW, right, case = got.get("c0.dW"), exp["c0.dW"], trusted.pair_cases("3.1")[0].name
        # A multiple of the right row is a factor (the scale), which the relative error already names.
        if dW is not None and dW.shape == right.shape and not np.allclose(dW[2], right[2]) and (
                not np.any(dW[2]) or not np.allclose(dW[2] * (right[2] @ right[2]), right[2] * (dW[2] @ right[2]))):
            g.fail(f"dW[2] is {np.round(dW[2], 4).tolist()}, expected {np.round(right[2], 4).tolist()} [{case}]",
                   g.entry("dW", case), "id 2 appears 3 times, each adding scale * dout (lesson 3 §3)",
                   hints.formula(eid, "repeats"), first=True)


def judge_table(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, (max_len, d_model) in enumerate(trusted.TABLE_SIZES):
        case = f"max_len {max_len}, d_model {d_model}"
        g.close(got, f"c{i}.pe", "pe", exp[f"c{i}.pe"], VALUE_TOL, case, hint=hints.formula(eid, "pe"))
        g.require(_text(got, f"c{i}.dtype") == "float64", f"pe has dtype {_text(got, f'c{i}.dtype')}, expected "
                                                          f"float64 [{case}]", g.entry("pe", case))
    case = "max_len 12, d_model 8, dtype float32"
    g.require(_text(got, "f32.dtype") == "float32", "sinusoidal_encoding(..., dtype=np.float32) is not float32",
              g.entry("pe", case))
    g.close(got, "f32.pe", "pe", exp["f32.pe"], 0.0, case, hint=hints.formula(eid, "pe (float32)"))


def judge_attention(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, (case, q, k, v, mask) in enumerate(trusted.attention_forward_cases()):
        weights = exp[f"c{i}.weights"]
        allowed = np.ones(weights.shape, bool) if mask is None else np.broadcast_to(mask, weights.shape)
        has_key = allowed.any(-1)
        more = ("" if has_key.all() else "a row whose every key is masked gets zero weights and output 0, never NaN "
                "(lesson 4 §4)")
        formula = hints.formula(eid, "masked row") if more else ""
        large = "1000" in case
        at_w, at_out = g.entry("weights", case), g.entry("out", case)
        w = g.array(got, f"c{i}.weights", "weights", weights.shape, case, at_w)
        if w is None and more:
            g.fail(f"weights are wrong where a query has no allowed key [{case}]", at_w, more, formula, shown_from=2)
        g.close(got, f"c{i}.scale", "scale", exp[f"c{i}.scale"], 1e-12, case, relative=True,
                hint=hints.formula(eid, "weights"), entry=at_w)
        if w is not None and not large:
            g.require(np.all(w[~allowed] == 0), f"weights are not exactly 0 at masked positions [{case}] (lesson 4 §3)",
                      at_w)
            sums = w.sum(-1)[has_key]
            g.require(np.allclose(sums, 1.0, rtol=0, atol=1e-12),
                      f"a row of weights sums to {sums[np.argmax(np.abs(sums - 1))]:.6g}, not 1 [{case}]: "
                      "normalise over the allowed keys", at_w)
            g.close(got, f"c{i}.weights", "weights", weights, VALUE_TOL, case, hint=formula or hints.formula(
                eid, "weights"), entry=at_w)
        ok = g.close(got, f"c{i}.out", "out", exp[f"c{i}.out"], 1e-9 if large else VALUE_TOL, case, relative=large,
                     hint=hints.formula(eid, "large") if large else formula, entry=at_out)
        if not ok and more:
            g.fail(f"out is wrong where a query has no allowed key [{case}]", at_out, more, shown_from=2)
    g.require(_text(got, "f32.dtypes") == "float32 float32",
              f"float32 inputs gave out and weights of dtypes {_text(got, 'f32.dtypes')}; keep float32 (training runs "
              "in float32)", g.entry("dtypes", "float32 q, k and v"), formula=hints.formula(eid, "dtypes"))


def judge_heads(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, (B, T, D, H) in enumerate(trusted.HEAD_SHAPES):
        split, merge = "split_heads(x, n_heads)", "merge_heads(heads)"
        case_x, case_h = f"x ({B}, {T}, {D}), {H} heads", f"heads ({B}, {H}, {T}, {D // H})"
        g.close(got, f"c{i}.split", split, exp[f"c{i}.split"], 0.0, case_x, hint=hints.formula(eid, split))
        g.close(got, f"c{i}.merge", merge, exp[f"c{i}.merge"], 0.0, case_h, hint=hints.formula(eid, merge))
        g.close(got, f"c{i}.roundtrip", "merge_heads(split_heads(x))", exp[f"c{i}.roundtrip"], 0.0, case_x,
                entry=g.entry(merge, case_h))


def judge_noam(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, (d, w, f, steps) in enumerate(trusted.NOAM_CASES):
        case = f"d_model {d}, warmup {w}, factor {f}, steps {steps[0]}..{steps[-1]}"
        ok = g.close(got, f"c{i}.lr", "lr(step)", exp[f"c{i}.lr"], 1e-12, case, relative=True,
                     hint=hints.formula(eid, "lr(step)"))
        lr = got.get(f"c{i}.lr")
        if not ok and lr is not None and lr.shape == (len(steps),) and w < 100:
            peak = steps[int(np.argmax(lr))]
            g.require(peak == w, f"the rate peaks at step {peak}, expected at warmup = {w} [{case}]",
                      g.entry("lr(step)", case), shown_from=2)


def judge_adam(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, (case, dtype, _, _, _, params, _, tol) in enumerate(trusted.adam_cases()):
        for t in (1, 2, 3):
            for k in params:
                key = f"c{i}.t{t}.{k}"
                at_p, at_m, at_v = (g.entry(n, case) for n in (k, f"m[{k!r}]", f"v[{k!r}]"))
                g.require(bool(got.get(key + ".same", False)),
                          f"Adam replaced params[{k!r}] by a new array; update it in place (p -= ...), the model "
                          f"holds the original [{case}]", at_p)
                p = got.get(key + ".p")
                if p is not None:
                    g.require(p.dtype == dtype, f"params[{k!r}] changed dtype to {p.dtype} [{case}]", at_p)
                if dtype == np.float64:
                    # The update, not the parameter: an error in it would hide behind |p| ~ 1.
                    prev_got = params[k] if t == 1 else got.get(f"c{i}.t{t - 1}.{k}.p")
                    prev_exp = params[k] if t == 1 else exp[f"c{i}.t{t - 1}.{k}.p"]
                    if p is not None and prev_got is not None and p.shape == prev_got.shape:
                        g.close({"u": p - prev_got}, "u", f"the update of {k} at step {t}", exp[key + ".p"] - prev_exp,
                                tol, case, relative=True, hint=hints.formula(eid, "update"), entry=at_p)
                    else:
                        g.array(got, key + ".p", f"{k} after step {t}", params[k].shape, case, at_p)
                else:
                    g.close(got, key + ".p", f"{k} after step {t}", exp[key + ".p"], tol, case, relative=True,
                            entry=at_p)
                g.close(got, key + ".m", f"m[{k!r}] after step {t}", exp[key + ".m"], tol, case, relative=True,
                        hint=hints.formula(eid, "m"), entry=at_m)
                g.close(got, key + ".v", f"v[{k!r}] after step {t}", exp[key + ".v"], tol, case, relative=True,
                        hint=hints.formula(eid, "v"), entry=at_v)


def judge_clip(g: Grader, eid: str, got: dict, exp: dict) -> None:
    grads, max_norms = trusted.clip_case()
    for i, max_norm in enumerate(max_norms):
        case = f"max_norm {max_norm}"
        g.close(got, f"c{i}.norm", "the returned norm", exp[f"c{i}.norm"], KINK_TOL, case, relative=True,
                hint=hints.formula(eid, "norm"))
        for k, original in grads.items():
            at = g.entry(f"grads[{k!r}] after clipping", case)
            g.require(bool(got.get(f"c{i}.{k}.same", False)), f"grads[{k!r}] was replaced by a new array; scale it "
                                                              f"in place (g *= ...), the model holds the original [{case}]",
                      at)
            a = got.get(f"c{i}.{k}")
            if a is not None:
                g.require(a.dtype == original.dtype, f"grads[{k!r}] changed dtype to {a.dtype} [{case}]", at)
            g.close(got, f"c{i}.{k}", f"grads[{k!r}] after clipping", exp[f"c{i}.{k}"], KINK_TOL, case, relative=True,
                    hint=hints.formula(eid, "grads"))


def judge_bleu(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, (hyp, refs, correct, total) in enumerate(trusted.SEGMENTS):
        case = f"hypothesis {hyp!r}, references {refs}"
        g.close(got, f"s{i}.total", "total (hypothesis n-grams of orders 1-4)", total, 0.0, case)
        g.close(got, f"s{i}.correct", "correct (clipped matches of orders 1-4)", correct, 0.0, case,
                hint=hints.formula(eid, "correct"))
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


def _layer_gradients(g: Grader, eid: str, got: dict, exp: dict, i: int, case: str, inputs=("dx",)) -> None:
    """A whole layer's gradients in case ``i``, one entry each: the inputs' (``dx``) and every parameter's."""
    keys = sorted(k for k in exp if k.startswith(f"c{i}.d"))
    names = {key: key.split(".", 1)[1] for key in keys}
    labels = {key: n if n in inputs else f"gradient of {n[1:]}" for key, n in names.items()}
    if f"c{i}.count" in got:  # backward returned the wrong number of values: nothing to compare
        for key in keys:
            g.fail(f"{g.exercise.function.split(', ')[-1]} returned {int(got[f'c{i}.count'])} value(s), expected "
                   f"{len(inputs)}: {', '.join(inputs)} [{case}]", g.entry(labels[key], case))
        return
    for key in keys:  # gradients of another forward say nothing
        g.close(got, f"c{i}.out", "the forward's out", exp[f"c{i}.out"], 1e-10, case, relative=True,
                entry=g.entry(labels[key], case))
    for key in keys:
        g.gradient(got, key, labels[key], exp[key], KINK_TOL, case, hints.formula(eid, names[key]))


def judge_encoder_layer(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, norm_first in enumerate((False, True)):
        _layer_gradients(g, eid, got, exp, i, f"{'pre' if norm_first else 'post'}-LN, dropout 0.2, padding mask, "
                                              "x (2, 4, 6)")


# --------------------------------------------------------------------------- #
# The back half of the course: 7.2, 9.1, 9.2, 11.1, 12.2 (12.3 is a "pair", judged by judge_pair)
# --------------------------------------------------------------------------- #

def judge_decoder_layer(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, norm_first in enumerate((False, True)):
        case = (f"{'pre' if norm_first else 'post'}-LN, dropout 0.2, causal + padding masks, x (2, 4, 6), "
                "memory (2, 5, 6)")
        _layer_gradients(g, eid, got, exp, i, case, inputs=("dx", "dmemory"))


def _token_rows(g: Grader, eid: str, got: dict, exp: dict, key: str, name: str, case: str) -> None:
    """Decoded token lists against the reference's, one entry per sentence."""
    a, e = got.get(f"{key}.tokens"), exp[f"{key}.tokens"]
    lengths, right = got.get(f"{key}.lengths"), exp[f"{key}.lengths"]
    entries = [g.touch(g.entry(f"{name}, sentence {b}", case)) for b in range(len(e))]
    if a is None or a.shape != e.shape or lengths is None or lengths.shape != right.shape:
        for entry in entries:
            g.fail(f"{name} did not return one token list per sentence ({len(right)} sentences) [{case}]", entry)
        return
    for b in range(len(e)):
        if not np.array_equal(a[b], e[b]) or lengths[b] != right[b]:
            first = int(np.argmax(a[b] != e[b])) if not np.array_equal(a[b], e[b]) else int(min(lengths[b], right[b]))
            g.fail(f"{name}, sentence {b}: {a[b][a[b] >= 0].tolist()} (length {int(lengths[b])}), expected "
                   f"{e[b][e[b] >= 0].tolist()} (length {int(right[b])}); first difference at step {first} [{case}]",
                   entries[b], formula=g._formula(name, hints.formula(eid, "tokens")))


def judge_greedy(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, (max_len, use_cache) in enumerate(trusted.GREEDY_RUNS):
        case = f"{len(exp[f'c{i}.lengths'])} sentences, max_len {max_len}, use_cache {use_cache}"
        _token_rows(g, eid, got, exp, f"c{i}", "greedy_decode", case)


def judge_beam(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, (max_len, K, alpha) in enumerate(trusted.BEAM_RUNS):
        case = f"{len(exp[f'c{i}.lengths'])} sentences, max_len {max_len}, beam_size {K}, length_penalty {alpha}"
        _token_rows(g, eid, got, exp, f"c{i}", "beam_search", case)


def judge_seeds(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, seeds in enumerate(trusted.SEED_LISTS):
        case = f"{len(seeds)} seeds"
        at_values, at_std, at_interval = (g.entry(n, case) for n in ("values", "std", "interval (low, high)"))
        calls = got.get(f"c{i}.calls")
        g.require(calls is not None and calls.tolist() == list(seeds),
                  f"train was called with seeds {None if calls is None else calls.tolist()}, expected each of "
                  f"{list(seeds)} once, in order [{case}]", at_values)
        g.close(got, f"c{i}.values", "values", exp[f"c{i}.values"], 0.0, case, hint=hints.formula(eid, "values"))
        g.close(got, f"c{i}.mean", "mean", exp[f"c{i}.mean"], 1e-12, case, relative=True)
        values = np.asarray(exp[f"c{i}.values"])
        std = got.get(f"c{i}.std")
        if std is not None and std.shape == () and abs(std - values.std()) < 1e-12 * values.std():
            g.fail(f"std is the population standard deviation (divided by n) [{case}]", at_std,
                   "over a few seeds the sample standard deviation is the unbiased one "
                   f"({g.exercise.section})", hints.formula(eid, "std"), shown_from=2, first=True)
        g.close(got, f"c{i}.std", "std", exp[f"c{i}.std"], 1e-12, case, relative=True, hint=hints.formula(eid, "std"))
        g.close(got, f"c{i}.sem", "sem", exp[f"c{i}.sem"], 1e-12, case, relative=True, hint=hints.formula(eid, "sem"))
        low, high, mean = got.get(f"c{i}.low"), got.get(f"c{i}.high"), got.get(f"c{i}.mean")
        if low is not None and high is not None and mean is not None and low.shape == high.shape == mean.shape == ():
            g.require(low <= mean <= high and abs((mean - low) - (high - mean)) <= 1e-12 * max(1.0, abs(mean)),
                      f"the interval [{float(low):.6g}, {float(high):.6g}] is not centred on the mean "
                      f"{float(mean):.6g} [{case}]", at_interval)
        for key in ("low", "high"):
            g.close(got, f"c{i}.{key}", key, exp[f"c{i}.{key}"], 1e-12, case, relative=True,
                    hint=hints.formula(eid, "interval"), entry=at_interval)


def judge_sampling(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, (z, temperature, top_k, top_p) in enumerate(trusted.sampling_cases()):
        case = f"logits {np.round(z, 2).tolist()}, temperature {temperature}, top_k {top_k}, top_p {top_p}"
        g.close(got, f"c{i}.probs", "next_token_probs", exp[f"c{i}.probs"], 1e-12, case,
                hint=hints.formula(eid, "next_token_probs"))
    for i, probs in enumerate(trusted.SAMPLE_PROBS):
        case = f"probs {probs.tolist()}"
        for key, name in ((f"k{i}", "top_k_filter(probs, 2)"), (f"p{i}", "top_p_filter(probs, 0.6)")):
            g.close(got, key, name, exp[key], 1e-12, case, hint=hints.formula(eid, name))
        name = f"{trusted.DRAWS} draws of sample_from"
        at = g.entry(name, case)
        draws = g.array(got, f"s{i}.draws", name, (trusted.DRAWS,), case, at)
        if draws is None:
            continue
        if not g.require(np.all((draws >= 0) & (draws < probs.size) & (draws == np.round(draws))),
                         f"sample_from returned something other than an id in [0, {probs.size}) [{case}]", at):
            continue
        counts = np.bincount(draws.astype(np.int64), minlength=probs.size)
        g.require(np.all(counts[probs == 0] == 0), f"sample_from drew an id of probability 0 "
                                                   f"({np.flatnonzero((probs == 0) & (counts > 0)).tolist()}) [{case}]",
                  at)
        # With a fixed generator the counts are fixed too; 5 binomial standard deviations is far beyond chance.
        n = trusted.DRAWS
        sd = np.sqrt(n * probs * (1 - probs))
        worst = int(np.argmax(np.abs(counts - n * probs) - 5 * sd))
        g.require(np.all(np.abs(counts - n * probs) <= 5 * sd + 1),
                  f"sample_from drew id {worst} {counts[worst]} times in {n}, expected about {n * probs[worst]:.0f} "
                  f"(5 standard deviations: {5 * sd[worst]:.0f}) [{case}]: draw each id with its probability", at,
                  formula=g._formula(name, hints.formula(eid, "draws")))
        g.record("frequency deviation (in standard deviations)",
                 float(np.max(np.abs(counts - n * probs) / np.maximum(sd, 1e-300), where=sd > 0, initial=0.0)), 5.0)
        g.require(np.array_equal(got.get(f"s{i}.again"), draws[:20]),
                  f"sample_from gave other ids from a generator of the same seed [{case}]: draw with rng, the "
                  f"generator passed in, and nothing else", at)


JUDGES: Dict[str, Callable[[Grader, str, dict, dict], None]] = {
    "pair": judge_pair, "table": judge_table, "attention": judge_attention, "heads": judge_heads, "noam": judge_noam,
    "adam": judge_adam, "clip": judge_clip, "bleu": judge_bleu, "encoder_layer": judge_encoder_layer,
    "decoder_layer": judge_decoder_layer, "greedy": judge_greedy, "beam": judge_beam, "seeds": judge_seeds,
    "sampling": judge_sampling}


# --------------------------------------------------------------------------- #
# Running a check
# --------------------------------------------------------------------------- #

class Result(NamedTuple):
    exercise_id: str
    status: str  # "passed", "not implemented", "failed"
    detail: str  # the text after "... "
    failures: tuple = ()  # every failing measurement, the first one also in detail
    cases: tuple = ()  # (entry, passed, what failed): each scored on its own, the exercise's points split evenly

    @property
    def line(self) -> str:
        head = f"{self.exercise_id} {BY_ID[self.exercise_id].function} ... {self.detail}"
        more = [f"    also: {f}" for f in self.failures[1:MAX_LINES]]
        if len(self.failures) > MAX_LINES:
            more.append(f"    ... and {len(self.failures) - MAX_LINES} more")
        return "\n".join([head, *more])

    @property
    def score(self) -> float:
        """The points this result earns: its exercise's points times the share of entries passed."""
        points = BY_ID[self.exercise_id].points
        if not self.cases:
            return float(points) if self.status == "passed" else 0.0
        return points * sum(passed for _, passed, _ in self.cases) / len(self.cases)


_EXERCISE_IN_MESSAGE = re.compile(r"Exercise (\d+\.\d+)\b")


class Sandbox(NamedTuple):
    """An unprivileged user that the student's process runs as (the grader being root), so that it cannot
    read what only root may: the teacher's library, with every solution, in the autograder's folder."""

    user: str
    uid: int
    gid: int


def sandbox_user(name: str) -> Sandbox:
    """The :class:`Sandbox` of the existing user ``name``; ValueError (one line) if there is none, or if this
    process, not being root, cannot start a process as another user."""
    import pwd

    if os.geteuid() != 0:
        raise ValueError(f"--sandbox-user {name}: only root can run the student's code as another user")
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise ValueError(f"--sandbox-user {name}: no such user (create it with: useradd {name})") from None
    if entry.pw_uid == 0:
        raise ValueError(f"--sandbox-user {name}: expected an unprivileged user, got uid 0")
    return Sandbox(name, entry.pw_uid, entry.pw_gid)


def hand_over(path: Path, sandbox: Sandbox) -> None:
    """Make ``path`` and everything under it the sandbox user's (symbolic links themselves, not their targets)."""
    for p in [path, *path.rglob("*")]:
        os.chown(p, sandbox.uid, sandbox.gid, follow_symlinks=False)


def _end_processes_of(uid: int) -> None:
    """Kill every process of ``uid``: nothing the student's code started outlives its check, to write into
    the next check's folder."""
    import signal

    for _ in range(3):  # a process may fork while the others are killed
        found = False
        for status in Path("/proc").glob("[0-9]*/status"):
            try:
                uids = next(line for line in status.read_text().splitlines() if line.startswith("Uid:")).split()[1:]
                if str(uid) in uids:
                    os.kill(int(status.parent.name), signal.SIGKILL)
                    found = True
            except (OSError, StopIteration, ValueError):
                continue  # a process that ended meanwhile
        if not found:
            return


def _probe(exercise_id: str, student_root: Path, timeout: float, tmp: Path, salt: int, swaps: list,
           sandbox: Optional[Sandbox] = None):
    """Run probe.py on the student's package (as ``sandbox``'s user, if given); (status dict, outputs dict)."""
    outputs, status_path, swaps_path = tmp / "outputs.npz", tmp / "status.json", tmp / "swaps.json"
    # The student's process gets copies of the trusted files, not a path into the grader's install.
    for source in (PROBE_FILE, PROBE_FILE.parent / "trusted.py", PROBE_FILE.parent.parent / "numpytransformer" / "core" / "gradcheck.py"):
        shutil.copyfile(source, tmp / source.name)
    swaps_path.write_text(json.dumps(swaps), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = [sys.executable, "-I", str(tmp / "probe.py"), str(student_root), exercise_id, str(outputs),
           str(status_path), str(salt), str(swaps_path)]
    user = {}
    if sandbox is not None:
        hand_over(tmp, sandbox)
        env.update(HOME=str(tmp), USER=sandbox.user, LOGNAME=sandbox.user)
        user = dict(user=sandbox.uid, group=sandbox.gid, extra_groups=[])
    try:
        proc = subprocess.run(cmd, cwd=tmp, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout, **user)  # no terminal: a breakpoint() or input() fails at once
    except subprocess.TimeoutExpired:
        return {"status": "timeout"}, {}
    finally:
        if sandbox is not None:
            _end_processes_of(sandbox.uid)
    try:
        status = json.loads(status_path.read_text(encoding="utf-8"))
        with np.load(outputs, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    except Exception:  # the process died before writing, or wrote something unreadable
        tail = " ".join((proc.stderr or "").strip().splitlines()[-1:])
        return {"status": "crashed", "message": f"exit code {proc.returncode}" + (f": {tail}" if tail else "")}, {}
    return status, arrays


def depends_on(exercise_id: str) -> List[str]:
    """Every exercise whose code the check of ``exercise_id`` runs: its needs, and theirs."""
    seen: List[str] = []
    todo = list(BY_ID[exercise_id].needs)
    while todo:
        e = todo.pop(0)
        if e != exercise_id and e not in seen:
            seen.append(e)
            todo.extend(BY_ID[e].needs)
    return seen


def grading_order(exercise_ids) -> List[str]:
    """``exercise_ids`` in an order that grades each exercise after every one it depends on.

    A check hands the student's process the reference code of what the exercise depends on
    (:func:`reference_swaps`); graded first, those exercises gain nothing from it.
    """
    order: List[str] = []

    def visit(eid: str) -> None:
        if eid not in order:
            for dep in depends_on(eid):
                if dep in exercise_ids:
                    visit(dep)
            order.append(eid)

    for eid in exercise_ids:
        visit(eid)
    return order


def reference_swaps(exercise_id: str) -> List[dict]:
    """The reference code of every function ``exercise_id`` depends on, for :func:`probe.swap_in`.

    Cut from this grader's own library; a student edition's grader has no reference code,
    so there each check runs the student's own code for what it depends on.
    """
    from .fences import function_source, package_dir

    if reference.REFERENCE_FILE.is_file():
        return []
    root = package_dir().parent
    own = {(BY_ID[exercise_id].file, q) for q in BY_ID[exercise_id].function.split(", ")}
    swaps = []
    for dep in depends_on(exercise_id):
        e = BY_ID[dep]
        text = (root / e.file).read_text(encoding="utf-8")
        module = ".".join(Path(e.file).with_suffix("").parts[1:])
        for qualname in e.function.split(", "):
            if (e.file, qualname) not in own:
                swaps.append({"exercise": dep, "module": module, "qualname": qualname,
                              "source": function_source(text, qualname)})
    return swaps


def _mend_broken_files(exercise_id: str, root: Path, tmp: Path) -> Path:
    """``root``, or a copy of it in ``tmp`` where each file that does not compile is the student edition's
    (this library's, with every solution cut out: the student's process may read it).

    A syntax error in one file would stop the import of the whole package, and with it
    every check; only the exercise whose own file it is should fail for it. What the graded
    exercise needs from the mended file is swapped in by the probe, as always.
    """
    from .fences import package_dir, parse_fences, replace_fences, strip_solution_only, without_fast_forms

    own = package_dir()
    broken = []
    for path in sorted((root / "numpytransformer").rglob("*.py")):
        rel = path.relative_to(root)
        if "exercises" in rel.parts or rel.as_posix() == BY_ID[exercise_id].file or not (own.parent / rel).is_file():
            continue
        try:
            compile(path.read_bytes(), str(path), "exec")
        except (SyntaxError, ValueError):
            broken.append(rel)
    if not broken:
        return root
    copy = tmp / "student"
    shutil.copytree(root / "numpytransformer", copy / "numpytransformer", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for rel in broken:
        text = (own.parent / rel).read_text(encoding="utf-8")
        text = strip_solution_only(replace_fences(text, parse_fences(text, rel.as_posix())))
        if rel == Path("numpytransformer", "core", "fast.py"):
            text = without_fast_forms(text)
        (copy / rel).unlink()
        (copy / rel).write_text(text, encoding="utf-8")
    return copy


def _judge(exercise_id: str, got: dict, exp: dict, level: int) -> Grader:
    g = Grader(exercise_id, level)
    with np.errstate(all="ignore"):
        JUDGES[trusted.PROBES[exercise_id][0]](g, exercise_id, got, exp)
    return g


def _scored(g: Grader, entries: List[str]) -> tuple:
    """(entry, passed, what failed) for each of ``entries``; a failure outside them counts against its case."""
    failures: Dict[str, List[Failure]] = {e: [] for e in entries}
    for entry, fs in g.entries.items():
        if entry not in failures:
            case = entry[entry.find(" ["):] if " [" in entry else None
            entry = next((e for e in entries if case and e.endswith(case)), entries[0])
        failures[entry].extend(fs)
    out = []
    for entry in entries:
        told = [f.render(g.level) for f in failures[entry]]
        if entry not in g.entries:
            out.append((entry, False, "not checked: an earlier failure stopped the check"))
        elif failures[entry]:
            out.append((entry, False, "\n".join(t for t in told if t) or "wrong; check again for the property "
                                                                          "it breaks"))
        else:
            out.append((entry, True, ""))
    return tuple(out)


def run_check(exercise_id: str, student_root=None, timeout: float = DEFAULT_TIMEOUT, salt: int = 0,
              level: int = 3, sandbox: Optional[Sandbox] = None) -> Result:
    """Grade one exercise of the ``numpytransformer`` package in ``student_root`` (default: this one's).

    ``salt`` 0 uses the public cases; any other draws fresh ones (only a full library, which
    computes its reference values live, can grade those). What the exercise depends on runs
    as this library's reference code (:func:`reference_swaps`), so it is graded on its own.
    ``level`` is the hint step told (1, 2 or 3; see :mod:`.hints`). With ``sandbox`` the
    student's process runs as that user, who must be able to read ``student_root``.
    """
    from .fences import package_dir

    reference.require_stored_values()
    if salt and reference.REFERENCE_FILE.is_file():
        raise ValueError("a student edition's grader holds reference values for the public cases only (salt 0)")
    root = Path(student_root).resolve() if student_root is not None else package_dir().parent
    swaps = reference_swaps(exercise_id)
    with tempfile.TemporaryDirectory(prefix="nt-grade-") as tmp:
        if not reference.REFERENCE_FILE.is_file():  # the teacher's grader: a file that does not compile
            # costs only the exercises in it
            root = _mend_broken_files(exercise_id, root, Path(tmp))
        status, got = _probe(exercise_id, root, timeout, Path(tmp), salt, swaps, sandbox)
    previous, trusted.SALT = trusted.SALT, salt
    try:
        exp = reference.expected(exercise_id)
        entries = list(_judge(exercise_id, exp, exp, 3).entries)  # what there is to score: the right answer's
        kind = status.get("status")
        if kind == "ok":
            try:
                g = _judge(exercise_id, got, exp, level)
            except Exception as e:  # outputs so odd that a judge trips over them: a failure, not a crash
                kind, status = "error", {"type": "outputs the grader cannot judge", "message": f"{type(e).__name__}: {e}"}
    finally:
        trusted.SALT = previous

    def failed(detail: str, status_: str = "failed") -> Result:
        return Result(exercise_id, status_, detail, (), tuple((e, False, detail) for e in entries))

    if kind == "timeout":
        return failed(f"FAILED: took longer than {timeout:g} s (the time limit); an endless loop, or a loop over "
                      "every entry where an array operation would do?")
    if kind == "crashed":
        return failed(f"FAILED: the check's process died ({status['message']})")
    if kind == "not implemented":
        m = _EXERCISE_IN_MESSAGE.search(status.get("message", ""))
        if m and m.group(1) != exercise_id:
            return failed(f"not yet implemented (needs Exercise {m.group(1)} first)", "not implemented")
        where = f" (the raise at {status['where']})" if status.get("where") else ""  # code above it is not reached
        return failed("not yet implemented" + where, "not implemented")
    if kind != "ok":
        where = f" (at {status['where']})" if status.get("where") else ""
        return failed(f"FAILED: {status.get('type', 'Error')}: {status.get('message', '')}{where}")
    cases = _scored(g, entries)
    if g.failed():
        failures = g.failures
        if not failures:  # at step 1 a broken property alone is not told yet
            first = next(entry for entry, passed, _ in cases if not passed)
            failures = [f"{first} is wrong; check again for the property it breaks"]
        return Result(exercise_id, "failed", f"FAILED: {failures[0]}", tuple(failures), cases)
    return Result(exercise_id, "passed", g.summary(), (), cases)
