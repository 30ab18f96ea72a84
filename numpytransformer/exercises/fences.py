"""Solution fences: find them in the library, and cut them out to make the student edition.

A fence sits inside a function body::

    ### BEGIN SOLUTION 4.2: dq, dk and dv of scaled dot-product attention
    ...the reference code...
    ### END SOLUTION

:func:`build_edition` copies the repository and replaces every fence by one line at
the fence's indentation, ``raise NotImplementedError("Exercise 4.2: ... (lesson 4;
check: python -m numpytransformer.exercises check 4.2)")``. The code after a fence
(often the ``return`` that shows what the student must compute) stays.
"""
from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence

from .catalog import BY_ID, EXERCISES, check_command

__all__ = ["Fence", "FenceError", "BuildError", "parse_fences", "library_fences", "placeholder",
           "replace_fences", "enclosing_function", "build_edition", "exercises_markdown"]

_BEGIN = re.compile(r"^(?P<indent>[ \t]*)### BEGIN SOLUTION (?P<id>\d+\.\d+): (?P<title>\S.*?)\s*$")
_END = re.compile(r"^(?P<indent>[ \t]*)### END SOLUTION\s*$")
# Anything that looks like a marker, spelt right or not, so that a typo is an error
# rather than a fence silently left in the student edition.
_LOOSE = re.compile(r"^\s*#+\s*(BEGIN|END)\s+SOLUTION", re.IGNORECASE)

#: What the repository holds besides the package: copied into the edition when present.
#: Besides the package and lessons/: what pip needs, and the measured sweeps that lesson 11 reads.
_EXTRA_FILES = ("README.md", "setup.cfg", "pyproject.toml", "data/README.md",
                "benchmarks/results/sweep-reverse-seq2seq.json", "benchmarks/results/sweep-reverse-tagger.json")
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".ipynb_checkpoints", ".pytest_cache")


class FenceError(ValueError):
    """A malformed fence: unmatched, nested, misspelt or out of its block."""


class BuildError(RuntimeError):
    """The student edition cannot be built (the message says why, in one line)."""


class Fence(NamedTuple):
    id: str
    title: str
    path: str  # as given to parse_fences
    begin: int  # line number of the BEGIN marker, from 1
    end: int  # line number of the END marker
    indent: str


def parse_fences(text: str, path: str = "<text>") -> List[Fence]:
    """Every fence of one source file, in order; :class:`FenceError` if any is malformed."""
    fences: List[Fence] = []
    open_: Optional[re.Match] = None
    open_line = 0
    for n, line in enumerate(text.splitlines(), start=1):
        begin, end = _BEGIN.match(line), _END.match(line)
        if begin:
            if open_ is not None:
                raise FenceError(f"{path}:{n}: BEGIN SOLUTION inside the fence opened at line {open_line} "
                                 "(fences do not nest)")
            open_, open_line = begin, n
        elif end:
            if open_ is None:
                raise FenceError(f"{path}:{n}: END SOLUTION without a BEGIN SOLUTION")
            if end["indent"] != open_["indent"]:
                raise FenceError(f"{path}:{n}: END SOLUTION is indented differently from its BEGIN "
                                 f"at line {open_line}")
            fences.append(Fence(open_["id"], open_["title"], path, open_line, n, open_["indent"]))
            open_ = None
        elif _LOOSE.match(line):
            raise FenceError(f"{path}:{n}: malformed fence marker {line.strip()!r}; write "
                             "'### BEGIN SOLUTION <id>: <title>' or '### END SOLUTION'")
        elif open_ is not None and line.strip() and not line.startswith(open_["indent"]):
            raise FenceError(f"{path}:{n}: a line of the fence opened at line {open_line} is indented "
                             "less than its BEGIN marker")
    if open_ is not None:
        raise FenceError(f"{path}:{open_line}: BEGIN SOLUTION {open_['id']} is never closed by END SOLUTION")
    return fences


def package_dir() -> Path:
    """The ``numpytransformer`` package this module belongs to."""
    return Path(__file__).resolve().parent.parent


