"""Build the lessons as a static site: every notebook executed, as HTML, with an index in order.

    python lessons/build_site.py                 # all lessons -> site/ (open site/index.html)
    python lessons/build_site.py 4 8 --out /tmp/site
    python lessons/build_site.py --out site-student --from handout   # the student edition's lessons
    python lessons/build_site.py --out site-teacher --instructor     # + the guide, the project, the solutions
    python lessons/build_site.py --check site    # is every lesson linked, with its figures?
    python lessons/build_site.py --check site --browser   # ... and does Chromium render its formulas?

Two sites. The *student site* (the default) holds the lessons and the project's handout
(``lessons/PROJECT.md``); ``--from DIR`` takes them from another copy of the repository, such as
the student edition that ``python -m course build DIR`` writes. The lessons are whole and hold no
solution (the solutions are fenced in the library, ``### BEGIN SOLUTION <id>``), so both are safe
to publish; ``--check`` proves it, failing a student site on any page that shows a line of a fenced
solution of the library beside this file. The *instructor site* (``--instructor``, from the full
repository only) adds the teacher's guide (``lessons/INSTRUCTOR.md``, with the answer keys) and a
page of every exercise's reference solution: keep it to the teaching staff.

Each notebook (every ``lessons/NN_*.ipynb``) runs in a fresh kernel with lessons/ as its
working directory, exactly as ``run_lessons.py`` runs it (the committed notebooks are not
changed), and is written with ``jupyter nbconvert``'s HTML exporter, figures embedded.
The pages need no network: the formulas are turned into MathML here, at build time
(``latex2mathml``), which browsers lay out themselves, and the pages load no script.
Each page links to the previous lesson, the next one and the index; the index gives each
lesson's one-line summary (the notebook's ``metadata.numpytransformer.summary``, else its
first sentence) and its exercises, then the other pages (the project; the guide and the
solutions). A small ``site.json`` records what ``--check`` verifies.
Exit code 1 if a lesson fails, is slower than --budget seconds, or (with --check) a page,
a figure or a formula is missing, or a student site shows a solution; with --browser also if headless Chromium does not lay a
page's fractions out as fractions (it keeps a screenshot of the first page, screenshot.png).
"""
from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

LESSONS = Path(__file__).resolve().parent
sys.path.insert(0, str(LESSONS))
from run_lessons import lesson_paths  # noqa: E402  (the one list of lessons, numbered and filtered)
_IMG = re.compile(r"<img\s[^>]*src=\"data:image/(png|svg\+xml|jpeg)", re.IGNORECASE)
# a script or style sheet fetched from elsewhere: the site must work with no network
_EXTERNAL = re.compile(r"<(?:script|link)\b[^>]*\b(?:src|href)=\"(?:https?:)?//", re.IGNORECASE)
# LaTeX left over: a formula the converter did not understand, or math never converted
_UNRENDERED = re.compile(r"<mi>(?:\\[A-Za-z]+|&amp;|&)</mi>|\$\$|\\(?:frac|begin|sum|partial)\b")
_CODE = re.compile(r"<(pre|code)\b.*?</\1>", re.DOTALL | re.IGNORECASE)

# LaTeX the converter does not know, rewritten into LaTeX it does (same meaning, same layout)
_TEX_REWRITES = [(re.compile(r"\\(begin|end)\{aligned\}"), r"\\\1{split}"),
                 (re.compile(r"\\arg(?![A-Za-z])"), r"\\operatorname{arg}")]


def tex_to_mathml(tex: str, display: bool) -> str:
    """One formula as MathML, which browsers lay out themselves: no script, no font to fetch."""
    from latex2mathml.converter import convert

    for pattern, replacement in _TEX_REWRITES:
        tex = pattern.sub(replacement, tex)
    mathml = convert(tex.strip(), display="block" if display else "inline")
    return mathml.replace("\\_", "_")  # an escaped underscore inside \text{...} is kept verbatim


def unrendered_math(page_html: str) -> list:
    """Bits of LaTeX in a page's prose (code and outputs in <pre>/<code> aside) that were not turned into MathML."""
    return _UNRENDERED.findall(_CODE.sub("", page_html))


