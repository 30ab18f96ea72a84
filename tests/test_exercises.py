"""The classroom exercises: fences in the library, the student edition, and the grader.

The grader must pass every exercise on the full library, report every exercise of a fresh
student edition as not yet implemented (and nothing as failed), and name every wrong tensor
when a student's code is wrong. Student editions are built into tmp_path and graded in a
subprocess, as a student (from the edition's folder) or a teacher (``--student``) runs it.
The grader's reference values come from the library itself, so the library is checked here
against independent plain references (ALiBi attention row by row, the slopes, the cosine
formula, textbook Lion, heads by repetition), which stay out of the student edition.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from course import BY_ID, EXERCISES, trusted
from course.catalog import CATALOG, LESSONS, PROJECTS
from course.__main__ import main
from course.checks import JUDGES, Grader, diagnose, run_check
from course.fences import (
    BuildError,
    FenceError,
    build_edition,
    enclosing_function,
    library_fences,
    package_dir,
    parse_fences,
    placeholder,
    replace_fences,
    without_fast_forms,
)
from course.reference import compute

ROOT = package_dir().parent
IDS = [e.id for e in EXERCISES]
#: Exercises whose solution is split over several fences (several functions), and how many.
FENCE_COUNTS = {"2.1": 2}


def _env():
    """The subprocess finds numpytransformer only through its working directory."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


def _run(args, cwd, timeout=300):
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, env=_env(),
                          timeout=timeout)


def _check_lines(stdout: str):
    """The first line of each exercise's report (no header, no summary, no "also:" lines)."""
    return [line for line in stdout.splitlines() if line.split(" ")[0] in BY_ID]


# ---- fences -------------------------------------------------------------------------------
def test_every_fence_has_a_check_and_every_check_a_fence():
    assert {f.id for f in library_fences()} == set(IDS)
    assert set(trusted.PROBES) == set(IDS)
    assert {kind for kind, _, _ in trusted.PROBES.values()} <= set(JUDGES)
    assert IDS == sorted(IDS, key=lambda i: tuple(map(int, i.split("."))))
    for e in CATALOG:
        assert e.difficulty in ("easy", "medium", "hard") and e.minutes > 0 and e.points > 0 and e.section, e
        assert e.kind == "exercise" and e.section.startswith("sibling of lesson ") or e.kind == "project", e


def test_the_catalog_is_the_plan():
    """25 autograded siblings and a teacher-graded project; INSTRUCTOR.md's tables state the catalog's minutes and
    points, and each lesson's exercise list its difficulty, minutes and points."""
    assert len(EXERCISES) == 25 and [p.id for p in PROJECTS] == ["P"] and PROJECTS[0].kind == "project"
    guide = (ROOT / "lessons" / "INSTRUCTOR.md").read_text(encoding="utf-8")
    for n, es in LESSONS.items():
        row = re.search(rf"^\| {n} [^|]+\| ([^|]+) \| (\d+) \| (\d+) \|$", guide, re.MULTILINE)
        assert row, f"INSTRUCTOR.md has no row for lesson {n}"
        assert row.groups() == (", ".join(e.id for e in es), str(sum(e.minutes for e in es)),
                                str(sum(e.points for e in es))), (n, row.groups())
    for e in EXERCISES:
        assert re.search(rf"{re.escape(e.id)} [^;|]+ \({e.minutes}, {e.points}\)", guide), f"week plan: {e.id}"
        notebook = next((ROOT / "lessons").glob(f"{e.lesson:02d}_*.ipynb")).read_text(encoding="utf-8")
        assert f"**Exercise {e.id} — `{e.function}`** (`{e.file}`; {e.difficulty}, about {e.minutes} minutes, " \
               f"{e.points} points)" in notebook, e.id
    points = sum(e.points for e in EXERCISES)
    assert f"{points} points (lessons 1-6: {sum(e.points for e in EXERCISES if e.lesson <= 6)}, lessons 7-13: " \
           f"{sum(e.points for e in EXERCISES if e.lesson >= 7)}" in " ".join(guide.split())


def test_fences_sit_where_the_catalog_says():
    by_id = {}
    for f in library_fences():
        by_id.setdefault(f.id, []).append(f)
    for e in EXERCISES:
        fences = by_id[e.id]
        assert len(fences) == FENCE_COUNTS.get(e.id, 1), e.id
        functions = []
        for f in fences:
            assert f.path == e.file and f.title == e.title, f
            functions.append(enclosing_function((ROOT / f.path).read_text(encoding="utf-8"), f.begin))
        assert ", ".join(functions) == e.function


def test_library_fences_are_well_formed():
    """Every BEGIN has an END at its indentation, nothing nests, no marker is misspelt."""
    for path in sorted(package_dir().rglob("*.py")):
        if "exercises" in path.relative_to(package_dir()).parts:
            continue
        text = path.read_text(encoding="utf-8")
        fences = parse_fences(text, str(path))
        lines = text.splitlines()
        for f in fences:
            assert lines[f.begin - 1].strip().startswith("### BEGIN SOLUTION")
            assert lines[f.end - 1].strip() == "### END SOLUTION"
        assert text.count("### BEGIN SOLUTION") == text.count("### END SOLUTION") == len(fences)


@pytest.mark.parametrize("text, message", [
    ("    ### BEGIN SOLUTION 1.1: a\n    ### BEGIN SOLUTION 1.2: b\n    ### END SOLUTION\n", "do not nest"),
    ("    x = 1\n    ### END SOLUTION\n", "without a BEGIN"),
    ("    ### BEGIN SOLUTION 1.1: a\n    x = 1\n", "never closed"),
    ("    ### BEGIN SOLUTION 1.1: a\n  ### END SOLUTION\n", "indented differently"),
    ("    ### BEGIN SOLUTION 1.1: a\nx = 1\n    ### END SOLUTION\n", "indented less"),
    ("    ## BEGIN SOLUTION 1.1: a\n", "malformed"),
    ("    ### BEGIN SOLUTION: a\n", "malformed"),
])
def test_malformed_fences_are_errors(text, message):
    with pytest.raises(FenceError, match=message):
        parse_fences(text, "f.py")


