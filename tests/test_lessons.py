"""The lesson notebooks as files: all there, in order, committed without outputs.

Executing them is CI's job (``python lessons/run_lessons.py``, minutes, not seconds).
"""
import json
from pathlib import Path

import pytest

LESSONS = Path(__file__).resolve().parent.parent / "lessons"
NOTEBOOKS = sorted(LESSONS.glob("[0-9][0-9]_*.ipynb"))


def test_thirteen_lessons_numbered_in_order():
    assert [int(p.name[:2]) for p in NOTEBOOKS] == list(range(1, 14))


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
