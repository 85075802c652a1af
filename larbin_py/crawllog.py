"""The crawl log: one line per URL outcome, fetched or forgotten.

``stateDir/crawl.log`` (or the file ``crawlLog`` names; ``crawlLog none``:
no log) gets one line for every URL the crawl took and ended, as
Heritrix's ``crawl.log`` does, and one for every robots.txt answer.  A
URL refused before it was taken (its depth, the rules, already seen) has
no line: it never had an outcome.  Tab-separated, UTF-8, one line each,
eleven fields (docs/outputs.md says each with an example):

==  ============  ==========================================================
 1  time          when the outcome was known, UTC, ``2024-05-01T12:00:00.123Z``
 2  status        the HTTP status, or a negative code when there was no
                  answer (:data:`CODES`: -1 no DNS, -2 no connection, -4
                  timeout, -9998 forbidden by robots.txt...)
 3  size          body bytes as saved (decoded), ``-`` without an answer
 4  url           the URL
 5  via           how it was found: ``seed``, ``input``, ``link``,
                  ``embed``, ``redirect``, ``sitemap``, ``prerequisite``
                  (robots.txt), ``-`` when not known
 6  referrer      the URL it was found from, ``-`` for none
 7  content type  as the server sent it (media type), ``-`` for none
 8  duration      seconds from the request's start to its answer (ms), ``-``
 9  digest        ``sha1:`` and the base32 SHA-1 of the body as saved
                  (the WARC's payload digest form), ``-`` without a body
10  reason        ``ok`` (saved), ``duplicate``, ``notModified`` (a
                  recrawl's 304) or the reason it was forgotten
                  (``err40X``, ``noDNS``...); ``robots`` for robots.txt
11  recrawl       in a recrawl (larbin_py.recrawl): ``new``, ``changed``,
                  ``unchanged``, ``gone``, ``kept``, ``skipped``; else ``-``
==  ============  ==========================================================

Every field is escaped as index.tsv's are (``\\\\``, ``\\t``, ``\\n``,
``\\r``), so a hostile Content-Type cannot add a field or a line.

**Durability**: the outcome journal's (larbin_py.journal).  The lines of
the outcomes a group commit covers are written by that commit on the
writer thread, before its journal line, and the line records the log's
position; ``--reload`` cuts the log back to the last commit's position
(:func:`cut_crawl_log`), so after a crash no line is lost (a committed
outcome has its line) and none is written twice (an outcome not committed
is done again and logged then).  A checkpoint fsyncs the log with the
other state files (every commit does with ``syncCommits``).

**Rotation**: once the log holds ``crawlLogMaxBytes`` (0: never), the next
commit renames it ``crawl.log.1`` (then ``.2``, ...: the higher, the
newer) and starts a new one.  A position is ``[rotations, offset]``; a cut
back to a commit before a rotation renames the rotated file back.

This module formats lines (sans-I/O: :func:`format_line`) and owns the file
(:class:`CrawlLogFile`, called on the writer thread only).
"""

from __future__ import annotations

import os
import time

from .output.base import escape_field, payload_digest, unescape_field
from .owner_only import opener

__all__ = ["CODES", "FIELDS", "CrawlLogFile", "cut_crawl_log", "format_line", "parse_line", "payload_digest",
           "read_log", "rotated_path", "rotations_of", "status_code"]

#: The fields of a line, in order (docs/outputs.md describes each).
FIELDS = ("time", "status", "size", "url", "via", "referrer", "content_type", "duration", "digest",
          "reason", "recrawl")

#: The status field of an outcome without an HTTP answer: Heritrix's codes
#: where it has one for the same failure, others below -9000.
CODES = {
    "noDNS": -1,
    "noConnection": -2,
    "reset": -3,
    "staleConnection": -3,
    "timeout": -4,
    "badResponse": -5,
    "headerTooBig": -5,
    "privateAddress": -7,
    "badUrl": -7,
    "forbiddenRobots": -9998,
    "tooBig": -9001,
    "outputError": -9002,
    "notDue": -9003,
}
#: The code of a reason not in :data:`CODES`.
OTHER_CODE = -9999


def status_code(reason: str) -> int:
    """The status field of an outcome forgotten for ``reason`` without an answer."""
    return CODES.get(reason, OTHER_CODE)


#: The last second formatted and its text, replaced as one tuple (a crawl writes many lines a second).
_second: tuple[int, str] = (-1, "")


def _iso(when: float) -> str:
    global _second
    seconds = int(when)
    last, text = _second
    if last != seconds:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        _second = (seconds, text)
    return f"{text}.{int((when - seconds) * 1000):03d}Z"


def format_line(*, when: float, status: int | None, url: str, reason: str, size: int | None = None,
                via: str = "", referrer: str = "", content_type: str | None = None,
                duration: float | None = None, digest: str | None = None, recrawl: str = "") -> bytes:
    """One line of the log (with its newline), the fields in :data:`FIELDS`' order.

    ``status`` None: the outcome had no HTTP answer (the code of ``reason``
    is written).  ``via``: the word (larbin_py.frontier.store.VIA_KINDS).
    """
    esc = escape_field
    code = status if status is not None else status_code(reason)
    fields = (
        _iso(when), str(code), str(size) if size is not None else "-", esc(url), via or "-",
        esc(referrer) if referrer else "-", esc(content_type) if content_type else "-",
        f"{duration:.3f}" if duration is not None else "-", digest or "-", esc(reason) or "-",
        recrawl or "-",
    )
    return ("\t".join(fields) + "\n").encode("utf-8", "surrogateescape")


