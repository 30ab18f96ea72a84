"""Classroom exercises: the student edition of the library and its grader.

The library is its own reference solution. The code a student writes is fenced in it::

    ### BEGIN SOLUTION 4.2: dq, dk and dv of scaled dot-product attention
    ...
    ### END SOLUTION

Commands (run from the repository, or from a student edition's folder)::

    python -m numpytransformer.exercises list            # the exercises
    python -m numpytransformer.exercises build OUT_DIR   # the student edition, fences cut out
    python -m numpytransformer.exercises check [N]       # grade exercise N (4.2), lesson N (4), or all

The grader checks the ``numpytransformer`` package that Python imports, which is the
one in the current directory when run as ``python -m`` from there.
"""
from .catalog import BY_ID, EXERCISES, LESSONS, Exercise

__all__ = ["Exercise", "EXERCISES", "BY_ID", "LESSONS"]
