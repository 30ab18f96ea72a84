"""Build the lessons as a static site: every notebook executed, as HTML, with an index in order.

    python lessons/build_site.py                 # all lessons -> site/ (open site/index.html)
    python lessons/build_site.py 4 8 --out /tmp/site
    python lessons/build_site.py --check site    # is every lesson linked, with its figures?

Each notebook runs in a fresh kernel with lessons/ as its working directory, exactly as
``run_lessons.py`` runs it (the committed notebooks are not changed), and is written with
``jupyter nbconvert``'s HTML exporter, figures embedded, so the pages need nothing else.
The index lists the lessons in order with their titles, run times and figure counts, and
a small ``site.json`` records the same for ``--check``. Exit code 1 if a lesson fails, is
slower than --budget seconds, or (with --check) a page or a figure is missing.
"""
from __future__ import annotations

import argparse
import html
import json
import re
import sys
import time
from pathlib import Path

LESSONS = Path(__file__).resolve().parent
sys.path.insert(0, str(LESSONS))
from run_lessons import lesson_paths  # noqa: E402  (the one list of lessons, numbered and filtered)
_IMG = re.compile(r"<img\s[^>]*src=\"data:image/(png|svg\+xml|jpeg)", re.IGNORECASE)


def title_of(nb) -> str:
    """The lesson's heading, "Lesson 4: Scaled dot-product attention"."""
    first = nb.cells[0].source.splitlines()[0] if nb.cells else ""
    return first.lstrip("# ").strip() or "Lesson"


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


def to_html(nb) -> str:
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    return body


def write_index(out: Path, entries) -> None:
    rows = "\n".join(
        f'<li><a href="{html.escape(e["page"])}">{html.escape(e["title"])}</a>'
        f' <span class="meta">({e["figures"]} figure{"" if e["figures"] == 1 else "s"}, ran in {e["seconds"]:.0f} s)'
        '</span></li>' for e in entries)
    (out / "index.html").write_text(f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>numpytransformer: the lessons</title>
<style>body {{ font-family: sans-serif; max-width: 46em; margin: 2em auto; line-height: 1.5 }}
.meta {{ color: #666; font-size: 90% }}</style></head>
<body><h1>numpytransformer: the lessons</h1>
<p>The Transformer of <i>Attention Is All You Need</i> in NumPy, every backward pass derived by hand.
Each lesson below was executed top to bottom on a CPU to make this page; take them in order.</p>
<ol>
{rows}
</ol></body></html>
""", encoding="utf-8")
    (out / "site.json").write_text(json.dumps(entries, indent=1) + "\n", encoding="utf-8")


def check_site(out: Path, expected_pages=None) -> list:
    """Problems with a built site: a lesson not linked from the index, a page missing, a figure missing."""
    problems = []
    index = (out / "index.html").read_text(encoding="utf-8") if (out / "index.html").is_file() else ""
    if not index:
        return [f"{out / 'index.html'} is missing"]
    entries = json.loads((out / "site.json").read_text(encoding="utf-8"))
    links = re.findall(r'<a href="([^"]+)"', index)
    pages = [e["page"] for e in entries]
    if expected_pages is not None and pages != list(expected_pages):
        problems.append(f"the index lists {pages}, expected {list(expected_pages)}")
    if links != pages:
        problems.append(f"the index links {links}, expected the lessons in order {pages}")
    for e in entries:
        page = out / e["page"]
        if not page.is_file():
            problems.append(f"{e['page']} is linked but missing")
            continue
        text = page.read_text(encoding="utf-8")
        found = len(_IMG.findall(text))
        if found < e["figures"]:
            problems.append(f"{e['page']} shows {found} figures, its notebook made {e['figures']}")
        if "Traceback (most recent call last)" in text:
            problems.append(f"{e['page']} holds an error")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lessons", nargs="*", help="lesson numbers (default: all)")
    ap.add_argument("--out", default=str(LESSONS.parent / "site"), help="output folder (default: site/)")
    ap.add_argument("--budget", type=float, default=180.0, help="seconds a lesson may take (default %(default)s)")
    ap.add_argument("--timeout", type=int, default=900, help="seconds a single cell may take (default %(default)s)")
    ap.add_argument("--check", metavar="SITE", help="only check an existing site; build nothing")
    args = ap.parse_args(argv)

    if args.check:
        problems = check_site(Path(args.check))
        for p in problems:
            print(f"problem: {p}")
        print("site ok" if not problems else f"{len(problems)} problems")
        return 1 if problems else 0

    import nbclient

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    entries, failed = [], []
    for path in lesson_paths(args.lessons):
        try:
            nb, seconds = execute(path, args.timeout)
        except nbclient.exceptions.CellExecutionError as e:
            print(f"FAILED  {path.name}\n{e}", flush=True)
            failed.append(path.name)
            continue
        page = path.stem + ".html"
        (out / page).write_text(to_html(nb), encoding="utf-8")
        entries.append({"page": page, "title": title_of(nb), "seconds": round(seconds, 1),
                        "figures": count_figures(nb)})
        over = seconds > args.budget
        print(f"{'SLOW  ' if over else 'ok    '}  {path.name}  {seconds:6.1f} s  {entries[-1]['figures']} figures"
              + (f"  (over the {args.budget:.0f} s budget)" if over else ""), flush=True)
        if over:
            failed.append(path.name)
    write_index(out, entries)
    problems = check_site(out, [p["page"] for p in entries])
    for p in problems:
        print(f"problem: {p}")
    print(f"wrote {out / 'index.html'}: {len(entries)} lessons, {sum(e['figures'] for e in entries)} figures"
          + (f"; {len(failed)} failed" if failed else ""))
    return 1 if failed or problems else 0


if __name__ == "__main__":
    sys.exit(main())
