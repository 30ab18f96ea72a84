"""The Gradescope autograder: the package that ``gradescope OUT.zip`` builds, and what it runs.

The zip holds, at its root, Gradescope's two scripts and this grader:

* ``setup.sh`` installs NumPy (Gradescope runs it once, when it builds the image);
* ``run_autograder`` runs ``python3 -m course autograde`` from the
  unzipped source (``/autograder/source``);
* ``numpytransformer/``: the full library, whose grader grades and computes the reference values;
* ``student_base/numpytransformer/``: the student edition's package (every solution cut out),
  onto which a submission of flat files is laid.

:func:`autograde` grades ``ROOT/submission`` and writes ``ROOT/results/results.json``,
ROOT being ``$AUTOGRADER_ROOT`` or ``/autograder``. A submission is the student's whole
folder (uploaded from GitHub, or as a zip, which is unpacked here if Gradescope has not) or
the edited files alone (``linear.py``, ``attention.py`` ...), each put in place by its name.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
import tempfile
import zipfile
from pathlib import Path
from typing import List, Optional, Tuple

from .catalog import BY_ID, EXERCISES

__all__ = ["build_package", "autograde", "find_student_folder", "results_document", "UPLOAD"]

ROOT_VARIABLE = "AUTOGRADER_ROOT"
PACKAGE = "numpytransformer"

#: What a student uploads, for the command's help and lessons/GRADESCOPE.md.
UPLOAD = ("Upload your whole folder (the one holding numpytransformer/), from GitHub or as a zip, or only "
          "the .py files you edited (linear.py, attention.py, ...). Files are matched by name; any other file "
          "is ignored.")

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, when it builds the autograder's image.
set -euo pipefail
python3 -m pip install --no-cache-dir "numpy>=1.22"
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for each submission: it grades $AUTOGRADER_ROOT/submission (default /autograder)
# and writes $AUTOGRADER_ROOT/results/results.json.
set -uo pipefail
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
cd "$ROOT/source"
exec "${{AUTOGRADER_PYTHON:-python3}}" -m course autograde --hints {hints}
"""


def _add_tree(z: zipfile.ZipFile, folder: Path, arcname: str) -> None:
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if path.is_file() and "__pycache__" not in rel.parts and path.suffix != ".pyc":
            z.write(path, f"{arcname}/{rel.as_posix()}")


def _add_script(z: zipfile.ZipFile, name: str, text: str) -> None:
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFREG | 0o755) << 16
    z.writestr(info, text)


def build_package(out_zip, hints: str = "property") -> List[str]:
    """Write the autograder zip to ``out_zip`` (through a temporary file beside it, renamed when
    whole); returns the names at its root."""
    from .fences import BuildError, build_edition, package_dir

    out, pkg = Path(out_zip), package_dir()
    refused = f"OUT.zip {str(out_zip)!r} cannot be written"
    try:  # before the edition is built: a folder that cannot be written (/proc, another user's) fails fast
        fd, part = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.absolute().parent)
    except OSError as e:
        raise BuildError(f"{refused}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as f, tempfile.TemporaryDirectory(prefix="nt-gradescope-") as tmp:
            edition = Path(tmp) / "edition"
            build_edition(edition, pkg)
            with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
                _add_script(z, "setup.sh", SETUP_SH)
                _add_script(z, "run_autograder", RUN_AUTOGRADER.format(hints=hints))
                _add_tree(z, pkg, PACKAGE)
                _add_tree(z, edition / PACKAGE, f"student_base/{PACKAGE}")
                for name in ("setup.cfg", "pyproject.toml"):
                    if (pkg.parent / name).is_file():
                        z.write(pkg.parent / name, name)
                names = z.namelist()
        os.chmod(part, 0o644)  # mkstemp makes 0600
        os.replace(part, out)
    except OSError as e:  # a full disk, ...
        raise BuildError(f"{refused}: {e.strerror or e}") from None
    finally:
        Path(part).unlink(missing_ok=True)
    return sorted({n.split("/")[0] for n in names})


def _unzip(archive: Path, into: Path) -> None:
    """Extract ``archive`` into ``into``, skipping any member that would land outside it."""
    into = into.resolve()
    with zipfile.ZipFile(archive) as z:
        for member in z.infolist():
            target = (into / member.filename).resolve()
            if into not in target.parents or member.is_dir():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with z.open(member) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)


