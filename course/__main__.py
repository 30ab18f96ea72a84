"""``python -m course {list,build,check,release,gradescope}``; see the package docstring."""
from __future__ import annotations

import argparse
import json
import secrets
import sys
from pathlib import Path
from typing import List, Optional

from .catalog import BY_ID, EXERCISES, LESSONS, PROJECTS, check_command

PROG = "python -m course"


class _Parser(argparse.ArgumentParser):
    """Errors on one line (argparse's default also prints the usage)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


#: --hints: which of the grader's three steps it tells (see course/hints.py)
HINTS = {"steps": None, "tensor": 1, "property": 2, "full": 3}
ATTEMPTS_FILE = ".grader_attempts.json"  # failed checks per exercise, in the folder checked
FULL_AFTER = 3  # failed attempts after which the formula-level step is told


def _parser() -> argparse.ArgumentParser:
    from .gradescope import UPLOAD

    p = _Parser(prog=PROG, description="Classroom exercises: build the student edition, grade it.")
    sub = p.add_subparsers(dest="command", required=True, metavar="{list,build,check,release,gradescope}",
                           parser_class=_Parser)
    sub.add_parser("list", help="print the exercises")
    b = sub.add_parser("build", help="copy the repository to OUT_DIR with every solution cut out")
    b.add_argument("out_dir", metavar="OUT_DIR", help="a new or empty directory")
    b.add_argument("--solved", metavar="IDS", default="",
                   help="exercise ids whose solutions stay in, comma-separated (1.1,4.1)")
    b.add_argument("--guided", action="store_true",
                   help="a gentler edition: keep the lessons' derivations and the backward docstrings' formulas")
    c = sub.add_parser("check", help="grade exercises (of this package, or of --student's)")
    c.add_argument("which", nargs="?", metavar="N",
                   help="an exercise id (4.2), a lesson number (4), or nothing for every exercise")
    c.add_argument("--student", metavar="DIR",
                   help="the student's folder (holding numpytransformer/): graded by this grader, with this "
                        "library's reference values; default: this package's own folder")
    c.add_argument("--json", nargs="?", const="results.json", metavar="PATH",
                   help="also write a Gradescope-style results file, one test per case (default PATH: results.json)")
    c.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="seconds each exercise may take (default 60)")
    c.add_argument("--seed", type=int, default=None, metavar="N",
                   help="draw the cases with this seed (0: the public cases; default with --student: a fresh one)")
    c.add_argument("--hints", choices=list(HINTS), default="steps",
                   help="steps (default): a failure names the tensor and its error, the next failed attempt the "
                        f"property it breaks, the formula only after {FULL_AFTER} failed attempts (counted in "
                        f"{ATTEMPTS_FILE} of the folder checked); or always tensor, property or full")
    r = sub.add_parser("release", help="write the solutions of IDS into a student's existing folder")
    r.add_argument("ids", metavar="IDS", help="exercise ids, comma-separated (7.1,8.2)")
    r.add_argument("--into", required=True, metavar="STUDENT_DIR",
                   help="the student's folder (holding numpytransformer/); only those solutions change")
    g = sub.add_parser("gradescope", help="build a Gradescope autograder zip (setup.sh, run_autograder)",
                       description=f"Build a Gradescope autograder zip. What students upload: {UPLOAD}")
    g.add_argument("out_zip", metavar="OUT.zip", help="the zip to write")
    g.add_argument("--hints", choices=list(HINTS)[1:], default="property",
                   help="the hint step the autograder tells (default property)")
    g.add_argument("--exercises", metavar="IDS", default=None,
                   help="the assignment: exercise ids and lesson numbers, comma-separated (1.1,1.2 or 6); "
                        "default every exercise")
    a = sub.add_parser("autograde", help="grade a Gradescope submission (what run_autograder runs)")
    a.add_argument("--root", default=None, metavar="DIR",
                   help="Gradescope's root, holding submission/ and results/ (default $AUTOGRADER_ROOT or /autograder)")
    a.add_argument("--hints", choices=list(HINTS)[1:], default="property")
    a.add_argument("--exercises", metavar="IDS", default=None, help="as for gradescope (default every exercise)")
    a.add_argument("--sandbox-user", metavar="NAME", default=None,
                   help="run the student's code as this unprivileged user (the grader being root)")
    return p


def _fail(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def _project_line(e) -> str:
    return f"{e.id} {e.function} ... graded by your teacher with the rubric in {e.file} ({e.points} points), not here"


def _select(which: Optional[str]):
    if which is None:
        return EXERCISES
    if which in BY_ID:
        return [BY_ID[which]]
    if which.isdigit() and int(which) in LESSONS:
        return LESSONS[int(which)]
    return None


def _list() -> int:
    width = max(len(e.function) for e in EXERCISES)
    print(f"{'id':<5} {'lesson':<6} {'function':<{width}}  file / what to write / difficulty, time, points")
    for e in EXERCISES:
        print(f"{e.id:<5} {e.lesson:<6} {e.function:<{width}}  {e.file}")
        print(f"{'':<5} {'':<6} {'':<{width}}  {e.title}")
        print(f"{'':<5} {'':<6} {'':<{width}}  {e.difficulty}, about {e.minutes} min, {e.points} points")
    for e in PROJECTS:
        print(f"{e.id:<5} {'12-13':<6} {e.function:<{width}}  {e.file}")
        print(f"{'':<5} {'':<6} {'':<{width}}  {e.title}")
        print(f"{'':<5} {'':<6} {'':<{width}}  {e.difficulty}, about {e.minutes} min, {e.points} points: "
              "graded by your teacher with the rubric in " + e.file)
    print(f"\nCheck one with: {check_command('<id>')}  (or a lesson number, or nothing for all)")
    return 0


def _build(out_dir: str, solved: str, guided: bool = False) -> int:
    from .fences import BuildError, build_edition

    try:
        fences = build_edition(out_dir, solved=solved, guided=guided)
    except BuildError as e:
        return _fail(str(e))
    kept = list(dict.fromkeys(i.strip() for i in solved.split(",") if i.strip()))
    print(f"Built the student edition in {out_dir}: {len({f.id for f in fences}) - len(kept)} exercises cut out"
          + (f", the solutions of {', '.join(kept)} released" if kept else "") + f"; see {out_dir}/EXERCISES.md")
    return 0


def _results_json(results, path: str, seed: int = 0) -> None:
    """Gradescope's results.json: one test per case, the exercise's points split among them."""
    from .gradescope import results_document

    Path(path).write_text(json.dumps(results_document(results, seed=seed), indent=2) + "\n", encoding="utf-8")


def _attempts(folder: Path) -> dict:
    """Failed checks per exercise, as counted in ``folder`` (a damaged file counts as none)."""
    try:
        counts = json.loads((folder / ATTEMPTS_FILE).read_text(encoding="utf-8"))
        return {k: v for k, v in counts.items() if isinstance(v, int)} if isinstance(counts, dict) else {}
    except (OSError, ValueError):
        return {}


def _level(hints: str, failed_before: int) -> int:
    if HINTS[hints] is not None:
        return HINTS[hints]
    return 1 if failed_before == 0 else 2 if failed_before < FULL_AFTER else 3


def _check(which: Optional[str], student: Optional[str], json_path: Optional[str], timeout: Optional[float],
           seed: Optional[int], hints: str = "steps") -> int:
    project = next((e for e in PROJECTS if e.id == which), None)
    if project is not None:
        print(_project_line(project))
        return 0
    selected = _select(which)
    if selected is None:
        return _fail(f"N={which!r} is neither an exercise id nor a lesson with exercises; valid ids: "
                     f"{', '.join(BY_ID)}; lessons: {', '.join(map(str, LESSONS))}")
    if timeout is not None and not 0 < timeout < float("inf"):
        return _fail(f"--timeout must be a positive number of seconds, got {timeout:g}")
    from .reference import REFERENCE_FILE, require_stored_values

    try:
        require_stored_values()
    except FileNotFoundError as e:
        return _fail(str(e))
    if seed is None:
        # A teacher (the full library, reference values computed live) grades a student on fresh cases.
        seed = secrets.randbelow(2 ** 31 - 1) + 1 if student is not None and not REFERENCE_FILE.is_file() else 0
    if seed < 0 or (seed and REFERENCE_FILE.is_file()):
        return _fail(f"--seed {seed}: this grader holds reference values for the public cases only; use --seed 0, "
                     "or grade with the full repository's grader" if seed > 0 else f"--seed must be >= 0, got {seed}")
    if student is not None and REFERENCE_FILE.is_file():
        return _fail("--student: this is a student edition's grader, which its student can edit; grade with the "
                     "full repository's: python -m course check --student ... run from there")
    if json_path and (Path(json_path).is_dir() or not Path(json_path).absolute().parent.is_dir()):
        return _fail(f"--json {json_path}: expected a file name in an existing folder")
    own = Path(__file__).resolve().parent.parent / "numpytransformer"
    if student is None:
        root = own.parent
        print(f"Checking the numpytransformer package in {own}")
    else:
        root = Path(student).resolve()
        if not (root / "numpytransformer" / "__init__.py").is_file():
            return _fail(f"--student {student!r} holds no numpytransformer/__init__.py; give the student's folder")
        print(f"Grading the numpytransformer package in {root / 'numpytransformer'} with the grader in {own}"
              + (f" (cases drawn with --seed {seed})" if seed else ""))
    from .checks import DEFAULT_TIMEOUT, run_check

    attempts = _attempts(root)
    results = []
    for e in selected:
        level = _level(hints, attempts.get(e.id, 0))
        result = run_check(e.id, root, DEFAULT_TIMEOUT if timeout is None else timeout, seed, level)
        results.append(result)
        print(result.line, flush=True)
        if result.status == "failed":
            attempts[e.id] = attempts.get(e.id, 0) + 1
    if student is None and attempts != _attempts(root):  # counted when students check their own work
        try:
            (root / ATTEMPTS_FILE).write_text(json.dumps(attempts, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        except OSError:
            pass  # a folder that cannot be written: the hints stay at their first step
    passed = sum(r.status == "passed" for r in results)
    if len(results) > 1:
        points = sum(r.score for r in results)
        print(f"{passed} of {len(results)} exercises passed "
              f"({points:.4g} of {sum(BY_ID[r.exercise_id].points for r in results)} points)")
    if which is None:
        for e in PROJECTS:
            print(_project_line(e))
    if json_path:
        try:
            _results_json(results, json_path, seed)
        except OSError as e:  # a folder that cannot be written (/proc, another user's)
            return _fail(f"--json {json_path}: cannot be written: {e.strerror or e}")
        print(f"Wrote {json_path}")
    return 0 if passed == len(results) else 1


def _release(ids: str, into: str) -> int:
    from .fences import BuildError, release

    try:
        done = release(ids, into)
    except BuildError as e:
        return _fail(str(e))
    print("\n".join(done))
    released = {line.split(":")[0] for line in done}
    print(f"Released into {into}: " + ", ".join(e.id for e in EXERCISES if e.id in released))
    return 0


def _gradescope(out_zip: str, hints: str, exercises: Optional[str] = None) -> int:
    from .fences import BuildError
    from .gradescope import UPLOAD, build_package, parse_exercises

    from .reference import is_student_edition

    if is_student_edition():
        return _fail("gradescope builds the autograder from the teacher's full repository, whose library holds the "
                     "solutions; this folder is a student edition")
    try:
        chosen = None if exercises is None else parse_exercises(exercises)
    except ValueError as e:
        return _fail(str(e))
    out = Path(out_zip)
    if out.is_dir() or not out.absolute().parent.is_dir():
        return _fail(f"OUT.zip {out_zip!r}: expected a file name in an existing folder")
    try:
        root = build_package(out, hints, chosen)
    except BuildError as e:
        return _fail(str(e))
    graded = chosen or [e.id for e in EXERCISES]
    print(f"Wrote {out_zip} ({', '.join(root)} at its root): upload it as the assignment's autograder. It grades "
          f"{', '.join(graded)} ({sum(BY_ID[i].points for i in graded)} points).")
    print(f"What students upload: {UPLOAD}")
    return 0


def _autograde(root: Optional[str], hints: str, exercises: Optional[str], sandbox: Optional[str]) -> int:
    from .gradescope import autograde, parse_exercises

    try:
        chosen = None if exercises is None else parse_exercises(exercises)
    except ValueError as e:
        return _fail(str(e))
    path = autograde(root, HINTS[hints], chosen, sandbox)
    print(f"Wrote {path}")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "list":
        return _list()
    if args.command == "build":
        return _build(args.out_dir, args.solved, args.guided)
    if args.command == "release":
        return _release(args.ids, args.into)
    if args.command == "gradescope":
        return _gradescope(args.out_zip, args.hints, args.exercises)
    if args.command == "autograde":
        return _autograde(args.root, args.hints, args.exercises, args.sandbox_user)
    return _check(args.which, args.student, args.json, args.timeout, args.seed, args.hints)


if __name__ == "__main__":
    sys.exit(main())
