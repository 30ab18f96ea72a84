"""The Gradescope autograder: the package that ``gradescope OUT.zip`` builds, and what it runs.

The zip holds, at its root, Gradescope's two scripts and this grader:

* ``setup.sh`` installs NumPy (Gradescope runs it once, when it builds the image);
* ``run_autograder`` runs ``python3 -m course autograde`` from the
  unzipped source (``/autograder/source``), as root, after making that folder root's alone:
  the student's code then runs as the unprivileged user ``student``, who cannot read it;
* ``numpytransformer/``: the full library, whose grader grades and computes the reference values;
* ``student_base/numpytransformer/``: the student edition's package (every solution cut out),
  onto which a submission of flat files is laid.

:func:`autograde` grades ``ROOT/submission`` and writes ``ROOT/results/results.json``,
ROOT being ``$AUTOGRADER_ROOT`` or ``/autograder``: the assignment's exercises (all, or those the
zip was built for), each on the public cases (shown to the student at once) and on fresh ones
drawn with the submission's seed (shown after the due date), the seed recorded so that a
regrade draws the same cases. A submission is the student's whole
folder (uploaded from GitHub, or as a zip, which is unpacked here if Gradescope has not) or
the edited files alone (``linear.py``, ``attention.py`` ...), each put in place by its name.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import stat
import tempfile
import zipfile
from pathlib import Path
from typing import List, Optional, Tuple

from .catalog import BY_ID, EXERCISES, LESSONS

__all__ = ["build_package", "autograde", "find_student_folder", "results_document", "parse_exercises",
           "submission_seed", "UPLOAD"]

ROOT_VARIABLE = "AUTOGRADER_ROOT"
SEED_VARIABLE = "AUTOGRADER_SEED"  # draws a submission's fresh cases again: its seed, from results.json
PACKAGE = "numpytransformer"

#: What a student uploads, for the command's help and lessons/GRADESCOPE.md.
UPLOAD = ("Upload your whole folder (the one holding numpytransformer/), from GitHub or as a zip, or only "
          "the .py files you edited (rmsnorm.py, gelu.py, ...). Files are matched by name; any other file "
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
# The teacher's library (every solution in it) becomes root's alone, and the student's code runs as an
# unprivileged user, who cannot read it. AUTOGRADER_SANDBOX_USER="" runs it as oneself (a dry run).
SANDBOX="${{AUTOGRADER_SANDBOX_USER-student}}"
if [ -n "$SANDBOX" ] && [ "$(id -u)" = 0 ]; then
    id -u "$SANDBOX" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$SANDBOX"
    chmod -R go-rwx "$ROOT/source"
    set -- --sandbox-user "$SANDBOX"
else
    [ -z "$SANDBOX" ] || echo "run_autograder: not root: the submission runs as $(id -un), unsandboxed" >&2
    set --
fi
exec "${{AUTOGRADER_PYTHON:-python3}}" -m course autograde --hints {hints}{exercises} "$@"
"""


def _add_tree(z: zipfile.ZipFile, folder: Path, arcname: str) -> None:
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if path.is_file() and "__pycache__" not in rel.parts and path.suffix != ".pyc" and rel.name != "reference.npz":
            z.write(path, f"{arcname}/{rel.as_posix()}")


def _add_script(z: zipfile.ZipFile, name: str, text: str) -> None:
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFREG | 0o755) << 16
    z.writestr(info, text)


def parse_exercises(spec: str) -> List[str]:
    """The exercise ids that ``spec`` names, in the catalog's order: ids and lesson numbers, comma-separated
    (``1.1,1.2``; ``6``: every exercise of lesson 6). ValueError, on one line, for anything else."""
    wanted, unknown = set(), []
    for part in (p.strip() for p in spec.split(",")):
        if part in BY_ID:
            wanted.add(part)
        elif part.isdigit() and int(part) in LESSONS:
            wanted.update(e.id for e in LESSONS[int(part)])
        elif part:
            unknown.append(part)
    if unknown:
        raise ValueError(f"--exercises: {', '.join(unknown)} is neither an exercise id nor a lesson with exercises; "
                         f"ids: {', '.join(BY_ID)}; lessons: {', '.join(map(str, LESSONS))}")
    if not wanted:
        raise ValueError("--exercises: give exercise ids or lesson numbers, comma-separated (1.1,1.2 or 6)")
    return [e.id for e in EXERCISES if e.id in wanted]


