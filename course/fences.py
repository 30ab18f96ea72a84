"""Solution fences: find them in the library, and cut them out to make the student edition.

A fence sits inside a function body::

    ### BEGIN SOLUTION 6.1: dx and dgamma of RMSNorm, gamma times x over the root mean square of its row
    ...the reference code...
    ### END SOLUTION

:func:`build_edition` copies the repository and replaces every fence by one line at
the fence's indentation, ``raise NotImplementedError("Exercise 6.1: ... (lesson 6;
check: python -m course check 6.1)")``. The code after a fence
(often the ``return`` that shows what the student must compute) stays.

The lessons stay whole: they derive their components openly, and each exercise asks for a
sibling that no lesson derives. In the library, a docstring block opened by ``..
solution-only::`` (how a graded backward was derived) is dropped from the student edition,
with everything indented under it; ``build --guided`` makes a gentler edition that keeps it,
and ``build --solved 1.1,4.1`` keeps chosen solutions, for a student who is stuck.

Either edition's ``fast.py`` keeps the switch but none of the fast forms
(:func:`without_fast_forms`): they would give the solutions away, and its Modules, loss and
Adam must run the student's own pairs.
"""
from __future__ import annotations

import ast
import copy
import errno
import json
import os
import re
import shutil
import tempfile
import textwrap
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence

from .catalog import BY_ID, EXERCISES, PROJECTS, check_command

__all__ = ["Fence", "FenceError", "BuildError", "parse_fences", "library_fences", "placeholder",
           "replace_fences", "enclosing_function", "build_edition", "exercises_markdown", "keep_fences",
           "strip_solution_only", "SOLUTION_ONLY", "without_fast_forms", "function_source", "function_span",
           "release"]

_BEGIN = re.compile(r"^(?P<indent>[ \t]*)### BEGIN SOLUTION (?P<id>\d+\.\d+): (?P<title>\S.*?)\s*$")
_END = re.compile(r"^(?P<indent>[ \t]*)### END SOLUTION\s*$")
# Anything that looks like a marker, spelt right or not, so that a typo is an error
# rather than a fence silently left in the student edition.
_LOOSE = re.compile(r"^\s*#+\s*(BEGIN|END)\s+SOLUTION", re.IGNORECASE)
#: What the repository holds besides the package: copied into the edition when present.
#: Besides the package and lessons/: what pip needs, and the measured sweeps that lesson 11 reads.
_EXTRA_FILES = ("README.md", "setup.cfg", "pyproject.toml", "data/README.md", "benchmarks/RESULTS.md",
                "benchmarks/bench_parallel.py", "benchmarks/lesson_try_it.py",
                "benchmarks/results/sweep-reverse-seq2seq.json", "benchmarks/results/sweep-reverse-tagger.json")
# The guide holds the answer keys, and GRADESCOPE.md how the autograder is set up: both stay with the teacher.
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".ipynb_checkpoints", ".pytest_cache",
                                 "reference.npz", "INSTRUCTOR.md", "GRADESCOPE.md")


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
    """The ``numpytransformer`` package that this course grades (it stands beside ``course/``)."""
    return Path(__file__).resolve().parent.parent / "numpytransformer"


def _fenced_sources(pkg: Path):
    """The package's Python files that may hold fences."""
    for path in sorted(pkg.rglob("*.py")):
        if "__pycache__" not in path.relative_to(pkg).parts:
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


def function_node(text: str, qualname: str):
    """The ``ast`` node of the def named ``qualname`` (``Class.method`` or ``function``) in ``text``."""
    node = ast.parse(text)
    for part in qualname.split("."):
        node = next((c for c in ast.iter_child_nodes(node)
                     if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and c.name == part), None)
        if node is None:
            raise KeyError(f"no def {qualname} in the file")
    return node


def function_span(text: str, qualname: str):
    """(first line, last line), from 1, of the def ``qualname`` in ``text``, its decorators included."""
    node = function_node(text, qualname)
    return min([node.lineno] + [d.lineno for d in node.decorator_list]), node.end_lineno


