"""The lessons as a static site (lessons/build_site.py): an index in order, every page linked, every figure there,
every formula MathML that a browser lays out with no network.

Building all the lessons is CI's job (``python lessons/build_site.py``, a few minutes);
here two short lessons are built, the index and pages are parsed, and (where Debian's
``chromium`` is installed) a headless browser measures how the formulas were laid out.
The student site, built from the student edition, must show no line of a fenced solution;
the instructor site shows them all, beside the teacher's guide.
"""
from __future__ import annotations

import html.parser
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

LESSONS = Path(__file__).resolve().parent.parent / "lessons"
pytest.importorskip("nbclient")
pytest.importorskip("nbconvert")
pytest.importorskip("latex2mathml")
_spec = importlib.util.spec_from_file_location("build_site", LESSONS / "build_site.py")
build_site = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_site)


class _Page(html.parser.HTMLParser):
    """The links and the embedded images of an HTML page."""

    def __init__(self):
        super().__init__()
        self.links, self.images = [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "a" and "href" in attrs:
            self.links.append(attrs["href"])
        if tag == "img" and attrs.get("src", "").startswith("data:image/"):
            self.images.append(attrs["src"][:30])


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    assert build_site.main(["1", "2", "--out", str(out)]) == 0
    return out


@pytest.fixture
def broken(site, tmp_path):
    """A copy of the built site, for a test to break."""
    return shutil.copytree(site, tmp_path / "broken")


def test_index_links_every_lesson_in_order(site):
    expected = [p.stem + ".html" for p in build_site.lesson_paths(["1", "2"])]
    index = _parse(site / "index.html")
    assert index.links == expected + ["PROJECT.html"]  # the lessons, then the project's handout
    for page in expected:
        assert (site / page).is_file()
    text = (site / "index.html").read_text(encoding="utf-8")
    assert text.index("Lesson 1:") < text.index("Lesson 2:")


def test_index_gives_each_lesson_its_summary_and_exercises(site):
    text = (site / "index.html").read_text(encoding="utf-8")
    entries = build_site.read_record(site)["lessons"]
    exercises = build_site.exercises_of(1) + build_site.exercises_of(2)
    assert exercises, "the catalogue lists exercises for lessons 1 and 2"
    for e in entries:
        assert e["summary"] and html_escape(e["summary"]) in text
    for x in exercises:
        assert f"{x.id} &mdash; <code>{html_escape(x.function)}</code>: {html_escape(x.title)}" in text
    # each lesson's exercises sit under it, before the next lesson's entry
    assert text.index("Lesson 1:") < text.index("1.1 &mdash;") < text.index("Lesson 2:") < text.index("2.1 &mdash;")


def test_summary_falls_back_to_the_first_sentence():
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
        "# Lesson 13: Data parallel\n\nEvery rank holds the whole model. Then it\nsums the gradients.")])
    assert build_site.summary_of(nb) == "Every rank holds the whole model."
    nb.metadata["numpytransformer"] = {"summary": "One line."}
    assert build_site.summary_of(nb) == "One line."


def test_every_page_links_to_the_previous_lesson_the_next_and_the_index(site):
    pages = [p.stem + ".html" for p in build_site.lesson_paths(["1", "2"])]
    first, second = (_parse(site / page).links for page in pages)
    assert "index.html" in first and pages[1] in first and pages[0] not in first
    assert "index.html" in second and pages[0] in second and pages[1] not in second


def test_formulas_are_mathml_and_nothing_is_fetched(site):
    text = (site / "01_backprop_linear_relu.html").read_text(encoding="utf-8")
    assert len(re.findall(r"<math\b", text)) > 50
    assert "<mfrac>" in text and 'display="block"' in text
    assert build_site.unrendered_math(text) == []
    assert not re.search(r"<(script|link)\b[^>]*(src|href)=\"(https?:)?//", text), "a page fetches from the network"
    assert "mathjax" not in text.lower()