def _package_folder(where: Path) -> Optional[Path]:
    """The shallowest folder under ``where`` holding ``numpytransformer/__init__.py``."""
    found = [p.parent.parent for p in where.rglob(f"{PACKAGE}/__init__.py") if "__MACOSX" not in p.parts]
    return min(found, key=lambda p: len(p.parts)) if found else None


def find_student_folder(submission: Path, work: Path, base: Path) -> Tuple[Path, List[str]]:
    """The folder to grade for ``submission`` (built under ``work`` if needed), and notes for the student."""
    notes: List[str] = []
    folder = _package_folder(submission)
    if folder is None:
        for archive in sorted(submission.rglob("*.zip")):
            try:
                _unzip(archive, work / "unzipped" / archive.stem)
            except (zipfile.BadZipFile, OSError) as e:
                notes.append(f"{archive.name}: could not unpack it ({e})")
        if (work / "unzipped").is_dir():
            folder = _package_folder(work / "unzipped")
    if folder is not None:
        notes.append("Graded your folder." if folder == submission else f"Graded the folder {folder.name}/ of "
                     "your submission.")
        return folder, notes
    # Flat files: laid onto the student edition, each by its name.
    student = work / "student"
    shutil.copytree(base, student / PACKAGE)
    by_name = {}
    for path in sorted((student / PACKAGE).rglob("*.py")):
        rel = path.relative_to(student)
        if "exercises" not in rel.parts:
            by_name.setdefault(path.name, []).append(rel)
    exercise_files = {e.file for e in EXERCISES}
    used, ignored = [], []
    for path in sorted(p for p in submission.rglob("*") if p.is_file() and "__MACOSX" not in p.parts):
        homes = by_name.get(path.name, [])
        if len(homes) > 1:  # lm.py is exercise 12.3's file and a task's: the exercise's is the one edited
            homes = [h for h in homes if h.as_posix() in exercise_files] or homes
        if len(homes) == 1:
            shutil.copyfile(path, student / homes[0])
            used.append(f"{path.name} -> {homes[0].as_posix()}")
        else:
            ignored.append(path.name + (" (more than one file has this name; upload the whole folder)"
                                        if len(homes) > 1 else ""))
    notes.append("Graded your files: " + ", ".join(used) if used else "No file of the library was found in your "
                 "submission: every exercise is graded as not yet implemented. " + UPLOAD)
    if ignored:
        notes.append("Ignored: " + ", ".join(ignored))
    return student, notes


def results_document(results, notes: List[str] = ()) -> dict:
    """Gradescope's results.json: one test per entry (a tensor in a case), each with its share of the points."""
    tests = []
    for r in results:
        e = BY_ID[r.exercise_id]
        cases = r.cases or ((f"{e.function}", r.status == "passed", "" if r.status == "passed" else r.detail),)
        for k, (entry, passed, output) in enumerate(cases, start=1):
            share = e.points / len(cases)
            tests.append({"name": f"{e.id} {e.function}: {entry}", "number": f"{e.id}.{k}",
                          "score": round(share if passed else 0.0, 6), "max_score": round(share, 6),
                          "status": "passed" if passed else "failed", "output": output})
    summary = [r.line.splitlines()[0] for r in results]
    return {"score": round(sum(r.score for r in results), 2),
            "max_score": sum(BY_ID[r.exercise_id].points for r in results),
            "output": "\n".join([*notes, *summary]), "tests": tests}


def autograde(root: Optional[str] = None, level: int = 2) -> Path:
    """Grade ``root/submission`` with every exercise on fresh cases; returns the results.json written."""
    from .checks import DEFAULT_TIMEOUT, run_check
    from .fences import package_dir

    root_dir = Path(root or os.environ.get(ROOT_VARIABLE) or "/autograder")
    base = package_dir().parent / "student_base" / PACKAGE
    results_path = root_dir / "results" / "results.json"
    results_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(prefix="nt-submission-") as work:
            folder, notes = find_student_folder(root_dir / "submission", Path(work), base)
            salt = secrets.randbelow(2 ** 31 - 1) + 1
            results = []
            for e in EXERCISES:
                results.append(run_check(e.id, folder, DEFAULT_TIMEOUT, salt, level))
                print(results[-1].line, flush=True)
        doc = results_document(results, notes)
    except Exception as e:  # Gradescope shows this file: a broken grader says so there, with no score
        doc = {"score": 0, "output": f"The autograder failed ({type(e).__name__}: {e}); tell your teacher.",
               "tests": []}
    results_path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return results_path