def function_source(text: str, qualname: str) -> str:
    """The source of the def ``qualname`` in ``text``, dedented (a method becomes a plain def)."""
    first, last = function_span(text, qualname)
    return textwrap.dedent("".join(text.splitlines(keepends=True)[first - 1:last]))


SOLUTION_ONLY = ".. solution-only::"
_SOLUTION_ONLY = re.compile(r"^(?P<indent>[ \t]*)\.\. solution-only::\s*$")


def strip_solution_only(text: str) -> str:
    """``text`` without its ``.. solution-only::`` blocks: the marker line and every line under it that is
    blank or indented deeper, up to the first line that is not."""
    lines, out, skip = text.splitlines(keepends=True), [], None
    for line in lines:
        if skip is not None:
            if not line.strip() or len(line) - len(line.lstrip()) > skip:
                continue
            skip = None
        m = _SOLUTION_ONLY.match(line)
        if m:
            skip = len(m["indent"])
            while out and not out[-1].strip():  # the blank line before the block goes with it
                out.pop()
            out.append("\n")
            continue
        out.append(line)
    return "".join(out)


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


def keep_fences(text: str, fences: Sequence[Fence]) -> str:
    """``text`` with the marker lines of ``fences`` removed and their code kept (a released solution)."""
    lines = text.splitlines(keepends=True)
    for fence in sorted(fences, key=lambda f: f.begin, reverse=True):
        del lines[fence.end - 1]
        del lines[fence.begin - 1]
    return "".join(lines)


def _parse_solved(solved) -> List[str]:
    ids = [s.strip() for s in (solved.split(",") if isinstance(solved, str) else solved or ()) if s.strip()]
    unknown = [i for i in ids if i not in BY_ID]
    if unknown:
        raise BuildError(f"--solved {','.join(unknown)}: not an exercise id; valid ids: {', '.join(BY_ID)}")
    return ids


_FAST_FORMS = re.compile(r"^# ---- BEGIN FAST FORMS.*?^# ---- END FAST FORMS ----$", re.MULTILINE | re.DOTALL)
_FAST_DEFAULT = re.compile(r"^ON_BY_DEFAULT = .*$", re.MULTILINE)


def without_fast_forms(text: str) -> str:
    """The student edition's ``fast.py``: the switch, no fast forms (``PAIRS`` empty), off by default."""
    text, n = _FAST_FORMS.subn("PAIRS: dict = {}  # the student edition has no fast forms: the Modules run "
                               "the student's pairs", text)
    text, m = _FAST_DEFAULT.subn("ON_BY_DEFAULT = False  # the student edition: the student's pairs run", text)
    if (n, m) != (1, 1):
        raise BuildError("fast.py has no '# ---- BEGIN FAST FORMS' ... '# ---- END FAST FORMS ----' block and "
                         "'ON_BY_DEFAULT = ...' line to cut from the edition")
    return text


