"""What the benchmarks share: tables, the JSON line, the peer's venv, runs.

Every benchmark prints a table and ends with one JSON line of its figures
(:func:`report`).  Peers such as Scrapy are never dependencies of the
project: :func:`peer_python` builds them a virtual environment of their own
under ``bench/.peers`` (or ``$LARBIN_BENCH_PEERS``) on first use.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # run from a checkout without installing


def compiled(*trees: str | None) -> None:
    """Compile the larbin_py modules of each source tree (None: this checkout) before
    anything is timed.  A crawler child importing a tree without its bytecode (a fresh
    ``git worktree`` for ``--baseline``, or ``PYTHONDONTWRITEBYTECODE`` set) compiles
    every module first: about 0.3 s of CPU in its figures that the other tree may not pay."""
    import compileall

    for tree in trees:
        root = os.path.join(os.path.abspath(tree) if tree else os.path.dirname(HERE), "larbin_py")
        compileall.compile_dir(root, quiet=1)


def table(title: str, columns: list[str], rows: list[list]) -> str:
    """A plain-text table (numbers right-aligned, 3 significant decimals)."""
    def cell(v):
        if isinstance(v, float):
            return f"{v:,.3f}" if abs(v) < 100 else f"{v:,.1f}"
        if isinstance(v, int):
            return f"{v:,}"
        return "-" if v is None else str(v)

    body = [[cell(v) for v in row] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in body)) if body else len(c) for i, c in enumerate(columns)]
    lines = [title, "  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines.append("  ".join("-" * w for w in widths))
    for row in body:
        lines.append("  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(row, widths))))
    return "\n".join(lines)


def machine() -> dict:
    """Where and when the figures were taken."""
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
    }


def report(name: str, figures: dict) -> None:
    """Print the one JSON line that ends every benchmark."""
    print(json.dumps({"bench": name, **figures, "machine": machine()}, sort_keys=True))


def percentile(values, q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def peer_python(package: str = "scrapy") -> str | None:
    """The Python of the peers' own venv (created with ``package`` if missing).

    Returns None, with the reason on stderr, when it cannot be built (no
    network, no pip): the benchmark then reports the peer as unavailable.
    """
    root = os.environ.get("LARBIN_BENCH_PEERS") or os.path.join(HERE, ".peers")
    python = os.path.join(root, "bin", "python")
    if os.path.exists(python):
        check = subprocess.run([python, "-c", f"import {package}"], capture_output=True)
        if check.returncode == 0:
            return python
    print(f"bench: installing {package} into {root} (the peers' own venv)...", file=sys.stderr)
    try:
        subprocess.run([sys.executable, "-m", "venv", root], check=True, capture_output=True)
        subprocess.run([python, "-m", "pip", "install", "-q", package], check=True, capture_output=True,
                       timeout=900)
    except (subprocess.SubprocessError, OSError) as exc:
        print(f"bench: {package} unavailable: {exc}", file=sys.stderr)
        return None
    return python


def cpu_seconds() -> float:
    """CPU time of this process (user + system), seconds."""
    t = os.times()
    return t.user + t.system


def peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def parents() -> dict[int, int]:
    """``{pid: parent pid}`` of every process, from /proc."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    out[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):  # ended meanwhile
                continue
    return out


def children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (any of its threads)."""
    return [child for child, parent in parents().items() if parent == pid]


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (children, their children...)."""
    tree = parents()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        below = [child for child, parent in tree.items() if parent == pid]
        out += below
        todo += below
    return out


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` so far; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