def test_check_site_finds_raw_latex_an_external_script_and_a_missing_link(site, broken):
    first, second = build_site.read_record(site)["lessons"][:2]
    page = broken / first["page"]
    text = page.read_text(encoding="utf-8")
    text = text.replace("</main>", "<p>$$\\frac{a}{b}$$</p></main>", 1)
    text = text.replace("</head>", '<script src="https://cdn.example/mathjax.js"></script></head>', 1)
    page.write_text(text, encoding="utf-8")
    other = broken / second["page"]
    other.write_text(other.read_text(encoding="utf-8").replace('rel="prev"', 'rel="nothing"'), encoding="utf-8")
    problems = build_site.check_site(broken)
    assert any(first["page"] in p and "not turned into MathML" in p for p in problems), problems
    assert any(first["page"] in p and "network" in p for p in problems), problems
    assert any(second["page"] in p and "prev link" in p for p in problems), problems


def test_every_formula_of_every_lesson_converts_to_mathml():
    """All the lessons' LaTeX, without executing them: nothing the converter leaves as a command."""
    import nbformat
    from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

    formulas = []

    class Collect(IPythonRenderer):
        def block_math(self, body):
            formulas.append((body, True))
            return ""

        def inline_math(self, body):
            formulas.append((body, False))
            return ""

        def latex_environment(self, name, body):
            formulas.append((f"\\begin{{{name}}}{body}\\end{{{name}}}", True))
            return ""

    bad = []
    for path in build_site.lesson_paths([]):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown":
                del formulas[:]
                MarkdownWithMath(renderer=Collect(escape=False)).render(cell.source)
                for tex, display in formulas:
                    left = build_site.unrendered_math(build_site.tex_to_mathml(tex, display))
                    if left:
                        bad.append((path.name, tex[:80], left))
    assert bad == []
    assert build_site.unrendered_math(build_site.tex_to_mathml(r"\notacommand x", False))  # the check can fail


def html_escape(text):
    import html

    return html.escape(text)


def test_every_page_shows_the_figures_its_notebook_made(site):
    entries = build_site.read_record(site)["lessons"]
    for e in entries:
        assert e["figures"] >= 1, e
        assert len(_parse(site / e["page"]).images) >= e["figures"], e
    assert build_site.check_site(site) == []


def test_check_site_finds_a_missing_figure_and_a_missing_page(site, broken):
    first, second = build_site.read_record(site)["lessons"][:2]
    page = broken / first["page"]
    page.write_text(page.read_text(encoding="utf-8").replace('src="data:image/png', 'src="missing.png', 1),
                    encoding="utf-8")
    (broken / second["page"]).unlink()
    problems = build_site.check_site(broken)
    assert any(first["page"] in p and "figures" in p for p in problems), problems
    assert any(second["page"] in p and "missing" in p for p in problems), problems
    assert build_site.main(["--check", str(broken)]) == 1


# ---- the student site and the instructor site --------------------------------------------------

REPO = LESSONS.parent


def _rmsnorm_solution_line() -> str:
    """The last code line inside exercise 6.1's fence (RMSNorm's dx), read from the library."""
    lines = (REPO / "numpytransformer/core/rmsnorm.py").read_text(encoding="utf-8").splitlines()
    begin = next(i for i, line in enumerate(lines) if line.strip().startswith("### BEGIN SOLUTION 6.1"))
    end = next(i for i in range(begin, len(lines)) if lines[i].strip() == "### END SOLUTION")
    code = [line.strip() for line in lines[begin + 1:end] if line.strip() and not line.strip().startswith("#")]
    return code[-1].split("  #")[0]


@pytest.fixture(scope="module")
def student_site(tmp_path_factory):
    """Lesson 6's page (it derives LayerNorm, beside exercise 6.1's RMSNorm), built from a fresh student edition."""
    edition = tmp_path_factory.mktemp("edition") / "student"
    subprocess.run([sys.executable, "-m", "course", "build", str(edition)], cwd=REPO, check=True,
                   capture_output=True)
    out = tmp_path_factory.mktemp("student-site")
    assert build_site.main(["6", "--out", str(out), "--from", str(edition)]) == 0
    return out


@pytest.fixture(scope="module")
def instructor_site(tmp_path_factory):
    out = tmp_path_factory.mktemp("instructor-site")
    assert build_site.main(["1", "--out", str(out), "--instructor"]) == 0
    return out


def _all_text(site: Path) -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(site.glob("*.html")))