def build_edition(out_dir, pkg: Optional[Path] = None, solved=(), guided: bool = False) -> List[Fence]:
    """Copy the repository to ``out_dir`` with every fence cut out; returns the library fences.

    Copies the package, ``lessons/`` (whole), ``docs/`` and the files in ``_EXTRA_FILES`` that
    exist, cuts the fences of the library (except those of ``solved``, a list or a
    comma-separated string of exercise ids), stores the grader's reference values
    (``course/reference.npz``, numbers computed by this library) and writes ``EXERCISES.md``.
    The derivations of the graded siblings (``.. solution-only::`` docstring blocks) are
    dropped too, unless ``guided``. ``out_dir`` must not exist or be empty.

    The edition is written into a private folder beside ``out_dir`` and renamed into place
    whole, so that two builds into one folder at once (``mpiexec -n 2``) cannot mix: the
    first to finish takes it, the other refuses it as not empty.
    """
    pkg = package_dir() if pkg is None else Path(pkg).resolve()
    root = pkg.parent
    out = Path(out_dir)
    keep = set(_parse_solved(solved))
    try:
        exists = out.exists()
    except OSError as e:  # a path the system refuses to look at (too long, not allowed)
        raise BuildError(f"OUT_DIR {str(out)!r} cannot be used: {e.strerror or e}") from None
    if exists and not out.is_dir():
        raise BuildError(f"OUT_DIR {str(out)!r} is a file; give a new or empty directory")
    if exists and any(out.iterdir()):
        raise BuildError(f"OUT_DIR {str(out)!r} is not empty; give a new or empty directory")
    for inside in (pkg, root / "lessons", root / "docs"):
        if out.resolve() == inside or inside in out.resolve().parents:
            raise BuildError(f"OUT_DIR {str(out)!r} lies inside {inside}, which is copied; choose another place")
    try:
        fences = library_fences(pkg)
    except FenceError as e:
        raise BuildError(f"malformed fence: {e}") from None
    _check_against_catalog(fences)

    try:
        out.absolute().parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{out.absolute().name}.", suffix=".tmp", dir=out.absolute().parent))
    except OSError as e:  # a parent that is a file, a folder that cannot be written, ...
        raise BuildError(f"OUT_DIR {str(out)!r} cannot be created: {e.strerror or e}") from None
    try:
        _write_edition(work, pkg, fences, keep, guided)
        os.chmod(work, 0o755)  # mkdtemp makes 0700
        try:
            os.rename(work, out)  # onto nothing, or onto an empty folder: in one step
        except OSError as e:
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise BuildError(f"OUT_DIR {str(out)!r} is not empty (another build filled it meanwhile); "
                                 "give a new or empty directory") from None
            raise BuildError(f"OUT_DIR {str(out)!r} cannot be created: {e.strerror or e}") from None
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return fences


