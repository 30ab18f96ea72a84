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
from .trusted import KINK_TOL, SMOOTH_TOL, grad_error, rel_error

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
    if abs(factor - 1) < 1e-6:  # a small error, not a factor: nothing simple to say
        return ""
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
        """A gradient against the expected one, the grader's library's own (``reference.compute``),
        by relative error (absolute for a gradient that is zero up to noise); ``hint`` is told at step 3."""
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
    """Properties the student's own gradients must have, told from the second step on."""
    name, sec = case.name, g.exercise.section
    at = (lambda tensor: g.entry(tensor, name))
    if eid == "2.1":
        d = got.get(f"{pre}c{i}.dlogits")
        g.require(not _text(got, f"{pre}c{i}.cache_changed"),
                  f"backward changed the cache ({_text(got, f'{pre}c{i}.cache_changed')}) [{name}]; "
                  "work on d, which is a copy", at("dlogits"))
        if d is None or d.shape != case.inputs["logits"].shape:
            return
        targets, pad_id = case.static["targets"], case.static["pad_id"]
        d = d.reshape(targets.size, -1)
        valid = np.ones(targets.size, bool) if pad_id is None else targets.ravel() != pad_id
        g.require(np.all(d[~valid] == 0), f"dlogits is not zero in rows whose target is the pad id [{name}]: pad "
                                          f"rows are not in the loss, its z-loss part included", at("dlogits"),
                  formula=hints.formula(eid, "pad rows"), shown_from=2, first=True)
    elif eid == "6.1" and case.static["eps"] == 0:
        dx = got.get(f"{pre}c{i}.dx")
        if dx is None or dx.shape != case.inputs["x"].shape:
            return
        x = case.inputs["x"]
        o = np.abs((dx * x).sum(-1)).max() / max(1e-300, np.abs(dx).max() * np.abs(x).max())
        g.require(o < 1e-8, f"dx is not orthogonal to x (relative {o:.1e}) [{name}]: with eps = 0, scaling a row of "
                            f"x changes nothing ({sec})", at("dx"), formula=hints.formula(eid, "scale"),
                  shown_from=2, first=True)
    elif eid == "3.2":
        dx = got.get(f"{pre}c{i}.dx")
        if dx is None or dx.shape != case.inputs["x"].shape:
            return
        dout = trusted.rng(case.seed).standard_normal(dx.shape)
        lengths = np.hypot(dx[..., 0::2], dx[..., 1::2]) - np.hypot(dout[..., 0::2], dout[..., 1::2])
        g.require(np.abs(lengths).max() < 1e-10, f"dx changes the length of a pair of dout [{name}]: a rotation "
                                                 f"keeps every pair's length ({sec})", at("dx"), shown_from=2)


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
                        relative=True, hint=hints.formula(eid, "out"), entry=entry)
            for name in case.wrt:
                if name is None:
                    continue
                key, formula = f"{pre}c{i}.d{name}", hints.formula(eid, "d" + name)
                if case.tol:
                    g.gradient(got, key, "d" + name, exp[key], case.tol, label, formula)
                else:  # a gradient that is exactly 0
                    g.close(got, key, "d" + name, exp[key], case.tol, label, hint=formula)
            _pair_properties(g, eid, pre, i, case._replace(name=label), got)


def judge_calls(g: Grader, eid: str, got: dict, exp: dict) -> None:
    """Each output of each call against the library's; a list (of chunks, of messages) item by item, the
    messages in sorted order (the probe sorts them: within a step, their order is free)."""
    for i, call in enumerate(trusted.call_cases(eid)):
        for label in call.outputs:
            base, entry = f"c{i}.{label}", g.entry(label, call.name)
            keys = [k for k in exp if (k == base or k.startswith(base + "[")) and not k.endswith("#len")]
            g.touch(entry)
            ok = True
            for lkey in [k for k in exp if k.startswith(base) and k.endswith("#len")]:
                want, have = int(exp[lkey]), (int(got[lkey]) if lkey in got else None)
                what = label + lkey[len(base):-len("#len")]
                if not g.require(have == want, f"{what} has {'no list' if have is None else f'{have} items'}, "
                                               f"expected {want} [{call.name}]", entry):
                    ok = False
            if not ok:
                continue
            for key in keys:
                if not g.close(got, key, label + key[len(base):], exp[key], call.tol, call.name, relative=call.relative,
                               hint=hints.formula(eid, label), entry=entry):
                    break  # the first wrong item of a list says enough
    if eid == "4.1":
        _alibi_properties(g, eid, got, exp)


