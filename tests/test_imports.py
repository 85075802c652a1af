"""The package's import graph: the engine never reaches the demo or the test web; no cycles."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import larbin_py

PACKAGE = Path(larbin_py.__file__).parent


def test_the_engine_imports_neither_the_demo_nor_the_synthetic_web():
    code = ("import sys, larbin_py.engine; "
            "print(sorted(m for m in sys.modules if m.startswith(('larbin_py.demo', 'larbin_py.sim'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    """Every module of the package and the package modules it imports, lazily too."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        base = name.split(".") if is_pkg else name.split(".")[:-1]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    root = ".".join(base[:len(base) - node.level + 1])
                    mod = f"{root}.{node.module}" if node.module else root
                else:
                    mod = node.module or ""
                # ``from . import x`` names a module x when there is one
                found = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod for a in node.names]
            else:
                continue
            for target in found:
                while target and target not in modules:  # a name inside a module: the module
                    target = target.rpartition(".")[0]
                if target and target != name and target.startswith("larbin_py"):
                    targets.add(target)
        graph[name] = targets
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of ``graph`` (one path per cycle found by a depth-first walk).

    A package's ``__init__`` re-exporting its submodules is not a cycle of
    code (the submodule imports the package's other modules, not the
    re-export), so edges from a package to its own submodules are left out.
    """
    edges = {m: {t for t in ts if not t.startswith(m + ".")} for m, ts in graph.items()}
    found, state, stack = [], {}, []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found


def test_no_import_cycle_in_the_package():
    assert _cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]


def test_only_the_command_line_and_the_demo_reach_the_synthetic_web():
    graph = import_graph()
    users = {m for m, targets in graph.items() if any(t.startswith("larbin_py.sim") for t in targets)
             and not m.startswith("larbin_py.sim")}
    assert users <= {"larbin_py.cli", "larbin_py.demo"}, users


#: What each room may not import, as its ``__init__`` docstring says.
FORBIDDEN = {
    "larbin_py.frontier": ("engine", "output", "web", "distributed", "analysis", "sim", "demo"),
    "larbin_py.net": ("engine", "output", "web", "distributed", "analysis", "sim", "demo"),
    "larbin_py.output": ("engine", "frontier", "net", "web", "distributed", "analysis", "sim", "demo"),
    "larbin_py.web": ("engine", "net", "output", "distributed", "analysis", "sim", "demo"),
    "larbin_py.analysis": ("engine", "frontier", "net", "web", "distributed", "sim", "demo"),
    "larbin_py.testing": ("engine", "net", "web", "distributed", "sim", "demo"),
    "larbin_py.distributed": ("sim", "demo"),
    "larbin_py.config": ("engine", "output", "state", "crawl_state", "cli", "runner", "wiring", "sim", "demo",
                         "testing"),
    "larbin_py.sim": ("",),  # the oracle: nothing of the crawler
}


def test_each_room_imports_only_what_its_docstring_allows():
    graph = import_graph()
    wrong = []
    for room, forbidden in FORBIDDEN.items():
        for module, targets in graph.items():
            if module != room and not module.startswith(room + "."):
                continue
            for target in targets:
                if target == room or target.startswith(room + "."):
                    continue
                if any(target == f"larbin_py.{f}" or target.startswith(f"larbin_py.{f}.") or f == ""
                       for f in forbidden) and not (room == "larbin_py.frontier" and target.startswith(
                           "larbin_py.net.") and module == "larbin_py.frontier.interfaces"):
                    wrong.append(f"{module} -> {target}")
    assert wrong == [], wrong


def test_a_crawl_starts_without_what_it_may_not_use():
    """Issue 37: what a crawl imports before its first request.  numpy (the seen
    stores' sorted arrays, from the first sealed chunk on), lxml (the analysis
    processes parse), warcio (WARC output), Chromium's driver (dynamicPages),
    email (a Retry-After date), h2 (a TLS connection that chose HTTP/2),
    zstandard (a zstd body), re2 (URL patterns), calendar (a cookie's Expires),
    shutil (records removed), tempfile (an exec analyzer), secrets (a Digest
    answer) and ctypes.util (which ran ldconfig in a child process) come at
    their first use, or never."""
    assert imported_by("import larbin_py.cli, larbin_py.engine, larbin_py.runner, larbin_py.wiring",
                       ("numpy", "lxml", "warcio", "email", "larbin_py.net.dynamic", "larbin_py.net.browser",
                        "larbin_py.output.warc", "h2", "larbin_py.net.h2conn", "zstandard", "re2", "calendar",
                        "shutil", "tempfile", "secrets", "ctypes.util")) == []


def imported_by(code: str, modules) -> list[str]:
    """Which of ``modules`` a fresh interpreter has imported after running ``code``."""
    probe = f"{code}\nimport sys\nprint(' '.join(sorted(m for m in {tuple(modules)!r} if m in sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_reading_a_configuration_imports_no_network_module():
    """Issue 37: the command line and a configuration read (every check of
    every key, a proxy, an auth line, a site line and TLS settings among them)
    import neither the event loop, the network's protocols nor the crawl:
    a configuration error or --print-config answers without them, and the
    crawl's start imports them once, after the configuration is known."""
    code = ("import larbin_py.cli\n"
            "from larbin_py.config import parse_config_text\n"
            "parse_config_text('startUrl http://a.test/\\nproxy http://u:p@127.0.0.1:3128\\n'\n"
            "                  'auth\\n http://a.test/ basic u p\\nend\\nsite\\n a.test waitDuration=2\\nend\\n'\n"
            "                  'tlsCaMode add\\nhttpVersion auto\\nhttpParser h11\\n')")
    assert imported_by(code, ("asyncio", "uvloop", "pycares", "h11", "h2", "ssl", "zstandard", "re2", "lxml", "numpy",
                              "secrets", "calendar", "larbin_py.net.http", "larbin_py.net.tls", "larbin_py.net.dns",
                              "larbin_py.engine", "larbin_py.output", "larbin_py.analysis", "larbin_py.web")) == []


def test_a_lazy_module_is_imported_at_first_use_then_is_the_module():
    code = """
import sys
from larbin_py.lazyimport import LazyModule
seen = []
np = LazyModule("numpy", globals(), "np", seen.append)
before = "numpy" in sys.modules
zeros = np.zeros(3)                   # the first attribute read imports it
assert np is sys.modules["numpy"]     # the name is the module from then on
assert seen == [np] and zeros.sum() == 0
print(before)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_the_seen_stores_work_with_numpy_imported_on_first_use(tmp_path):
    """A sieve that seals a chunk (and so first needs numpy) in a fresh process."""
    code = f"""
import sys
from larbin_py.frontier.sieve import Sieve
from larbin_py.frontier.seen import SeenSet
s = Sieve({str(tmp_path)!r}, seal_at=4, first_merge=8, background=False)
assert "numpy" not in sys.modules
assert s.add_many(list(range(1, 20))) == [True] * 19
assert "numpy" in sys.modules and s.add_many([3, 25]) == [False, True] and 7 in s and 99 not in s
a = SeenSet()
assert a.add(5) and not a.add(5)
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
