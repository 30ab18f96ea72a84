"""The README and the pages under docs/: short, readable, and true to the code.

The README is the front door: at most 1,500 words, lines a reader can read, its two
set-up commands there as CI runs them, its code runnable as written, its links alive. Every
command line in the README and in docs/cli.md must parse with the real command-line parser.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from numpytransformer.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
MAX_LINE = 100


def blocks(text: str, lang: str):
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)


def test_readme_is_short():
    words = len(README.read_text(encoding="utf-8").split())  # as `wc -w` counts
    assert words <= 1500, f"README.md has {words} words; move detail to a page under docs/"


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda p: p.name)
def test_lines_are_readable(path):
    """Lines of at most 100 characters; a table row or a line with a URL may be longer."""
    long = [(n, len(line)) for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if len(line) > MAX_LINE and not line.startswith("|") and "://" not in line]
    assert not long, f"{path.name}: lines over {MAX_LINE} characters (line, length): {long}"


def test_readme_holds_the_two_set_up_commands():
    text = README.read_text(encoding="utf-8")
    commands = [" ".join(b.replace("\\\n", " ").split()) for b in blocks(text, "bash")]
    assert 'pip install -e ".[test]" && python -m pytest -q' in commands  # what .ci/run runs
    main_job = ('pip install -e ".[plot]" && python -m numpytransformer train reverse && '
                'python -m numpytransformer predict --checkpoint runs/reverse "3 5 4 2 1"')
    assert main_job in commands
    assert "python -m pytest -q" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_readme_python_runs_as_written(capsys):
    code = blocks(README.read_text(encoding="utf-8"), "python")
    assert code
    for block in code:
        exec(compile(block, "README.md", "exec"), {})
    assert capsys.readouterr().out  # the example prints its decoded tokens


def test_library_page_python_runs_as_written():
    """The page's snippets run, except the sort task, which is a package file shown as it is
    (tests/test_add_task.py checks it against tasks/sort.py)."""
    code = [b for b in blocks((ROOT / "docs" / "library.md").read_text(encoding="utf-8"), "python")
            if "from ." not in b]
    assert code
    for block in code:
        exec(compile(block, "docs/library.md", "exec"), {})


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _links(text: str):
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)  # code is not links
    yield from re.findall(r"\]\(([^)\s]+)\)", text)
    yield from re.findall(r"^\[[^\]]+\]:\s*(\S+)", text, re.M)


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda p: p.name)
def test_links_resolve(path):
    broken = []
    for link in _links(path.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", link):
            continue  # a web address
        file, _, anchor = link.partition("#")
        target = (path.parent / file).resolve() if file else path
        if not target.exists():
            broken.append(link)
            continue
        if anchor and target.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", target.read_text(encoding="utf-8"), re.M)
            if anchor not in {_slug(h.replace("`", "")) for h in headings}:
                broken.append(link)
    assert not broken, f"{path.name}: links to nothing: {broken}"


def test_readme_links_every_page():
    text = README.read_text(encoding="utf-8")
    for page in PAGES:
        assert f"(docs/{page.name})" in text, page.name


def _command_lines(text: str):
    """The `python -m numpytransformer ...` commands of the bash blocks, as argument lists."""
    for block in blocks(text, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            for part in re.split(r"&&|\|", line.split(" # ")[0]):
                words = shlex.split(part)
                if words[:3] == ["python", "-m", "numpytransformer"]:
                    yield words[3:]


@pytest.mark.parametrize("path", [README, ROOT / "docs" / "cli.md"], ids=lambda p: p.name)
def test_documented_commands_parse(path):
    commands = list(_command_lines(path.read_text(encoding="utf-8")))
    assert commands
    parser = build_parser()
    for argv in commands:
        try:
            parser.parse_args(argv)
        except SystemExit:
            pytest.fail(f"{path.name}: the parser refuses `python -m numpytransformer {' '.join(argv)}`")


def test_cli_page_shows_every_command_and_task():
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices  # aliases too
    for name in commands:
        assert f"`{name}" in text, name
    from numpytransformer.tasks.base import TASKS
    for task in TASKS:
        assert f"train {task}" in text, task


def _package_imports(path: Path) -> set:
    """The numpytransformer modules a file imports at module level (``from . import x``, ``from .x import y``)."""
    import ast

    found = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found.update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
    return found