def _alibi_properties(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, call in enumerate(trusted.call_cases(eid)):
        w, mask = got.get(f"c{i}.weights"), call.args["mask"]
        if w is None or w.shape != exp[f"c{i}.weights"].shape or mask is None:
            continue
        allowed = np.broadcast_to(mask, w.shape)
        g.require(np.all(w[~allowed] == 0), f"weights are not exactly 0 at masked positions [{call.name}]: the bias "
                                            f"is added before the mask, never after", g.entry("weights", call.name),
                  shown_from=2)


def _layer_gradients(g: Grader, eid: str, got: dict, exp: dict, i: int, case: str) -> None:
    """A whole block's gradients in case ``i``, one entry each: the input's (``dx``) and every parameter's."""
    keys = sorted(k for k in exp if k.startswith(f"c{i}.d"))
    names = {key: key.split(".", 1)[1] for key in keys}
    labels = {key: n if n == "dx" else f"gradient of {n[1:]}" for key, n in names.items()}
    for key in keys:  # gradients of another forward say nothing
        g.close(got, f"c{i}.out", "the forward's out", exp[f"c{i}.out"], 1e-10, case, relative=True,
                entry=g.entry(labels[key], case))
    for key in keys:
        g.gradient(got, key, labels[key], exp[key], trusted.ANALYTIC_TOL, case, hints.formula(eid, names[key]))


def judge_block(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, spec in enumerate(trusted.BLOCKS):
        case = (f"d_model {spec['d_model']}, {spec['n_heads']} heads, dropout {spec['dropout']}, {spec['mask']} mask, "
                f"x (2, 4, {spec['d_model']})")
        if eid == "7.2":
            g.close(got, f"c{i}.out", "out", exp[f"c{i}.out"], 1e-10, case, relative=True,
                    hint=hints.formula(eid, "out"))
        else:
            _layer_gradients(g, eid, got, exp, i, case)


def judge_cosine(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, (peak, warmup, min_ratio, total, steps) in enumerate(trusted.cosine_cases()):
        case = f"peak {peak:g}, warmup {warmup}, min_ratio {min_ratio:g}, total {total}, steps {steps[0]}..{steps[-1]}"
        ok = g.close(got, f"c{i}.lr", "lr(step, total)", exp[f"c{i}.lr"], 1e-12, case, relative=True,
                     hint=hints.formula(eid, "lr(step, total)"))
        lr = got.get(f"c{i}.lr")
        if not ok and lr is not None and lr.shape == (len(steps),) and total > warmup:
            after = [s for s in steps if s >= total]
            if after:
                last = float(lr[steps.index(after[-1])])
                g.require(abs(last - min_ratio * peak) <= 1e-12 * peak,
                          f"the rate at step {after[-1]} is {last:.6g}, not the floor min_ratio * peak = "
                          f"{min_ratio * peak:.6g} [{case}]", g.entry("lr(step, total)", case), shown_from=2)


def judge_lion(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, (case, dtype, _, _, _, params, _, tol) in enumerate(trusted.lion_cases()):
        for t in (1, 2, 3):
            for k in params:
                key = f"c{i}.t{t}.{k}"
                at_p, at_m = g.entry(k, case), g.entry(f"m[{k!r}]", case)
                g.require(bool(got.get(key + ".same", False)),
                          f"Lion replaced params[{k!r}] by a new array; update it in place (p -= ...), the model "
                          f"holds the original [{case}]", at_p)
                p = got.get(key + ".p")
                if p is not None:
                    g.require(p.dtype == dtype, f"params[{k!r}] changed dtype to {p.dtype} [{case}]", at_p)
                g.close(got, key + ".p", f"{k} after step {t}", exp[key + ".p"], tol, case, relative=True,
                        hint=hints.formula(eid, "update"), entry=at_p)
                g.close(got, key + ".m", f"m[{k!r}] after step {t}", exp[key + ".m"], tol, case, relative=True,
                        hint=hints.formula(eid, "m"), entry=at_m)


def judge_ema(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, (decay, dtype) in enumerate(trusted.EMA_CASES):
        case = f"decay {decay}, {np.dtype(dtype).name} weights W (3, 4) and b (4,), 3 updates"
        for t in (1, 2, 3):
            for k in ("W", "b"):
                at = g.entry(f"shadow[{k!r}]", case)
                a = got.get(f"c{i}.t{t}.{k}")
                if a is not None:
                    g.require(a.dtype == dtype, f"shadow[{k!r}] changed dtype to {a.dtype} [{case}]", at)
                g.close(got, f"c{i}.t{t}.{k}", f"shadow[{k!r}] after update {t}", exp[f"c{i}.t{t}.{k}"],
                        SMOOTH_TOL if dtype == np.float64 else KINK_TOL, case, relative=True,
                        hint=hints.formula(eid, "shadow"), entry=at)


def judge_gqa_cache(g: Grader, eid: str, got: dict, exp: dict) -> None:
    for i, (H_kv, chunks) in enumerate(trusted.GQA_CACHE_RUNS):
        held = 0
        for j, T in enumerate(chunks):
            case = (f"rotary, {trusted.GQA_CACHE['n_heads']} heads, n_kv_heads {H_kv}, chunks {list(chunks)}: "
                    f"positions {held}..{held + T - 1}")
            g.close(got, f"c{i}.chunk{j}", "out", exp[f"c{i}.chunk{j}"], 1e-10, case, relative=True,
                    hint=hints.formula(eid, "out" if held == 0 else "offset"))
            held += T


JUDGES: Dict[str, Callable[[Grader, str, dict, dict], None]] = {
    "pair": judge_pair, "calls": judge_calls, "block": judge_block, "cosine": judge_cosine, "lion": judge_lion,
    "ema": judge_ema, "gqa_cache": judge_gqa_cache}


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


def reference_swaps(exercise_id: str, graded_with=()) -> List[dict]:
    """The reference code of every function ``exercise_id`` depends on, for :func:`probe.swap_in`.

    Cut from this grader's own library; a student edition's grader has no reference code,
    so there each check runs the student's own code for what it depends on. So does an exercise
    in ``graded_with`` (the other exercises of the same assignment): its reference code must not
    reach the process of a student who is being graded on it.
    """
    from .fences import function_source, package_dir

    if reference.REFERENCE_FILE.is_file():
        return []
    root = package_dir().parent
    own = {(BY_ID[exercise_id].file, q) for q in BY_ID[exercise_id].function.split(", ")}
    swaps = []
    for dep in depends_on(exercise_id):
        if dep in graded_with:
            continue
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
              level: int = 3, sandbox: Optional[Sandbox] = None, graded_with=()) -> Result:
    """Grade one exercise of the ``numpytransformer`` package in ``student_root`` (default: this one's).

    ``salt`` 0 uses the public cases; any other draws fresh ones (only a full library, which
    computes its reference values live, can grade those). What the exercise depends on runs
    as this library's reference code (:func:`reference_swaps`), so it is graded on its own.
    ``level`` is the hint step told (1, 2 or 3; see :mod:`.hints`). With ``sandbox`` the
    student's process runs as that user, who must be able to read ``student_root``. The
    exercises in ``graded_with`` run as the student's own code (:func:`reference_swaps`).
    """
    from .fences import package_dir

    reference.require_stored_values()
    if salt and reference.REFERENCE_FILE.is_file():
        raise ValueError("a student edition's grader holds reference values for the public cases only (salt 0)")
    root = Path(student_root).resolve() if student_root is not None else package_dir().parent
    swaps = reference_swaps(exercise_id, graded_with)
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