def title_of(nb) -> str:
    """The lesson's heading, "Lesson 4: Scaled dot-product attention"."""
    first = nb.cells[0].source.splitlines()[0] if nb.cells else ""
    return first.lstrip("# ").strip() or "Lesson"


def summary_of(nb) -> str:
    """The lesson's one line for the index: its metadata's summary, else the first sentence after the heading."""
    summary = nb.metadata.get("numpytransformer", {}).get("summary", "")
    if summary:
        return summary
    text = " ".join(nb.cells[0].source.split("\n\n", 1)[-1].split()) if nb.cells else ""
    return re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0]


def _course():
    """The course package beside these lessons (its catalogue and its fence parser)."""
    if str(LESSONS.parent) not in sys.path:
        sys.path.insert(0, str(LESSONS.parent))
    import course.catalog
    import course.fences

    return course


def exercises_of(number: int) -> list:
    """The exercises of a lesson, from the grader's catalogue (of the library beside the lessons, as they use)."""
    return _course().catalog.LESSONS.get(number, [])


def solution_fences(repo: Path) -> list:
    """``(fence, code)`` for every solution fenced in ``repo``'s library, code without its markers, dedented."""
    found = []
    for fence in _course().fences.library_fences(Path(repo) / "numpytransformer"):
        lines = (Path(repo) / fence.path).read_text(encoding="utf-8").splitlines()
        found.append((fence, textwrap.dedent("\n".join(lines[fence.begin:fence.end - 1]))))
    return found


# A line of a solution that could also be prose or a lesson's own code ("return dx", a comment, a loop's
# header) proves nothing; nor does one that the exercise's statement gives away on purpose.
_DISTINCTIVE = 20


def solution_lines(repo: Path) -> set:
    """The distinctive code lines of every fenced solution in ``repo``'s library, whitespace collapsed."""
    stated = " ".join(" ".join(x.title.split()) for x in _course().catalog.EXERCISES)
    lines = set()
    for _, code in solution_fences(repo):
        for line in code.splitlines():
            line = " ".join(re.sub(r"\s#.*$", "", line).split())  # a trailing comment may be left out
            if len(line) >= _DISTINCTIVE and not line.startswith("#") and not line.endswith(":") \
                    and line not in stated:
                lines.add(line)
    return lines


def leaked_lines(page_html: str, lines) -> list:
    """The solution lines a page shows, read as its text (tags, such as code highlighting, stripped)."""
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", "", page_html)).split())
    return sorted(line for line in lines if line in text)


def count_figures(nb) -> int:
    """Image outputs of an executed notebook."""
    return sum(1 for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
               if any(k.startswith("image/") for k in o.get("data", {})))


def execute(path: Path, timeout: int):
    import nbclient
    import nbformat

    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()
    return nb, time.perf_counter() - start


