"""The correlate/export layers depend one way: no import circle, none dodged inside a function.

The graph is read from the sources (every `import` / `from ... import` of a sigmatrace module,
wherever it is written), so an import moved into a function to break a circle is still seen.
"""
import ast
import subprocess
import sys
from pathlib import Path

import sigmatrace

ROOT = Path(sigmatrace.__file__).parent
PACKAGES = ("correlate", "export")


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(imported sigmatrace module, whether outside any function) for every import in the file."""
    mod = _module_name(path)
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    in_function = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                   for n in ast.walk(f)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target] + [f"{target}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for n in names:
            if n.startswith("sigmatrace"):
                out.append((n, id(node) not in in_function))
    return out


def _graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Edges between the modules of sigmatrace.correlate / .export: (outside functions, anywhere)."""
    files = {_module_name(f): f for pkg in PACKAGES for f in (ROOT / pkg).rglob("*.py")}
    top: dict[str, set[str]] = {m: set() for m in files}
    anywhere: dict[str, set[str]] = {m: set() for m in files}
    for m, f in files.items():
        for target, at_top in _imports(f):
            if target in files and target != m:
                anywhere[m].add(target)
                if at_top:
                    top[m].add(target)
    return top, anywhere


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_the_graph_is_read():
    top, _ = _graph()
    assert "sigmatrace.correlate.model" in top["sigmatrace.correlate.stream"]
    assert "sigmatrace.correlate.output" in top["sigmatrace.export.perfetto"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_import_circle():
    _, anywhere = _graph()
    assert _cycle(anywhere) is None


def test_no_import_inside_a_function_within_the_layers():
    """Imports inside functions between these modules are how circles were hidden."""
    top, anywhere = _graph()
    assert {m: sorted(anywhere[m] - top[m]) for m in top if anywhere[m] - top[m]} == {}


def test_every_module_imports_alone():
    """Each module imported first in a fresh interpreter: no order of imports is relied on."""
    top, _ = _graph()
    code = ("import importlib, sys\n"
            "for m in sys.argv[1:]:\n"
            "    for k in [k for k in sys.modules if k.startswith('sigmatrace')]:\n"
            "        del sys.modules[k]\n"
            "    importlib.import_module(m)\n")
    r = subprocess.run([sys.executable, "-c", code, *sorted(top)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert len(top) >= 20