def build_package(out_zip, hints: str = "property", exercises: Optional[List[str]] = None) -> List[str]:
    """Write the autograder zip to ``out_zip`` (through a temporary file beside it, renamed when
    whole); returns the names at its root. It grades ``exercises`` (ids; default every one)."""
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
                chosen = f" --exercises {','.join(exercises)}" if exercises else ""
                _add_script(z, "run_autograder", RUN_AUTOGRADER.format(hints=hints, exercises=chosen))
                _add_tree(z, pkg, PACKAGE)
                # The grader, without stored values (reference.npz): it computes them live, on fresh cases too.
                _add_tree(z, Path(__file__).resolve().parent, "course")
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
        if path.is_symlink():  # read as root, a link could copy in what the student may not read
            ignored.append(f"{path.name} (a link, not a file)")
            continue
        homes = by_name.get(path.name, [])
        if len(homes) > 1:  # two files of one name: the exercise's is the one edited
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


def _cases(r) -> tuple:
    e = BY_ID[r.exercise_id]
    return r.cases or ((e.function, r.status == "passed", "" if r.status == "passed" else r.detail),)


def results_document(results, notes: List[str] = (), seed: int = 0, public=()) -> dict:
    """Gradescope's results.json: one test per entry (a tensor in a case), each with its share of the points.

    ``results`` were graded on the cases drawn with ``seed`` (0: the public cases), ``public``, if
    given, on the public cases as well. A public case is "visible" at once; a fresh one is shown
    "after_due_date", so that a student cannot fit their code to it before the deadline. An
    exercise's points are split evenly among the entries of its fresh cases; beside them its public
    cases weigh nothing (a student edition stores their answers, in ``reference.npz``), and are
    feedback only. ``extra_data`` records the seed.
    """
    runs = [(0, {r.exercise_id: r for r in public}), (seed, {r.exercise_id: r for r in results})]
    ids = list(dict.fromkeys([*runs[0][1], *runs[1][1]]))
    tests, score = [], 0.0
    for eid in ids:
        e = BY_ID[eid]
        graded = [(s, _cases(by_id[eid])) for s, by_id in runs if eid in by_id]
        has_fresh = any(s for s, _ in graded)  # then the public cases weigh nothing
        share = e.points / sum(len(cases) for s, cases in graded if s or not has_fresh)
        k = 0
        for s, cases in graded:
            kind = f"fresh case, seed {s}" if s else "public case"
            worth = share if s or not has_fresh else 0.0
            for entry, passed, output in cases:
                k += 1
                tests.append({"name": f"{e.id} {e.function}: {entry} ({kind})", "number": f"{e.id}.{k}",
                              "score": round(worth if passed else 0.0, 6), "max_score": round(worth, 6),
                              "status": "passed" if passed else "failed", "output": output,
                              "visibility": "after_due_date" if s else "visible"})
                score += worth if passed else 0.0
    summary = [(("[fresh cases] " if s else "[public cases] ") if public else "") + r.line.splitlines()[0]
               for s, by_id in runs for r in by_id.values()]
    return {"score": round(score, 2), "max_score": sum(BY_ID[eid].points for eid in ids), "visibility": "visible",
            "output": "\n".join([*notes, *summary]), "tests": tests, "extra_data": {"seed": seed, "exercises": ids}}