_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block extra_css -%}<style>
nav.lessons { display: flex; justify-content: space-between; gap: 1em; padding: 0.6em 1em;
  font-family: sans-serif; font-size: 95%; border-bottom: 1px solid #ddd; }
nav.lessons.bottom { border-top: 1px solid #ddd; border-bottom: none; margin-top: 2em; }
math { font-family: "STIX Two Math", "Cambria Math", "Latin Modern Math", math; font-size: 1.05em; }  /* a font with a MATH table stretches brackets and braces */
math[display="block"] { margin: 0.6em 0; }
</style>{%- endblock extra_css -%}
{%- block body_header -%}{{ super() }}{{ resources.site_nav }}{%- endblock body_header -%}
{%- block body_footer -%}{{ resources.site_nav | replace('class="lessons"', 'class="lessons bottom"') }}{{ super() }}{%- endblock body_footer -%}
"""


def _exporter():
    """nbconvert's JupyterLab page, with its formulas as MathML and without the scripts it loads from a CDN."""
    import jinja2
    from nbconvert import HTMLExporter
    from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

    class MathMLRenderer(IPythonRenderer):
        def block_math(self, body):
            return tex_to_mathml(body, display=True)

        def inline_math(self, body):
            return tex_to_mathml(body, display=False)

        def latex_environment(self, name, body):
            return tex_to_mathml(f"\\begin{{{name}}}{body}\\end{{{name}}}", display=True)

    class SiteExporter(HTMLExporter):
        @jinja2.pass_context
        def markdown2html(self, context, source):
            cell = context.get("cell", {})
            renderer = MathMLRenderer(escape=False, attachments=cell.get("attachments", {}),
                                      embed_images=self.embed_images, anchor_link_text=self.anchor_link_text,
                                      exclude_anchor_links=self.exclude_anchor_links)
            return MarkdownWithMath(renderer=renderer).render(source)

    return SiteExporter(template_name="lab", template_file="site.html.j2",
                        extra_loaders=[jinja2.DictLoader({"site.html.j2": _TEMPLATE})])


def nav_html(prev_entry, next_entry) -> str:
    """The links to the previous lesson, the index and the next lesson, as every page shows them."""
    def link(entry, rel, text):
        if entry is None:
            return "<span></span>"
        return f'<a href="{html.escape(entry["page"])}" rel="{rel}">{text}</a>'
    return ('<nav class="lessons">'
            + link(prev_entry, "prev", "&larr; " + html.escape(prev_entry["title"]) if prev_entry else "")
            + '<a href="index.html" rel="index">All lessons</a>'
            + link(next_entry, "next", html.escape(next_entry["title"]) + " &rarr;" if next_entry else "")
            + "</nav>")


def to_html(nb, nav: str = "") -> str:
    body, _ = _exporter().from_notebook_node(nb, resources={"site_nav": nav})
    return body


def markdown_page(text: str) -> str:
    """A Markdown document as a page of the site: the lessons' look, MathML formulas, a link to the index."""
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(text)])
    return to_html(nb, nav_html(None, None))


def solutions_markdown(repo: Path) -> str:
    """Every exercise's reference solution, in catalogue order, as the library fences it."""
    by_id = {}
    for fence, code in solution_fences(repo):
        by_id.setdefault(fence.id, []).append((fence, code))
    parts = ["# Solutions of the exercises\n\nFor the teaching staff: each exercise's reference solution, "
             "the code between its `### BEGIN SOLUTION` and `### END SOLUTION` in the library. "
             "Students get it after the deadline with `python -m course release --into STUDENT_DIR IDS`."]
    for x in _course().catalog.EXERCISES:
        parts.append(f"## {x.id}: `{x.function}`\n\n{x.title}.")
        for fence, code in by_id.get(x.id, []):
            parts.append(f"`{fence.path}`, lines {fence.begin}-{fence.end}:\n\n```python\n{code}\n```")
    return "\n\n".join(parts) + "\n"


def documents_of(source: Path, instructor: bool) -> list:
    """The pages besides the lessons: ``{"page", "title", "markdown"}`` for the project, and the guide and the
    solutions on the instructor site."""
    wanted = [("PROJECT.md", "PROJECT.html")] + ([("INSTRUCTOR.md", "INSTRUCTOR.html")] if instructor else [])
    docs = []
    for name, page in wanted:
        path = Path(source) / "lessons" / name
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            docs.append({"page": page, "title": text.splitlines()[0].lstrip("# ").strip(), "markdown": text})
    if instructor:
        docs.append({"page": "solutions.html", "title": "Solutions of the exercises",
                     "markdown": solutions_markdown(source)})
    return docs