def _write_edition(out: Path, pkg: Path, fences: List[Fence], keep: set, guided: bool) -> None:
    """Copy and cut the edition into the new folder ``out`` (what :func:`build_edition` describes)."""
    root = pkg.parent
    shutil.copytree(pkg, out / pkg.name, ignore=_IGNORE)
    shutil.copytree(Path(__file__).resolve().parent, out / "course", ignore=_IGNORE)
    if (root / "lessons").is_dir():
        shutil.copytree(root / "lessons", out / "lessons", ignore=_IGNORE)
    if (root / "docs").is_dir():  # the pages the README links to
        shutil.copytree(root / "docs", out / "docs", ignore=_IGNORE)
    for name in _EXTRA_FILES:
        if (root / name).is_file():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, out / name)

    by_file: Dict[str, List[Fence]] = {}
    for f in fences:
        by_file.setdefault(f.path, []).append(f)
    for rel, file_fences in by_file.items():
        target = out / rel
        text = target.read_text(encoding="utf-8")
        text = keep_fences(text, [f for f in file_fences if f.id in keep])
        text = replace_fences(text, parse_fences(text, rel))
        try:
            compile(text, str(target), "exec")
        except SyntaxError as e:
            raise BuildError(f"{rel}: the student version does not compile ({e.msg}, line {e.lineno})") from None
        target.write_text(text, encoding="utf-8")
    fast_py = out / pkg.name / "core" / "fast.py"
    fast_py.write_text(without_fast_forms(fast_py.read_text(encoding="utf-8")), encoding="utf-8")
    from .hints import STUDENT_EDITION  # the formula-level hints reach students through the teacher's grader only

    (out / "course" / "hints.py").write_text(STUDENT_EDITION, encoding="utf-8")
    if not guided:
        for path in sorted((out / pkg.name).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            if SOLUTION_ONLY in text:
                path.write_text(strip_solution_only(text), encoding="utf-8")
    from .reference import write_reference_file  # the teacher's library computes what students are compared with

    write_reference_file(out / "course" / "reference.npz", [e.id for e in EXERCISES])
    (out / "EXERCISES.md").write_text(exercises_markdown(sorted(keep, key=list(BY_ID).index), guided),
                                      encoding="utf-8")


def _placeholder_lines(text: str, exercise_id: str, qualname: str) -> List[int]:
    """Line numbers (from 1) of the edition's ``raise NotImplementedError("Exercise <id>: ...`` in ``qualname``."""
    marker = f'raise NotImplementedError("Exercise {exercise_id}: '
    return [n for n, line in enumerate(text.splitlines(), start=1)
            if line.strip().startswith(marker) and enclosing_function(text, n) == qualname]


def _code(text: str, qualname: str) -> Optional[str]:
    """The code of the def ``qualname`` in ``text``, docstring and comments aside (None if there is none):
    equal for two versions of a function that differ only in what a reader sees."""
    try:
        node = copy.deepcopy(function_node(text, qualname))
    except (KeyError, SyntaxError, ValueError):
        return None
    first = node.body[0] if node.body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        node.body = node.body[1:]
    return ast.dump(node)


def solution_file(path: Path) -> Path:
    """Where :func:`release` writes the solutions of functions the student changed: ``rmsnorm.py`` ->
    ``rmsnorm.solution.py`` (not importable: the student's own module stays the one that runs)."""
    return path.with_name(f"{path.stem}.solution{path.suffix}")


def release(ids, student_dir, pkg: Optional[Path] = None) -> List[str]:
    """Write the reference solutions of exercises ``ids`` into a student's existing folder, overwriting
    nothing the student wrote.

    Where the student's function is still the edition's (its ``NotImplementedError`` in place,
    nothing else changed but comments), that line becomes the fenced code. Where the student
    changed the function, it stays as they wrote it and the solution goes beside it, into
    :func:`solution_file`. (The lessons are whole in every edition: nothing of theirs to release.) Returns what was
    done, one line each; :class:`BuildError` (nothing written) if an id, the folder or a file
    is missing.
    """
    pkg = package_dir() if pkg is None else Path(pkg).resolve()
    keep = _parse_solved(ids)
    if not keep:
        raise BuildError("IDS: give exercise ids, comma-separated (4.1,4.2)")
    student = Path(student_dir)
    if not (student / pkg.name / "__init__.py").is_file():
        raise BuildError(f"--into {str(student)!r} holds no {pkg.name}/__init__.py; give the student's folder")
    try:
        fences = [f for f in library_fences(pkg) if f.id in keep]
    except FenceError as e:
        raise BuildError(f"malformed fence: {e}") from None
    missing = [i for i in keep if i not in {f.id for f in fences}]
    if missing:
        raise BuildError(f"no fence for exercise(s) {', '.join(missing)} in {pkg}; release from the full repository")
    texts: Dict[str, str] = {}
    beside: Dict[str, List[str]] = {}
    released: List[Fence] = []  # put in already: the edition's function without their raise lines
    done = []
    for fence in fences:
        source = (pkg.parent / fence.path).read_text(encoding="utf-8")
        qualname = enclosing_function(source, fence.begin)
        target = student / fence.path
        if fence.path not in texts:
            if not target.is_file():
                raise BuildError(f"{target} is missing from the student's folder")
            texts[fence.path] = target.read_text(encoding="utf-8")
        text = texts[fence.path]
        lines = text.splitlines(keepends=True)
        newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
        mine = _code(text, qualname)
        edition = _code(replace_fences(source, [f for f in parse_fences(source, fence.path) if f not in released]),
                        qualname)
        raises = _placeholder_lines(text, fence.id, qualname) if mine is not None else []
        if raises and mine == edition:
            body = source.splitlines(keepends=True)[fence.begin:fence.end - 1]
            lines[raises[0] - 1:raises[0]] = [line.rstrip("\r\n") + newline for line in body]
            released.append(fence)
            done.append(f"{fence.id}: {fence.path} {qualname}, the raise line replaced by the solution")
        elif mine is not None and mine == _code(source, qualname):
            done.append(f"{fence.id}: {fence.path} {qualname} is the solution already")
        else:
            # As the student edition prints it: no fence lines, no solution-only docstring block.
            reference = [line for line in strip_solution_only(function_source(source, qualname)).splitlines()
                         if not (_BEGIN.match(line) or _END.match(line))]
            beside.setdefault(fence.path, []).append(
                f"# Exercise {fence.id}: {qualname} of {Path(fence.path).name}, released. Your own version there is kept "
                f"as you wrote it.\n" + "\n".join(reference) + "\n")
            done.append(f"{fence.id}: {fence.path} {qualname} is your own: kept as you wrote it, the solution written "
                        f"beside it in {solution_file(Path(fence.path)).as_posix()}")
        texts[fence.path] = "".join(lines)
    for rel, text in texts.items():
        try:
            compile(text, rel, "exec")
        except SyntaxError as e:
            raise BuildError(f"{rel}: the student's file does not compile with the solution in "
                             f"({e.msg}, line {e.lineno}); nothing was written") from None
    for rel, text in texts.items():
        (student / rel).write_text(text, encoding="utf-8")
    for rel, parts in beside.items():
        path = solution_file(student / rel)
        old = path.read_text(encoding="utf-8") if path.is_file() else ""
        new = [part for part in parts if part.splitlines()[0] not in old.splitlines()]
        path.write_text("\n\n".join(part.rstrip("\n") for part in [old, *new] if part) + "\n", encoding="utf-8")
    return done


def exercises_markdown(solved: Sequence[str] = (), guided: bool = False) -> str:
    """EXERCISES.md of a student edition: the exercises and how a class works with them."""
    derive = ("This is the guided edition: the docstrings of the graded backward passes also say how each "
              "gradient is derived." if guided else
              "The lessons are whole: each derives its components, with every step shown. An exercise asks "
              "for a sibling that no lesson derives (GELU beside ReLU, RMSNorm beside LayerNorm, rotary beside "
              "sinusoidal positions ...): the derivation is yours, by the lesson's method.")
    rows = "\n".join(
        f"| {e.id}{' (released)' if e.id in solved else ''} | {e.lesson} | `{e.file}` | `{e.function}` | {e.title} | {e.difficulty} | {e.minutes} min | "
        f"{e.points} | {', '.join(e.needs) or '-'} | `{check_command(e.id)}` |"
        for e in EXERCISES)
    projects = "\n".join(f"* **{e.id}, the project** ({e.points} points, about {e.minutes // 60} hours): {e.title}. "
                         f"Graded by your teacher with the rubric in `{e.file}`, not by the grader." for e in PROJECTS)
    total_points = sum(e.points for e in EXERCISES)
    total_minutes = sum(e.minutes for e in EXERCISES)
    released = (f"\nThe solutions of {', '.join(solved)} are released in this edition: their code is in place "
                "and their checks pass.\n" if solved else "")
    return f"""# Exercises

This is the student edition of numpytransformer. It is the whole library, except that
the {len(EXERCISES)} pieces of code listed below have been cut out: each one is now a line

    raise NotImplementedError("Exercise 4.2: ... (lesson 4; check: python -m course check 4.2)")

Your job is to replace each such line with code that computes what the message says.
The docstring of each function states its contract: its shapes, what it returns and
the forward's equation. Code after the `raise` line (often the `return`) stays: it shows
the names you must define. {derive}

A backward pass is derived, not measured: hand in its derivation with the code (half a page,
from the forward's equation through each step of the chain rule to the formula in your code's
names; your teacher grades it, and a backward's points count only with it). Finite differences
of the forward are how the lessons *check* a backward, never one: the checker refuses the plain
ways a backward can call its own forward (not every way), and a backward that computes its
gradients numerically is not your work under the course's rules, whatever the checker prints.
{released}
## Working on an exercise

Run every command from this folder (the one holding this file), so that Python finds
*this* copy of `numpytransformer`, with your code in it:

    cd {{this folder}}
    pip install -e .            # optional: makes your copy importable from anywhere
    python -m course list        # the table below
    python -m course check 4.2   # one exercise
    python -m course check 4     # every exercise of lesson 4
    python -m course check       # all of them

In a notebook, the setup cell runs `%autoreload 2`, so a function you edit in a `.py`
file is reloaded when you re-run a cell; if in doubt, restart the kernel.

The checker runs your functions in a separate process, on its own test cases, and compares
what they return with the reference library's: gradients with its analytic backward (to a
relative 1e-12, below what plain centred differences reach; your backward may not call its
own forward), forward values, optimiser states, counts and messages. It prints one line per exercise:

    6.1 rmsnorm_backward ... passed (largest relative error 3.1e-16, tolerance 1e-12)
    6.1 rmsnorm_backward ... not yet implemented (the raise at numpytransformer/core/rmsnorm.py:NN)
    3.2 rotary_backward ... not yet implemented (needs Exercise 3.1 first)
    6.1 rmsnorm_backward ... FAILED: dx: relative error 2.3e-01 (tolerance 1e-12) [x (2, 3, 5), eps 1e-05]; ...

A FAILED line names the tensor that is wrong, by how much, and the case (shapes, mask).
Hints come in steps. The first failed check of an exercise says only that; the next one
adds the property your result breaks (RMSNorm's dx is orthogonal to x when eps = 0; pad
rows get no gradient; a rotation keeps every pair's length ...) or a simple relation to the right answer (transposed, sign flipped, off by a
constant factor). The failed attempts are counted in `.grader_attempts.json` in this folder;
the last step, close to the formula, comes from your teacher's grader only. Every failing
tensor is listed, one per line. Tolerances: a relative 1e-12 for the gradients of a backward
pass or a whole block, 1e-7 for the optimiser's steps (1e-5 in float32). "needs Exercise X first"
means that the check also runs the code of exercise X (the "needs" column), which still
raises NotImplementedError; your teacher's grader runs its own code for X instead, so each
exercise is graded on its own. Each exercise has a time limit of a minute. The exit code
is 0 only when every selected exercise passed.

## How a class uses it

* The teacher builds this folder from the full repository with
  `python -m course build OUT_DIR` and hands it out
  (`--solved 4.1,4.2` keeps chosen solutions, for a student stuck on them; `--guided` builds
  a gentler edition whose docstrings keep the derivations of the graded backward passes).
* Students work through the lessons in order (`jupyter lab lessons/`); lessons 1-13 run
  as they are, and each ends with its exercises: the sibling to write, its file, its check.
  Lesson 14 fine-tunes a pretrained model whose FFN is the exact GELU, so it runs the
  backward of exercise 1.1: solve 1.1 first (or have it released) before running lesson 14.
* To grade, the teacher runs the grader of the full repository (from that repository,
  not from the student's folder) on the student's folder:

      python -m course check --student PATH/TO/STUDENT --json results.json

  It imports nothing from the student's folder into the grading process: the student's
  functions run in a separate process, and are judged there by the teacher's copy with
  reference values from the teacher's library. Each exercise runs with the teacher's code
  for what it needs, so a bug costs only its own exercise. `--json` writes a Gradescope-style
  `results.json` with one test per case, each with its share of the exercise's points
  ({total_points} in all): each gradient in each shape or mask case, each value, count or
  message list in each case.
* On Gradescope: `python -m course gradescope autograder.zip --exercises 4.1,4.2`, run in the
  full repository, builds one week's autograder (the teacher's `lessons/GRADESCOPE.md` says what
  students upload).
* After a deadline: `python -m course release 4.1,4.2 --into STUDENT_DIR`
  writes those solutions into a student's folder (beside their own version, in a file of its own,
  where they wrote one) and changes nothing else of theirs.
* The checks in this folder (`course/`) are the same code, with the
  reference values stored as numbers (`reference.npz`): use them to check yourself.

## The exercises

About {total_minutes // 60} hours {total_minutes % 60} minutes of code in all, after reading the lessons. Besides the
code, plan on about 2 hours to read each lesson and rework its derivations, an hour for its
written questions, and half an hour to write up each backward pass's derivation.

| id | lesson | file | function | what to write | difficulty | time | points | needs | check |
|----|--------|------|----------|---------------|------------|------|--------|-------|-------|
{rows}

## The project

{projects}
"""