def test_replace_fences_keeps_indentation_and_the_code_after():
    text = ("def f(x):\n    \"\"\"Doc.\"\"\"\n    ### BEGIN SOLUTION 4.2: dq, dk and dv\n    y = x * 2\n"
            "    ### END SOLUTION\n    return y\n")
    fences = parse_fences(text)
    out = replace_fences(text, fences)
    assert out == ("def f(x):\n    \"\"\"Doc.\"\"\"\n"
                   "    raise NotImplementedError(\"Exercise 4.2: dq, dk and dv (lesson 4; "
                   "check: python -m course check 4.2)\")\n    return y\n")
    assert placeholder(fences[0]).startswith("    raise NotImplementedError(\"Exercise 4.2: ")
    compile(out, "f.py", "exec")


# ---- the grader's references are right (independent plain computations) -------------------
def test_reference_alibi_is_attention_with_a_bias_on_distance():
    ref = compute("4.1")
    for i, call in enumerate(trusted.call_cases("4.1")):
        a = call.args
        T, S = a["q"].shape[-2], a["k"].shape[-2]
        i_pos = a.get("offset", 0) + np.arange(T)
        bias = -a["slopes"][:, None, None] * (i_pos[:, None] - np.arange(S)[None, :])  # (H, T, S)
        out, weights = _reference_attention_biased(a["q"], a["k"], a["v"], a["mask"], bias)
        np.testing.assert_allclose(ref[f"c{i}.out"], out, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(ref[f"c{i}.weights"], weights, rtol=1e-9, atol=1e-12)


def _reference_attention_biased(q, k, v, mask, bias):
    """Attention row by row with a bias added to the scores, softmax over the allowed keys only."""
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]) + bias
    allowed = np.ones(scores.shape, bool) if mask is None else np.broadcast_to(mask, scores.shape)
    weights = np.zeros_like(scores)
    for idx in np.ndindex(*scores.shape[:-1]):
        ok = allowed[idx]
        if ok.any():
            e = np.exp(scores[idx][ok] - scores[idx][ok].max())
            weights[idx][ok] = e / e.sum()
    return weights @ v, weights


