"""Crash-safe crawl state in stateDir: checkpoints, carried URLs, robots log.

Layout of stateDir::

    frontier/{main,priority,wait}/seg-*.log   URL stores (append-only logs)
    seen.log                                  URL-seen fingerprints (append-only)
    robots.log                                robots.txt answers (append-only)
    checkpoint.json                           the last checkpoint (atomic)
    carry-NNNNNNNN.log                        the URLs it carried (see below)

The logs are append-only and flushed at every checkpoint (the stores also
whenever their buffer fills), so nothing queued before a flush is lost.  A
checkpoint holds what is not in the logs: the stores' read positions, the
counters, the output's position, the sites' pending waits, and the *carried*
records -- URLs taken out of the stores (RAM windows, site FIFOs, pages in
flight) and not yet done.  It is written to a temporary file, fsynced and
renamed over ``checkpoint.json``, so a crash leaves either the old or the new
one, never half of either.  Its carry file is written (and fsynced) before
it, and the previous carry file deleted after.

Every line of ``robots.log`` and every carry record carries a CRC32, like the
store's records: a line cut by a crash is detected, dropped and counted.
"""

from __future__ import annotations

import base64
import errno
import json
import os

from .logline import frame, unframe
from .owner_only import opener
from .frontier.store import UrlRecord, decode_record, encode_record

__all__ = [
    "FORMAT",
    "VERSION",
    "StateError",
    "CutBeforeFirstCheckpoint",
    "RobotsLog",
    "describe_write_error",
    "has_state",
    "remove_crawl_files",
    "read_checkpoint",
    "write_checkpoint",
]

FORMAT = "larbin_py-state"
#: Bumped whenever a state file changes meaning; other versions are refused.
#: 2: URL records may carry how they were found and the recrawl's token (the
#: store's eight-field form), which a reader of version 1 would misread.
VERSION = 2
#: The versions this larbin_py continues (version 1 is version 2 without those fields).
READABLE = (1, 2)
CHECKPOINT = "checkpoint.json"
SEEN_LOG = "seen.log"
ROBOTS_LOG = "robots.log"
FRONTIER_DIR = "frontier"


class StateError(Exception):
    """stateDir cannot be used as asked (missing, foreign, incompatible, damaged)."""


def describe_write_error(exc: OSError, path: str | None = None) -> str:
    """One line saying which file or folder could not be written, and why.

    ``path`` names the file (or folder) when ``exc`` does not (a ``write()``
    on an open file carries no name).  A full disk (ENOSPC, EDQUOT) and a
    file size limit (EFBIG, ``ulimit -f``) say what to do about them.
    """
    where = exc.filename if exc.filename is not None else path
    code = exc.errno
    name = errno.errorcode.get(code, "") if code is not None else ""
    reason = (os.strerror(code) if code else exc.strerror or str(exc)).lower()
    text = f"cannot write {where}: {reason}" + (f" ({name})" if name else "")
    if code in (errno.ENOSPC, errno.EDQUOT):
        text += "; free space on that disk"
    elif code == errno.EFBIG:
        text += "; a file size limit was reached (ulimit -f)"
    return text


def _named(exc: OSError, path: str) -> OSError:
    """``exc`` naming ``path`` when it names no file (so the message can)."""
    if exc.filename is None:
        exc.filename = path
    return exc


def remove_crawl_files(state_dir: str) -> None:
    """Remove a crawl's own state from ``state_dir``: its checkpoint, the seen and robots logs,
    the journals and carried records, the URL stores and the analysis queue.  Its records
    (larbin_py.records), crawl log, cookie jar, lock and anything else stay."""
    import shutil  # (and the lzma and bz2 modules it imports: not at a crawl's start)

    for name in os.listdir(state_dir):
        path = os.path.join(state_dir, name)
        if name in (CHECKPOINT, CHECKPOINT + ".tmp", SEEN_LOG, ROBOTS_LOG, "seen.run", "seen.run.tmp") or \
                (name.startswith(("carry-", "journal-")) and name.endswith(".log")):
            os.unlink(path)
        elif name in (FRONTIER_DIR, "analysis") and os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)


