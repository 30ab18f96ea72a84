"""The tree is the architecture: each layer of the package imports only the layers below it.

From the ground up: the shared checks (``errors.py``, ``validation.py``); ``core/``, the pure
pairs and their fast forms; ``nn/``, the modules and models; ``training/``; ``text/``;
``datasets/``; ``pretrained/`` (Hugging Face directories in and out, which a task may fine-tune);
``tasks/``; then the application (``sweep.py``, then ``cli.py``). The course
(``course/``) grades the library from outside it: the library never imports it.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "numpytransformer"

LAYERS = [
    {"errors"},
    {"files"},
    {"validation"},
    {"core"},
    {"nn"},
    {"training"},
    {"text"},
    {"datasets"},
    {"pretrained"},
    {"tasks"},
    {"sweep"},
    {"cli"},
    {"__main__"},
]


def layer_of(part: str) -> int:
    for i, names in enumerate(LAYERS):
        if part in names:
            return i
    raise AssertionError(f"numpytransformer/{part} belongs to no layer: add it to LAYERS")


def imported_parts(path: Path):
    """The top-level parts of the package (``core``, ``nn``, ...) that ``path`` imports."""
    here = path.relative_to(ROOT).with_suffix("").parts  # ("numpytransformer", "core", "linear")
    package = list(here[:-1]) if path.name != "__init__.py" else list(here[:-1])
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                target = base + (node.module.split(".") if node.module else [])
                names = [a.name for a in node.names] if target == ["numpytransformer"] else []
            else:
                target = (node.module or "").split(".")
                names = [a.name for a in node.names] if target == ["numpytransformer"] else []
            if target[:1] == ["course"]:
                yield "course"
            if target[:1] != ["numpytransformer"]:
                continue
            if len(target) > 1:
                yield target[1]
            yield from names
        elif isinstance(node, ast.Import):
            for a in node.names:
                t = a.name.split(".")
                if t[0] == "course":
                    yield "course"
                if t[0] == "numpytransformer" and len(t) > 1:
                    yield t[1]


SOURCES = sorted(p for p in PKG.rglob("*.py") if p.name != "__init__.py" or p.parent != PKG)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(PKG).as_posix())
def test_each_layer_imports_only_the_layers_below_it(path):
    part = path.relative_to(PKG).with_suffix("").parts[0]
    mine = layer_of(part)
    for other in set(imported_parts(path)):
        assert other != "course", f"{path.relative_to(ROOT)} imports the course, which grades the library from outside"
        if other == part:
            continue
        assert layer_of(other) < mine, (f"{path.relative_to(ROOT)} (layer {mine}, {part}) imports {other} "
                                         f"(layer {layer_of(other)}): a layer imports only the layers below it")


def test_the_test_catches_an_upward_import(tmp_path):
    """The check above can fail: a core file that imported nn/ would be refused."""
    bad = PKG / "core" / "linear.py"
    text = bad.read_text(encoding="utf-8") + "\nfrom ..nn.module import Module\n"
    copy = tmp_path / "numpytransformer" / "core" / "linear.py"
    copy.parent.mkdir(parents=True)
    copy.write_text(text, encoding="utf-8")
    global ROOT
    saved = ROOT
    try:
        ROOT = tmp_path
        assert "nn" in set(imported_parts(copy))
    finally:
        ROOT = saved


def test_no_import_circles_between_files():
    """No two files of the package import each other, directly or around a loop."""
    graph = {}
    for path in PKG.rglob("*.py"):
        mod = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        package = mod.split(".")[:-1]
        if path.name == "__init__.py":
            mod = mod[: -len(".__init__")]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = package[:len(package) - node.level + 1] if node.level else []
                target = ".".join(base + (node.module.split(".") if node.module else []))
                if target.startswith("numpytransformer"):
                    deps.add(target)
                    deps.update(f"{target}.{a.name}" for a in node.names)
        graph[mod] = deps
    graph = {m: {d for d in ds if d in graph and d != m} for m, ds in graph.items()}
    # __init__ files only hand names on; a circle through one of them is not a loop of code
    inits = {m for m in graph if (PKG.parent / m.replace(".", "/") / "__init__.py").is_file()}
    state = {}

    def visit(m, stack):
        state[m] = "open"
        for d in sorted(graph[m]):
            if d in inits:
                continue
            if state.get(d) == "open":
                raise AssertionError("import circle: " + " -> ".join(stack[stack.index(d):] + [d]))
            if d not in state:
                visit(d, stack + [d])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state and m not in inits:
            visit(m, [m])