def test_reference_slopes_cosine_and_heads_follow_their_formulas():
    ref = compute("4.2")
    for i, call in enumerate(trusted.call_cases("4.2")):
        H = call.args["n_heads"]
        np.testing.assert_allclose(ref[f"c{i}.slopes"], [2 ** (-8 * h / H) for h in range(1, H + 1)], rtol=1e-15)
    ref = compute("8.1")
    for i, (peak, w, r, total, steps) in enumerate(trusted.cosine_cases()):
        def lr(s):
            s = max(s, 1)
            if s <= w:
                return peak * s / w
            p = min(1.0, (s - w) / max(total - w, 1))
            return r * peak + 0.5 * (peak - r * peak) * (1 + math.cos(math.pi * p))
        np.testing.assert_allclose(ref[f"c{i}.lr"], [lr(s) for s in steps], rtol=1e-12, atol=0)
    ref = compute("5.1")
    for i, call in enumerate(trusted.call_cases("5.1")):
        x, G = call.args["x"], call.args["group"]
        assert np.array_equal(ref[f"c{i}.out"], np.stack([x[:, h // G] for h in range(x.shape[1] * G)], axis=1))


def test_reference_lion_is_textbook_lion():
    ref = compute("8.2")
    for i, (_, dtype, lr, (b1, b2), wd, params, grads_per_step, tol) in enumerate(trusted.lion_cases()):
        p = {k: v.astype(np.float64) for k, v in params.items()}
        m = {k: np.zeros_like(v) for k, v in p.items()}
        for t, grads in enumerate(grads_per_step, start=1):
            rate = 0.05 / t if lr == "0.05/t" else lr
            for k in p:
                g = grads[k].astype(np.float64)
                if p[k].ndim >= 2:
                    p[k] = p[k] * (1 - rate * wd)
                p[k] = p[k] - rate * np.sign(b1 * m[k] + (1 - b1) * g)
                m[k] = b2 * m[k] + (1 - b2) * g
                np.testing.assert_allclose(ref[f"c{i}.t{t}.{k}.p"], p[k], rtol=tol * 10, atol=1e-6 if dtype == np.float32 else 1e-12)
                np.testing.assert_allclose(ref[f"c{i}.t{t}.{k}.m"], m[k], rtol=tol * 10, atol=1e-12)


def test_reference_gradients_are_finite_differences_of_the_library():
    """The backward passes' expected gradients are the library's analytic ones, and on every case the grader
    draws they agree with centred differences of the library's forward (the tests' check, on these cases)."""
    pairs = [(e, j) for e, (kind, _, names) in trusted.PROBES.items() if kind == "pair" for j in range(len(names) // 2)]
    assert len(pairs) == 7  # 1.1, 1.2, 2.1, 3.2, 5.2, 6.1, 6.2
    for exercise_id, j in pairs:
        ref = compute(exercise_id)
        _, module, names = trusted.PROBES[exercise_id]
        lib = __import__(f"numpytransformer.{module}", fromlist=["x"])
        forward, backward = getattr(lib, names[2 * j]), getattr(lib, names[2 * j + 1])
        pre = "f1." if j else ""
        for i, case in enumerate(trusted.pair_cases(exercise_id)):
            inputs = {k: v.copy() for k, v in case.inputs.items()}
            out, cache = forward(**inputs, **case.static)
            dout = trusted.rng(case.seed).standard_normal(np.shape(out))
            grads = backward(dout.copy(), cache)
            grads = grads if isinstance(grads, tuple) else (grads,)
            for name, g in zip(case.wrt, grads):
                if name is None:
                    continue
                np.testing.assert_array_equal(ref[f"{pre}c{i}.d{name}"], g)
                numeric = trusted.numerical_gradient(lambda: forward(**inputs, **case.static)[0], inputs[name], dout)
                assert trusted.grad_error(g, numeric)[1] < trusted.KINK_TOL, (exercise_id, i, name)


#: (exercise, a line of its fence, a numerical gradient of the forward in its place, a copy of the forward's code)
NUMERICAL = [
    ("1.1", "dgate = np.exp(-0.5 * x ** 2) / math.sqrt(2.0 * math.pi)  # the normal density phi(x)\n        dx = dout * (cache.gate + x * dgate)",
     "f, h = (lambda v: gelu_forward(v)[0]), 1e-5\n        dx = dout * (f(x + h) - f(x - h)) / (2 * h)",
     "def _copy(x):\n    return x * 0.5 * (1.0 + erf(x / math.sqrt(2.0))), None\n"),
    ("6.1", "    dx = rrms * (g - xhat * (g * xhat).mean(axis=-1, keepdims=True))",
     "    x, dx, h = xhat / rrms, np.empty_like(xhat), 1e-5\n"
     "    for idx in np.ndindex(*x.shape):\n"
     "        xp, xm = x.copy(), x.copy()\n"
     "        xp[idx] += h\n"
     "        xm[idx] -= h\n"
     "        dx[idx] = ((rmsnorm_forward(xp, gamma)[0] - rmsnorm_forward(xm, gamma)[0]) * dout).sum() / (2 * h)",
     "def _copy(x, gamma, eps=1e-5):\n    return gamma * x / np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + eps), None\n"),
]


@pytest.mark.parametrize("exercise_id, old, new, copy", NUMERICAL, ids=[n[0] for n in NUMERICAL])
def test_a_numerical_gradient_is_not_a_backward(tmp_path, exercise_id, old, new, copy):
    """A backward that runs its forward, however it reaches it, is refused; centred differences of a copy
    of the forward's code miss the analytic gradients by far more than the tolerance (a higher-order
    stencil or a complex step on such a copy can pass: INSTRUCTOR.md says so, and makes the points of
    a backward count only with its derivation)."""
    forward, backward = trusted.PROBES[exercise_id][2][:2]
    refused = f"RuntimeError: {backward} called {forward}"
    result = _graded_with(tmp_path, exercise_id, old, new)
    assert result.status == "failed" and refused in result.line, result.line
    result = _graded_with(tmp_path, exercise_id, old, new.replace(f"{forward}(", "_same("),
                          append=f"\n_same = {forward}\n")
    assert result.status == "failed" and refused in result.line, result.line
    result = _graded_with(tmp_path, exercise_id, old, new.replace(f"{forward}(", "_held[0]("),
                          append=f"\n_held = ({forward},)\n")  # held where no name points at it
    assert result.status == "failed" and refused in result.line, result.line
    result = _graded_with(tmp_path, exercise_id, old, new.replace(f"{forward}(", "_made("),
                          append=f"\n_made = type({forward})({forward}.__code__, globals())\n")  # its code, anew
    assert result.status == "failed" and refused in result.line, result.line
    result = _graded_with(tmp_path, exercise_id, old, new.replace(f"{forward}(", "_copy("), append="\n\n" + copy)
    assert result.status == "failed" and "relative error" in "\n".join(result.failures), result.line
    errors = [float(m) for m in re.findall(r"relative error ([0-9.e+-]+) \(tolerance 1e-12\)", "\n".join(result.failures))]
    assert errors and min(errors) > 10 * trusted.ANALYTIC_TOL, result.failures


#: (exercise, a line of its fence, the same gradient derived another way)
OTHERWISE = [
    ("1.1", "dgate = np.exp(-0.5 * x ** 2) / math.sqrt(2.0 * math.pi)  # the normal density phi(x)\n        dx = dout * (cache.gate + x * dgate)",
     "dx = dout * cache.gate + dout * x * np.exp(-x * x / 2) * (2 * math.pi) ** -0.5"),
    ("1.2", "dgate = 0.5 * (1.0 - th ** 2) * TANH_C * (1.0 + 3.0 * TANH_K * x ** 2)  # the chain rule through tanh(u(x))\n        dx = dout * (cache.gate + x * dgate)",
     "dx = dout * cache.gate + (dout * x) * (0.5 * TANH_C) * (1 - th * th) * (1 + 3 * TANH_K * x * x)"),
    ("6.1", "dx = rrms * (g - xhat * (g * xhat).mean(axis=-1, keepdims=True))",
     "x = xhat / rrms\n    dx = g * rrms - x * rrms ** 3 * (g * x).sum(axis=-1, keepdims=True) / D"),
]


@pytest.mark.parametrize("exercise_id, old, new", OTHERWISE, ids=[o[0] for o in OTHERWISE])
def test_a_backward_derived_another_way_passes(tmp_path, exercise_id, old, new):
    """The tolerance of the backward passes is far below finite differences, yet leaves room for the
    rounding of another correct derivation."""
    result = _graded_with(tmp_path, exercise_id, old, new)
    assert result.status == "passed", result.line


def test_trusted_measure():
    assert trusted.rel_error(np.zeros(3), np.zeros(3)) == 0.0
    assert trusted.rel_error(np.array([1.0, 2.0]), np.array([1.0, 4.0])) == 0.5
    assert trusted.grad_error(np.array([1e-9]), np.array([0.0])) == ("absolute error", 1e-9)
    x = np.array([0.3, -1.2])
    numeric = trusted.numerical_gradient(lambda: np.sin(x), x, np.array([1.0, 2.0]))
    np.testing.assert_allclose(numeric, np.cos([0.3, -1.2]) * [1.0, 2.0], rtol=1e-9)


def test_diagnose_names_simple_relations():
    e = np.arange(1.0, 7.0).reshape(2, 3)
    assert diagnose(2 * e, e) == "it is the right one times 2"
    assert diagnose(-e, e) == "the sign is flipped"
    assert diagnose(np.zeros_like(e), e) == "it is all zeros"
    sq = np.arange(1.0, 10.0).reshape(3, 3)
    assert diagnose(sq.T, sq) == "it is the transpose of the right one"
    assert diagnose(e + 1, e) == ""


def test_grader_reports_every_failing_tensor_with_the_properties():
    """An RMSNorm dx without its scale term: named as missing, dgamma's factor too, every case listed."""
    from course import probe

    exp = compute("6.1")
    got = {k: v.copy() for k, v in exp.items()}
    for i, case in enumerate(trusted.pair_cases("6.1")):
        x, gamma = case.inputs["x"], case.inputs["gamma"]
        dout = trusted.rng(case.seed).standard_normal(x.shape)
        got[f"c{i}.dx"] = dout * gamma / np.sqrt((x ** 2).mean(-1, keepdims=True) + case.static["eps"])
        got[f"c{i}.dgamma"] = 2 * exp[f"c{i}.dgamma"]
    grader = Grader("6.1")
    JUDGES["pair"](grader, "6.1", got, exp)
    text = "\n".join(grader.failures)
    assert "dx is not orthogonal to x" in text and "root mean square, missing?" in text and "lesson 6 §2" in text
    assert text.count("dx: relative error") == 3 and text.count("dgamma: relative error") == 3
    assert "it is the right one times 2" in text
    assert probe.pair_prefix(0) == ""


# ---- the command line on the full library ---------------------------------------------------
def test_check_passes_every_exercise_on_the_full_library(capsys, tmp_path):
    results = tmp_path / "results.json"
    assert main(["check", "--json", str(results)]) == 0
    lines = _check_lines(capsys.readouterr().out)
    assert [line.split(" ")[0] for line in lines] == IDS
    for line in lines:
        assert " ... passed (" in line, line
    doc = json.loads(results.read_text())
    assert doc["score"] == doc["max_score"] == sum(e.points for e in EXERCISES)
    assert list(dict.fromkeys(t["number"].rsplit(".", 1)[0] for t in doc["tests"])) == IDS  # one test per case
    assert len(doc["tests"]) > 3 * len(IDS)
    assert all(t["status"] == "passed" and t["score"] == t["max_score"] > 0 for t in doc["tests"])


def test_check_selects_an_exercise_or_a_lesson(capsys):
    assert main(["check", "4.2"]) == 0
    assert [line.split(" ")[0] for line in _check_lines(capsys.readouterr().out)] == ["4.2"]
    assert main(["check", "8"]) == 0
    assert [line.split(" ")[0] for line in _check_lines(capsys.readouterr().out)] == ["8.1", "8.2", "8.3"]
    assert main(["check", "P"]) == 0
    assert "graded by your teacher with the rubric in lessons/PROJECT.md" in capsys.readouterr().out


@pytest.mark.parametrize("argv, fragment", [
    (["check", "9.9"], "'9.9'"),
    (["check", "14"], "'14'"),
    (["check", "four"], "'four'"),
])
def test_bad_exercise_ids_give_a_one_line_error(capsys, argv, fragment):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert fragment in err and "1.1, 1.2" in err and "10.1" in err


@pytest.mark.parametrize("argv", [[], ["frobnicate"], ["build"], ["check", "1.1", "1.2"],
                                  ["check", "--timeout", "x"]])
def test_bad_commands_give_a_one_line_error(capsys, argv):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv, fragment", [
    (["check", "1.1", "--student", "/nonexistent"], "holds no numpytransformer"),
    (["check", "1.1", "--timeout", "0"], "--timeout must be a positive"),
])
def test_bad_check_options_give_a_one_line_error(capsys, argv, fragment):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and fragment in err


def test_list_prints_every_exercise(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for e in CATALOG:
        assert e.id in out and e.file in out and e.title in out and f"{e.points} points" in out
    assert "graded by your teacher" in out


def test_build_refuses_a_non_empty_directory_and_unknown_solved_ids(tmp_path, capsys):
    (tmp_path / "something").write_text("x")
    assert main(["build", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "not empty" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["something"]
    assert main(["build", str(tmp_path / "new"), "--solved", "1.1,9.9"]) == 2
    assert "9.9" in capsys.readouterr().err and not (tmp_path / "new").exists()


# ---- the student edition --------------------------------------------------------------------
@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    out = tmp_path_factory.mktemp("student") / "edition"
    build_edition(out)
    return out


def _solution_lines():
    """(exercise, where, line) for each statement of each solution body in the library.

    Comments, short lines, checks (``assert``, ``print``) and bare control flow (``if ...:``, ``for ...:``,
    ``return ...``) say nothing about the solution on their own; every other line (an assignment, a
    computation, a sentence of code in markdown) must not survive in the student edition.
    """
    def significant(line):
        s = " ".join(line.split())
        return (len(s) >= 16 and not s.startswith(("#", "if ", "for ", "return ", "else", "elif ", "<!--", "assert ",
                                                    "print("))
                and s not in ("### STUDENT EDITION",))

    fences = library_fences()
    inside = {(f.path, n) for f in fences for n in range(f.begin, f.end + 1)}
    outside = {" ".join(line.split()) for path in sorted(package_dir().rglob("*.py"))
               for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
               if (path.relative_to(ROOT).as_posix(), n) not in inside}
    for f in fences:
        for line in (ROOT / f.path).read_text(encoding="utf-8").splitlines()[f.begin:f.end - 1]:
            if significant(line) and " ".join(line.split()) not in outside:  # a line a lesson pair shares is no leak
                yield f.id, f.path, " ".join(line.split())


def _edition_texts(edition_dir: Path):
    for p in sorted(edition_dir.rglob("*")):
        if p.suffix in (".py", ".md", ".txt", ".cfg", ".toml"):
            yield p, p.read_text(encoding="utf-8")
        elif p.suffix == ".ipynb":
            cells = json.loads(p.read_text(encoding="utf-8"))["cells"]
            yield p, "\n".join("".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells)


def test_edition_holds_no_solution_body(edition):
    """Grep the student edition for every line of every solution: none may remain."""
    texts = [(p, {" ".join(line.split()) for line in text.splitlines()} | {" ".join(text.split())})
             for p, text in _edition_texts(edition)]
    lines = list(_solution_lines())
    assert len(lines) > 40
    leaks = []
    for exercise_id, where, line in lines:
        for p, normalised in texts:
            if line in normalised or any(line in t for t in normalised if len(t) > 200):
                leaks.append(f"{exercise_id} ({where}): {line!r} in {p.relative_to(edition)}")
    assert not leaks, "\n".join(leaks)


def test_edition_holds_the_repository_without_solutions(edition):
    for name in ("EXERCISES.md", "README.md", "setup.cfg", "pyproject.toml", "data/README.md",
                 "numpytransformer/__init__.py", "numpytransformer/datasets/__init__.py",
                 "course/reference.npz",
                 "benchmarks/results/sweep-reverse-seq2seq.json", "lessons/11_ablation.ipynb",
                 "docs/cli.md", "docs/teaching.md", "benchmarks/RESULTS.md"):
        assert (edition / name).is_file(), name
    assert not (edition / "tests").exists()
    assert not (edition / "lessons" / "INSTRUCTOR.md").exists()        # the answer keys stay with the teacher
    assert not (edition / "lessons" / "GRADESCOPE.md").exists()        # and how the autograder is set up
    assert not list(edition.rglob("__pycache__"))
    assert library_fences(edition / "numpytransformer") == []
    for path in (ROOT / "lessons").glob("*.ipynb"):  # the lessons stay whole
        assert (edition / "lessons" / path.name).read_bytes() == path.read_bytes(), path.name
    placeholders = sum(p.read_text(encoding="utf-8").count("raise NotImplementedError(\"Exercise ")
                       for p in (edition / "numpytransformer").rglob("*.py") if "exercises" not in p.parts)
    assert placeholders == len(library_fences())
    for src in (ROOT / "course").glob("*.py"):  # the grader is copied unchanged, but for its last hints
        copy = (edition / "course" / src.name).read_bytes()
        assert (copy == src.read_bytes()) == (src.name != "hints.py"), src.name
    guide = (edition / "EXERCISES.md").read_text(encoding="utf-8")
    for e in EXERCISES:
        assert f"check {e.id}`" in guide and e.title in guide and f"| {e.minutes} min | {e.points} |" in guide
    assert "lessons/PROJECT.md" in guide and PROJECTS[0].title in guide
    assert "pip install -e ." in guide and "--student" in guide and "results.json" in guide


@pytest.fixture(scope="module")
def guided_edition(tmp_path_factory):
    out = tmp_path_factory.mktemp("guided") / "edition"
    assert main(["build", str(out), "--guided"]) == 0
    return out


@pytest.mark.parametrize("which", ["edition", "guided_edition"])
def test_an_edition_without_its_reference_file_refuses_to_grade(which, request, tmp_path):
    """Without the stored values the grader would compute them from the student's own code and grade
    that code against itself: it refuses, in one line naming the file, before running any of it."""
    copy = tmp_path / "edition"
    shutil.copytree(request.getfixturevalue(which), copy)
    (copy / "course" / "reference.npz").unlink()
    r = _run(["-m", "course", "check", "1.1"], copy)
    assert r.returncode == 2 and not r.stdout, r.stdout + r.stderr
    assert "reference.npz is missing" in r.stderr and len(r.stderr.splitlines()) == 1
    code = ("from course import checks\n"
            "checks._probe = None  # a probe would be a TypeError: the refusal comes first\n"
            "checks.run_check('1.1')")
    r = _run(["-c", code], copy)
    assert r.returncode == 1 and "FileNotFoundError" in r.stderr and "reference.npz is missing" in r.stderr


def test_edition_reports_every_exercise_not_yet_implemented(edition):
    r = _run(["-m", "course", "check"], edition)
    assert r.returncode == 1, r.stdout + r.stderr
    assert str((edition / "numpytransformer").resolve()) in r.stdout.splitlines()[0]
    lines = _check_lines(r.stdout)
    assert [line.split(" ")[0] for line in lines] == IDS
    assert "FAILED" not in r.stdout and not r.stderr
    for line in lines:
        exercise_id = line.split(" ")[0]
        detail = line.split(" ... ", 1)[1]
        assert detail.startswith("not yet implemented (the raise at numpytransformer/") or (
            detail.startswith("not yet implemented (needs Exercise ")
            and detail.split("Exercise ")[1].split(" ")[0] in BY_ID[exercise_id].needs), line
    assert f"0 of {len(IDS)} exercises passed (0 of {sum(e.points for e in EXERCISES)} points)" in r.stdout


def test_build_refuses_to_run_from_a_student_edition(edition, tmp_path):
    r = _run(["-m", "course", "build", str(tmp_path / "again")], edition)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "no fence" in r.stderr
    assert not (tmp_path / "again").exists()
    r = _run(["-m", "course", "gradescope", str(tmp_path / "week.zip"), "--exercises", "6.1"], edition)
    assert r.returncode == 2 and not (tmp_path / "week.zip").exists()
    assert len(r.stderr.strip().splitlines()) == 1 and "this folder is a student edition" in r.stderr, r.stderr


def _fence_code(exercise_id: str) -> str:
    """The reference code of a (single) fence, as written in the library."""
    (fence,) = [f for f in library_fences() if f.id == exercise_id]
    lines = (ROOT / fence.path).read_text(encoding="utf-8").splitlines(keepends=True)
    return "".join(lines[fence.begin:fence.end - 1])


def _implement(edition_dir: Path, exercise_id: str, code: str) -> None:
    """Put ``code`` where the student edition raises for ``exercise_id``."""
    path = edition_dir / BY_ID[exercise_id].file
    text = path.read_text(encoding="utf-8")
    (line,) = [ln for ln in text.splitlines(keepends=True) if f"Exercise {exercise_id}:" in ln]
    path.write_text(text.replace(line, code), encoding="utf-8")


def test_a_student_implementation_is_graded(tmp_path):
    """Right code passes; a wrong formula fails with the tensor named, in the student's and the teacher's run."""
    edition_dir = tmp_path / "edition"
    build_edition(edition_dir)
    right = _fence_code("6.1")
    assert "dgamma = (dout * xhat).reshape(-1, D).sum(axis=0)" in right
    _implement(edition_dir, "6.1", right)
    r = _run(["-m", "course", "check", "6.1"], edition_dir)
    assert r.returncode == 0 and "6.1 rmsnorm_backward ... passed" in r.stdout, r.stdout

    wrong = right.replace("dgamma = (dout * xhat)", "dgamma = 2 * (dout * xhat)")
    shutil.rmtree(edition_dir)
    build_edition(edition_dir)
    _implement(edition_dir, "6.1", wrong)
    for args, cwd in ((["check", "6", "--hints", "property"], edition_dir),
                      (["check", "6", "--student", str(edition_dir), "--hints", "property"], ROOT)):
        r = _run(["-m", "course", *args], cwd)
        assert r.returncode == 1
        lines = _check_lines(r.stdout)
        assert lines[0].startswith("6.1 rmsnorm_backward ... FAILED: dgamma: relative error 5.0e-01 (tolerance 1e-12)")
        assert "it is the right one times 2" in lines[0]
        assert r.stdout.count("also: dgamma: relative error 5.0e-01") == 2   # every case, not just the first
        assert lines[1].startswith("6.2 swiglu_backward ... not yet implemented (the raise at numpytransformer/core/swiglu.py:")


def test_what_students_and_teachers_get_wrong_gets_a_clear_answer(tmp_path):
    """Code written above the raise is pointed at the raise; a leftover input() or breakpoint()
    fails at once (no terminal), not at the time limit; a student edition's grader refuses to
    grade others; a --json path that cannot be written and an infinite --timeout are refused
    before any grading."""
    edition_dir = tmp_path / "edition"
    build_edition(edition_dir)
    path = edition_dir / BY_ID["6.1"].file
    (line,) = [ln for ln in path.read_text().splitlines(keepends=True) if "Exercise 6.1:" in ln]
    path.write_text(path.read_text().replace(line, _fence_code("6.1") + line))  # the solution, then the raise
    _implement(edition_dir, "6.2", "    input()\n")
    p = subprocess.Popen([sys.executable, "-m", "course", "check", "6", "--timeout", "20"],
                         cwd=edition_dir, env=_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    out = p.stdout.read()  # the grader's stdin stays open, like a terminal nobody types into
    p.wait(timeout=60)
    p.stdin.close()
    lines = _check_lines(out)
    assert lines[0].startswith("6.1 rmsnorm_backward ... not yet implemented (the raise at numpytransformer/core/rmsnorm.py:")
    assert lines[1].startswith("6.2 swiglu_backward ... FAILED: EOFError"), out
    for args, message in ((["check", "6.1", "--student", str(edition_dir)], "this is a student edition's grader"),
                          (["check", "6.1", "--timeout", "inf"], "--timeout must be a positive number")):
        r = _run(["-m", "course", *args], edition_dir)
        assert r.returncode == 2 and message in r.stderr, r.stderr
    r = _run(["-m", "course", "check", "6.1", "--student", str(edition_dir), "--json",
              str(tmp_path / "missing" / "r.json")], ROOT)
    assert r.returncode == 2 and "--json" in r.stderr and "Grading" not in r.stdout


def test_solved_releases_chosen_solutions(tmp_path, capsys):
    edition_dir = tmp_path / "edition"
    assert main(["build", str(edition_dir), "--solved", "3.1,6.1"]) == 0
    assert "the solutions of 3.1, 6.1 released" in capsys.readouterr().out
    r = _run(["-m", "course", "check", "3"], edition_dir)
    lines = _check_lines(r.stdout)
    assert lines[0].startswith("3.1 rotary_forward ... passed"), r.stdout
    assert lines[1].startswith("3.2 rotary_backward ... not yet implemented (the raise at")  # no longer waits
    assert "### BEGIN SOLUTION" not in (edition_dir / "numpytransformer" / "core" / "rotary.py").read_text()
    assert "3.1 (released)" in (edition_dir / "EXERCISES.md").read_text()


def test_the_edition_trains_on_the_students_pairs_not_the_fast_forms(tmp_path):
    """The edition's fast.py has the switch but no fast forms (they hold solutions), and is off even
    with NUMPYTRANSFORMER_FAST=1: with every solution but 6.1 released, a module's backward reaches the
    student's rmsnorm_backward (and its raise)."""
    edition_dir = tmp_path / "edition"
    build_edition(edition_dir, solved=[e.id for e in EXERCISES if e.id != "6.1"])
    code = ("import numpy as np\n"
            "from numpytransformer import fast\n"
            "from numpytransformer.core.fast import *  # __all__ names only what the edition's fast.py holds\n"
            "from numpytransformer.nn.modules import RMSNorm\n"
            "fast.use_fast(True)\n"
            "print(fast.enabled(), len(fast.PAIRS), hasattr(fast, 'attention_backward'))\n"
            "norm = RMSNorm(4)\n"
            "norm.backward(np.ones((2, 4)) + 0 * norm.forward(np.ones((2, 4))))\n")
    env = dict(_env(), NUMPYTRANSFORMER_FAST="1")
    r = subprocess.run([sys.executable, "-c", code], cwd=edition_dir, capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.stdout.split() == ["False", "0", "False"], r.stdout + r.stderr
    assert "NotImplementedError: Exercise 6.1" in r.stderr, r.stderr
    assert "ON_BY_DEFAULT = False" in (edition_dir / "numpytransformer" / "core" / "fast.py").read_text()
    with pytest.raises(BuildError, match="BEGIN FAST FORMS"):
        without_fast_forms("ON_BY_DEFAULT = True\n")


def test_a_pair_runs_the_graders_reference_of_what_it_needs(tmp_path):
    """5.2 runs the rotary pair (3.1, 3.2): in an edition whose 3.2 is not written it passes, because the
    grader runs its reference 3.2; the Modules' kernels are bound again to the functions swapped in."""
    edition_dir = tmp_path / "edition"
    build_edition(edition_dir, solved=[e.id for e in EXERCISES if e.id != "3.2"])
    r = _run(["-m", "course", "check", "5.2", "--student", str(edition_dir)], ROOT)
    assert _check_lines(r.stdout)[0].startswith("5.2 gqa_backward ... passed"), r.stdout + r.stderr


def test_each_exercise_passes_once_it_and_what_it_needs_are_written(tmp_path):
    """The "needs" column is complete: with those fences restored, the exercise passes."""
    fences = library_fences()
    source = package_dir()
    for e in EXERCISES:
        pkg = tmp_path / e.id / "numpytransformer"
        shutil.copytree(source, pkg, ignore=shutil.ignore_patterns("__pycache__"))
        cut = {}
        for f in fences:
            if f.id not in {e.id, *e.needs}:
                cut.setdefault(f.path, []).append(f)
        for rel, file_fences in cut.items():
            path = pkg.parent / rel
            path.write_text(replace_fences(path.read_text(encoding="utf-8"), file_fences), encoding="utf-8")
    for e in EXERCISES:  # graded by this (the full) library's grader, as a teacher grades
        result = run_check(e.id, tmp_path / e.id)
        assert result.status == "passed", (e.id, result.line)


def test_a_backward_that_overwrites_dout_is_not_graded_against_its_own_output(tmp_path):
    """Writing into dout must not change the reference: ``dout *= 0; dx = dout`` fails."""
    edition_dir = tmp_path / "edition"
    build_edition(edition_dir)
    _implement(edition_dir, "1.1", "        dout *= 0\n        dx = dout\n")
    r = _run(["-m", "course", "check", "1.1"], edition_dir)
    assert r.returncode == 1, r.stdout
    assert _check_lines(r.stdout)[0].startswith("1.1 gelu_backward ... FAILED: dx:"), r.stdout


def test_check_pair_is_not_fooled_by_a_backward_that_writes_into_dout():
    from numpytransformer.core.gradcheck import check_pair
    from numpytransformer.core.relu import relu_forward

    def lazy_backward(dout, cache):
        dout *= 0
        return dout

    x = np.random.default_rng(0).standard_normal((3, 4))
    assert check_pair(relu_forward, lazy_backward, {"x": x}, wrt=("x",))["x"] > 0.5


# ---- the siblings' derivations --------------------------------------------------------------
def test_the_student_edition_drops_the_derivations_of_the_graded_backward_passes(edition, guided_edition):
    """The docstring block that says how a graded gradient is derived is in the library and in the guided
    edition, not in the student edition; the lessons' own derivations stay everywhere."""
    guided = guided_edition
    for rel, text in (("numpytransformer/core/rmsnorm.py", "LayerNorm's formula without the"),
                      ("numpytransformer/core/gelu.py", "the normal density; for the tanh form"),
                      ("numpytransformer/core/swiglu.py", "so its two gradients add")):
        assert text in (ROOT / rel).read_text() and text in (guided / rel).read_text(), rel
        assert text not in (edition / rel).read_text() and ".. solution-only::" not in (edition / rel).read_text(), rel
    assert "dx = dout W^T" in (edition / "numpytransformer" / "core" / "linear.py").read_text()  # lesson 1's


def test_solution_only_docstring_blocks_are_dropped():
    from course.fences import strip_solution_only

    text = ('def f(x):\n    """Contract.\n\n    .. solution-only::\n\n        dx = dout W^T\n\n        more\n\n'
            '    Returns\n    -------\n    dx\n    """\n    return x\n')
    out = strip_solution_only(text)
    assert out == 'def f(x):\n    """Contract.\n\n    Returns\n    -------\n    dx\n    """\n    return x\n'
    compile(out, "f.py", "exec")
    assert strip_solution_only("no marker\n") == "no marker\n"


def test_the_lessons_call_no_exercise_and_hold_no_fence():
    """The lessons run on a student edition before any release: no cell calls a fenced function, and no
    fence marker or student-edition metadata is left in them."""
    # a method: its class; 2.1's fences run only with z_loss > 0, which no lesson sets
    fenced = {q.split(".")[0] for e in EXERCISES if e.id != "2.1" for q in e.function.split(", ")}
    for path in sorted((ROOT / "lessons").glob("*.ipynb")):
        for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
            src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            assert "BEGIN SOLUTION" not in src and "solution" not in cell.get("metadata", {}), (path.name, i)
            if cell["cell_type"] == "code":
                called = {name for name in fenced if f"{name}(" in src or f".{name}" in src}
                assert not called, (path.name, i, called)


# ---- each check fails a typical mistake -----------------------------------------------------
def _graded_with(tmp_path: Path, exercise_id: str, old: str, new: str, append: str = ""):
    """Grade ``exercise_id`` in a copy of the library whose fenced code has ``old`` replaced by ``new``
    (and ``append`` added at the end of its file)."""
    root = tmp_path / exercise_id.replace(".", "_") / str(abs(hash((old, new))))
    shutil.copytree(package_dir(), root / "numpytransformer", ignore=shutil.ignore_patterns("__pycache__"))
    path = root / BY_ID[exercise_id].file
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    assert text.count(old) == 1 and any(old in "".join(lines[f.begin:f.end - 1]) for f in parse_fences(text)
                                        if f.id == exercise_id), f"{old!r} is not once in a fence of {exercise_id}"
    path.write_text(text.replace(old, new) + append, encoding="utf-8")
    return run_check(exercise_id, root)


#: One realistic bug per exercise, and what its failure must name.
MISTAKES = [
    ("1.1", "np.exp(-0.5 * x ** 2) / math.sqrt", "np.exp(-x ** 2) / math.sqrt", "dx: relative error"),
    ("1.2", "* TANH_C * (1.0 + 3.0 * TANH_K * x ** 2)", "* TANH_C", "dx: relative error"),
    ("2.1", "log_z * row_weight", "log_z * (dloss / max(n_valid, 1))", "pad id"),
    ("3.1", "out_odd = x_even * sin + x_odd * cos", "out_odd = x_even * sin - x_odd * cos", "out: "),
    ("3.2", "dx_odd = -d_even * sin + d_odd * cos", "dx_odd = d_even * sin + d_odd * cos", "length of a pair"),
    ("4.1", "bias = -slopes[:, None, None] * distance", "bias = slopes[:, None, None] * distance", "weights: "),
    ("4.2", "h = np.arange(1, n_heads + 1, dtype=np.float64)", "h = np.arange(n_heads, dtype=np.float64)", "slopes: "),
    ("5.1", "np.repeat(x, group, axis=1)", "np.tile(x, (1, group, 1, 1))", "out: "),
    ("5.2", "dk = dk.reshape(B, H_kv, H // H_kv, T, Dh).sum(axis=2)", "dk = dk.reshape(B, H_kv, H // H_kv, T, Dh).mean(axis=2)",
     "dW_k: relative error"),
    ("6.1", "dx = rrms * (g - xhat * (g * xhat).mean(axis=-1, keepdims=True))", "dx = rrms * g", "not orthogonal to x"),
    ("6.2", "dh = da * sig * (1.0 + h * (1.0 - sig))", "dh = da * sig", "dW1: relative error"),
    ("7.1", "return dout + self.norm.backward(dh)", "return self.norm.backward(dh)", "dx: relative error"),
    ("7.2", "+ self.ffn_drop(self.ffn(h))", "+ self.ffn_drop(self.ffn(x))", "out: "),
    ("8.1", "return floor + 0.5 * (peak - floor)", "return 0.5 * peak", "lr(step, total): "),
    ("8.2", "self.m[k] = b2 * self.m[k] + (1 - b2) * g", "self.m[k] = b1 * self.m[k] + (1 - b1) * g", "m['W'] after step"),
    ("8.3", "decay * self.shadow[k] + (1 - decay) * p", "(1 - decay) * self.shadow[k] + decay * p",
     "shadow['W'] after update"),
    ("9.1", "last = hyp[t - n + 1:] if n > 1 else []", "last = hyp[t - n:] if n > 1 else []", "banned: "),
    ("9.2", "if t < min_len:", "if t <= min_len:", "banned: "),
    ("10.1", "matched = sum((h & r).values())", "matched = len(set(h) & set(r))", "stats: "),
    ("10.2", "recall = float(np.mean(stats[both, 2] / stats[both, 1]))",
     "recall = float(np.mean(stats[both, 2] / stats[both, 0]))", "chrF: "),
    ("11.1", "np.quantile(deltas, [(1 - level) / 2, (1 + level) / 2])", "np.quantile(deltas, [1 - level, level])",
     "low: "),
    ("12.1", "keep = probs >= p * probs.max()", "keep = probs >= p", "out: "),
    ("12.2", "positions = np.arange(held, held + x.shape[1])", "positions = np.arange(x.shape[1])",
     "out: relative error"),
    ("13.1", "theirs = range((partner // d) * d, (partner // d + 1) * d)",
     "theirs = range((r // d) * d, (r // d + 1) * d)", "chunks["),
    ("13.2", "chunks[r][i] = received\n", "chunks[r][i] = chunks[r][i] + received\n", "garbage outside rank r's chunk r"),
]


def test_every_exercise_has_a_typical_mistake():
    assert [m[0] for m in MISTAKES] == IDS


@pytest.mark.parametrize("exercise_id, old, new, expected", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_each_check_fails_a_typical_mistake(tmp_path, exercise_id, old, new, expected):
    result = _graded_with(tmp_path, exercise_id, old, new)
    assert result.status == "failed" and expected in "\n".join(result.failures), result.line
    assert all(entry.endswith("]") for entry, passed, _ in result.cases if not passed)  # each names its case


def test_the_back_half_carries_weight():
    """At least 40% of the autograded points from lessons 7-13, and more with the project."""
    points = sum(e.points for e in EXERCISES)
    back = sum(e.points for e in EXERCISES if e.lesson >= 7)
    assert back >= 0.4 * points
    assert back + PROJECTS[0].points >= 0.55 * (points + PROJECTS[0].points)
    for lesson in range(1, 14):
        assert LESSONS[lesson], lesson


def test_the_blocks_expected_gradients_agree_with_finite_differences_on_the_public_cases():
    """7.1 expects the library's own backward (reference.compute): on the public cases, the grader's block
    passes check_module (centred differences, dropout masks held fixed) to KINK_TOL, and its gradients there
    are the expected values."""
    from course import probe, reference
    from numpytransformer.core.gradcheck import KINK_TOL, check_module

    expected = compute("7.1")
    for i, spec in enumerate(trusted.BLOCKS):
        block = probe.build_block(reference._lib, spec)
        x, mask = trusted.block_inputs(spec)
        dout = trusted.rng(spec["dout_seed"]).standard_normal(expected[f"c{i}.out"].shape)
        errors = check_module(block, [x.copy(), mask], ["x", None], dout=dout)
        assert max(errors.values()) < KINK_TOL, (i, errors)
        assert len(errors) == len([k for k in expected if k.startswith(f"c{i}.d")])  # every gradient compared
        for name, g in block.gradients().items():
            np.testing.assert_array_equal(expected[f"c{i}.d{name}"], g)
