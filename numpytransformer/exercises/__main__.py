"""``python -m numpytransformer.exercises {list,build,check}``; see the package docstring."""
from __future__ import annotations

import argparse
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
    c = sub.add_parser("check", help="grade exercises of the numpytransformer package in the current directory")
    c.add_argument("which", nargs="?", metavar="N",
                   help="an exercise id (4.2), a lesson number (4), or nothing for every exercise")
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
    print(f"{'id':<5} {'lesson':<6} {'function':<{width}}  file / what to write")
    for e in EXERCISES:
        print(f"{e.id:<5} {e.lesson:<6} {e.function:<{width}}  {e.file}")
        print(f"{'':<5} {'':<6} {'':<{width}}  {e.title}")
    print(f"\nCheck one with: {check_command('<id>')}  (or a lesson number, or nothing for all)")
    return 0


def _build(out_dir: str) -> int:
    from .fences import BuildError, build_edition

    try:
        fences = build_edition(out_dir)
    except BuildError as e:
        return _fail(str(e))
    print(f"Built the student edition in {out_dir}: {len(fences)} fences cut out "
          f"({len({f.id for f in fences})} exercises); see {out_dir}/EXERCISES.md")
    return 0


def _check(which: Optional[str]) -> int:
    selected = _select(which)
    if selected is None:
        return _fail(f"N={which!r} is neither an exercise id nor a lesson with exercises; valid ids: "
                     f"{', '.join(BY_ID)}; lessons: {', '.join(map(str, LESSONS))}")
    from .checks import run_check

    print(f"Checking the numpytransformer package in {Path(__file__).resolve().parent.parent}")
    results = []
    for e in selected:
        result = run_check(e.id)
        results.append(result)
        print(result.line, flush=True)
    passed = sum(r.status == "passed" for r in results)
    if len(results) > 1:
        print(f"{passed} of {len(results)} exercises passed")
    return 0 if passed == len(results) else 1


def main(argv: Optional[List[str]] = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "list":
        return _list()
    if args.command == "build":
        return _build(args.out_dir)
    return _check(args.which)


if __name__ == "__main__":
    sys.exit(main())
