"""The classroom exercises: fences in the library and the lessons, the student edition, and the grader.

The grader must pass every exercise on the full library, report every exercise of a fresh
student edition as not yet implemented (and nothing as failed), and name every wrong tensor
when a student's code is wrong. Student editions are built into tmp_path and graded in a
subprocess, as a student (from the edition's folder) or a teacher (``--student``) runs it.
The grader's reference values come from the library itself, so the library is checked here
against independent plain references (attention row by row, the sinusoid loop, the Noam
formula, textbook Adam, heads by slicing), which stay out of the student edition.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from course import BY_ID, EXERCISES, trusted
from course.__main__ import main
from course.checks import JUDGES, Grader, diagnose, run_check
from course.fences import (
    BuildError,
    FenceError,
    build_edition,
    cut_notebook,
    enclosing_function,
    library_fences,
    notebook_fences,
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
FENCE_COUNTS = {"5.1": 2, "7.2": 2, "8.3": 2, "12.2": 4, "12.3": 2}


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
    for e in EXERCISES:
        assert e.difficulty in ("easy", "medium", "hard") and e.minutes > 0 and e.points > 0 and e.section, e


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


def _nb(*cells):
    return {"cells": [{"cell_type": kind, "source": src, "metadata": {}} for kind, src in cells]}


def test_notebook_fences_are_cut_kept_or_replaced_by_the_student_code():
    nb = _nb(("code", "a = 1\n### BEGIN SOLUTION 5.1\nq4 = q.reshape(B, T, H, Dh)\n### STUDENT EDITION\n"
                      "# qh = split_heads(q, H)\n### END SOLUTION\nprint(a)"),
             ("code", "### BEGIN SOLUTION 8.2\nm = b1 * m + (1 - b1) * g\n### END SOLUTION"),
             ("markdown", "The formula.\n<!-- BEGIN SOLUTION 1.1 -->\n`dW = x2.T @ d2`\n<!-- END SOLUTION -->\nMore."))
    assert [(f.id, f.cell, f.markdown) for f in notebook_fences(nb)] == [("5.1", 0, False), ("8.2", 1, False),
                                                                          ("1.1", 2, True)]
    kept = json.loads(json.dumps(nb))
    assert cut_notebook(kept, keep={"5.1", "8.2", "1.1"}) == 0
    assert [c["source"] for c in kept["cells"]] == ["a = 1\nq4 = q.reshape(B, T, H, Dh)\nprint(a)",
                                                    "m = b1 * m + (1 - b1) * g", "The formula.\n`dW = x2.T @ d2`\nMore."]
    assert cut_notebook(nb) == 3
    code, cut, md = (c["source"] for c in nb["cells"])
    assert code == "a = 1\nqh = split_heads(q, H)\nprint(a)"
    assert cut.startswith("# Exercise 8.2: ") and "b1" not in cut
    assert md.startswith("The formula.\n*Turning this into NumPy is Exercise 1.1") and md.endswith("More.")
    assert "x2.T" not in md


@pytest.mark.parametrize("cells, message", [
    ((("code", "### BEGIN SOLUTION 1.1\nx = 1"),), "never closed"),
    ((("code", "## BEGIN SOLUTION 1.1\nx = 1"),), "malformed"),
    ((("code", "### BEGIN SOLUTION 1.1\n### STUDENT EDITION\nx = 1\n### END SOLUTION"),), "as comments"),
    ((("markdown", "<!-- END SOLUTION -->"),), "without a BEGIN"),
])
def test_malformed_notebook_fences_are_errors(cells, message):
    with pytest.raises(FenceError, match=message):
        notebook_fences(_nb(*cells))


def test_the_lessons_fence_the_code_that_restates_a_solution():
    fenced = {}
    for path in sorted((ROOT / "lessons").glob("*.ipynb")):
        for f in notebook_fences(json.loads(path.read_text(encoding="utf-8")), path.name):
            assert f.id in BY_ID, (path.name, f)
            fenced.setdefault(f.id, []).append(path.name[:2])
    for exercise_id in ("1.1", "4.2", "5.1", "5.2", "6.1", "8.2", "10.1"):
        assert exercise_id in fenced, exercise_id


# ---- the grader's references are right (independent plain computations) -------------------
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


def test_reference_attention_is_attention():
    ref = compute("4.1")
    for i, (_, q, k, v, mask) in enumerate(trusted.attention_forward_cases()):
        out, weights = _reference_attention(q, k, v, mask)
        np.testing.assert_allclose(ref[f"c{i}.out"], out, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(ref[f"c{i}.weights"], weights, rtol=1e-9, atol=1e-12)


def test_reference_sinusoids_noam_and_heads_follow_their_formulas():
    ref = compute("3.2")
    for i, (max_len, d_model) in enumerate(trusted.TABLE_SIZES):
        expected = [[(math.sin if j % 2 == 0 else math.cos)(pos / 10000 ** ((j - j % 2) / d_model))
                     for j in range(d_model)] for pos in range(max_len)]
        np.testing.assert_allclose(ref[f"c{i}.pe"], expected, rtol=0, atol=1e-12)
    ref = compute("8.1")
    for i, (d, w, f, steps) in enumerate(trusted.NOAM_CASES):
        expected = [f * d ** -0.5 * min(max(s, 1) ** -0.5, max(s, 1) * w ** -1.5) for s in steps]
        np.testing.assert_allclose(ref[f"c{i}.lr"], expected, rtol=1e-12, atol=0)
    ref = compute("5.1")
    for i, (B, T, D, H) in enumerate(trusted.HEAD_SHAPES):
        r = trusted.rng(i)
        x, heads = r.standard_normal((B, T, D)), r.standard_normal((B, H, T, D // H))
        Dh = D // H
        assert np.array_equal(ref[f"c{i}.split"], np.stack([x[:, :, h * Dh:(h + 1) * Dh] for h in range(H)], axis=1))
        assert np.array_equal(ref[f"c{i}.merge"], np.concatenate(list(np.moveaxis(heads, 1, 0)), axis=-1))


def test_reference_adam_is_textbook_adam():
    ref = compute("8.2")
    for i, (_, dtype, lr, (b1, b2), eps, params, grads_per_step, tol) in enumerate(trusted.adam_cases()):
        p = {k: v.astype(np.float64) for k, v in params.items()}
        m = {k: np.zeros_like(v) for k, v in p.items()}
        v = {k: np.zeros_like(x) for k, x in p.items()}
        for t, grads in enumerate(grads_per_step, start=1):
            rate = 0.05 / t if lr == "0.05/t" else lr
            for k in p:
                g = grads[k].astype(np.float64)
                m[k] = b1 * m[k] + (1 - b1) * g
                v[k] = b2 * v[k] + (1 - b2) * g * g
                p[k] = p[k] - rate * (m[k] / (1 - b1 ** t)) / (np.sqrt(v[k] / (1 - b2 ** t)) + eps)
                np.testing.assert_allclose(ref[f"c{i}.t{t}.{k}.p"], p[k], rtol=tol * 10, atol=0)
                np.testing.assert_allclose(ref[f"c{i}.t{t}.{k}.m"], m[k], rtol=tol * 10, atol=1e-12)


def test_reference_gradients_are_finite_differences_of_the_library():
    """The grader's trusted numerical gradient agrees with the library's analytic backward (the tests' check)."""
    pairs = [(e, j) for e, (kind, _, names) in trusted.PROBES.items() if kind == "pair" for j in range(len(names) // 2)]
    assert len(pairs) == 10  # 10 pair exercises
    for exercise_id, j in pairs:
        ref = compute(exercise_id)
        _, module, names = trusted.PROBES[exercise_id]
        lib = __import__(f"numpytransformer.{module}", fromlist=["x"])
        forward, backward = getattr(lib, names[2 * j]), getattr(lib, names[2 * j + 1])
        pre = "f1." if j else ""
        for i, case in enumerate(trusted.pair_cases(exercise_id)):
            if case.reference != "numeric":
                continue
            out, cache = forward(**{k: v.copy() for k, v in case.inputs.items()}, **case.static)
            grads = backward(trusted.rng(case.seed).standard_normal(np.shape(out)), cache)
            grads = grads if isinstance(grads, tuple) else (grads,)
            for name, g in zip(case.wrt, grads):
                if name is not None:
                    assert trusted.grad_error(g, ref[f"{pre}c{i}.d{name}"])[1] < case.tol, (exercise_id, i, name)
    # The same cases are tests/test_gradients.py's for these pairs, run by the public check_pair: one set.


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


def test_grader_reports_every_failing_tensor_with_the_lessons_properties():
    """A LayerNorm dx without its variance term: named as missing, dgamma's factor too, every case listed."""
    from course import probe

    exp = compute("6.1")
    got = {k: v.copy() for k, v in exp.items()}
    for i, case in enumerate(trusted.pair_cases("6.1")):
        x = case.inputs["x"]
        gamma = case.inputs["gamma"]
        dout = trusted.rng(case.seed).standard_normal(x.shape)
        g = dout * gamma
        rstd = 1 / np.sqrt(x.var(-1, keepdims=True) + case.static["eps"])
        got[f"c{i}.dx"] = (g - g.mean(-1, keepdims=True)) * rstd        # the variance term left out
        got[f"c{i}.dgamma"] = 2 * exp[f"c{i}.dgamma"]
    grader = Grader("6.1")
    JUDGES["pair"](grader, "6.1", got, exp)
    text = "\n".join(grader.failures)
    assert "dx is not orthogonal to x_hat" in text and "variance, missing?" in text and "lesson 6 §2" in text
    assert "rows of dx do not sum to 0" not in text          # the mean term is there
    assert text.count("dx: relative error") == 3 and text.count("dgamma: relative error") == 3
    assert "it is the right one times 2" in text
    assert probe.pair_prefix(0) == ""


def test_the_embedding_hint_names_overwriting_not_a_forgotten_scale():
    """dW[ids] = scale * dout keeps only the last of the repeated id 2: the np.add.at hint; the
    scale forgotten gives every row times 1/scale: the factor, and no hint about np.add.at."""
    exp = compute("3.1")
    dout = trusted.rng(trusted.pair_cases("3.1")[0].seed).standard_normal((1, 3, 2))
    for row, hinted in ((2.0 * dout[0, -1], True), (exp["c0.dW"][2] / 2.0, False)):
        got = {k: v.copy() for k, v in exp.items()}
        got["c0.dW"][2] = row
        grader = Grader("3.1")
        JUDGES["pair"](grader, "3.1", got, exp)
        assert ("repeated ids must accumulate (np.add.at)" in "\n".join(grader.failures)) == hinted


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


@pytest.mark.parametrize("argv, fragment", [
    (["check", "9.9"], "'9.9'"),
    (["check", "13"], "'13'"),
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
    for e in EXERCISES:
        assert e.id in out and e.file in out and e.title in out and f"{e.points} points" in out


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
    """(exercise, where, line) for each statement of each solution body, in the library and the lessons.

    Comments, short lines, checks (``assert``, ``print``) and bare control flow (``if ...:``, ``for ...:``,
    ``return ...``) say nothing about the solution on their own; every other line (an assignment, a
    computation, a sentence of code in markdown) must not survive in the student edition.
    """
    def significant(line):
        s = " ".join(line.split())
        return (len(s) >= 16 and not s.startswith(("#", "if ", "for ", "return ", "else", "elif ", "<!--", "assert ",
                                                    "print("))
                and s not in ("### STUDENT EDITION",))

    for f in library_fences():
        for line in (ROOT / f.path).read_text(encoding="utf-8").splitlines()[f.begin:f.end - 1]:
            if significant(line):
                yield f.id, f.path, " ".join(line.split())
    for path in sorted((ROOT / "lessons").glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        for f in notebook_fences(nb, path.name):
            src = nb["cells"][f.cell]["source"]
            lines = ("".join(src) if isinstance(src, list) else src).splitlines()[f.begin:(f.student or f.end) - 1]
            for line in lines:
                if significant(line):
                    yield f.id, path.name, " ".join(line.split())


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
    assert len(lines) > 50
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
                 "docs/cli.md", "docs/teaching.md"):
        assert (edition / name).is_file(), name
    assert not (edition / "tests").exists()
    assert not (edition / "lessons" / "INSTRUCTOR.md").exists()        # the answer keys stay with the teacher
    assert not list(edition.rglob("__pycache__"))
    assert library_fences(edition / "numpytransformer") == []
    for path in (edition / "lessons").glob("*.ipynb"):
        assert notebook_fences(json.loads(path.read_text(encoding="utf-8")), path.name) == []
    placeholders = sum(p.read_text(encoding="utf-8").count("raise NotImplementedError(\"Exercise ")
                       for p in (edition / "numpytransformer").rglob("*.py") if "exercises" not in p.parts)
    assert placeholders == len(library_fences())
    for src in (ROOT / "course").glob("*.py"):  # the grader is copied unchanged, but for its last hints
        copy = (edition / "course" / src.name).read_bytes()
        assert (copy == src.read_bytes()) == (src.name != "hints.py"), src.name
    guide = (edition / "EXERCISES.md").read_text(encoding="utf-8")
    for e in EXERCISES:
        assert f"check {e.id}`" in guide and e.title in guide and f"| {e.minutes} min | {e.points} |" in guide
    assert "pip install -e ." in guide and "--student" in guide and "results.json" in guide


def test_edition_notebooks_compile(edition):
    """Every code cell of the student edition's lessons is valid Python (IPython magics aside)."""
    for path in sorted((edition / "lessons").glob("*.ipynb")):
        for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
            if cell["cell_type"] == "code":
                src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
                code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in src.splitlines())
                compile(code, f"{path.name} cell {i}", "exec")


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
    right = _fence_code("1.1")
    assert "dW = x2.T @ d2\n" in right
    _implement(edition_dir, "1.1", right)
    r = _run(["-m", "course", "check", "1.1"], edition_dir)
    assert r.returncode == 0 and "1.1 linear_backward ... passed (largest relative error" in r.stdout, r.stdout

    _implement_again = right.replace("dW = x2.T @ d2\n", "dW = x2.T @ d2 * 2\n")
    shutil.rmtree(edition_dir)
    build_edition(edition_dir)
    _implement(edition_dir, "1.1", _implement_again)
    for args, cwd in ((["check", "1", "--hints", "property"], edition_dir),
                      (["check", "1", "--student", str(edition_dir), "--hints", "property"], ROOT)):
        r = _run(["-m", "course", *args], cwd)
        assert r.returncode == 1
        lines = _check_lines(r.stdout)
        assert lines[0].startswith("1.1 linear_backward ... FAILED: dW: relative error 5.0e-01 (tolerance 1e-7)")
        assert "it is the right one times 2" in lines[0]
        assert r.stdout.count("also: dW: relative error 5.0e-01") == 2   # every case, not just the first
        assert lines[1].startswith("1.2 relu_backward ... not yet implemented (the raise at numpytransformer/core/relu.py:")


def test_what_students_and_teachers_get_wrong_gets_a_clear_answer(tmp_path):
    """Code written above the raise is pointed at the raise; a leftover input() or breakpoint()
    fails at once (no terminal), not at the time limit; a student edition's grader refuses to
    grade others; a --json path that cannot be written and an infinite --timeout are refused
    before any grading."""
    edition_dir = tmp_path / "edition"
    build_edition(edition_dir)
    path = edition_dir / BY_ID["1.1"].file
    (line,) = [ln for ln in path.read_text().splitlines(keepends=True) if "Exercise 1.1:" in ln]
    path.write_text(path.read_text().replace(line, _fence_code("1.1") + line))  # the solution, then the raise
    _implement(edition_dir, "1.2", "    input()\n")
    p = subprocess.Popen([sys.executable, "-m", "course", "check", "1", "--timeout", "20"],
                         cwd=edition_dir, env=_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    out = p.stdout.read()  # the grader's stdin stays open, like a terminal nobody types into
    p.wait(timeout=60)
    p.stdin.close()
    lines = _check_lines(out)
    assert lines[0].startswith("1.1 linear_backward ... not yet implemented (the raise at numpytransformer/core/linear.py:")
    assert lines[1].startswith("1.2 relu_backward ... FAILED: EOFError"), out
    for args, message in ((["check", "1.1", "--student", str(edition_dir)], "this is a student edition's grader"),
                          (["check", "1.1", "--timeout", "inf"], "--timeout must be a positive number")):
        r = _run(["-m", "course", *args], edition_dir)
        assert r.returncode == 2 and message in r.stderr, r.stderr
    r = _run(["-m", "course", "check", "1.1", "--student", str(edition_dir), "--json",
              str(tmp_path / "missing" / "r.json")], ROOT)
    assert r.returncode == 2 and "--json" in r.stderr and "Grading" not in r.stdout


def test_solved_releases_chosen_solutions(tmp_path, capsys):
    edition_dir = tmp_path / "edition"
    assert main(["build", str(edition_dir), "--solved", "1.1,4.1"]) == 0
    assert "the solutions of 1.1, 4.1 released" in capsys.readouterr().out
    r = _run(["-m", "course", "check", "4"], edition_dir)
    lines = _check_lines(r.stdout)
    assert lines[0].startswith("4.1 attention_forward ... passed"), r.stdout
    assert lines[1].startswith("4.2 attention_backward ... not yet implemented (the raise at")  # no longer waits
    assert "### BEGIN SOLUTION" not in (edition_dir / "numpytransformer" / "core" / "attention.py").read_text()
    lesson1 = (edition_dir / "lessons" / "01_backprop_linear_relu.ipynb").read_text()
    assert "dW = x2.T @ d2" in lesson1 and "BEGIN SOLUTION" not in lesson1
    assert "4.1 (released)" in (edition_dir / "EXERCISES.md").read_text()


def test_the_edition_trains_on_the_students_pairs_not_the_fast_forms(tmp_path):
    """The edition's fast.py has the switch but no fast forms (they hold solutions), and is off even
    with NUMPYTRANSFORMER_FAST=1: with every solution but 4.1 released, a model's forward reaches the
    student's attention_forward (and its raise)."""
    edition_dir = tmp_path / "edition"
    build_edition(edition_dir, solved=[e.id for e in EXERCISES if e.id != "4.1"])
    code = ("import numpy as np\n"
            "from numpytransformer import Transformer, TransformerConfig, fast\n"
            "from numpytransformer.core.fast import *  # __all__ names only what the edition's fast.py holds\n"
            "fast.use_fast(True)\n"
            "print(fast.enabled(), len(fast.PAIRS), hasattr(fast, 'attention_backward'))\n"
            "cfg = TransformerConfig(src_vocab_size=7, tgt_vocab_size=7, d_model=8, n_heads=2, n_layers=1, d_ff=16,\n"
            "                        max_len=6, dropout=0.0, dtype='float64')\n"
            "Transformer(cfg).forward(np.ones((1, 3), int), np.ones((1, 3), int))\n")
    env = dict(_env(), NUMPYTRANSFORMER_FAST="1")
    r = subprocess.run([sys.executable, "-c", code], cwd=edition_dir, capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.stdout.split() == ["False", "0", "False"], r.stdout + r.stderr
    assert "NotImplementedError: Exercise 4.1" in r.stderr, r.stderr
    assert "ON_BY_DEFAULT = False" in (edition_dir / "numpytransformer" / "core" / "fast.py").read_text()
    with pytest.raises(BuildError, match="BEGIN FAST FORMS"):
        without_fast_forms("ON_BY_DEFAULT = True\n")


def test_a_layer_runs_the_graders_reference_of_what_it_needs(tmp_path):
    """The Modules run the functions the switch bound (core.kernels) when the package was imported; the
    grader's reference code, put in place after that, must be bound again: 7.1 passes in an edition
    whose 5.2 is not written, because its multi-head attention runs the reference 5.2."""
    edition_dir = tmp_path / "edition"
    build_edition(edition_dir, solved=[e.id for e in EXERCISES if e.id != "5.2"])
    r = _run(["-m", "course", "check", "7.1", "--student", str(edition_dir)], ROOT)
    assert _check_lines(r.stdout)[0].startswith("7.1 EncoderLayer.backward ... passed"), r.stdout + r.stderr


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
    """Writing into dout must not change the reference: ``dout *= 0; return dout`` fails."""
    edition_dir = tmp_path / "edition"
    build_edition(edition_dir)
    _implement(edition_dir, "1.2", "    dout *= 0\n    return dout\n")
    r = _run(["-m", "course", "check", "1.2"], edition_dir)
    assert r.returncode == 1, r.stdout
    assert _check_lines(r.stdout)[0].startswith("1.2 relu_backward ... FAILED: dx:"), r.stdout


def test_check_pair_is_not_fooled_by_a_backward_that_writes_into_dout():
    from numpytransformer.core.gradcheck import check_pair
    from numpytransformer.core.relu import relu_forward

    def lazy_backward(dout, cache):
        dout *= 0
        return dout

    x = np.random.default_rng(0).standard_normal((3, 4))
    assert check_pair(relu_forward, lazy_backward, {"x": x}, wrt=("x",))["x"] > 0.5


# ---- students derive: the student edition hides what the exercises grade --------------------
#: Per exercise, the expressions that give its graded result away, as the repository writes them (lesson
#: cells, docstrings). The student edition must hold none of them; the repository and the guided edition
#: hold every one. Lesson 1 (1.1, 1.2) is the worked example of the method and keeps its derivation; the
#: grader's hints are judged by their own tests.
GRADED_EXPRESSIONS = {
    "1.1": ["``dx = dout W^T``, ``dW = x^T dout``"],
    "2.1": ["(p - q) / N", "(p - q)/N", "expected = (softmax(logits) - q) / len(targets)", "= -q_j + p_j \\sum_v q_v = p_j - q_j",
            "\\partial L / \\\\partial z_v = p_v - q_v"],
    "4.2": ["dS_formula = p * (dP_row - np.sum(dP_row * p))", "J = np.diag(p) - np.outer(p, p)",
            "\\frac{\\partial P_j}{\\partial S_l} = P_j\\big([j = l] - P_l\\big)",
            "dS = P \\odot \\big(dP - \\operatorname{rowsum}(dP \\odot P)\\big)",
            "dS = P \\odot (dP - \\operatorname{rowsum}(dP \\odot P))",
            "dS = P \\\\odot (dP - \\\\text{rowsum}(dP \\\\odot P))", "dQ = c\\; dS\\, K", "dV = P^\\top dO"],
    "5.1": ["`reshape` $(B, T, D) \\to (B, T, H, d_h)$", "`transpose(0, 2, 1, 3)` $\\to (B, H, T, d_h)$"],
    "6.1": ["\\boxed{\\,dx = r\\,\\big(g - \\overline{g} - \\hat x \\odot \\overline{g \\odot \\hat x}\\,\\big)\\,}",
            "J = r * (np.eye(D) - np.ones((D, D)) / D - np.outer(xh, xh) / D)",
            "r\\Big(\\delta_{ij} - \\frac{1}{D} - \\frac{\\hat x_i\\, \\hat x_j}{D}\\Big)",
            "\\left(g - \\\\overline{g} - \\\\hat x\\\\, \\\\overline{g \\\\odot \\\\hat x}\\\\right)"],
    "7.2": ["then $dx = d + F^\\top(\\text{Drop}^\\top(d))$",
            "The residual branch and the sublayer branch each carry gradient; they add."],
    "10.1": ["sum(min(k, r1[g]) for g, k in h1.items())"],
    "12.1": ["its gradient is the sum over the batch of"],
}


def _normalised_texts(root: Path):
    """(path, whitespace-normalised text) of the lessons' cells, the package's .py files (its grader aside)
    and the Markdown files under ``root``."""
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).parts
        if "exercises" in rel or "tests" in rel or rel[0].startswith("."):
            continue
        if p.suffix in (".py", ".md"):
            yield p, " ".join(p.read_text(encoding="utf-8").split())
        elif p.suffix == ".ipynb":
            cells = json.loads(p.read_text(encoding="utf-8"))["cells"]
            sources = ("".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells)
            yield p, " ".join(" ".join(src.split()) for src in sources)


def _where_found(root: Path):
    texts = list(_normalised_texts(root))
    return {(e, x): [p.relative_to(root).as_posix() for p, t in texts if " ".join(x.split()) in t]
            for e, xs in GRADED_EXPRESSIONS.items() for x in xs}


@pytest.fixture(scope="module")
def guided_edition(tmp_path_factory):
    out = tmp_path_factory.mktemp("guided") / "edition"
    assert main(["build", str(out), "--guided"]) == 0
    return out


def test_student_edition_holds_no_graded_expression(edition, guided_edition):
    """The done-when of 'students derive': none of the expressions in the student edition, every one of them in
    the repository (so the list is not stale) and in the guided edition (which keeps the derivations)."""
    assert all(GRADED_EXPRESSIONS.values()) and set(GRADED_EXPRESSIONS) <= set(BY_ID)
    in_repo = _where_found(ROOT)
    assert not [k for k, where in in_repo.items() if not where], "expressions the repository does not hold"
    leaks = {k: where for k, where in _where_found(edition).items() if where}
    assert not leaks, "\n".join(f"{e}: {x!r} in {where}" for (e, x), where in leaks.items())
    kept = _where_found(guided_edition)
    assert not [k for k, where in kept.items() if not where], "the guided edition lost a derivation"


def test_student_edition_asks_the_derivation_and_keeps_the_checks(edition):
    """A hidden cell shows its questions (or code that leaves the expression to the student) in its place: no
    cell is added or removed, and the check cells after it stay as they are."""
    for path in sorted((ROOT / "lessons").glob("*.ipynb")):
        full = json.loads(path.read_text(encoding="utf-8"))["cells"]
        student = json.loads((edition / "lessons" / path.name).read_text(encoding="utf-8"))["cells"]
        assert len(student) == len(full), path.name
        for i, (a, b) in enumerate(zip(full, student)):
            assert "solution" not in b["metadata"] and "solution" not in b["metadata"].get("tags", [])
            if "solution" in a["metadata"].get("tags", []):
                assert b["source"] == a["metadata"]["solution"]["student"] != "".join(a["source"]), (path.name, i)
                assert b["cell_type"] == a["cell_type"]
    lesson4 = json.loads((edition / "lessons" / "04_attention.ipynb").read_text(encoding="utf-8"))["cells"]
    questions = " ".join(lesson4[22]["source"].split())
    assert "what is $\\partial P_j / \\partial S_l$?" in questions and "Why must each row of $dS$ sum to 0?" in questions
    assert "dS_formula = None" in lesson4[23]["source"]
    assert "rel_error(dS_jacobian, dS_formula)" in "".join(lesson4[24]["source"])  # the check stays


def test_solved_and_guided_keep_the_derivation_of_their_exercises():
    from course.fences import BuildError, hide_derivations

    def notebook():
        return {"cells": [{"cell_type": "code", "source": "expected = p - q", "outputs": ["x"], "execution_count": 3,
                           "metadata": {"tags": ["solution", "other"],
                                        "solution": {"exercise": "2.1", "student": "expected = None"}}},
                          {"cell_type": "markdown", "source": "text", "metadata": {}}]}

    nb = notebook()
    assert hide_derivations(nb) == 1
    assert nb["cells"][0]["source"] == "expected = None" and nb["cells"][0]["outputs"] == []
    assert nb["cells"][0]["metadata"] == {"tags": ["other"]} and nb["cells"][1]["source"] == "text"
    nb = notebook()
    assert hide_derivations(nb, keep={"2.1"}) == 0
    assert nb["cells"][0]["source"] == "expected = p - q" and nb["cells"][0]["metadata"] == {"tags": ["other"]}
    nb = notebook()
    nb["cells"][0]["metadata"]["solution"] = {"exercise": "2.1"}
    with pytest.raises(BuildError, match="cell 0: a cell tagged 'solution' needs"):
        hide_derivations(nb, "l.ipynb")


def test_solution_only_docstring_blocks_are_dropped():
    from course.fences import strip_solution_only

    text = ('def f(x):\n    """Contract.\n\n    .. solution-only::\n\n        dx = dout W^T\n\n        more\n\n'
            '    Returns\n    -------\n    dx\n    """\n    return x\n')
    out = strip_solution_only(text)
    assert out == 'def f(x):\n    """Contract.\n\n    Returns\n    -------\n    dx\n    """\n    return x\n'
    compile(out, "f.py", "exec")
    assert strip_solution_only("no marker\n") == "no marker\n"


# ---- the back half: each new check fails a typical mistake, and passes another right answer -------
def _graded_with(tmp_path: Path, exercise_id: str, old: str, new: str):
    """Grade ``exercise_id`` in a copy of the library whose fenced code has ``old`` replaced by ``new``."""
    root = tmp_path / exercise_id.replace(".", "_") / str(abs(hash((old, new))))
    shutil.copytree(package_dir(), root / "numpytransformer", ignore=shutil.ignore_patterns("__pycache__"))
    path = root / BY_ID[exercise_id].file
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    assert text.count(old) == 1 and any(old in "".join(lines[f.begin:f.end - 1]) for f in parse_fences(text)
                                        if f.id == exercise_id), f"{old!r} is not once in a fence of {exercise_id}"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return run_check(exercise_id, root)


@pytest.mark.parametrize("exercise_id, old, new, expected", [
    ("7.2", "dx = dout + self.norm.backward(dsub)", "dx = self.norm.backward(dsub)", "dx: relative error"),
    ("7.2", "d, dmemory = self.cross_attn_sublayer.backward(d, self.cross_attn.backward)",
     "d, dmemory = self.cross_attn_sublayer.backward(d, self.cross_attn.backward)[0], None", "dmemory is None"),
    ("9.1", "model._decode_step(ys[:, -1:]", "model._decode_step(ys[:, :1]", "greedy_decode, sentence"),
    ("9.2", 'cache["self"][part][...] = cache["self"][part][flat]', "pass", "beam_search, sentence"),
    ("9.2", "lengths = np.take_along_axis(lengths, beam, axis=1) + ~was_finished",
     "lengths = np.take_along_axis(lengths, beam, axis=1) + 1", "beam_search, sentence"),
    ("11.1", "std = values.std(ddof=1)", "std = values.std()", "population standard deviation"),
    ("11.1", "half = t_quantile(n - 1) * sem", "half = 1.96 * sem", "Student's t"),
    ("12.2", "(z - z.max()) / temperature", "(z - z.max()) * temperature", "next_token_probs:"),
    ("12.2", "keep = order[before < p]", "keep = order[np.cumsum(probs[order]) < p]", "top_p_filter"),
    ("12.2", "    u = rng.random()\n", "    u = 0.5\n", "sample_from drew id"),
    ("12.3", "targets = ids[:, 1:]", "targets = ids[:, :-1]", "the forward's out"),
])
def test_the_new_checks_fail_a_typical_mistake(tmp_path, exercise_id, old, new, expected):
    result = _graded_with(tmp_path, exercise_id, old, new)
    assert result.status == "failed" and expected in "\n".join(result.failures), result.line


def test_sampling_is_graded_by_its_statistics_not_by_one_algorithm(tmp_path):
    """A sample_from that draws with rng.choice (another right algorithm, other ids) passes."""
    result = _graded_with(tmp_path, "12.2", "    u = rng.random()\n", "    return int(rng.choice(probs.size, p=probs))\n")
    assert result.status == "passed", result.line


def test_the_back_half_carries_weight():
    points = sum(e.points for e in EXERCISES)
    back = sum(e.points for e in EXERCISES if e.lesson >= 7)
    assert len(EXERCISES) >= 22 and back >= 0.35 * points
    for lesson in (7, 9, 11, 12):
        assert any(e.lesson == lesson and e.id != "7.1" and e.id != "12.1" for e in EXERCISES), lesson


@pytest.mark.parametrize("exercise_id", ["7.1", "7.2"])
def test_the_layers_expected_gradients_agree_with_finite_differences_on_the_public_cases(exercise_id):
    """7.1 and 7.2 expect the library's own backward (reference.compute): on the public cases, the
    grader's layer passes check_module (centred differences, dropout masks held fixed) to KINK_TOL,
    and its gradients there are the expected values."""
    from course import probe, reference
    from numpytransformer.core.gradcheck import KINK_TOL, check_module

    expected = compute(exercise_id)
    if exercise_id == "7.1":
        cls, spec, args, names = "EncoderLayer", trusted.ENCODER_LAYER, trusted.encoder_layer_inputs(), ["x", None]
    else:
        cls, spec, args, names = ("DecoderLayer", trusted.DECODER_LAYER, trusted.decoder_layer_inputs(),
                                  ["x", "memory", None, None])
    for i, norm_first in enumerate((False, True)):
        layer = probe.build_layer(reference._lib, cls, spec, norm_first)
        dout = trusted.rng(spec["dout_seed"]).standard_normal(expected[f"c{i}.out"].shape)
        errors = check_module(layer, [a.copy() for a in args], names, dout=dout)
        assert max(errors.values()) < KINK_TOL, (exercise_id, i, errors)
        assert len(errors) == len([k for k in expected if k.startswith(f"c{i}.d")])  # every gradient compared
        for name, g in layer.gradients().items():
            np.testing.assert_array_equal(expected[f"c{i}.d{name}"], g)
