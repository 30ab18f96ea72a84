"""Execute every lesson notebook top to bottom, as CI does, and time each one.

    python lessons/run_lessons.py            # all lessons, in order
    python lessons/run_lessons.py 4 8        # lessons 4 and 8 only

Each notebook runs in a fresh kernel with lessons/ as its working directory, exactly as
it opens in Jupyter. Nothing is written back: the committed notebooks stay without
outputs. Exit code 1 if any cell of any lesson raised (its traceback is printed).
A lesson slower than --budget seconds (3 minutes by default) is reported as over budget
and also fails the run, so the lessons stay short enough for a class.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

LESSONS = Path(__file__).resolve().parent


def lesson_paths(numbers, folder: Path = LESSONS):
    """The lesson notebooks of ``folder`` (lessons/ beside this file), all or those numbered."""
    paths = sorted(Path(folder).glob("[0-9][0-9]_*.ipynb"))
    if numbers:
        wanted = {int(n) for n in numbers}
        paths = [p for p in paths if int(p.name[:2]) in wanted]
        missing = wanted - {int(p.name[:2]) for p in paths}
        if missing:
            raise SystemExit(f"error: no lesson numbered {sorted(missing)} in {folder}")
    return paths


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lessons", nargs="*", help="lesson numbers (default: all)")
    ap.add_argument("--budget", type=float, default=180.0, help="seconds a lesson may take (default %(default)s)")
    ap.add_argument("--timeout", type=int, default=900, help="seconds a single cell may take (default %(default)s)")
    args = ap.parse_args(argv)

    import nbclient
    import nbformat

    failed = []
    total = time.perf_counter()
    for path in lesson_paths(args.lessons):
        nb = nbformat.read(path, as_version=4)
        client = nbclient.NotebookClient(nb, timeout=args.timeout, kernel_name="python3",
                                         resources={"metadata": {"path": str(LESSONS)}})
        start = time.perf_counter()
        try:
            client.execute()
        except Exception as e:  # CellExecutionError carries the cell's traceback
            seconds = time.perf_counter() - start
            print(f"FAILED  {path.name}  after {seconds:.1f} s\n{e}", flush=True)
            failed.append(path.name)
            continue
        seconds = time.perf_counter() - start
        over = seconds > args.budget
        print(f"{'SLOW  ' if over else 'ok    '}  {path.name}  {seconds:6.1f} s"
              + (f"  (over the {args.budget:.0f} s budget)" if over else ""), flush=True)
        if over:
            failed.append(path.name)
    print(f"{len(failed)} of the lessons failed; {time.perf_counter() - total:.0f} s in all"
          if failed else f"all lessons ran; {time.perf_counter() - total:.0f} s in all")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