def has_state(state_dir: str) -> bool:
    """True when ``state_dir`` holds anything of a crawl."""
    if not os.path.isdir(state_dir):
        return False
    for name in (CHECKPOINT, SEEN_LOG, ROBOTS_LOG):
        if os.path.exists(os.path.join(state_dir, name)):
            return True
    frontier = os.path.join(state_dir, FRONTIER_DIR)
    return os.path.isdir(frontier) and any(os.scandir(frontier))


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_checkpoint(state_dir: str, data: dict, carry: list[UrlRecord], serial: int) -> None:
    """Write checkpoint ``serial`` (``data`` + ``carry``) atomically; see the module docstring.

    An OSError names the file it failed on (``filename``); the previous
    checkpoint is then still the one in force.
    """
    carry_name = f"carry-{serial:08d}.log"
    carry_path = os.path.join(state_dir, carry_name)
    try:
        with open(carry_path, "wb", opener=opener) as f:
            f.write(b"".join(encode_record(rec) for rec in carry))
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise _named(exc, carry_path)
    doc = {"format": FORMAT, "version": VERSION, "serial": serial, "carry": carry_name,
           "carry_count": len(carry), **data}
    tmp = os.path.join(state_dir, CHECKPOINT + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8", opener=opener) as f:
            json.dump(doc, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(state_dir, CHECKPOINT))
        _fsync_dir(state_dir)
    except OSError as exc:
        raise _named(exc, tmp)
    for name in os.listdir(state_dir):
        if name.startswith("carry-") and name.endswith(".log") and name != carry_name:
            try:
                os.unlink(os.path.join(state_dir, name))
            except FileNotFoundError:
                pass


class CutBeforeFirstCheckpoint(StateError):
    """``state_dir`` holds a crawl without a checkpoint: one cut before its first (or run
    with canReload off).  Nothing of it can be continued (larbin_py.crawl_state starts it again)."""


def read_checkpoint(state_dir: str) -> tuple[dict, list[UrlRecord], int]:
    """``(checkpoint, carried records, damaged carry records)``; StateError when unusable
    (:class:`CutBeforeFirstCheckpoint` for a crawl that has none)."""
    path = os.path.join(state_dir, CHECKPOINT)
    if not os.path.exists(path):
        if has_state(state_dir):
            raise CutBeforeFirstCheckpoint(f"{state_dir}: no {CHECKPOINT}; the crawl there was cut before its "
                                           "first checkpoint, or canReload was off: nothing to continue")
        raise StateError(f"{state_dir}: no saved crawl to continue (start one without --reload)")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as exc:
        raise StateError(f"{path}: unreadable checkpoint: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise StateError(f"{path}: not a larbin_py checkpoint")
    if doc.get("version") not in READABLE:
        raise StateError(f"{path}: state version {doc.get('version')!r}, this larbin_py reads versions "
                         f"{', '.join(map(str, READABLE))} only; finish that crawl with the version that started it, "
                         "or remove the folder")
    carry: list[UrlRecord] = []
    damaged = 0
    carry_path = os.path.join(state_dir, str(doc.get("carry", "")))
    try:
        with open(carry_path, "rb") as f:
            for line in f:
                rec = decode_record(line) if line.endswith(b"\n") else None
                if rec is None:
                    damaged += 1
                else:
                    carry.append(rec)
    except OSError as exc:
        raise StateError(f"{carry_path}: carried URLs unreadable: {exc}") from None
    expected = doc.get("carry_count")
    if isinstance(expected, int) and expected > len(carry) + damaged:
        damaged += expected - len(carry) - damaged
    return doc, carry, damaged


class RobotsLog:
    """Append-only log of robots.txt answers: ``robots URL -> (wall time, body)``.

    ``body`` None records "no restriction" (a 4xx, too many redirects).
    Each line: ``crc32hex time url base64(body)|-``.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        if os.path.exists(path):  # cut a torn last line, so new lines never glue onto it
            with open(path, "r+b") as f:
                data = f.read()
                keep = data.rfind(b"\n") + 1
                if keep < len(data):
                    f.truncate(keep)
        self._f = open(path, "ab", buffering=0, opener=opener)
        self._size = self._f.seek(0, os.SEEK_END)
        self._buf: list[bytes] = []

    def append(self, robots_url: str, when: float, body: bytes | None) -> None:
        payload = base64.b64encode(body).decode("ascii") if body is not None else "-"
        rest = f"{when:.3f} {robots_url} {payload}".encode("utf-8", "surrogateescape")
        self._buf.append(frame(rest))

    def flush(self, sync: bool = False) -> None:
        """Write the buffered lines; an OSError names this log's path."""
        try:
            if self._buf:
                view = memoryview(b"".join(self._buf))
                self._buf.clear()
                while view:  # an unbuffered write may be short (a disk filling up)
                    n = self._f.write(view)
                    self._size += n
                    view = view[n:]
            if sync:
                os.fsync(self._f.fileno())
        except OSError as exc:
            raise _named(exc, self.path)

    def position(self) -> int:
        """Bytes written to the file (after :meth:`flush`: a commit records it, --reload cuts to it)."""
        return self._size

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._f.close()

    @staticmethod
    def load(path: str) -> tuple[dict[str, tuple[float, bytes | None]], int]:
        """The last answer logged per robots URL, and the number of damaged lines."""
        answers: dict[str, tuple[float, bytes | None]] = {}
        damaged = 0
        if not os.path.exists(path):
            return answers, 0
        with open(path, "rb") as f:
            for line in f:
                rest = unframe(line)
                if rest is None:
                    damaged += 1
                    continue
                try:
                    when, url, payload = rest.decode("utf-8", "surrogateescape").split(" ", 2)
                    body = None if payload == "-" else base64.b64decode(payload, validate=True)
                    answers[url] = (float(when), body)
                except ValueError:
                    damaged += 1
        return answers, damaged
