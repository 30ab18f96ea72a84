"""How the grader scores: each exercise on its own, partial credit by case, hints in steps,
the release of solutions into a student's folder, the Gradescope package, the builder's bad paths.

Student folders are built into tmp_path and graded in subprocesses, as a student (from the
folder), a teacher (``--student``) or Gradescope (``run_autograder``) runs the grader.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from course import BY_ID, EXERCISES, checks
from course.__main__ import main
from course.fences import build_edition, package_dir, release
from course.hints import FORMULAS, STUDENT_EDITION

WEEK1 = BY_ID["1.1"].points + BY_ID["1.2"].points  # the points of the assignment "1.1,1.2"

ROOT = package_dir().parent
IDS = [e.id for e in EXERCISES]
WRONG_DV = ("    dx = dx1 + dxv\n", "    dx = dx1 + dxv\n    dV = 2 * dV\n")  # exercise 6.2 with a factor 2 in dV
WRONG_RMSNORM = """    dgamma = (dout * xhat).reshape(-1, D).sum(axis=0)
    g = dout * gamma
    dx = rrms * g
"""


def _env():
    """The subprocess finds numpytransformer only through its working directory."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


def _run(args, cwd, timeout=600):
    return subprocess.run([sys.executable, "-m", "course", *args], cwd=cwd, capture_output=True,
                          text=True, env=_env(), timeout=timeout)


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, (path, old)
    path.write_text(text.replace(old, new), encoding="utf-8")


def _fence_code(exercise_id: str) -> str:
    """The reference code of a (single) fence, as written in the library."""
    from course.fences import library_fences

    (fence,) = [f for f in library_fences() if f.id == exercise_id]
    return "".join((ROOT / fence.path).read_text(encoding="utf-8").splitlines(keepends=True)[fence.begin:fence.end - 1])


def _implement(root: Path, exercise_id: str, code: str) -> None:
    path = root / BY_ID[exercise_id].file
    (line,) = [ln for ln in path.read_text(encoding="utf-8").splitlines(keepends=True) if f"Exercise {exercise_id}:" in ln]
    _replace(path, line, code)


@pytest.fixture(scope="module")
def complete(tmp_path_factory):
    """A student's folder with every exercise done (the reference code), and 6.2's dV doubled."""
    out = tmp_path_factory.mktemp("complete") / "student"
    build_edition(out, solved=IDS)
    _replace(out / BY_ID["6.2"].file, *WRONG_DV)
    return out


def _by_exercise(doc: dict) -> dict:
    scores = {}
    for t in doc["tests"]:
        assert set(t) >= {"name", "number", "score", "max_score", "output", "status"}, t
        assert 0 <= t["score"] <= t["max_score"] and isinstance(t["output"], str), t
        assert t["name"].split(" ")[0] == t["number"].rsplit(".", 1)[0]
        s = scores.setdefault(t["number"].rsplit(".", 1)[0], [0.0, 0.0, []])
        s[0] += t["score"]
        s[1] += t["max_score"]
        s[2].append(t)
    return scores


# ---- each exercise on its own, partial credit by case ----------------------------------------
def test_a_wrong_swiglu_backward_fails_exercise_6_2_alone(complete, tmp_path):
    """The teacher's grader on a complete folder with a wrong dV: 6.2 loses the dV cases, nothing else."""
    results = tmp_path / "results.json"
    r = _run(["check", "--student", str(complete), "--json", str(results)], ROOT)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.split(" ")[0] in BY_ID]
    assert [ln for ln in lines if " ... passed (" not in ln] == [next(ln for ln in lines if ln.startswith("6.2 "))]
    assert "6.2 swiglu_backward ... FAILED: dV: relative error 5.0e-01" in r.stdout, r.stdout
    assert "P project ... graded by your teacher" in r.stdout
    doc = json.loads(results.read_text())
    scores = _by_exercise(doc)
    assert list(scores) == IDS
    for e in EXERCISES:
        assert scores[e.id][1] == pytest.approx(e.points, abs=1e-3), e.id
        if e.id != "6.2":
            assert scores[e.id][0] == pytest.approx(e.points, abs=1e-3), e.id
    # 6.2's cases: dx, dW1, dV and dW2 in two shapes; only the two dV cases fail.
    cases = scores["6.2"][2]
    assert len(cases) == 8
    failed = [t["name"] for t in cases if t["status"] == "failed"]
    assert len(failed) == 2 and all(": dV [" in n for n in failed), failed
    assert all("relative error 5.0e-01" in t["output"] for t in cases if t["status"] == "failed")
    assert scores["6.2"][0] == pytest.approx(BY_ID["6.2"].points * 6 / 8, abs=1e-3)
    assert doc["score"] == pytest.approx(sum(e.points for e in EXERCISES) - BY_ID["6.2"].points * 2 / 8, abs=0.01)
    assert doc["max_score"] == sum(e.points for e in EXERCISES)