def _fenced_sources(pkg: Path):
    """The package's Python files that may hold fences (the exercises package never does)."""
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(pkg)
        if rel.parts[0] == "exercises" or "__pycache__" in rel.parts:
            continue
        yield path


def library_fences(pkg: Optional[Path] = None) -> List[Fence]:
    """Every fence of the package, with paths relative to the repository root."""
    pkg = package_dir() if pkg is None else Path(pkg)
    fences = []
    for path in _fenced_sources(pkg):
        rel = path.relative_to(pkg.parent).as_posix()
        fences.extend(parse_fences(path.read_text(encoding="utf-8"), rel))
    return fences


def placeholder(fence: Fence) -> str:
    """The line that replaces a fence in the student edition."""
    lesson = fence.id.split(".")[0]
    message = f"Exercise {fence.id}: {fence.title} (lesson {lesson}; check: {check_command(fence.id)})"
    literal = '"' + message.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"{fence.indent}raise NotImplementedError({literal})"


def replace_fences(text: str, fences: Sequence[Fence]) -> str:
    """``text`` with each fence (markers included) replaced by its :func:`placeholder`."""
    lines = text.splitlines(keepends=True)
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    for fence in sorted(fences, key=lambda f: f.begin, reverse=True):
        lines[fence.begin - 1:fence.end] = [placeholder(fence) + newline]
    return "".join(lines)


def enclosing_function(text: str, line: int) -> Optional[str]:
    """Qualified name (``Class.method`` or ``function``) of the innermost def holding ``line``."""
    best = None

    def visit(node, prefix):
        nonlocal best
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if child.lineno <= line <= child.end_lineno:
                    if not isinstance(child, ast.ClassDef):
                        best = name
                    visit(child, name + ".")
    visit(ast.parse(text), "")
    return best


def _check_against_catalog(fences: List[Fence]) -> None:
    found: Dict[str, List[Fence]] = {}
    for f in fences:
        if f.id not in BY_ID:
            raise BuildError(f"{f.path}:{f.begin}: fence {f.id} is not a known exercise "
                             f"(known: {', '.join(BY_ID)})")
        if f.title != BY_ID[f.id].title:
            raise BuildError(f"{f.path}:{f.begin}: the title of fence {f.id} differs from the exercise "
                             f"catalog's {BY_ID[f.id].title!r}")
        found.setdefault(f.id, []).append(f)
    missing = [e.id for e in EXERCISES if e.id not in found]
    if missing:
        raise BuildError(f"no fence for exercise(s) {', '.join(missing)} in {package_dir()}; build from "
                         "the full repository, not from a student edition")


def build_edition(out_dir, pkg: Optional[Path] = None) -> List[Fence]:
    """Copy the repository to ``out_dir`` with every fence cut out; returns the fences.

    Copies the package, ``lessons/`` and the files in ``_EXTRA_FILES`` that exist,
    then writes ``EXERCISES.md``. ``out_dir`` must not exist or be empty.
    """
    pkg = package_dir() if pkg is None else Path(pkg).resolve()
    root = pkg.parent
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise BuildError(f"OUT_DIR {str(out)!r} is a file; give a new or empty directory")
    if out.exists() and any(out.iterdir()):
        raise BuildError(f"OUT_DIR {str(out)!r} is not empty; give a new or empty directory")
    for inside in (pkg, root / "lessons"):
        if out.resolve() == inside or inside in out.resolve().parents:
            raise BuildError(f"OUT_DIR {str(out)!r} lies inside {inside}, which is copied; choose another place")
    try:
        fences = library_fences(pkg)
    except FenceError as e:
        raise BuildError(f"malformed fence: {e}") from None
    _check_against_catalog(fences)

    out.mkdir(parents=True, exist_ok=True)
    shutil.copytree(pkg, out / pkg.name, ignore=_IGNORE)
    if (root / "lessons").is_dir():
        shutil.copytree(root / "lessons", out / "lessons", ignore=_IGNORE)
    for name in _EXTRA_FILES:
        if (root / name).is_file():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, out / name)

    by_file: Dict[str, List[Fence]] = {}
    for f in fences:
        by_file.setdefault(f.path, []).append(f)
    for rel, file_fences in by_file.items():
        target = out / rel
        text = replace_fences(target.read_text(encoding="utf-8"), file_fences)
        try:
            compile(text, str(target), "exec")
        except SyntaxError as e:
            raise BuildError(f"{rel}: the student version does not compile ({e.msg}, line {e.lineno})") from None
        target.write_text(text, encoding="utf-8")
    (out / "EXERCISES.md").write_text(exercises_markdown(), encoding="utf-8")
    return fences


