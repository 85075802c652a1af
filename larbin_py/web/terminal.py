"""Larbin's printStats: a one-line crawl status on the terminal.

:func:`format_status` is pure: snapshot in, one line out.  On a terminal
(``tty``) with an end in sight (``pages.limit`` or ``limit_time``) the line
starts with a progress bar and is fitted to ``width`` so it can be redrawn
in place; otherwise it is a plain log line.

:class:`StatusLine` writes it every ``every`` seconds with one loop timer:
redrawn in place with ``\\r`` on a terminal with an end, one line per tick
otherwise.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from typing import TextIO

from .source import StatsSource

__all__ = ["StatusLine", "format_status", "progress_of"]


def _count(n: float) -> str:
    n = float(n)
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale * 10:
            return f"{n / scale:.1f}{unit}"
    return f"{n:.0f}"


def _bytes(n: float) -> str:
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}TiB"


def _clock(seconds: float) -> str:
    s = max(0, int(seconds))
    return f"{s // 3600:d}:{s // 60 % 60:02d}:{s % 60:02d}"


def progress_of(snapshot: dict) -> float | None:
    """Fraction (0..1) of the crawl done by its page or time limit, or None."""
    pages = snapshot.get("pages") or {}
    fractions = []
    limit = pages.get("limit")
    if isinstance(limit, int) and limit > 0:
        fractions.append((pages.get("fetched") or 0) / limit)
    limit_time = snapshot.get("limit_time")
    if isinstance(limit_time, (int, float)) and limit_time > 0:
        fractions.append((snapshot.get("uptime") or 0) / limit_time)
    if not fractions:
        return None
    return min(max(max(fractions), 0.0), 1.0)


def format_status(snapshot: dict, width: int = 80, tty: bool = False) -> str:
    """One status line (no newline) for ``snapshot``.

    Fields: elapsed time, pages fetched and pages/s (now, average), bandwidth,
    URLs queued (disk + memory) and in flight, errors (forgotten URLs), DNS
    in flight/failures, open connections.  With ``tty`` and a limit, a
    progress bar and percentage come first and the line is cut to
    ``width - 1`` characters.
    """
    pages = snapshot.get("pages") or {}
    urls = snapshot.get("urls") or {}
    dns = snapshot.get("dns") or {}
    conns = snapshot.get("connections") or {}
    forgotten = urls.get("forgotten") or {}
    errors = sum(v for v in forgotten.values() if isinstance(v, int))
    queued = (urls.get("queued_disk") or 0) + (urls.get("in_memory") or 0)
    fields = [
        f"{_clock(snapshot.get('uptime') or 0)}",
        f"pages {_count(pages.get('fetched') or 0)}",
        f"{pages.get('rate_now') or 0:.1f}/s (avg {pages.get('rate_avg') or 0:.1f})",
        f"{_bytes(pages.get('bytes_rate_now') or 0)}/s",
        f"urls queued {_count(queued)} in flight {_count(urls.get('in_flight') or 0)}",
        f"errors {_count(errors)}",
        f"dns {dns.get('in_flight') or 0} in flight {_count(dns.get('failures') or 0)} failed",
        f"conns {conns.get('open') or 0}/{conns.get('max') or 0}",
    ]
    state = snapshot.get("state")
    if state and state != "running":
        fields.insert(0, str(state))
    line = " | ".join(fields)
    progress = progress_of(snapshot)
    if not tty or progress is None:
        return line
    width = max(width, 20)
    bar_width = max(10, min(30, width // 4))
    done = int(progress * bar_width)
    bar = "[" + "#" * done + "." * (bar_width - done) + f"] {progress * 100:3.0f}% "
    return (bar + line)[: width - 1]


class StatusLine:
    """Write :func:`format_status` to ``stream`` every ``every`` seconds."""

    def __init__(
        self,
        source: StatsSource,
        *,
        stream: TextIO | None = None,
        every: float = 5.0,
        isatty: bool | None = None,
    ) -> None:
        self.source = source
        self.stream = stream if stream is not None else sys.stderr
        self.every = every
        if isatty is None:
            probe = getattr(self.stream, "isatty", None)
            isatty = bool(probe and probe())
        self.isatty = isatty
        self._handle: asyncio.TimerHandle | None = None
        self._in_place = False

    def start(self) -> None:
        """Print now, then every ``every`` seconds on the running loop."""
        if self._handle is None:
            self._tick(asyncio.get_running_loop())

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self.print_once()
        self._handle = loop.call_later(self.every, self._tick, loop)

    def print_once(self) -> None:
        """Write one status now (in place on a terminal with an end)."""
        try:
            snap = self.source.snapshot()
        except Exception as exc:  # never let a bad snapshot kill the timer
            snap = {"state": f"snapshot failed: {type(exc).__name__}"}
        width = shutil.get_terminal_size((80, 24)).columns if self.isatty else 80
        line = format_status(snap, width, self.isatty)
        if self.isatty and progress_of(snap) is not None:
            self.stream.write("\r" + line.ljust(width - 1))
            self._in_place = True
        else:
            if self._in_place:
                self.stream.write("\n")
                self._in_place = False
            self.stream.write(line + "\n")
        self.stream.flush()

    def stop(self) -> None:
        """Cancel the timer and end an in-place line with a newline."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._in_place:
            self.stream.write("\n")
            self.stream.flush()
            self._in_place = False
