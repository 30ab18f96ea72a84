"""The classroom exercises: fences in the library, the student edition, and the grader.

The grader must pass every exercise on the full library, report every exercise of a
fresh student edition as not yet implemented (and nothing as failed), and name the
wrong tensor when a student's code is wrong. Student editions are built into tmp_path
and graded in a subprocess whose working directory is the edition, as a student runs it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from numpytransformer.exercises import BY_ID, EXERCISES
from numpytransformer.exercises.__main__ import main
from numpytransformer.exercises.checks import CHECKS, run_check
from numpytransformer.exercises.fences import (FenceError, build_edition, enclosing_function, library_fences,
                                               package_dir, parse_fences, placeholder, replace_fences)

ROOT = package_dir().parent

#: The exercise ids of the shared design (issue 6), in order.
DESIGN_IDS = ["1.1", "1.2", "2.1", "3.1", "3.2", "4.1", "4.2", "5.1", "5.2", "6.1", "6.2", "7.1", "8.1", "8.2",
              "8.3", "10.1"]


def _env():
    """The subprocess finds numpytransformer only through its working directory."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


def _run(args, cwd):
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, env=_env(),
                          timeout=120)


def _check_lines(stdout: str):
    """The per-exercise lines of a check's output (no header, no summary)."""
    return [line for line in stdout.splitlines() if line.split(" ")[0] in BY_ID]


# ---- fences ---------------------------------------------------------------------------------
def test_every_fence_has_a_check_and_every_check_a_fence():
    fence_ids = {f.id for f in library_fences()}
    assert list(BY_ID) == DESIGN_IDS
    assert fence_ids == set(DESIGN_IDS)
    assert set(CHECKS) == set(DESIGN_IDS)


def test_fences_sit_where_the_catalog_says():
    by_id = {}
    for f in library_fences():
        by_id.setdefault(f.id, []).append(f)
    for e in EXERCISES:
        fences = by_id[e.id]
        assert len(fences) == (2 if e.id == "5.1" else 1), e.id
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
                   "check: python -m numpytransformer.exercises check 4.2)\")\n    return y\n")
    assert placeholder(fences[0]).startswith("    raise NotImplementedError(\"Exercise 4.2: ")
    compile(out, "f.py", "exec")


# ---- the grader on the full library --------------------------------------------------------
def test_check_passes_every_exercise_on_the_full_library(capsys):
    assert main(["check"]) == 0
    lines = _check_lines(capsys.readouterr().out)
    assert [line.split(" ")[0] for line in lines] == DESIGN_IDS
    for line in lines:
        assert " ... passed (" in line, line


def test_check_selects_an_exercise_or_a_lesson(capsys):
    assert main(["check", "4.2"]) == 0
    assert [line.split(" ")[0] for line in _check_lines(capsys.readouterr().out)] == ["4.2"]
    assert main(["check", "8"]) == 0
    assert [line.split(" ")[0] for line in _check_lines(capsys.readouterr().out)] == ["8.1", "8.2", "8.3"]


def test_run_check_reports_how_a_check_ended(monkeypatch):
    def raises(exc):
        def check(grader):
            raise exc
        return check

    monkeypatch.setitem(CHECKS, "4.2", raises(NotImplementedError("Exercise 4.1: scale, ... (lesson 4; ...)")))
    assert run_check("4.2").detail == "not yet implemented (needs Exercise 4.1 first)"
    monkeypatch.setitem(CHECKS, "4.2", raises(NotImplementedError("Exercise 4.2: dq ...")))
    assert run_check("4.2").detail == "not yet implemented"
    monkeypatch.setitem(CHECKS, "4.2", raises(ValueError("shapes\n  differ")))
    result = run_check("4.2")
    assert result.status == "failed" and result.detail.startswith("FAILED: ValueError: shapes differ")
    assert result.line.startswith("4.2 attention_backward ... FAILED")


@pytest.mark.parametrize("argv, fragment", [
    (["check", "9.9"], "'9.9'"),
    (["check", "9"], "'9'"),
    (["check", "four"], "'four'"),
])
def test_bad_exercise_ids_give_a_one_line_error(capsys, argv, fragment):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert fragment in err and "1.1, 1.2" in err and "10.1" in err


