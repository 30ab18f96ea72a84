"""The values a student's answers are compared with, computed by the grader's own library.

In the teacher's repository every value is computed when it is needed: the forward
values and optimiser states by running the library's own functions on the trusted
cases (:func:`probe.collect`), the gradients of the pairs by finite differences of the
library's forward (:func:`trusted.numerical_gradient`), never by the backward under test.
A whole layer's (7.1, 7.2) are its own backward's, which ``tests/test_gradients.py`` proves
by finite differences: a layer's feed-forward has dozens of ReLU kinks, and a case drawn
afresh (a salt) can put one within the step of the differences, which are then wrong (the
cases of ``--seed 1003188327`` did, and failed a correct 7.2).
A student edition has no solutions to compute them with, so ``build`` stores them,
computed by the teacher's library, in ``exercises/reference.npz`` (numbers, no code,
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


def _pair_gradients(exercise_id: str, values: dict) -> None:
    _, module, names = trusted.PROBES[exercise_id]
    for j in range(len(names) // 2):
        forward, pre = getattr(_lib(module), names[2 * j]), probe.pair_prefix(j)
        for i, case in enumerate(trusted.pair_cases(exercise_id)):
            if case.reference != "numeric":
                continue
            inputs = {k: v.copy() for k, v in case.inputs.items()}
            out, _ = forward(**inputs, **case.static)
            dout = trusted.rng(case.seed).standard_normal(np.shape(out))
            for name in case.wrt:
                if name is not None:
                    values[f"{pre}c{i}.d{name}"] = trusted.numerical_gradient(
                        lambda: forward(**inputs, **case.static)[0], inputs[name], dout)


def compute(exercise_id: str) -> Dict[str, np.ndarray]:
    """The expected values of one exercise, from this package's own library."""
    values = probe.collect(exercise_id, _lib)
    if trusted.PROBES[exercise_id][0] == "pair":
        _pair_gradients(exercise_id, values)
    return values


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
