"""The lesson notebooks as files: all there, in order, committed without outputs.

Executing them is CI's job (``python lessons/run_lessons.py``, minutes, not seconds).
"""
import json
from pathlib import Path

import pytest

LESSONS = Path(__file__).resolve().parent.parent / "lessons"
NOTEBOOKS = sorted(LESSONS.glob("[0-9][0-9]_*.ipynb"))


def test_fourteen_lessons_numbered_in_order():
    assert [int(p.name[:2]) for p in NOTEBOOKS] == list(range(1, 15))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_without_outputs(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert nb["nbformat"] == 4
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code, "a lesson runs code"
    for cell in code:
        assert cell["outputs"] == [] and cell["execution_count"] is None, "clear the outputs before committing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_uses_the_library_beside_it_and_checks_with_asserts(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    sources = ["".join(c["source"]) for c in nb["cells"]]
    assert sources[0].startswith(f"# Lesson {int(path.name[:2])}")
    first_code = next(s for c, s in zip(nb["cells"], sources) if c["cell_type"] == "code")
    assert "sys.path.insert(0, str(pathlib.Path.cwd().parent))" in first_code
    assert "import numpytransformer" in first_code
    assert any("assert " in s for c, s in zip(nb["cells"], sources) if c["cell_type"] == "code")


QUESTIONED = NOTEBOOKS
INSTRUCTOR = (LESSONS / "INSTRUCTOR.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("path", QUESTIONED, ids=lambda p: p.name)
def test_lesson_ends_with_written_questions_answered_in_instructor_md(path):
    """Each lesson ends with 2-4 written questions (a "## Questions" cell); INSTRUCTOR.md answers every one."""
    import re

    nb = json.loads(path.read_text(encoding="utf-8"))
    last = "".join(nb["cells"][-1]["source"])
    assert nb["cells"][-1]["cell_type"] == "markdown" and last.startswith("## Questions")
    numbers = re.findall(r"^(\d)\. \*\*", last, flags=re.MULTILINE)
    assert 2 <= len(numbers) <= 4 and numbers == [str(i) for i in range(1, len(numbers) + 1)]
    n = int(path.name[:2])
    section = INSTRUCTOR.split(f"#### Lesson {n} questions", 1)
    assert len(section) == 2, f"INSTRUCTOR.md has no '#### Lesson {n} questions' answers"
    answers = re.split(r"\n#{2,4} ", section[1], maxsplit=1)[0]
    for q in numbers:
        assert re.search(rf"^{q}\. \*\*", answers, flags=re.MULTILINE), f"no model answer to lesson {n} question {q}"
