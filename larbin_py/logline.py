"""The line format of the crawl's append-only logs: ``<crc32 hex> <body>\\n``.

The URL stores, the robots.txt log and the completion journal write one
record a line, its body behind the CRC32 of that body in 8 hex digits, so a
line cut by a crash, or damaged on disk, is told apart from a good one and
dropped.  A body holds no newline (each log encodes its own fields).
"""

from __future__ import annotations

import zlib

__all__ = ["frame", "unframe"]


def frame(body: bytes) -> bytes:
    """``body`` as one log line, its CRC in front and a newline behind."""
    return b"%08x %s\n" % (zlib.crc32(body), body)


def unframe(line: bytes, *, whole: bool = True) -> bytes | None:
    """The body of one log line; None when it is damaged.

    ``whole``: the line must end with its newline (a line without one was
    cut by a crash); with ``whole=False`` a line read without its newline
    is taken too.
    """
    if line.endswith(b"\n"):
        line = line[:-1]
    elif whole:
        return None
    if len(line) < 9 or line[8:9] != b" ":
        return None
    body = line[9:]
    try:
        crc = int(line[:8], 16)
    except ValueError:
        return None
    return body if crc == zlib.crc32(body) else None
