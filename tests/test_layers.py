"""The packages' layers hold: imports run downward only, and only the dashboard imports Streamlit
(pyproject.toml [tool.importlinter]); inside ingest/ the stages run downward too (pipeline <
importers < formats < engine < derived < settings) and no modules import one another in a circle.
A broken contract fails with import-linter's own report."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp

from tests.conftest import REPO_ROOT

# No cycle is allowed (the last one, serving <-> serving_columnar, went with their one definition).
KNOWN_CYCLES: list[set[str]] = []


def test_imports_run_downward_and_figures_need_no_streamlit():
    command = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    done = subprocess.run([command], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "4 kept, 0 broken" in done.stdout, done.stdout[-2000:]


def cycles(graph: grimp.ImportGraph, package: str) -> list[set[str]]:
    """The import cycles among `package`'s modules: each strongly connected set of two or more
    modules (Tarjan), imports inside functions and under TYPE_CHECKING included."""
    modules = sorted(m for m in graph.modules if m == package or m.startswith(package + "."))
    edges = {m: sorted(d for d in graph.find_modules_directly_imported_by(m) if d in modules) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(module: str) -> None:  # recursion depth is bounded by the number of modules (~60)
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in edges[module]:
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(component)

    for module in modules:
        if module not in index:
            visit(module)
    return found


def test_no_import_cycle_inside_ingest():
    found = cycles(grimp.build_graph("ingest", cache_dir=None), "ingest")
    unexpected = [sorted(cycle) for cycle in found if cycle not in KNOWN_CYCLES]
    assert unexpected == [], f"modules that import one another in a circle: {unexpected}"


def test_the_cycle_finder_sees_a_circle_and_only_a_circle():
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.d", "pkg.e", "other.x"):
        graph.add_module(module)
    for importer, imported in (("pkg.a", "pkg.b"), ("pkg.b", "pkg.c"), ("pkg.c", "pkg.a"),  # a -> b -> c -> a
                               ("pkg.c", "pkg.d"), ("pkg.d", "pkg.e"),                      # downward only
                               ("pkg.e", "other.x"), ("other.x", "pkg.e")):                  # leaves pkg
        graph.add_import(importer=importer, imported=imported)
    assert cycles(graph, "pkg") == [{"pkg.a", "pkg.b", "pkg.c"}]
    graph.add_import(importer="pkg.e", imported="pkg.d")
    assert sorted(map(sorted, cycles(graph, "pkg"))) == [["pkg.a", "pkg.b", "pkg.c"], ["pkg.d", "pkg.e"]]
