"""The lessons as a static site (lessons/build_site.py): an index in order, every page linked, every figure there.

Building all eleven lessons is CI's job (``python lessons/build_site.py``, a few minutes);
here two short lessons are built and the index is parsed.
"""
from __future__ import annotations

import html.parser
import importlib.util
import json
from pathlib import Path

import pytest

LESSONS = Path(__file__).resolve().parent.parent / "lessons"
pytest.importorskip("nbclient")
pytest.importorskip("nbconvert")
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


def test_index_links_every_lesson_in_order(site):
    expected = [p.stem + ".html" for p in build_site.lesson_paths(["1", "2"])]
    index = _parse(site / "index.html")
    assert index.links == expected
    for page in expected:
        assert (site / page).is_file()
    text = (site / "index.html").read_text(encoding="utf-8")
    assert text.index("Lesson 1:") < text.index("Lesson 2:")


def test_every_page_shows_the_figures_its_notebook_made(site):
    entries = json.loads((site / "site.json").read_text(encoding="utf-8"))
    for e in entries:
        assert e["figures"] >= 1, e
        assert len(_parse(site / e["page"]).images) >= e["figures"], e
    assert build_site.check_site(site) == []


def test_check_site_finds_a_missing_figure_and_a_missing_page(site, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    for p in site.iterdir():
        (broken / p.name).write_bytes(p.read_bytes())
    first, second = json.loads((site / "site.json").read_text(encoding="utf-8"))[:2]
    page = broken / first["page"]
    page.write_text(page.read_text(encoding="utf-8").replace('src="data:image/png', 'src="missing.png', 1),
                    encoding="utf-8")
    (broken / second["page"]).unlink()
    problems = build_site.check_site(broken)
    assert any(first["page"] in p and "figures" in p for p in problems), problems
    assert any(second["page"] in p and "missing" in p for p in problems), problems
    assert build_site.main(["--check", str(broken)]) == 1