def submission_seed(root_dir: Path) -> Tuple[int, str]:
    """The seed of a submission's fresh cases, and where it came from.

    ``$AUTOGRADER_SEED`` if set; else one derived from the submission's id in Gradescope's
    ``submission_metadata.json``, so that a regrade of the same submission draws the same
    cases; else (no metadata: a dry run) a random one. ValueError if ``$AUTOGRADER_SEED`` is
    not a whole number >= 1.
    """
    given = os.environ.get(SEED_VARIABLE, "").strip()
    if given:
        if not given.isdigit() or int(given) < 1:
            raise ValueError(f"{SEED_VARIABLE}={given!r}: expected a whole number >= 1")
        return int(given), f"from ${SEED_VARIABLE}"
    try:
        submission = json.loads((root_dir / "submission_metadata.json").read_text(encoding="utf-8"))["id"]
    except (OSError, ValueError, KeyError, TypeError):
        submission = None
    if isinstance(submission, (int, str)) and str(submission):
        digest = hashlib.sha256(f"numpytransformer submission {submission}".encode()).digest()
        return int.from_bytes(digest[:4], "big") % (2 ** 31 - 1) + 1, f"from the submission id {submission}"
    return secrets.randbelow(2 ** 31 - 1) + 1, "drawn at random: no submission id"


def _sandboxed_copy(folder: Path, home: Path, sandbox) -> Path:
    """A copy of the student's ``folder`` in ``home``, all of it the sandbox user's, who must be able to run
    this interpreter with NumPy; links are copied as links, followed (or not) with that user's rights."""
    import subprocess
    import sys

    from .checks import hand_over

    copy = home / "submission"
    shutil.copytree(folder, copy, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    hand_over(home, sandbox)
    probe = subprocess.run([sys.executable, "-I", "-c", "import numpy"], cwd=home, capture_output=True,
                           user=sandbox.uid, group=sandbox.gid, extra_groups=[], env={"PATH": os.defpath})
    if probe.returncode != 0:
        raise RuntimeError(f"the sandbox user {sandbox.user} cannot run {sys.executable} with NumPy; install "
                           "Python and NumPy where every user can read them (setup.sh does)")
    return copy


def autograde(root: Optional[str] = None, level: int = 2, exercises: Optional[List[str]] = None,
              sandbox: Optional[str] = None) -> Path:
    """Grade ``root/submission``; returns the results.json written.

    Each of ``exercises`` (ids; default every one) is graded on the public cases and on fresh
    ones drawn with :func:`submission_seed`. With ``sandbox`` (a user's name; the grader being
    root) the student's code runs as that user, on a copy of the submission that user owns.
    """
    from .checks import DEFAULT_TIMEOUT, grading_order, run_check, sandbox_user
    from .fences import package_dir

    root_dir = Path(root or os.environ.get(ROOT_VARIABLE) or "/autograder")
    base = package_dir().parent / "student_base" / PACKAGE
    results_path = root_dir / "results" / "results.json"
    results_path.parent.mkdir(parents=True, exist_ok=True)
    chosen = list(exercises or [e.id for e in EXERCISES])
    try:
        box = sandbox_user(sandbox) if sandbox else None
        seed, origin = submission_seed(root_dir)
        with tempfile.TemporaryDirectory(prefix="nt-submission-") as work, \
                tempfile.TemporaryDirectory(prefix="nt-sandbox-") as home:
            folder, notes = find_student_folder(root_dir / "submission", Path(work), base)
            if box is not None:
                folder = _sandboxed_copy(folder, Path(home), box)
            public, fresh = {}, {}
            for eid in grading_order(chosen):
                public[eid] = run_check(eid, folder, DEFAULT_TIMEOUT, 0, level, box, graded_with=chosen)
                fresh[eid] = run_check(eid, folder, DEFAULT_TIMEOUT, seed, level, box, graded_with=chosen)
                print(fresh[eid].line, flush=True)
        notes.append(f"Fresh cases drawn with seed {seed} ({origin}); the public cases are shown now, the "
                     "fresh ones after the due date.")
        doc = results_document([fresh[i] for i in chosen], notes, seed, [public[i] for i in chosen])
    except Exception as e:  # Gradescope shows this file: a broken grader says so there, with no score
        doc = {"score": 0, "output": f"The autograder failed ({type(e).__name__}: {e}); tell your teacher.",
               "tests": []}
    results_path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return results_path