def write_index(out: Path, entries, documents=(), edition: str = "student") -> None:
    rows = []
    for e in entries:
        exercises = "".join(
            f'<li>{html.escape(x["id"])} &mdash; <code>{html.escape(x["function"])}</code>: {html.escape(x["title"])} '
            f'<span class="meta">({html.escape(x["difficulty"])}, {x["minutes"]} min, {x["points"]} points)</span></li>'
            for x in e["exercises"])
        rows.append(
            f'<li><a href="{html.escape(e["page"])}">{html.escape(e["title"])}</a>'
            f'<p class="summary">{html.escape(e["summary"])}</p>'
            + (f'<ul class="exercises">{exercises}</ul>' if exercises else "")
            + f'<p class="meta">{e["figures"]} figure{"" if e["figures"] == 1 else "s"}, ran in {e["seconds"]:.0f} s</p></li>')
    rows = "\n".join(rows)
    others = "".join(f'<li><a href="{html.escape(d["page"])}">{html.escape(d["title"])}</a></li>' for d in documents)
    others = f'<h2>Also here</h2><ul class="documents">{others}</ul>' if others else ""
    (out / "index.html").write_text(f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>numpytransformer: the lessons</title>
<style>body {{ font-family: sans-serif; max-width: 50em; margin: 2em auto; padding: 0 1em; line-height: 1.5 }}
ol > li {{ margin-bottom: 1.2em }} ol > li > a {{ font-weight: bold }} p {{ margin: 0.2em 0 }}
ul.exercises {{ margin: 0.2em 0; padding-left: 1.2em; font-size: 95% }}
.meta {{ color: #666; font-size: 90% }}</style></head>
<body><h1>numpytransformer: the lessons</h1>
<p>The Transformer of <i>Attention Is All You Need</i> in NumPy, every backward pass derived by hand.
Each lesson below was executed top to bottom on a CPU to make this page; take them in order.
Each exercise asks for a sibling of what its lesson derives, a real option of the models, cut out of
the library in the student edition; each is checked with <code>python -m course check ID</code>,
and each lesson ends with written questions.</p>
<ol>
{rows}
</ol>{others}</body></html>
""", encoding="utf-8")
    record = {"edition": edition, "lessons": list(entries),
              "documents": [{"page": d["page"], "title": d["title"]} for d in documents]}
    (out / "site.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def read_record(out: Path) -> dict:
    """What a built site's ``site.json`` says it holds: its edition, its lessons and its other pages."""
    return json.loads((out / "site.json").read_text(encoding="utf-8"))


def _page_problems(name: str, text: str) -> list:
    """What any page of the site may not hold: an error, LaTeX left unconverted, a fetch from the network."""
    problems = []
    if "Traceback (most recent call last)" in text:
        problems.append(f"{name} holds an error")
    left = unrendered_math(text)
    if left:
        problems.append(f"{name} holds {len(left)} formulas not turned into MathML, the first {left[0]!r}")
    if _EXTERNAL.search(text):
        problems.append(f"{name} loads {_EXTERNAL.search(text).group(0)!r}...: it needs the network")
    return problems


def check_site(out: Path, expected_pages=None, solutions_of: Path = LESSONS.parent) -> list:
    """Problems with a built site: a lesson not linked from the index, a page missing, a figure missing,
    a formula left as LaTeX, a script fetched from the network, a page without its links to its neighbours;
    and, unless it is the instructor site, a page that shows a line of a solution fenced in the library of
    ``solutions_of`` (the repository beside this file; a student edition's library has none to find)."""
    problems = []
    index = (out / "index.html").read_text(encoding="utf-8") if (out / "index.html").is_file() else ""
    if not index:
        return [f"{out / 'index.html'} is missing"]
    record = read_record(out)
    entries, documents = record["lessons"], record["documents"]
    links = re.findall(r'<a href="([^"]+)"', index)
    pages = [e["page"] for e in entries]
    if expected_pages is not None and pages != list(expected_pages):
        problems.append(f"the index lists {pages}, expected {list(expected_pages)}")
    if links != pages + [d["page"] for d in documents]:
        problems.append(f"the index links {links}, expected the lessons in order {pages}, then "
                        f"{[d['page'] for d in documents]}")
    secret = solution_lines(solutions_of) if record["edition"] != "instructor" else set()
    for d in documents:
        page = out / d["page"]
        if not page.is_file():
            problems.append(f"{d['page']} is linked but missing")
            continue
        text = page.read_text(encoding="utf-8")
        problems += _page_problems(d["page"], text)
        if '<a href="index.html" rel="index">' not in text:
            problems.append(f"{d['page']} has no index link to index.html")
        shown = leaked_lines(text, secret)
        if shown:
            problems.append(f"{d['page']} shows {len(shown)} lines of the solutions, the first {shown[0]!r}")
    for i, e in enumerate(entries):
        page = out / e["page"]
        if not page.is_file():
            problems.append(f"{e['page']} is linked but missing")
            continue
        text = page.read_text(encoding="utf-8")
        found = len(_IMG.findall(text))
        if found < e["figures"]:
            problems.append(f"{e['page']} shows {found} figures, its notebook made {e['figures']}")
        problems += _page_problems(e["page"], text)
        shown = leaked_lines(text, secret)
        if shown:
            problems.append(f"{e['page']} shows {len(shown)} lines of the solutions, the first {shown[0]!r}")
        neighbours = {"index": "index.html"}
        if i > 0:
            neighbours["prev"] = entries[i - 1]["page"]
        if i + 1 < len(entries):
            neighbours["next"] = entries[i + 1]["page"]
        for rel, target in neighbours.items():
            if f'<a href="{target}" rel="{rel}">' not in text:
                problems.append(f"{e['page']} has no {rel} link to {target}")
    return problems


# ---------------------------------------------------------------------------------------------
# In a real browser: Debian's chromium, headless, with no network and a fresh profile.

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync")

# Appended to a copy of a page: measures the laid-out formulas and writes what it found into the DOM.
# A fraction rendered as MathML has its numerator above its denominator; as text (no MathML support,
# or LaTeX never converted) they sit side by side or do not exist.
_PROBE = """<script>
(function () {
  const maths = Array.from(document.querySelectorAll("math"));
  const fractions = Array.from(document.querySelectorAll("math mfrac"));
  const flat = fractions.filter(function (f) {
    if (f.children.length !== 2) return true;
    const top = f.children[0].getBoundingClientRect(), bottom = f.children[1].getBoundingClientRect();
    return !(top.height > 0 && bottom.height > 0 && top.bottom <= bottom.top + 1);
  });
  const empty = maths.filter(function (m) { const r = m.getBoundingClientRect(); return r.width === 0 || r.height === 0; });
  const pre = document.createElement("pre");
  pre.id = "render-check";
  pre.textContent = JSON.stringify({formulas: maths.length, fractions: fractions.length,
                                    flat: flat.length, empty: empty.length});
  document.body.appendChild(pre);
})();
</script>"""


def find_browser():
    """The path of a Chromium (or Chrome) executable, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _run_browser(browser: str, args, url: str, timeout: float) -> str:
    with tempfile.TemporaryDirectory(prefix="site-browser-") as profile:
        done = subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, url],
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"{browser} exited with {done.returncode}: {done.stderr.strip()[-500:]}")
    return done.stdout


def render_check(page: Path, browser: str, screenshot=None, timeout: float = 120.0) -> dict:
    """Open a page in headless Chromium and measure its formulas as laid out.

    Returns {"formulas", "fractions", "flat", "empty"}: how many <math> elements the page holds, how
    many fractions, how many fractions are not stacked (numerator above denominator), and how many
    formulas take no space. With ``screenshot``, also saves a PNG of the top of the page.
    """
    with tempfile.TemporaryDirectory(prefix="site-probe-") as tmp:
        probe = Path(tmp) / page.name
        text = page.read_text(encoding="utf-8")
        cut = text.rfind("</body>")
        probe.write_text(text[:cut] + _PROBE + text[cut:] if cut >= 0 else text + _PROBE, encoding="utf-8")
        dom = _run_browser(browser, ["--dump-dom"], probe.as_uri(), timeout)
        found = re.search(r'<pre id="render-check">([^<]*)</pre>', dom)
        if not found:
            raise RuntimeError(f"{browser} did not run the check on {page.name}")
        result = json.loads(html.unescape(found.group(1)))
        if screenshot is not None:
            _run_browser(browser, [f"--screenshot={Path(screenshot).resolve()}", "--window-size=1280,1600",
                                   "--hide-scrollbars"], probe.as_uri(), timeout)
    return result


def browser_problems(out: Path, browser: str, screenshot=None) -> list:
    """Render every page of a built site in Chromium; a page whose formulas are not laid out as math is a problem."""
    problems = []
    record = read_record(out)
    for i, e in enumerate(record["lessons"] + record["documents"]):
        r = render_check(out / e["page"], browser, screenshot if i == 0 else None)
        print(f"browser  {e['page']}  {r['formulas']} formulas, {r['fractions']} fractions, "
              f"{r['flat']} not stacked, {r['empty']} empty", flush=True)
        if r["flat"] or r["empty"]:
            problems.append(f"{e['page']} in {browser}: {r['flat']} of {r['fractions']} fractions not stacked, "
                            f"{r['empty']} of {r['formulas']} formulas with no size")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lessons", nargs="*", help="lesson numbers (default: all)")
    ap.add_argument("--out", default=str(LESSONS.parent / "site"), help="output folder (default: site/)")
    ap.add_argument("--budget", type=float, default=180.0, help="seconds a lesson may take (default %(default)s)")
    ap.add_argument("--timeout", type=int, default=900, help="seconds a single cell may take (default %(default)s)")
    ap.add_argument("--from", dest="source", metavar="DIR", default=str(LESSONS.parent),
                    help="the repository whose lessons/ to build, such as a student edition made by "
                         "'python -m course build DIR' (default: this one)")
    ap.add_argument("--instructor", action="store_true",
                    help="the instructor site: also the guide (INSTRUCTOR.md) and every exercise's solution; "
                         "not for students")
    ap.add_argument("--check", metavar="SITE", help="only check an existing site; build nothing")
    ap.add_argument("--browser", action="store_true",
                    help="also render every page in headless Chromium, and keep SITE/screenshot.png")
    args = ap.parse_args(argv)

    if args.check:
        problems = check_site(Path(args.check))
        if args.browser and not problems:
            browser = find_browser()
            if browser is None:
                problems.append("--browser: no chromium on PATH (apt-get install chromium)")
            else:
                shot = Path(args.check) / "screenshot.png"
                problems += browser_problems(Path(args.check), browser, shot)
                print(f"screenshot: {shot}")
        for p in problems:
            print(f"problem: {p}")
        print("site ok" if not problems else f"{len(problems)} problems")
        return 1 if problems else 0

    import nbclient
    import nbformat

    source = Path(args.source).resolve()
    if not (source / "lessons").is_dir():
        ap.error(f"--from {args.source}: no lessons/ folder there; expected a copy of the repository")
    if args.instructor and not ((source / "lessons" / "INSTRUCTOR.md").is_file() and solution_fences(source)):
        ap.error(f"--instructor needs the full repository (lessons/INSTRUCTOR.md and the library's solutions); "
                 f"{args.source} has not both: is it a student edition?")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    paths = lesson_paths(args.lessons, source / "lessons")
    # Each page links to its neighbours, so the list (pages and titles) is known before anything runs.
    planned = []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        planned.append({"page": path.stem + ".html", "title": title_of(nb), "summary": summary_of(nb),
                        "exercises": [{"id": x.id, "function": x.function, "title": x.title, "difficulty": x.difficulty,
                                       "minutes": x.minutes, "points": x.points}
                                      for x in exercises_of(int(path.name[:2]))]})
    entries, failed = [], []
    for i, path in enumerate(paths):
        try:
            nb, seconds = execute(path, args.timeout)
        except nbclient.exceptions.CellExecutionError as e:
            print(f"FAILED  {path.name}\n{e}", flush=True)
            failed.append(path.name)
            continue
        entry = dict(planned[i], seconds=round(seconds, 1), figures=count_figures(nb))
        nav = nav_html(planned[i - 1] if i > 0 else None, planned[i + 1] if i + 1 < len(planned) else None)
        (out / entry["page"]).write_text(to_html(nb, nav), encoding="utf-8")
        entries.append(entry)
        over = seconds > args.budget
        print(f"{'SLOW  ' if over else 'ok    '}  {path.name}  {seconds:6.1f} s  {entry['figures']} figures"
              + (f"  (over the {args.budget:.0f} s budget)" if over else ""), flush=True)
        if over:
            failed.append(path.name)
    documents = documents_of(source, args.instructor)
    for d in documents:
        (out / d["page"]).write_text(markdown_page(d["markdown"]), encoding="utf-8")
    edition = "instructor" if args.instructor else "student"
    write_index(out, entries, documents, edition)
    problems = check_site(out, [p["page"] for p in entries])
    for p in problems:
        print(f"problem: {p}")
    print(f"wrote {out / 'index.html'}, the {edition} site: {len(entries)} lessons, "
          f"{sum(e['figures'] for e in entries)} figures, {len(documents)} other pages"
          + (f"; {len(failed)} failed" if failed else ""))
    return 1 if failed or problems else 0


if __name__ == "__main__":
    sys.exit(main())
