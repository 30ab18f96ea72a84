"""``python -m numpytransformer.exercises {list,build,check}``; see the package docstring."""
from __future__ import annotations

import argparse
import json
import secrets
import sys
from pathlib import Path
from typing import List, Optional

from .catalog import BY_ID, EXERCISES, LESSONS, check_command

PROG = "python -m numpytransformer.exercises"


class _Parser(argparse.ArgumentParser):
    """Errors on one line (argparse's default also prints the usage)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Classroom exercises: build the student edition, grade it.")
    sub = p.add_subparsers(dest="command", required=True, metavar="{list,build,check}", parser_class=_Parser)
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
                   help="also write a Gradescope-style results file (default PATH: results.json)")
    c.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="seconds each exercise may take (default 60)")
    c.add_argument("--seed", type=int, default=None, metavar="N",
                   help="draw the cases with this seed (0: the public cases; default with --student: a fresh one)")
    return p


def _fail(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


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


def _results_json(results, path: str) -> None:
    """Gradescope's results.json: one test per exercise, its points all or nothing."""
    tests = [{"name": f"{r.exercise_id} {BY_ID[r.exercise_id].function}", "number": r.exercise_id,
              "score": BY_ID[r.exercise_id].points if r.status == "passed" else 0,
              "max_score": BY_ID[r.exercise_id].points,
              "status": "passed" if r.status == "passed" else "failed", "output": r.line} for r in results]
    doc = {"score": sum(t["score"] for t in tests), "max_score": sum(t["max_score"] for t in tests),
           "output": f"{sum(r.status == 'passed' for r in results)} of {len(results)} exercises passed",
           "tests": tests}
    Path(path).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def _check(which: Optional[str], student: Optional[str], json_path: Optional[str], timeout: Optional[float],
           seed: Optional[int]) -> int:
    selected = _select(which)
    if selected is None:
        return _fail(f"N={which!r} is neither an exercise id nor a lesson with exercises; valid ids: "
                     f"{', '.join(BY_ID)}; lessons: {', '.join(map(str, LESSONS))}")
    if timeout is not None and not 0 < timeout < float("inf"):
        return _fail(f"--timeout must be a positive number of seconds, got {timeout:g}")
    from .reference import REFERENCE_FILE

    if seed is None:
        # A teacher (the full library, reference values computed live) grades a student on fresh cases.
        seed = secrets.randbelow(2 ** 31 - 1) + 1 if student is not None and not REFERENCE_FILE.is_file() else 0
    if seed < 0 or (seed and REFERENCE_FILE.is_file()):
        return _fail(f"--seed {seed}: this grader holds reference values for the public cases only; use --seed 0, "
                     "or grade with the full repository's grader" if seed > 0 else f"--seed must be >= 0, got {seed}")
    if student is not None and REFERENCE_FILE.is_file():
        return _fail("--student: this is a student edition's grader, which its student can edit; grade with the "
                     "full repository's: python -m numpytransformer.exercises check --student ... run from there")
    if json_path and (Path(json_path).is_dir() or not Path(json_path).absolute().parent.is_dir()):
        return _fail(f"--json {json_path}: expected a file name in an existing folder")
    own = Path(__file__).resolve().parent.parent
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

    results = []
    for e in selected:
        result = run_check(e.id, root, DEFAULT_TIMEOUT if timeout is None else timeout, seed)
        results.append(result)
        print(result.line, flush=True)
    passed = sum(r.status == "passed" for r in results)
    if len(results) > 1:
        points = sum(BY_ID[r.exercise_id].points for r in results if r.status == "passed")
        print(f"{passed} of {len(results)} exercises passed "
              f"({points} of {sum(BY_ID[r.exercise_id].points for r in results)} points)")
    if json_path:
        _results_json(results, json_path)
        print(f"Wrote {json_path}")
    return 0 if passed == len(results) else 1


def main(argv: Optional[List[str]] = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "list":
        return _list()
    if args.command == "build":
        return _build(args.out_dir, args.solved, args.guided)
    return _check(args.which, args.student, args.json, args.timeout, args.seed)


if __name__ == "__main__":
    sys.exit(main())
