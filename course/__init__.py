"""Classroom exercises: the student edition of the library and its grader.

The library is its own reference solution. The code a student writes is fenced in it::

    ### BEGIN SOLUTION 6.1: dx and dgamma of RMSNorm, gamma times x over the root mean square of its row
    ...
    ### END SOLUTION

Commands (run from the repository, or from a student edition's folder)::

    python -m course list            # the exercises
    python -m course build OUT_DIR   # the student edition, fences cut out
    python -m course build OUT_DIR --guided   # the same, the derivations kept
    python -m course check [N]       # grade exercise N (4.2), lesson N (4), or all
    python -m course check --student DIR --json results.json   # a teacher grading
    python -m course release 4.1,4.2 --into DIR   # solutions into a student's folder
    python -m course gradescope autograder.zip    # the Gradescope autograder

Without ``--student`` the grader checks its own package (a student checking their work).
With it, the teacher's grader grades the student's folder: the student's functions run in
a separate process (``probe.py``, loaded from the grader's install), and are judged in the
grader's process, which never imports the student's code, against values from the
grader's own library, with the measure and cases of ``trusted.py``. The teacher's grader
runs what an exercise depends on as its own reference code, so each exercise is graded on
its own, and scores it case by case. Hints come in steps (``hints.py``).
"""
from .catalog import BY_ID, EXERCISES, LESSONS, Exercise

__all__ = ["Exercise", "EXERCISES", "BY_ID", "LESSONS"]