def test_without_the_reference_code_swapped_in_the_bug_would_cost_more(tmp_path, monkeypatch):
    """5.2 runs 3.2's rotary_backward: with 3.2 wrong, 5.2 passes only because the reference's is swapped in."""
    folder = tmp_path / "student"
    build_edition(folder, solved=IDS)
    _replace(folder / BY_ID["3.2"].file, "dx_odd = -d_even * sin + d_odd * cos", "dx_odd = d_even * sin + d_odd * cos")
    assert "3.2" in checks.depends_on("5.2")
    assert checks.run_check("5.2", folder, salt=3).status == "passed"
    monkeypatch.setattr(checks, "reference_swaps", lambda exercise_id, graded_with=(): [])
    result = checks.run_check("5.2", folder, salt=3)
    assert result.status == "failed" and "positions rotary" in result.detail, result.line
    assert 0 < result.score < BY_ID["5.2"].points  # partial: the cases without rotary positions are still right


def test_a_right_block_passes_fresh_cases(complete):
    """7.1's expected gradients are the library's own backward (finite differences would meet a ReLU kink
    within their step on some seeds): a correct block passes the cases of any seed."""
    r = _run(["check", "7.1", "--student", str(complete), "--seed", "1003188327"], ROOT)
    assert r.returncode == 0 and "7.1 ParallelBlock.backward ... passed" in r.stdout, r.stdout


def test_every_check_names_its_cases():
    """Every exercise is scored by named entries (a tensor or quantity in a case), none lumped together."""
    from course import reference

    for e in EXERCISES:
        exp = reference.expected(e.id)
        entries = list(checks._judge(e.id, exp, exp, 3).entries)
        assert checks.OTHER not in entries and len(entries) >= 2, (e.id, entries)
        assert all(entry.endswith("]") and " [" in entry for entry in entries), (e.id, entries)


def _mistake(tmp_path: Path, exercise_id: str, old: str, new: str) -> Path:
    """A complete student folder whose ``exercise_id`` has ``old`` replaced by ``new``."""
    folder = tmp_path / exercise_id
    build_edition(folder, solved=[exercise_id])
    _replace(folder / BY_ID[exercise_id].file, old, new)
    return folder


def test_a_collective_may_list_the_messages_of_a_step_in_any_order(tmp_path):
    """The contract leaves the order of a step's messages open: the ranks visited the other way round pass."""
    folder = _mistake(tmp_path, "13.2", "        for r in range(N):\n            partner, mine = r ^ d",
                      "        for r in reversed(range(N)):\n            partner, mine = r ^ d")
    result = checks.run_check("13.2", folder, salt=5)
    assert result.status == "passed", result.detail


@pytest.mark.parametrize("exercise_id, old, new, failing, passing", [
    ("5.2", "dk = dk.reshape(B, H_kv, H // H_kv, T, Dh).sum(axis=2)",
     "dk = dk.reshape(B, H_kv, H // H_kv, T, Dh).mean(axis=2)", "dW_k [", "n_kv_heads 4,"),
    ("9.2", "if t < min_len:", "if t <= min_len:", "banned [t at min_len", "banned [t after min_len"),
    ("12.2", "positions = np.arange(held, held + x.shape[1])", "positions = np.arange(x.shape[1])",
     "positions 3..3]", "positions 0..2]"),
    ("13.1", "chunks[r][i] = chunks[r][i] + received", "chunks[r][i] = received", "chunks [4 ranks", "messages ["),
])
def test_the_back_half_earns_partial_credit_by_case(tmp_path, exercise_id, old, new, failing, passing):
    """A typical mistake fails the cases it breaks, each named, and no more: what the
    exercise needs runs as the reference's, and the cases the mistake leaves right keep their share."""
    result = checks.run_check(exercise_id, _mistake(tmp_path, exercise_id, old, new), salt=5)
    failed = [entry for entry, passed, _ in result.cases if not passed]
    assert result.status == "failed" and any(failing in entry for entry in failed), result.cases
    kept = [passed for entry, passed, _ in result.cases if passing in entry]
    assert kept and all(kept), result.cases
    assert 0 < result.score < BY_ID[exercise_id].points, result.score