@pytest.mark.parametrize("argv", [[], ["frobnicate"], ["build"], ["check", "1.1", "1.2"]])
def test_bad_commands_give_a_one_line_error(capsys, argv):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_list_prints_every_exercise(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for e in EXERCISES:
        assert e.id in out and e.file in out and e.title in out


def test_build_refuses_a_non_empty_directory(tmp_path, capsys):
    (tmp_path / "something").write_text("x")
    assert main(["build", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "not empty" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["something"]


# ---- the student edition -------------------------------------------------------------------
@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    out = tmp_path_factory.mktemp("student") / "edition"
    build_edition(out)
    return out


def test_edition_holds_the_repository_without_solutions(edition):
    for name in ("EXERCISES.md", "README.md", "setup.cfg", "pyproject.toml", "data/README.md",
                 "numpytransformer/__init__.py", "numpytransformer/datasets/__init__.py",
                 "benchmarks/results/sweep-reverse-seq2seq.json", "lessons/11_ablation.ipynb"):
        assert (edition / name).is_file(), name
    assert not (edition / "tests").exists()
    assert not list(edition.rglob("__pycache__"))
    assert library_fences(edition / "numpytransformer") == []
    placeholders = sum(p.read_text(encoding="utf-8").count("raise NotImplementedError(\"Exercise ")
                       for p in (edition / "numpytransformer").rglob("*.py") if "exercises" not in p.parts)
    assert placeholders == len(library_fences())
    for src in (package_dir() / "exercises").glob("*.py"):  # the grader is copied unchanged
        assert (edition / "numpytransformer" / "exercises" / src.name).read_bytes() == src.read_bytes()
    guide = (edition / "EXERCISES.md").read_text(encoding="utf-8")
    for e in EXERCISES:
        assert f"check {e.id}`" in guide and e.title in guide
    assert "pip install -e ." in guide


def test_edition_imports_its_own_package(edition):
    r = _run(["-c", "import numpytransformer; print(numpytransformer.__file__)"], edition)
    assert r.returncode == 0, r.stderr
    assert Path(r.stdout.strip()).resolve() == (edition / "numpytransformer" / "__init__.py").resolve()


def test_edition_reports_every_exercise_not_yet_implemented(edition):
    r = _run(["-m", "numpytransformer.exercises", "check"], edition)
    assert r.returncode == 1, r.stdout + r.stderr
    assert str((edition / "numpytransformer").resolve()) in r.stdout.splitlines()[0]
    lines = _check_lines(r.stdout)
    assert [line.split(" ")[0] for line in lines] == DESIGN_IDS
    assert "FAILED" not in r.stdout and not r.stderr
    for line in lines:
        exercise_id = line.split(" ")[0]
        detail = line.split(" ... ", 1)[1]
        assert detail == "not yet implemented" or (
            detail.startswith("not yet implemented (needs Exercise ")
            and detail.split("Exercise ")[1].split(" ")[0] in BY_ID[exercise_id].needs), line


def test_build_refuses_to_run_from_a_student_edition(edition, tmp_path):
    r = _run(["-m", "numpytransformer.exercises", "build", str(tmp_path / "again")], edition)
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
    """Right code passes; a wrong formula fails with the tensor named."""
    edition_dir = tmp_path / "edition"
    build_edition(edition_dir)
    right = _fence_code("1.1")
    assert "dW = x2.T @ d2\n" in right
    _implement(edition_dir, "1.1", right)
    r = _run(["-m", "numpytransformer.exercises", "check", "1.1"], edition_dir)
    assert r.returncode == 0 and "1.1 linear_backward ... passed (largest relative error" in r.stdout, r.stdout

    shutil.rmtree(edition_dir)
    build_edition(edition_dir)
    _implement(edition_dir, "1.1", right.replace("dW = x2.T @ d2\n", "dW = x2.T @ d2 * 2\n"))
    r = _run(["-m", "numpytransformer.exercises", "check", "1"], edition_dir)
    assert r.returncode == 1
    lines = _check_lines(r.stdout)
    assert lines[0].startswith("1.1 linear_backward ... FAILED: dW: relative error 5.0e-01 (tolerance 1e-7)")
    assert lines[1] == "1.2 relu_backward ... not yet implemented"


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
    script = ("import sys; from numpytransformer.exercises.checks import run_check; "
              "r = run_check(sys.argv[1]); print(r.line)")
    for e in EXERCISES:
        r = _run(["-c", script, e.id], tmp_path / e.id)
        assert " ... passed (" in r.stdout, (e.id, r.stdout, r.stderr)


def test_a_backward_that_overwrites_dout_is_not_graded_against_its_own_output(tmp_path):
    """Writing into dout must not change the reference: ``dout *= 0; return dout`` fails."""
    edition_dir = tmp_path / "edition"
    build_edition(edition_dir)
    _implement(edition_dir, "1.2", "    dout *= 0\n    return dout\n")
    r = _run(["-m", "numpytransformer.exercises", "check", "1.2"], edition_dir)
    assert r.returncode == 1, r.stdout
    assert _check_lines(r.stdout)[0].startswith("1.2 relu_backward ... FAILED: dx:"), r.stdout


def test_check_pair_is_not_fooled_by_a_backward_that_writes_into_dout():
    from numpytransformer.gradcheck import check_pair
    from numpytransformer.relu import relu_forward

    def lazy_backward(dout, cache):
        dout *= 0
        return dout

    x = np.random.default_rng(0).standard_normal((3, 4))
    assert check_pair(relu_forward, lazy_backward, {"x": x}, wrt=("x",))["x"] > 0.5