def exercises_markdown() -> str:
    """EXERCISES.md of a student edition: the exercises and how a class works with them."""
    rows = "\n".join(
        f"| {e.id} | {e.lesson} | `{e.file}` | `{e.function}` | {e.title} | "
        f"{', '.join(e.needs) or '-'} | `{check_command(e.id)}` |"
        for e in EXERCISES)
    return f"""# Exercises

This is the student edition of numpytransformer. It is the whole library, except that
the {len(EXERCISES)} pieces of code listed below have been cut out: each one is now a line

    raise NotImplementedError("Exercise 4.2: ... (lesson 4; check: python -m numpytransformer.exercises check 4.2)")

Your job is to replace each such line with code that computes what the message says.
The lessons (`lessons/`) derive every formula you need, and the docstring of each
function states its equation, its shapes and how its gradient was derived. Code after
the `raise` line (often the `return`) stays: it shows the names you must define.

## Working on an exercise

Run every command from this folder (the one holding this file), so that Python finds
*this* copy of `numpytransformer`, with your code in it:

    cd {{this folder}}
    pip install -e .            # optional: makes your copy importable from anywhere
    python -m numpytransformer.exercises list        # the table below
    python -m numpytransformer.exercises check 4.2   # one exercise
    python -m numpytransformer.exercises check 4     # every exercise of lesson 4
    python -m numpytransformer.exercises check       # all of them

The checker runs your function through the same float64 finite-difference gradient
checks and property tests as the library's test suite, and prints one line per exercise:

    4.2 attention_backward ... passed (largest relative error 3.1e-11, tolerance 1e-7)
    4.2 attention_backward ... not yet implemented
    5.2 multihead_attention_backward ... not yet implemented (needs Exercise 4.2 first)
    4.2 attention_backward ... FAILED: dk: relative error 2.3e-01 (tolerance 1e-5) [causal mask, ...]

A FAILED line names the tensor that is wrong and by how much, and the case (shapes,
mask) in which it went wrong. Tolerances: 1e-7 for smooth operations, 1e-5 near kinks
(ReLU, masks), for whole layers and for the optimiser's steps (Adam, clipping), which
are also checked in float32. "needs Exercise X first" means that the check also
runs the code of exercise X (the "needs" column), which still raises NotImplementedError.
The exit code is 0 only when every selected exercise passed, so a script can grade.

## How a class uses it

* The teacher builds this folder from the full repository with
  `python -m numpytransformer.exercises build OUT_DIR` and hands it out.
* Students work through the lessons in order (`jupyter lab lessons/`). The notebooks
  call the library, so a lesson's cells that use an exercise's function fail with its
  NotImplementedError until the exercise is done; implement it, re-run the check, then
  re-run the notebook.
* To grade, run `python -m numpytransformer.exercises check` in a student's folder
  (or `check N` for one lesson's homework).
* The checks are not secret: `numpytransformer/exercises/checks.py` is in this folder,
  and a few of them compare with a plain reference (the sinusoid table, attention row
  by row, textbook Adam, the Noam formula), as a visible unit test would. For work that
  is marked, grade with the teacher's copy: put the full repository's
  `numpytransformer/exercises/` over the student's before running `check`.

## The exercises

| id | lesson | file | function | what to write | needs | check |
|----|--------|------|----------|---------------|-------|-------|
{rows}
"""