def test_a_file_that_does_not_compile_costs_only_the_exercises_in_it(complete, tmp_path):
    folder = tmp_path / "student"
    shutil.copytree(complete, folder)
    with open(folder / BY_ID["3.2"].file, "a", encoding="utf-8") as f:
        f.write("\ndef broken(:\n")
    result = checks.run_check("3.2", folder, salt=3)
    assert result.status == "failed" and "SyntaxError" in result.detail and result.score == 0, result.line
    for exercise_id in ("6.1", "5.2", "4.2"):  # 5.2 runs 3.2's code: the reference's, in a file that compiles
        result = checks.run_check(exercise_id, folder, salt=3)
        assert result.status == "passed", result.line


def test_every_exercise_is_graded_on_its_own_in_an_otherwise_empty_folder(tmp_path):
    """Only one exercise written (the reference code), everything else still raising: it passes in full."""
    for e in EXERCISES:
        if not e.needs:
            continue
        folder = tmp_path / e.id
        build_edition(folder, solved=[e.id])
        result = checks.run_check(e.id, folder, salt=7)
        assert result.status == "passed" and result.score == e.points, result.line


def test_a_student_edition_grades_with_the_students_own_code_for_what_an_exercise_needs(tmp_path):
    """A student edition has no reference code to swap in: its self-check says which exercise comes first."""
    folder = tmp_path / "edition"
    build_edition(folder, solved=["3.2"])
    r = _run(["check", "3.2"], folder)
    assert "3.2 rotary_backward ... not yet implemented (needs Exercise 3.1 first)" in r.stdout, r.stdout


# ---- hints in steps ---------------------------------------------------------------------------
def test_hints_come_in_steps(tmp_path):
    """1st failure: the tensor and its error; 2nd: the property; the formula only from the teacher's grader,
    after several failed attempts (counted in the student's folder) or with --hints full."""
    folder = tmp_path / "edition"
    build_edition(folder)
    _implement(folder, "6.1", WRONG_RMSNORM)
    variance = FORMULAS["6.1"]["scale"]
    outputs = [_run(["check", "6.1"], folder).stdout for _ in range(4)]
    first, second, _, fourth = outputs
    assert "6.1 rmsnorm_backward ... FAILED: dx: relative error" in first, first
    assert "orthogonal" not in first and "missing?" not in first
    assert "FAILED: dx is not orthogonal to x" in second and "missing?" not in second, second
    assert variance not in fourth  # the student edition's grader has no formula-level hints
    assert json.loads((folder / ".grader_attempts.json").read_text()) == {"6.1": 4}
    teacher = _run(["check", "6.1", "--student", str(folder)], ROOT).stdout  # 4 failed attempts: step 3
    assert variance in teacher and FORMULAS["6.1"]["dx"] in teacher, teacher
    (folder / ".grader_attempts.json").write_text("{}")
    teacher = _run(["check", "6.1", "--student", str(folder)], ROOT).stdout
    assert "orthogonal" not in teacher and variance not in teacher
    assert variance in _run(["check", "6.1", "--student", str(folder), "--hints", "full"], ROOT).stdout
    assert json.loads((folder / ".grader_attempts.json").read_text()) == {}  # the teacher's runs count nothing


def test_the_student_edition_holds_no_formula_level_hint(tmp_path):
    folder = tmp_path / "edition"
    build_edition(folder)
    assert (folder / "course" / "hints.py").read_text() == STUDENT_EDITION
    texts = {p: p.read_text(encoding="utf-8") for p in folder.rglob("*")
             if p.is_file() and p.suffix in (".py", ".md", ".ipynb", ".txt", ".json", ".cfg", ".toml")}
    formulas = [(e, about, text) for e, d in FORMULAS.items() for about, text in d.items()]
    assert len(formulas) > 30 and all(len(text) > 10 for _, _, text in formulas)
    leaks = [f"{e} {about}: {p.relative_to(folder)}" for e, about, text in formulas for p, t in texts.items()
             if text in t or json.dumps(text)[1:-1] in t]
    assert not leaks, leaks


def test_the_checks_take_their_formula_level_hints_from_hints_py():
    """A judge passes a hint (the step-3 text) from ``hints.formula``, never as a literal that the student
    edition's copy of checks.py would show."""
    import ast

    tree = ast.parse((ROOT / "course" / "checks.py").read_text(encoding="utf-8"))
    literal = []
    for node in ast.walk(tree):
        for k in node.keywords if isinstance(node, ast.Call) else ():
            if k.arg in ("hint", "formula") and isinstance(k.value, (ast.Constant, ast.JoinedStr)) and (
                    not isinstance(k.value, ast.Constant) or k.value.value):
                literal.append(f"line {node.lineno}")
    assert not literal, literal
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "formula"]
    assert len(calls) > 10


