"""A student cannot fool the teacher's grader.

Each test builds a student edition, writes a *wrong* RMSNorm backward (the scale term
left out), tampers with the student's folder the way a student could, and
grades it the way a teacher does: with the full repository's grader and ``--student``.
The grader's process never imports the student's code; the student's functions run in a
separate process on cases drawn with a fresh seed, and are judged against the teacher's
library with the grader's own measure. So every tampering below still gives FAILED.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from course.checks import run_check
from course.fences import build_edition, package_dir

ROOT = package_dir().parent

WRONG_RMSNORM = """    dgamma = (dout * xhat).reshape(-1, D).sum(axis=0)
    g = dout * gamma
    dx = rrms * g
"""


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    out = tmp_path_factory.mktemp("tamper") / "edition"
    build_edition(out)
    _implement(out, "numpytransformer/core/rmsnorm.py", "Exercise 6.1:", WRONG_RMSNORM)
    return out


@pytest.fixture
def student(pristine, tmp_path):
    out = tmp_path / "student"
    shutil.copytree(pristine, out)
    return out


def _implement(root: Path, rel: str, marker: str, code: str) -> None:
    path = root / rel
    text = path.read_text(encoding="utf-8")
    (line,) = [ln for ln in text.splitlines(keepends=True) if marker in ln]
    path.write_text(text.replace(line, code), encoding="utf-8")


def _append(root: Path, rel: str, code: str) -> None:
    path = root / rel
    path.write_text(path.read_text(encoding="utf-8") + "\n" + code + "\n", encoding="utf-8")


def _grade(student_dir: Path, exercise_id: str = "6.1", timeout: float = 60.0):
    return run_check(exercise_id, student_dir, timeout, salt=12345)


def _self_check(student_dir: Path, exercise_id: str = "6.1") -> str:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    r = subprocess.run([sys.executable, "-m", "course", "check", exercise_id], cwd=student_dir,
                       capture_output=True, text=True, env=env, timeout=300)
    return r.stdout


def test_the_wrong_rmsnorm_fails(student):
    result = _grade(student)
    assert result.status == "failed" and "root mean square, missing?" in result.detail, result.line


def test_rel_error_returning_zero_does_not_pass(student):
    """The trick: the student's gradcheck (and their copy of the grader's measure) say 0."""
    _append(student, "numpytransformer/core/gradcheck.py",
            "def rel_error(a, b):\n    return 0.0\n\ndef _grad_error(a, b):\n    return 0.0\n")
    _append(student, "course/trusted.py",
            "def rel_error(a, b):\n    return 0.0\n\ndef grad_error(a, b):\n    return 'relative error', 0.0\n")
    result = _grade(student)
    assert result.status == "failed" and "dx" in result.detail, result.line


def test_a_monkeypatched_numpy_in_the_students_package_does_not_pass(student):
    _append(student, "numpytransformer/__init__.py",
            "import numpy as _np\n"
            "_np.max = lambda *a, **k: 0.0\n_np.abs = lambda x, *a, **k: x * 0\n"
            "_np.allclose = lambda *a, **k: True\n_np.array_equal = lambda *a, **k: True\n"
            "_np.testing.assert_allclose = lambda *a, **k: None\n")
    result = _grade(student)
    assert result.status == "failed", result.line


def test_replaced_check_and_helper_functions_in_the_students_package_do_not_pass(student):
    """The student's copy of the grader says "passed" whatever happens; the teacher's copy is used."""
    _append(student, "course/checks.py",
            "def run_check(exercise_id, *args, **kwargs):\n"
            "    return Result(exercise_id, 'passed', 'passed (every value exact)')\n"
            "JUDGES = {k: (lambda *a: None) for k in JUDGES}\n")
    (student / "course" / "probe.py").write_text(
        "import sys, json\nif __name__ == '__main__':\n    open(sys.argv[4], 'w').write(json.dumps({'status': 'ok'}))\n",
        encoding="utf-8")
    assert "6.1 rmsnorm_backward ... passed" in _self_check(student)
    result = _grade(student)
    assert result.status == "failed" and "dx" in result.detail, result.line


def test_answers_copied_from_the_editions_reference_values_do_not_pass(student):
    """The student's code writes the stored reference values as its outputs; the teacher's cases are fresh."""
    _append(student, "numpytransformer/__init__.py", """
import atexit as _atexit, json as _json, sys as _sys
from pathlib import Path as _Path

def _forge():
    import numpy
    stored = numpy.load(_Path(__file__).parent.parent / "course" / "reference.npz")
    prefix = _sys.argv[2] + "/"
    numpy.savez(_sys.argv[3], **{k[len(prefix):]: stored[k] for k in stored.files if k.startswith(prefix)})
    _Path(_sys.argv[4]).write_text(_json.dumps({"status": "ok"}))
_atexit.register(_forge)
""")
    assert "6.1 rmsnorm_backward ... passed" in _self_check(student)   # the public cases are forged...
    result = _grade(student)                                               # ...the teacher's are not those
    assert result.status == "failed", result.line


def test_each_check_has_a_time_limit(student):
    _implement(student, "numpytransformer/core/gelu.py", "Exercise 1.1:", "        while True:\n            pass\n")
    result = _grade(student, "1.1", timeout=2.0)
    assert result.status == "failed" and "time limit" in result.detail, result.line


def test_the_teachers_command_line_grades_the_students_folder(student, tmp_path):
    results = tmp_path / "results.json"
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    r = subprocess.run([sys.executable, "-m", "course", "check", "6", "--student", str(student),
                        "--json", str(results)], cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "with the grader in" in r.stdout and "cases drawn with --seed" in r.stdout
    assert "6.1 rmsnorm_backward ... FAILED" in r.stdout
    assert "6.2 swiglu_backward ... not yet implemented" in r.stdout
    assert '"score": 0' in results.read_text()
