"""Solution fences: find them in the library, and cut them out to make the student edition.

A fence sits inside a function body::

    ### BEGIN SOLUTION 4.2: dq, dk and dv of scaled dot-product attention
    ...the reference code...
    ### END SOLUTION

:func:`build_edition` copies the repository and replaces every fence by one line at
the fence's indentation, ``raise NotImplementedError("Exercise 4.2: ... (lesson 4;
check: python -m course check 4.2)")``. The code after a fence
(often the ``return`` that shows what the student must compute) stays.

The lesson notebooks are fenced too. In a code cell::

    ### BEGIN SOLUTION 8.2
    ...code that restates the solution...
    ### STUDENT EDITION
    # ...what the student edition runs instead, written as comments...
    ### END SOLUTION

the fence becomes the commented lines, uncommented (or, without a ``### STUDENT EDITION``
part, one comment saying which exercise the code was). In a markdown cell,
``<!-- BEGIN SOLUTION 1.1 -->`` ... ``<!-- END SOLUTION -->`` becomes one sentence naming
the exercise: the derivation and the equations stay, the code that restates them goes.
``build --solved 1.1,4.1`` keeps chosen solutions, for a student who is stuck.

Students derive what they are graded on. A lesson cell that hands over a graded derivation
carries the tag ``solution`` and, in ``metadata["solution"]``, the exercise id and the
``student`` source that replaces it in the student edition: the questions that lead through
the derivation, or code that leaves the derived expression to the student (the check cells
after it stay). In the library, a docstring block opened by ``.. solution-only::`` (the
formula a backward computes) is dropped from the student edition, with everything indented
under it. ``build --guided`` makes a gentler edition that keeps both.

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

from .catalog import BY_ID, EXERCISES, check_command

__all__ = ["Fence", "FenceError", "BuildError", "parse_fences", "library_fences", "placeholder",
           "replace_fences", "enclosing_function", "build_edition", "exercises_markdown", "NotebookFence",
           "notebook_fences", "cut_notebook", "keep_fences", "hide_derivations", "strip_solution_only",
           "SOLUTION_ONLY", "without_fast_forms", "function_source", "function_span", "release"]

_BEGIN = re.compile(r"^(?P<indent>[ \t]*)### BEGIN SOLUTION (?P<id>\d+\.\d+): (?P<title>\S.*?)\s*$")
_END = re.compile(r"^(?P<indent>[ \t]*)### END SOLUTION\s*$")
# Anything that looks like a marker, spelt right or not, so that a typo is an error
# rather than a fence silently left in the student edition.
_LOOSE = re.compile(r"^\s*#+\s*(BEGIN|END)\s+SOLUTION", re.IGNORECASE)
# Notebook cells: code fences may omit the title; markdown fences are HTML comments.
_NB_BEGIN = re.compile(r"^### BEGIN SOLUTION (?P<id>\d+\.\d+)(: .*)?\s*$")
_NB_STUDENT = re.compile(r"^### STUDENT EDITION\s*$")
_NB_END = re.compile(r"^### END SOLUTION\s*$")
_MD_BEGIN = re.compile(r"^<!-- BEGIN SOLUTION (?P<id>\d+\.\d+) -->\s*$")
_MD_END = re.compile(r"^<!-- END SOLUTION -->\s*$")
_NB_LOOSE = re.compile(r"^\s*(#+|<!--)\s*((BEGIN|END)\s+SOLUTION|STUDENT\s+EDITION)", re.IGNORECASE)

#: What the repository holds besides the package: copied into the edition when present.
#: Besides the package and lessons/: what pip needs, and the measured sweeps that lesson 11 reads.
_EXTRA_FILES = ("README.md", "setup.cfg", "pyproject.toml", "data/README.md",
                "benchmarks/results/sweep-reverse-seq2seq.json", "benchmarks/results/sweep-reverse-tagger.json")
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".ipynb_checkpoints", ".pytest_cache",
                                 "reference.npz", "INSTRUCTOR.md")  # the guide holds the answer keys


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


class NotebookFence(NamedTuple):
    id: str
    path: str
    cell: int  # index of the cell, from 0
    begin: int  # line of the BEGIN marker in the cell's source, from 1
    end: int  # line of the END marker
    markdown: bool
    student: Optional[int] = None  # line of "### STUDENT EDITION" (code cells), if any


def _cell_source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def notebook_fences(nb: dict, path: str = "<notebook>") -> List[NotebookFence]:
    """Every fence of a notebook (its JSON as a dict); :class:`FenceError` if any is malformed."""
    fences = []
    for c, cell in enumerate(nb.get("cells", [])):
        markdown = cell.get("cell_type") == "markdown"
        begin_re, end_re = (_MD_BEGIN, _MD_END) if markdown else (_NB_BEGIN, _NB_END)
        open_, student = None, None
        where = f"{path} cell {c}"
        for n, line in enumerate(_cell_source(cell).splitlines(), start=1):
            b, e = begin_re.match(line), end_re.match(line)
            if b:
                if open_ is not None:
                    raise FenceError(f"{where} line {n}: BEGIN SOLUTION inside the fence opened at line {open_[1]}")
                open_, student = (b["id"], n), None
            elif e:
                if open_ is None:
                    raise FenceError(f"{where} line {n}: END SOLUTION without a BEGIN SOLUTION")
                fences.append(NotebookFence(open_[0], path, c, open_[1], n, markdown, student))
                open_, student = None, None
            elif not markdown and _NB_STUDENT.match(line) and open_ is not None and student is None:
                student = n
            elif _NB_LOOSE.match(line):
                raise FenceError(f"{where} line {n}: malformed fence marker {line.strip()!r}")
            elif student is not None and line.strip() and not line.startswith("#"):
                raise FenceError(f"{where} line {n}: the STUDENT EDITION part of a fence is written as comments")
        if open_ is not None:
            raise FenceError(f"{where} line {open_[1]}: BEGIN SOLUTION {open_[0]} is never closed by END SOLUTION")
    return fences


def _notebook_placeholder(fence: NotebookFence) -> List[str]:
    e = BY_ID.get(fence.id)
    where = f"`{e.function}` in `{e.file}`" if e else "the library"
    if fence.markdown:
        return [f"*Turning this into NumPy is Exercise {fence.id} ({where}); "
                f"check it with `{check_command(fence.id)}`.*"]
    return [f"# Exercise {fence.id}: the code that stood here restates its solution; it is yours to write in "
            f"{where.replace('`', '')}."]


def cut_notebook(nb: dict, path: str = "<notebook>", keep=()) -> int:
    """Cut the fences of ``nb`` (in place) except those of the exercises in ``keep``; returns how many were cut.

    A kept fence loses its markers and its STUDENT EDITION part; a cut one becomes the
    STUDENT EDITION code (uncommented) or a placeholder.
    """
    cut = 0
    by_cell: Dict[int, List[NotebookFence]] = {}
    for f in notebook_fences(nb, path):
        by_cell.setdefault(f.cell, []).append(f)
    for c, fences in by_cell.items():
        cell = nb["cells"][c]
        lines = _cell_source(cell).splitlines()
        for f in sorted(fences, key=lambda f: f.begin, reverse=True):
            if f.id in keep:
                body = lines[f.begin:(f.student or f.end) - 1]
            elif f.student is not None:
                body = [ln[2:] if ln.startswith("# ") else ln[1:] for ln in lines[f.student:f.end - 1]]
                cut += 1
            else:
                body = _notebook_placeholder(f)
                cut += 1
            lines[f.begin - 1:f.end] = body
        cell["source"] = "\n".join(lines)
    return cut


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


def hide_derivations(nb: dict, path: str = "<notebook>", keep=()) -> int:
    """Replace (in place) each cell tagged ``solution`` by its ``student`` source, except those of the
    exercises in ``keep``; returns how many were replaced. The tag and the metadata go in both cases."""
    hidden = 0
    for c, cell in enumerate(nb.get("cells", [])):
        meta = cell.get("metadata", {})
        if "solution" not in meta.get("tags", []):
            continue
        spec = meta.get("solution")
        if not isinstance(spec, dict) or spec.get("exercise") not in BY_ID or not isinstance(spec.get("student"), str):
            raise BuildError(f"{path} cell {c}: a cell tagged 'solution' needs metadata solution = "
                             "{'exercise': <an exercise id>, 'student': <the source the student edition shows>}")
        if spec["exercise"] not in keep:
            cell["source"] = spec["student"]
            if cell.get("cell_type") == "code":
                cell["outputs"], cell["execution_count"] = [], None
            hidden += 1
        del meta["solution"]
        meta["tags"] = [t for t in meta["tags"] if t != "solution"]
        if not meta["tags"]:
            del meta["tags"]
    return hidden


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


def _write_notebook(path: Path, nb: dict) -> None:
    path.write_text(json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def build_edition(out_dir, pkg: Optional[Path] = None, solved=(), guided: bool = False) -> List[Fence]:
    """Copy the repository to ``out_dir`` with every fence cut out; returns the library fences.

    Copies the package, ``lessons/``, ``docs/`` and the files in ``_EXTRA_FILES`` that exist, cuts
    the fences of the library and of the notebooks (except those of ``solved``, a list
    or a comma-separated string of exercise ids), stores the grader's reference values
    (``exercises/reference.npz``, numbers computed by this library) and writes
    ``EXERCISES.md``. The derivations that exercises grade (tagged lesson cells, ``..
    solution-only::`` docstring blocks) are hidden too, unless ``guided`` (or their exercise
    is in ``solved``). ``out_dir`` must not exist or be empty.

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
        notebooks = {p: json.loads(p.read_text(encoding="utf-8")) for p in sorted((root / "lessons").glob("*.ipynb"))}
        for p, nb in notebooks.items():
            for f in notebook_fences(nb, p.name):
                if f.id not in BY_ID:
                    raise BuildError(f"{p.name} cell {f.cell}: fence {f.id} is not a known exercise")
            hide_derivations(json.loads(json.dumps(nb)), p.name)  # a malformed tag stops the build here
    except FenceError as e:
        raise BuildError(f"malformed fence: {e}") from None
    _check_against_catalog(fences)

    try:
        out.absolute().parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{out.absolute().name}.", suffix=".tmp", dir=out.absolute().parent))
    except OSError as e:  # a parent that is a file, a folder that cannot be written, ...
        raise BuildError(f"OUT_DIR {str(out)!r} cannot be created: {e.strerror or e}") from None
    try:
        _write_edition(work, pkg, fences, notebooks, keep, guided)
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