# ---- release ----------------------------------------------------------------------------------
def test_release_writes_only_the_chosen_solutions_into_the_students_folder(tmp_path, capsys):
    folder = tmp_path / "student"
    build_edition(folder)
    _implement(folder, "6.1", _fence_code("6.1").replace("\n", "  # mine\n", 1))  # the student's own 6.1
    _implement(folder, "3.1", "    out = x  # my attempt at 3.1\n")  # a wrong 3.1
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert main(["release", "3.1,3.2,5.1", "--into", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "Released into" in out and "3.1, 3.2, 5.1" in out
    changed = sorted(str(p.relative_to(folder)) for p in before if p.read_bytes() != before[p])
    assert changed == ["numpytransformer/core/gqa.py", "numpytransformer/core/rotary.py"], changed
    rotary = (folder / "numpytransformer" / "core" / "rotary.py").read_text()
    assert "my attempt at 3.1" in rotary and "BEGIN SOLUTION" not in rotary  # the student's own 3.1 stays
    assert "Exercise 3.2:" not in rotary
    assert "def rotary_forward(" in (folder / "numpytransformer" / "core" / "rotary.solution.py").read_text()
    assert "kept as you wrote it" in out and "rotary.solution.py" in out
    gqa = (folder / "numpytransformer" / "core" / "gqa.py").read_text()
    assert "Exercise 5.1:" not in gqa and "Exercise 5.2:" in gqa  # 5.2 was not released
    old = before[folder / "numpytransformer" / "core" / "gqa.py"].decode().splitlines()
    new = gqa.splitlines()
    assert [ln for ln in old if "Exercise 5.1:" not in ln] == [ln for ln in new if ln in old]
    assert "# mine" in (folder / "numpytransformer" / "core" / "rmsnorm.py").read_text()
    r = _run(["check"], folder)
    passed = {ln.split(" ")[0] for ln in r.stdout.splitlines() if " ... passed (" in ln}
    assert passed == {"5.1", "6.1"}, r.stdout  # 3.2 runs the student's 3.1


def test_releasing_every_solution_gives_the_package_that_build_solved_gives(tmp_path, capsys):
    """Two fences in one function (1.1 and 1.2 in gelu_backward) and one exercise in two functions (2.1)
    are released whole; the lessons are the same in every edition."""
    build_edition(tmp_path / "released")
    build_edition(tmp_path / "solved", solved=IDS)
    assert main(["release", ",".join(IDS), "--into", str(tmp_path / "released")]) == 0
    assert f"Released into {tmp_path / 'released'}: {', '.join(IDS)}" in capsys.readouterr().out
    for path in [*sorted((tmp_path / "solved" / "numpytransformer").rglob("*.py")),
                 *sorted((tmp_path / "solved" / "lessons").glob("*.ipynb"))]:
        rel = path.relative_to(tmp_path / "solved")
        assert (tmp_path / "released" / rel).read_bytes() == path.read_bytes(), rel
    assert not list((tmp_path / "released").rglob("*.solution.py"))


def test_release_overwrites_no_line_the_student_wrote(tmp_path, capsys):
    """A student's own version of one of the exercise's functions (2.1's backward) stays as written, its
    solution beside it in a .solution.py file; the other function (2.1's forward), untouched, is released."""
    folder = tmp_path / "student"
    build_edition(folder)
    losses = folder / BY_ID["2.1"].file
    stubs = [ln for ln in losses.read_text(encoding="utf-8").splitlines(keepends=True) if "Exercise 2.1:" in ln]
    assert len(stubs) == 2
    _replace(losses, stubs[1], "        d = d * 2  # my attempt, unfinished\n" + stubs[1])  # the raise is still there
    assert main(["release", "2.1", "--into", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "kept as you wrote" in out and "losses.solution.py" in out
    text = losses.read_text()
    assert "d = d * 2  # my attempt, unfinished\n" + stubs[1] in text and stubs[0] not in text.splitlines(True)
    beside = losses.with_name("losses.solution.py").read_text()
    assert "def softmax_cross_entropy_backward(" in beside and "BEGIN SOLUTION" not in beside
    compile(beside, "losses.solution.py", "exec")
    assert main(["release", "2.1", "--into", str(folder)]) == 0  # again: nothing more is added
    assert losses.with_name("losses.solution.py").read_text() == beside


@pytest.mark.parametrize("args, fragment", [
    (["release", "9.9", "--into", "{folder}"], "9.9"),
    (["release", "4.1", "--into", "{missing}"], "holds no numpytransformer"),
    (["release", "", "--into", "{folder}"], "IDS"),
])
def test_release_refuses_bad_input_on_one_line(tmp_path, capsys, args, fragment):
    folder = tmp_path / "student"
    (folder / "numpytransformer").mkdir(parents=True)
    (folder / "numpytransformer" / "__init__.py").write_text("")
    argv = [a.format(folder=folder, missing=tmp_path / "missing") for a in args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and fragment in err, err


# ---- the Gradescope package -------------------------------------------------------------------
def _gradescope_root(tmp_path: Path, zip_path: Path) -> Path:
    """Unpack the autograder as Gradescope does: the zip into ROOT/source, run_autograder beside it."""
    root = tmp_path / "autograder"
    with zipfile.ZipFile(zip_path) as z:
        z.extractall(root / "source")
    shutil.copy2(root / "source" / "run_autograder", root / "run_autograder")
    for name in ("run_autograder", "source/run_autograder", "source/setup.sh"):
        (root / name).chmod(0o755)
    (root / "submission").mkdir()
    return root


def _run_autograder(root: Path, **env_vars) -> dict:
    """Run the zip's run_autograder on ROOT; by default as oneself (no sandbox user), as a dry run does."""
    env = _env()
    env.update(AUTOGRADER_ROOT=str(root), AUTOGRADER_PYTHON=sys.executable, AUTOGRADER_SANDBOX_USER="")
    env.update(env_vars)
    r = subprocess.run([str(root / "run_autograder")], cwd=str(root.parent), env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads((root / "results" / "results.json").read_text())


def test_the_gradescope_zip_grades_a_submission_as_gradescope_runs_it(tmp_path, complete, capsys):
    """An assignment of 6.1 and 6.2, graded by the zip's run_autograder as Gradescope runs it."""
    zip_path = tmp_path / "autograder.zip"
    assert main(["gradescope", str(zip_path), "--exercises", "6.1,6.2"]) == 0
    assert "What students upload" in capsys.readouterr().out
    with zipfile.ZipFile(zip_path) as z:
        names = z.namelist()
        modes = {i.filename: i.external_attr >> 16 for i in z.infolist()}
    assert "setup.sh" in names and "run_autograder" in names
    assert modes["run_autograder"] & stat.S_IXUSR and modes["setup.sh"] & stat.S_IXUSR
    assert "course/checks.py" in names and "student_base/numpytransformer/core/rmsnorm.py" in names
    # setup.sh installs NumPy with pip (not run here); it must at least be valid bash.
    root = _gradescope_root(tmp_path / "flat", zip_path)
    assert subprocess.run(["bash", "-n", str(root / "source" / "setup.sh")]).returncode == 0

    # 1. The edited files alone: a right rmsnorm.py, a swiglu_backward that stops at W2, and a stray file.
    shutil.copy2(complete / "numpytransformer" / "core" / "rmsnorm.py", root / "submission" / "rmsnorm.py")
    edition = tmp_path / "edition"
    build_edition(edition)
    _implement(edition, "6.2", "    dm, dW2, _ = linear_backward(dout, lin2)\n    dx = dW1 = dV = None\n")
    shutil.copy2(edition / "numpytransformer" / "core" / "swiglu.py", root / "submission" / "swiglu.py")
    (root / "submission" / "notes.txt").write_text("hello")
    doc = _run_autograder(root)
    scores = _by_exercise(doc)
    assert list(scores) == ["6.1", "6.2"] and doc["max_score"] == BY_ID["6.1"].points + BY_ID["6.2"].points
    assert scores["6.1"][0] == pytest.approx(BY_ID["6.1"].points, abs=1e-3)
    assert "6.2 swiglu_backward ... FAILED: dx is None" in doc["output"]
    assert 0 < scores["6.2"][0] < 10  # dW2 is right
    assert "rmsnorm.py -> numpytransformer/core/rmsnorm.py" in doc["output"] and "notes.txt" in doc["output"]

    # 2. The whole folder, as a zip: 6.1, and 6.2 but its dV cases.
    root = _gradescope_root(tmp_path / "whole", zip_path)
    shutil.make_archive(str(root / "submission" / "mywork"), "zip", complete.parent, complete.name)
    doc = _run_autograder(root)
    scores = _by_exercise(doc)
    assert scores["6.1"][0] == pytest.approx(BY_ID["6.1"].points, abs=1e-3)
    assert scores["6.2"][0] == pytest.approx(BY_ID["6.2"].points * 6 / 8, abs=1e-3)


def test_a_weekly_assignment_grades_its_exercises_with_a_recorded_seed(tmp_path, capsys):
    """--exercises 1 (lesson 1: 1.1 and 1.2, GELU's two forms) grades those alone, out of their points. The fresh cases'
    seed is in results.json; the same seed draws the same cases, another seed others. Public cases are
    visible at once, fresh ones after the due date."""
    zip_path = tmp_path / "week1.zip"
    assert main(["gradescope", str(zip_path), "--exercises", "9.9,1"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "9.9" in err, err
    assert main(["gradescope", str(zip_path), "--exercises", "1"]) == 0
    assert f"It grades 1.1, 1.2 ({WEEK1} points)" in capsys.readouterr().out
    edition = tmp_path / "edition"
    build_edition(edition)
    _implement(edition, "1.2", "        dx = dout * cache.gate\n")  # wrong by an amount that depends on the case

    def grade(name, **env_vars):
        root = _gradescope_root(tmp_path / name, zip_path)
        shutil.copy2(edition / BY_ID["1.2"].file, root / "submission" / "gelu.py")
        return root, _run_autograder(root, **env_vars)

    _, first = grade("a", AUTOGRADER_SEED="11")
    _, again = grade("b", AUTOGRADER_SEED="11")
    _, other = grade("c", AUTOGRADER_SEED="12")
    assert list(_by_exercise(first)) == ["1.1", "1.2"] and first["max_score"] == WEEK1 and first["score"] == 0
    assert first["extra_data"] == {"seed": 11, "exercises": ["1.1", "1.2"]} and "seed 11" in first["output"]
    assert first["tests"] == again["tests"]
    assert first["visibility"] == "visible"
    for doc in (first, other):
        assert {t["visibility"] for t in doc["tests"] if "(public case)" in t["name"]} == {"visible"}
        fresh = [t for t in doc["tests"] if "(fresh case" in t["name"]]
        assert fresh and {t["visibility"] for t in fresh} == {"after_due_date"}
        # the public cases' answers ship in the edition: they are feedback, and every point is on fresh cases
        assert {t["max_score"] for t in doc["tests"] if "(public case)" in t["name"]} == {0}
        assert sum(t["max_score"] for t in fresh) == pytest.approx(WEEK1, abs=1e-3)
    public = [t for t in first["tests"] if t["visibility"] == "visible"]
    assert public == [t for t in other["tests"] if t["visibility"] == "visible"]
    fresh = {doc["extra_data"]["seed"]: [t["output"] for t in doc["tests"] if t["number"].startswith("1.2.")
                                        and t["visibility"] != "visible"] for doc in (first, other)}
    assert fresh[11] != fresh[12] and all(fresh.values())  # other cases, other errors

    # On Gradescope the seed comes from the submission's id: a regrade draws the same cases.
    from course.gradescope import submission_seed

    metadata = tmp_path / "metadata"
    metadata.mkdir()
    (metadata / "submission_metadata.json").write_text(json.dumps({"id": 4242}))
    seed, _ = submission_seed(metadata)
    root, doc = grade("d")
    (root / "submission_metadata.json").write_text(json.dumps({"id": 4242}))
    assert _run_autograder(root)["extra_data"]["seed"] == seed == submission_seed(metadata)[0] > 0


def _python_for_everyone(where: Path):
    """An interpreter with NumPy that an unprivileged user can run: this one, or else a venv of the
    system's Python of this version with this NumPy copied in; None if there is neither."""
    import pwd

    import numpy

    def runs(python: str) -> bool:
        nobody = pwd.getpwnam("nobody")
        try:
            return subprocess.run([python, "-I", "-c", "import numpy"], user=nobody.pw_uid, group=nobody.pw_gid,
                                  extra_groups=[], cwd="/", capture_output=True).returncode == 0
        except OSError:  # not even allowed to start it
            return False

    if runs(sys.executable):
        return sys.executable
    system = shutil.which(f"python{sys.version_info.major}.{sys.version_info.minor}", path="/usr/bin:/usr/local/bin")
    if system is None or subprocess.run([system, "-m", "venv", "--without-pip", str(where / "py")]).returncode:
        return None
    site = next((where / "py" / "lib").glob("python*/site-packages"))
    for part in Path(numpy.__file__).parent.parent.glob("numpy*"):
        if part.is_dir():
            shutil.copytree(part, site / part.name)
    python = str(where / "py" / "bin" / "python")
    return python if runs(python) else None


CHEAT = '''# At import, look for the teacher's library (every solution in it) and load the package from there.
import os as _os, sys as _sys, tempfile as _tempfile
from pathlib import Path as _Path

_SKIP = {skip!r}  # copies on the test machine that a Gradescope container does not hold


def _find_reference():
    here = _Path(__file__).resolve().parent
    roots = [_Path(_os.environ.get("AUTOGRADER_ROOT", "/autograder")), _Path("/autograder"), _Path("/"),
             *here.parents, *_Path.cwd().parents, *(_Path(p) for p in _sys.path if p),
             *sorted(_Path(_tempfile.gettempdir()).glob("nt-*"))]
    for root in roots:
        for pattern in ("numpytransformer", "*/numpytransformer", "*/*/numpytransformer"):
            try:
                found = sorted(root.glob(pattern))
            except OSError:
                continue
            for pkg in found:
                if pkg.resolve() == here or any(str(pkg.resolve()).startswith(s) for s in _SKIP):
                    continue
                try:
                    if "### BEGIN SOLUTION 1.1" in (pkg / "core" / "gelu.py").read_text():
                        return pkg
                except OSError:
                    continue
    return None


_reference = _find_reference()
if _reference is not None:
    __path__[:] = [str(_reference)]
'''


def test_the_sandboxed_submission_cannot_read_the_teachers_library(tmp_path, capsys):
    """A submission whose package, at import, looks for the teacher's library (in the autograder's
    folder, /, its parent folders, site-packages, the grader's temporary folders) and loads itself from
    there scores everything when it runs as root, as in a dry run; run_autograder run as root makes the
    library root's alone and runs the student's code as the user `student`: the same submission then
    scores nothing, as not implemented."""
    import tempfile

    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("the sandbox needs root and useradd")
    where = Path(tempfile.mkdtemp(prefix="nt-gradescope-test-"))  # outside pytest's folders, which only root may enter
    try:
        where.chmod(0o755)
        python = _python_for_everyone(where)
        if python is None:
            pytest.skip("no Python with NumPy that an unprivileged user can run")
        zip_path = where / "week1.zip"
        assert main(["gradescope", str(zip_path), "--exercises", "1.1,1.2"]) == 0
        capsys.readouterr()
        elsewhere = [str(p.resolve()) for r in (Path("/"), Path(tempfile.gettempdir()))
                     for pattern in ("*/numpytransformer", "*/*/numpytransformer") for p in r.glob(pattern)
                     if where not in p.resolve().parents]
        cheat = where / "cheat"
        build_edition(cheat / "student")
        init = cheat / "student" / "numpytransformer" / "__init__.py"
        init.write_text(CHEAT.format(skip=[str(ROOT), *elsewhere]) + init.read_text(encoding="utf-8"))

        def grade(name, **env_vars):
            root = _gradescope_root(where / name, zip_path)
            root.parent.chmod(0o755)
            shutil.copytree(cheat / "student", root / "submission" / "student")
            return root, _run_autograder(root, AUTOGRADER_PYTHON=python, AUTOGRADER_SEED="3", **env_vars)

        _, unsandboxed = grade("as-root")  # the test can fail: the cheat works where nothing stops it
        assert unsandboxed["score"] == pytest.approx(WEEK1, abs=0.01), unsandboxed["output"]
        root, doc = grade("sandboxed", AUTOGRADER_SANDBOX_USER="student")
        assert doc["max_score"] == WEEK1 and doc["score"] == 0, doc["output"]
        assert "1.1 gelu_backward ... not yet implemented" in doc["output"]
        assert "1.2 gelu_backward ... not yet implemented" in doc["output"]
        assert stat.S_IMODE((root / "source" / "numpytransformer").stat().st_mode) & 0o077 == 0
    finally:
        shutil.rmtree(where, ignore_errors=True)


def test_a_flat_file_goes_to_its_library_file_and_an_ambiguous_name_is_ignored(tmp_path):
    """A file uploaded alone lands on the library file of its name (exercise 12.1's here). A name that
    two library files share and no exercise settles (reverse.py) is ignored, with a note."""
    from course.gradescope import find_student_folder

    base = tmp_path / "base"
    exercise_file = Path(BY_ID["12.1"].file).relative_to("numpytransformer")
    for rel in ("__init__.py", exercise_file.as_posix(), "tasks/reverse.py", "datasets/reverse.py"):
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text("# the edition's\n")
    (tmp_path / "submission").mkdir()
    for name in (exercise_file.name, "reverse.py"):
        (tmp_path / "submission" / name).write_text("# mine\n")
    folder, notes = find_student_folder(tmp_path / "submission", tmp_path / "work", base)
    assert (folder / BY_ID["12.1"].file).read_text() == "# mine\n"
    assert (folder / "numpytransformer" / "tasks" / "reverse.py").read_text() == "# the edition's\n"
    assert f"{exercise_file.name} -> {BY_ID['12.1'].file}" in notes[0]
    assert "reverse.py (more than one file has this name" in notes[-1]


def test_a_grader_that_trips_still_writes_results_json(tmp_path, monkeypatch):
    """Run outside its zip (no student_base/), the autograder cannot lay flat files onto the edition:
    results.json says so, with no score, rather than leaving Gradescope without a file."""
    from course.gradescope import autograde

    (tmp_path / "submission").mkdir()
    (tmp_path / "submission" / "linear.py").write_text("x = 1\n")
    doc = json.loads(autograde(str(tmp_path)).read_text())
    assert doc["score"] == 0 and doc["tests"] == [] and doc["output"].startswith("The autograder failed")


def test_outputs_a_judge_trips_over_are_a_failure_not_a_crash(monkeypatch):
    def trips(g, exercise_id, got, exp):
        g.touch("dx [a case]")
        if got is not exp:  # the right answer is judged first, to list the cases
            raise IndexError("odd")
    monkeypatch.setitem(checks.JUDGES, "pair", trips)
    result = checks.run_check("1.2")
    assert result.status == "failed" and "cannot judge" in result.detail and "IndexError: odd" in result.detail
    assert result.score == 0 and result.cases == (("dx [a case]", False, result.detail),)


def test_gradescope_upload_instructions_are_written_down():
    from course.gradescope import UPLOAD

    guide = (ROOT / "lessons" / "GRADESCOPE.md").read_text(encoding="utf-8")
    assert UPLOAD in " ".join(guide.split()) and "python -m course gradescope" in guide


# ---- the builder's bad paths ------------------------------------------------------------------
@pytest.mark.parametrize("where", ["parent is a file", "cannot be created"])
def test_build_into_a_path_that_cannot_be_a_folder_is_one_line(tmp_path, where):
    if where == "parent is a file":
        (tmp_path / "afile").write_text("x")
        out = tmp_path / "afile" / "edition"
    elif Path("/proc/self").is_dir():
        out = Path("/proc/nt-no-such-folder/edition")  # /proc refuses new folders, even to root
    else:
        pytest.skip("no /proc here, and no other path that refuses a new folder whoever runs the test")
    r = _run(["build", str(out)], ROOT)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and str(out) in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_two_builds_into_one_folder_at_once_leave_one_whole_edition(tmp_path):
    """As under ``mpiexec -n 2``: each build writes a private folder and renames it into place,
    so one takes OUT_DIR whole and the other refuses it on one line; no half edition, no leftovers."""
    for attempt in range(3):  # the two often finish within moments of each other; several tries meet the race
        out = tmp_path / f"edition{attempt}"
        procs = [subprocess.Popen([sys.executable, "-m", "course", "build", str(out)], cwd=ROOT, env=_env(),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        runs = sorted((p.wait(timeout=600), *p.communicate()) for p in procs)
        assert [code for code, _, _ in runs] == [0, 2], runs
        err = runs[1][2]
        assert len(err.strip().splitlines()) == 1 and "not empty" in err and "Traceback" not in err, err
        assert (out / "EXERCISES.md").is_file() and (out / "course" / "reference.npz").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["edition0", "edition1", "edition2"]


def test_gradescope_into_a_folder_that_cannot_be_written_is_one_line(capsys):
    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc here, and no other folder that refuses a new file whoever runs the test")
    out = "/proc/nt-no-such-autograder.zip"  # /proc refuses new files, even to root
    assert main(["gradescope", out]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and out in err and "cannot be written" in err, err



def test_an_assignment_keeps_the_reference_of_its_own_exercises_out_of_the_students_process(tmp_path):
    """Graded alone, 3.2 runs the reference 3.1; graded in an assignment that also grades 3.1, it runs the
    student's own 3.1, so that no reference code of the assignment's exercises reaches the student's process."""
    folder = tmp_path / "student"
    build_edition(folder, solved=["3.2"])
    assert checks.run_check("3.2", folder, salt=5).status == "passed"
    result = checks.run_check("3.2", folder, salt=5, graded_with=["3.1", "3.2"])
    assert result.status == "not implemented" and "3.1" in result.line, result.line
