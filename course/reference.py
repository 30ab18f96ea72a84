"""The values a student's answers are compared with, computed by the grader's own library.

In the teacher's repository every value is computed when it is needed, by running the
library's own functions on the trusted cases (:func:`probe.collect`): the forward values,
the optimiser states, and the gradients of its own backward passes, the teacher's analytic
ones, which ``tests/test_gradients.py``, ``tests/test_siblings.py`` and
``tests/test_exercises.py`` prove by finite differences (the last on these very cases). A
student's backward is held to them at ``trusted.ANALYTIC_TOL``, below what plain centred
differences reach (higher-order ones or a complex step can: see ``lessons/INSTRUCTOR.md``).
A student edition has no solutions to compute them with, so ``build`` stores them,
computed by the teacher's library, in ``course/reference.npz`` (numbers, no code,
read without pickle).
"""
from __future__ import annotations

import importlib
import re
from functools import lru_cache
from pathlib import Path
from typing import Dict

import numpy as np

from . import probe, trusted

REFERENCE_FILE = Path(__file__).resolve().parent / "reference.npz"
_PACKAGE = "numpytransformer"  # the library this course grades

@lru_cache(maxsize=None)
def is_student_edition() -> bool:
    """Whether this package is an edition: its library holds no solution fences (``build`` cut them).
    A plain scan for the fences' opening line, so that this module needs nothing of ``fences.py``
    (which imports it to write the stored values)."""
    library = Path(__file__).resolve().parent.parent / _PACKAGE
    fence = re.compile(r"^[ \t]*### BEGIN SOLUTION \d+\.\d+: ", re.MULTILINE)
    return not any(fence.search(path.read_text(encoding="utf-8")) for path in library.rglob("*.py"))


def require_stored_values() -> None:
    """A student edition grades only against its stored values: computed live, they would come from
    the student's own code, which would then be graded against itself."""
    if is_student_edition() and not REFERENCE_FILE.is_file():
        raise FileNotFoundError(f"{REFERENCE_FILE} is missing: a student edition's grader compares your answers "
                                "with the values stored there; copy that file again from the edition your teacher "
                                "gave you")


def _lib(name: str):
    return importlib.import_module(f"{_PACKAGE}.{name}")


def compute(exercise_id: str) -> Dict[str, np.ndarray]:
    """The expected values of one exercise, from this package's own library."""
    return probe.collect(exercise_id, _lib)


def expected(exercise_id: str) -> Dict[str, np.ndarray]:
    """From the stored file in a student edition, computed live in the full library."""
    if REFERENCE_FILE.is_file() and not trusted.SALT:
        prefix = f"{exercise_id}/"
        with np.load(REFERENCE_FILE, allow_pickle=False) as f:
            return {k[len(prefix):]: f[k] for k in f.files if k.startswith(prefix)}
    return compute(exercise_id)


def write_reference_file(path, exercise_ids) -> None:
    """Store every exercise's expected values for the public cases (the student edition's ``reference.npz``)."""
    assert trusted.SALT == 0
    arrays = {f"{e}/{k}": v for e in exercise_ids for k, v in compute(e).items()}
    np.savez_compressed(path, **arrays)