def _write_edition(out: Path, pkg: Path, fences: List[Fence], notebooks: dict, keep: set, guided: bool) -> None:
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
    for p, nb in notebooks.items():
        hide_derivations(nb, p.name, set(BY_ID) if guided else keep)
        cut_notebook(nb, p.name, keep)
        _write_notebook(out / "lessons" / p.name, nb)
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
    """Where :func:`release` writes the solutions of functions the student changed: ``attention.py`` ->
    ``attention.solution.py`` (not importable: the student's own module stays the one that runs)."""
    return path.with_name(f"{path.stem}.solution{path.suffix}")


def release(ids, student_dir, pkg: Optional[Path] = None) -> List[str]:
    """Write the reference solutions of exercises ``ids`` into a student's existing folder, overwriting
    nothing the student wrote.

    Where the student's function is still the edition's (its ``NotImplementedError`` in place,
    nothing else changed but comments), that line becomes the fenced code. Where the student
    changed the function, it stays as they wrote it and the solution goes beside it, into
    :func:`solution_file`. Lesson cells likewise (:func:`_release_notebooks`). Returns what was
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
        edition = _code(replace_fences(source, parse_fences(source, fence.path)), qualname)
        raises = _placeholder_lines(text, fence.id, qualname) if mine is not None else []
        if raises and mine == edition:
            body = source.splitlines(keepends=True)[fence.begin:fence.end - 1]
            lines[raises[0] - 1:raises[0]] = [line.rstrip("\r\n") + newline for line in body]
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
    return done + _release_notebooks(keep, pkg.parent / "lessons", student / "lessons")


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _release_notebooks(keep, lessons: Path, student_lessons: Path) -> List[str]:
    """Put the lesson cells that hold the solutions of ``keep`` (fenced, or derivations hidden from the
    edition) back into the student's notebooks, found by cell id, so that the lessons run on. A cell still
    as the edition had it is replaced; one the student wrote in stays as it is, the solution in a new
    cell after it. Every other cell, and any cell the student added, stays as it is."""
    done = []
    for src in sorted(lessons.glob("*.ipynb")):
        target = student_lessons / src.name
        if not target.is_file():
            continue
        teacher = json.loads(src.read_text(encoding="utf-8"))
        released, held = copy.deepcopy(teacher), copy.deepcopy(teacher)
        for nb, kept in ((released, keep), (held, ())):
            hide_derivations(nb, src.name, kept)
            cut_notebook(nb, src.name, kept)
        cells = {r["id"]: (r, h) for r, h in zip(released["cells"], held["cells"]) if _source(r) != _source(h)}
        if not cells:
            continue
        nb = json.loads(target.read_text(encoding="utf-8"))
        ids = {cell.get("id") for cell in nb["cells"]}
        replaced, kept = 0, []
        for c, cell in reversed(list(enumerate(nb["cells"]))):
            if cell.get("id") not in cells:
                continue
            solution, edition = cells[cell["id"]]
            if _source(cell).strip() == _source(solution).strip():
                continue
            if _source(cell).strip() == _source(edition).strip():
                cell["source"] = solution["source"]
                if cell.get("cell_type") == "code":
                    cell["outputs"], cell["execution_count"] = [], None
                replaced += 1
                continue
            kept.append(c)  # the student wrote in it
            if f"{cell['id']}-solution" not in ids:
                new = copy.deepcopy(solution)
                new["id"] = f"{cell['id']}-solution"
                if new.get("cell_type") == "code":
                    new["outputs"], new["execution_count"] = [], None
                nb["cells"].insert(c + 1, new)
        if replaced or kept:
            _write_notebook(target, nb)
            told = [f"{replaced} cell(s) of the released solutions put back"] if replaced else []
            if kept:
                told.append(f"cell(s) {', '.join(map(str, sorted(kept)))} are yours: kept as you wrote them, the "
                            "solution in a new cell after each")
            done.append(f"lessons/{src.name}: " + "; ".join(told))
    return done


def exercises_markdown(solved: Sequence[str] = (), guided: bool = False) -> str:
    """EXERCISES.md of a student edition: the exercises and how a class works with them."""
    derive = ("This is the guided edition: the lessons show every derivation, and the docstrings say how "
              "each gradient was derived; the few cells that restated a solution in code now say which "
              "exercise it is." if guided else
              "The derivations are yours: where a lesson derived a result that an exercise grades, this "
              "edition asks the questions that lead through it instead (what is the derivative of this step? "
              "which property must the result have?), and the check cells after them test your answer. The "
              "cells that restated a solution in code now say which exercise it is.")
    rows = "\n".join(
        f"| {e.id}{' (released)' if e.id in solved else ''} | {e.lesson} | `{e.file}` | `{e.function}` | {e.title} | {e.difficulty} | {e.minutes} min | "
        f"{e.points} | {', '.join(e.needs) or '-'} | `{check_command(e.id)}` |"
        for e in EXERCISES)
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
what they return with reference values: gradients with float64 finite differences (a whole
layer's, 7.1 and 7.2, with the library's backward, checked that way in its tests), forward
values and optimiser states with the library's. It prints one line per exercise:

    4.2 attention_backward ... passed (largest relative error 3.1e-11, tolerance 1e-7)
    4.2 attention_backward ... not yet implemented (the raise at numpytransformer/core/attention.py:NN)
    5.2 multihead_attention_backward ... not yet implemented (needs Exercise 4.2 first)
    4.2 attention_backward ... FAILED: dk: relative error 2.3e-01 (tolerance 1e-5) [causal mask, ...]; ...

A FAILED line names the tensor that is wrong, by how much, and the case (shapes, mask).
Hints come in steps. The first failed check of an exercise says only that; the next one
adds the property the lesson derives that your result breaks (rows of the cross-entropy
gradient sum to zero; LayerNorm's dx is orthogonal to 1 and to x_hat; pad rows get no
gradient ...) or a simple relation to the right answer (transposed, sign flipped, off by a
constant factor). The failed attempts are counted in `.grader_attempts.json` in this folder;
the last step, close to the formula, comes from your teacher's grader only. Every failing
tensor is listed, one per line. Tolerances: 1e-7 for smooth operations, 1e-5 near kinks
(ReLU, masks), for whole layers and for the optimiser's steps. "needs Exercise X first"
means that the check also runs the code of exercise X (the "needs" column), which still
raises NotImplementedError; your teacher's grader runs its own code for X instead, so each
exercise is graded on its own. Each exercise has a time limit of a minute. The exit code
is 0 only when every selected exercise passed.

## How a class uses it

* The teacher builds this folder from the full repository with
  `python -m course build OUT_DIR` and hands it out
  (`--solved 4.1,4.2` keeps chosen solutions, for a student stuck on them; `--guided` builds
  a gentler edition whose lessons and docstrings keep the derivations).
* Students work through the lessons in order (`jupyter lab lessons/`). The notebooks
  call the library, so a lesson's cells that use an exercise's function fail with its
  NotImplementedError until the exercise is done; implement it, re-run the check, then
  re-run the notebook.
* To grade, the teacher runs the grader of the full repository (from that repository,
  not from the student's folder) on the student's folder:

      python -m course check --student PATH/TO/STUDENT --json results.json

  It imports nothing from the student's folder into the grading process: the student's
  functions run in a separate process, and are judged there by the teacher's copy with
  reference values from the teacher's library. Each exercise runs with the teacher's code
  for what it needs, so a bug costs only its own exercise. `--json` writes a Gradescope-style
  `results.json` with one test per case, each with its share of the exercise's points
  ({total_points} in all): each gradient in each shape or mask case; in lessons 9-12 each
  decoded sentence, each statistic, each distribution.
* On Gradescope: `python -m course gradescope autograder.zip` builds the
  autograder (see `lessons/GRADESCOPE.md`, which says what students upload).
* After a deadline: `python -m course release 4.1,4.2 --into STUDENT_DIR`
  writes those solutions into a student's folder and changes nothing else of theirs.
* The checks in this folder (`course/`) are the same code, with the
  reference values stored as numbers (`reference.npz`): use them to check yourself.

## The exercises

About {total_minutes // 60} hours {total_minutes % 60} minutes of work in all, after reading the lessons.

| id | lesson | file | function | what to write | difficulty | time | points | needs | check |
|----|--------|------|----------|---------------|------------|------|--------|-------|-------|
{rows}
"""