def test_the_student_site_shows_no_solution(student_site):
    line = _rmsnorm_solution_line()
    assert "rms" in line and len(line) > 20, line
    assert line in build_site.solution_lines(REPO)
    text = _all_text(student_site)
    assert "06_layernorm_ffn_residual.html" in text and "rmsnorm_backward" in text  # the exercise is listed
    assert build_site.leaked_lines(text, {line}) == []
    assert build_site.leaked_lines(text, build_site.solution_lines(REPO)) == []
    assert "INSTRUCTOR" not in {p.stem for p in student_site.glob("*.html")}
    assert build_site.read_record(student_site)["edition"] == "student"
    assert build_site.check_site(student_site) == []


def test_the_instructor_site_adds_the_guide_the_project_and_every_solution(instructor_site):
    record = build_site.read_record(instructor_site)
    assert record["edition"] == "instructor"
    assert [d["page"] for d in record["documents"]] == ["PROJECT.html", "INSTRUCTOR.html", "solutions.html"]
    assert _parse(instructor_site / "index.html").links[-3:] == ["PROJECT.html", "INSTRUCTOR.html", "solutions.html"]
    solutions = (instructor_site / "solutions.html").read_text(encoding="utf-8")
    assert build_site.leaked_lines(solutions, {_rmsnorm_solution_line()})
    assert len(build_site.leaked_lines(solutions, build_site.solution_lines(REPO))) == len(
        build_site.solution_lines(REPO))
    from course.catalog import EXERCISES

    for x in EXERCISES:
        assert f"<h2 id=\"{x.id}" in solutions or f">{x.id}: " in solutions, x.id
    guide = (instructor_site / "INSTRUCTOR.html").read_text(encoding="utf-8")
    assert "Answer keys" in guide and build_site.unrendered_math(guide) == []
    assert build_site.check_site(instructor_site) == []


def test_the_solution_check_fails_a_student_site_that_shows_them(instructor_site, tmp_path):
    """The same pages, recorded as a student site: --check finds the solutions and fails."""
    copy = shutil.copytree(instructor_site, tmp_path / "copy")
    record = build_site.read_record(copy)
    record["edition"] = "student"
    (copy / "site.json").write_text(json.dumps(record), encoding="utf-8")
    problems = build_site.check_site(copy)
    assert any("solutions.html" in p and "lines of the solutions" in p for p in problems), problems
    assert build_site.main(["--check", str(copy)]) == 1


def test_the_instructor_site_needs_the_full_repository(tmp_path):
    edition = tmp_path / "student"
    subprocess.run([sys.executable, "-m", "course", "build", str(edition)], cwd=REPO, check=True,
                   capture_output=True)
    with pytest.raises(SystemExit) as stop:
        build_site.main(["1", "--out", str(tmp_path / "site"), "--from", str(edition), "--instructor"])
    assert stop.value.code == 2
    assert not (tmp_path / "site" / "index.html").exists()


# ---- in a real browser --------------------------------------------------------------------------

def _browser():
    browser = build_site.find_browser()
    if browser is None:
        pytest.skip("no chromium on PATH: the browser test needs Debian's chromium (apt-get install chromium); "
                    "the formulas' layout was NOT checked")
    return browser


def test_chromium_lays_out_the_formulas_and_keeps_a_screenshot(site, tmp_path):
    """Headless Chromium, no network, opens a built page: every fraction stacked, no formula without size."""
    browser = _browser()
    shot = Path(os.environ.get("NUMPYTRANSFORMER_SITE_SCREENSHOT", tmp_path / "screenshot.png"))
    shot.parent.mkdir(parents=True, exist_ok=True)
    result = build_site.render_check(site / "01_backprop_linear_relu.html", browser, screenshot=shot)
    print(f"browser check {result}; screenshot: {shot}")
    assert result["formulas"] > 50 and result["fractions"] > 5, result
    assert result["flat"] == 0 and result["empty"] == 0, result
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    assert build_site.browser_problems(site, browser) == []


def test_chromium_check_fails_on_nbconvert_s_own_page(tmp_path):
    """The page that fails (nbconvert's default, MathJax from a CDN, no network): no formula is laid out."""
    browser = _browser()
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(LESSONS / "01_backprop_linear_relu.ipynb", as_version=4)
    page = tmp_path / "plain.html"
    page.write_text(HTMLExporter(template_name="lab").from_notebook_node(nb)[0], encoding="utf-8")
    assert "$$" in page.read_text(encoding="utf-8")
    result = build_site.render_check(page, browser)
    assert result["formulas"] == 0 and result["fractions"] == 0, result