def parse_line(line: str) -> dict:
    """One line (without its newline) as a dict of :data:`FIELDS` (``-`` becomes None;
    ``status`` and ``size`` ints, ``duration`` a float).  ValueError when it is no line of the log."""
    fields = line.split("\t")
    if len(fields) != len(FIELDS):
        raise ValueError(f"crawl log line has {len(fields)} fields, expected {len(FIELDS)}: {line[:200]!r}")
    entry: dict = {}
    for name, value in zip(FIELDS, fields):
        entry[name] = None if value == "-" else unescape_field(value)
    entry["status"] = int(entry["status"])
    entry["size"] = int(entry["size"]) if entry["size"] is not None else None
    entry["duration"] = float(entry["duration"]) if entry["duration"] is not None else None
    return entry


def read_log(path: str) -> list[dict]:
    """Every line of the log at ``path``, its rotated files first (oldest first), parsed."""
    paths = [rotated_path(path, n) for n in range(1, rotations_of(path) + 1)] + [path]
    entries = []
    for p in paths:
        try:
            with open(p, encoding="utf-8", errors="surrogateescape") as f:
                entries.extend(parse_line(line.rstrip("\n")) for line in f)
        except FileNotFoundError:
            continue
    return entries


def rotated_path(path: str, n: int) -> str:
    """The ``n``-th rotated log of ``path`` (``crawl.log.1`` is the oldest)."""
    return f"{path}.{n}"


def rotations_of(path: str) -> int:
    """How many times the log at ``path`` was rotated (the highest ``path.N``)."""
    folder, base = os.path.split(os.path.abspath(path))
    top = 0
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return 0
    for name in names:
        if name.startswith(base + ".") and name[len(base) + 1:].isdigit():
            top = max(top, int(name[len(base) + 1:]))
    return top


def _fsync_dir(path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def cut_crawl_log(path: str, position) -> list[str]:
    """Cut the log at ``path`` back to ``position`` (``[rotations, offset]``, a commit's).

    What a crash left after the commit goes: a later rotation is undone
    (the file rotated at that commit renamed back, later ones removed) and
    the file is truncated to the offset.  Returns what was found damaged
    (one sentence each): a log shorter than the commit says (a machine
    crash lost its end; logging goes on from where it ends).
    """
    rotations, offset = int(position[0]), int(position[1])
    damage = []
    top = rotations_of(path)
    if top > rotations:
        if os.path.exists(path):
            os.unlink(path)
        os.rename(rotated_path(path, rotations + 1), path)
        for n in range(rotations + 2, top + 1):
            try:
                os.unlink(rotated_path(path, n))
            except FileNotFoundError:
                pass
        _fsync_dir(path)
    elif top < rotations:
        damage.append(f"{path}: rotated {top} times, the journal says {rotations}: the lines between "
                      "are lost, logging goes on")
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        size = 0
    if size > offset:
        os.truncate(path, offset)
    elif size < offset:
        damage.append(f"{path}: {size} bytes, the journal says {offset}: a machine crash cut its end, "
                      "logging goes on from there")
    return damage


class CrawlLogFile:
    """The log file, appended to in batches on the writer thread.

    Opened at its end (the crawl log goes on across crawls and restarts;
    ``--reload`` cuts it first with :func:`cut_crawl_log`).  ``max_bytes``:
    rotate once the file holds that much (0: never).  An ``OSError`` names
    the file.
    """

    def __init__(self, path: str, *, max_bytes: int = 0) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.rotations = rotations_of(path)
        self._fd = -1
        self._offset = 0
        self._open()

    def _open(self) -> None:
        try:
            self._fd = opener(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            self._offset = os.fstat(self._fd).st_size
        except OSError as exc:
            if exc.filename is None:
                exc.filename = self.path
            raise

    def position(self) -> list[int]:
        """``[rotations, offset]``: where the next line goes (a commit records it)."""
        return [self.rotations, self._offset]

    def write(self, lines: list[bytes]) -> None:
        """Append ``lines`` (one batch: a commit's); rotate first when the file is full."""
        if not lines:
            return
        try:
            if self.max_bytes and self._offset >= self.max_bytes:
                self._rotate()
            view = memoryview(b"".join(lines))
            while view:
                n = os.write(self._fd, view)
                self._offset += n
                view = view[n:]
        except OSError as exc:  # a write() names no file: say which one failed
            if exc.filename is None:
                exc.filename = self.path
            raise

    def _rotate(self) -> None:
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = -1
        os.rename(self.path, rotated_path(self.path, self.rotations + 1))
        self.rotations += 1
        self._open()
        _fsync_dir(self.path)

    def sync(self) -> None:
        """fdatasync the log (a checkpoint, or every commit with syncCommits)."""
        if self._fd >= 0:
            try:
                os.fdatasync(self._fd)
            except OSError as exc:
                if exc.filename is None:
                    exc.filename = self.path
                raise

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)
