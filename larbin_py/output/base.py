"""What every output shares: the page record, the error, the counters, the index.

An *output* receives one :class:`Document` per fetched page and stores it
synchronously.  The engine never calls a disk output (``mirror``, ``save``,
``warc``) on the event loop: it wraps it in a
:class:`~larbin_py.output.writer.ThreadedOutput`, whose writer thread makes
every call, one at a time and in order (so an output needs no locking).  A
page file is written with one ``write`` to a temporary name and renamed
into place (``os.replace``), so a crash never leaves a half-written page
under its name; index lines go to a buffered file that :meth:`Output.flush`
pushes to the kernel.  A group commit (:mod:`larbin_py.journal`) calls
``flush()`` then ``position()``: what the kernel holds, which a process
crash keeps.  A checkpoint (or every commit, with ``syncCommits``) calls
``flush(sync=True)``, which makes durable the page files written since the
last sync, their directories and the index -- the output's own files, never
``os.sync()`` -- and ``position()`` right after it names exactly what is
durable.

Index format (``saveDir/index.tsv``, UTF-8, one line per write)::

    URL <TAB> PATH <TAB> STATUS <TAB> CONTENT-TYPE <TAB> LENGTH [<TAB> OFFSET]

PATH is relative to saveDir (the page file, or the WARC file for ``warc``);
LENGTH is the number of body bytes stored; OFFSET (``warc`` only) is the byte
offset of the page's gzip member (response record) in that WARC file.  In
every field ``\\`` is written ``\\\\``, and TAB, LF, CR are written ``\\t``,
``\\n``, ``\\r`` (:func:`escape_field` / :func:`unescape_field`); an absent
content type is an empty field.
"""

from __future__ import annotations

import base64
import errno as _errno
import hashlib
import os
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

__all__ = [
    "payload_digest",
    "Document",
    "Output",
    "OutputError",
    "OutputStats",
    "IndexWriter",
    "escape_field",
    "unescape_field",
    "parse_index_line",
    "INDEX_NAME",
    "position_int",
]

INDEX_NAME = "index.tsv"


def payload_digest(body: bytes) -> str:
    """``sha1:`` and the base32 SHA-1 of ``body``: the form of a WARC's payload digest."""
    return "sha1:" + base64.b32encode(hashlib.sha1(body).digest()).decode("ascii")

#: Distinct content types counted one by one; the rest go under ``"other"``
#: (a hostile server must not grow the counters without bound).
MAX_CONTENT_TYPES = 100


@dataclass(slots=True)
class Document:
    """One fetched page, as the engine hands it to an output.

    ``url`` is the normalized absolute URL; ``headers`` the response headers
    (lower-case names); ``body`` the decoded body as it is saved.  For WARC:
    ``raw_request`` is the exact request sent, ``raw_response_head`` the status
    line and headers as received, ``raw_body`` the entity body before content
    decoding (``None``: ``body`` is archived and the record's headers are
    rewritten to match it).
    """

    url: str
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    content_type: str | None = None
    fetched_at: float = 0.0
    ip: str | None = None
    duplicate_of: str | None = None
    raw_request: bytes | None = None
    raw_response_head: bytes | None = None
    raw_body: bytes | None = None
    #: ``body`` is the DOM rendered by the browser (dynamicPages), not the body fetched;
    #: the WARC then keeps the fetched answer as the response and adds a ``conversion`` record.
    rendered: bool = False
    #: An exchange only the WARC keeps (a redirect, an error, robots.txt, a page not
    #: saved): no page file, no index line; the other modes ignore it.
    archive_only: bool = False
    #: A recrawl's page that did not change: ``"server-not-modified"`` (a 304, no body)
    #: or ``"identical-payload-digest"`` (the body the last crawl had).  The WARC writes
    #: a ``revisit`` record referring to the capture of ``refers_to_date`` (wall time).
    revisit: str | None = None
    refers_to_date: float | None = None
    #: The body was cut at maxPageSize (the WARC says ``WARC-Truncated: length``).
    truncated: bool = False
    #: A recrawl's page whose file stays as it is (no request, or an answer without a
    #: page: skipped, kept, gone and kept): the mirror indexes the file it has; the
    #: others write nothing.  ``remove``: a page gone, taken out of the mirror.
    keep: bool = False
    remove: bool = False
    #: How the URL was found when not by a link: ``sitemap`` (larbin_py.sitemap_fetch), with the
    #: ``<lastmod>`` the sitemap gave (W3C datetime, or ""): the WARC writes them on the response.
    found_by: str = ""
    lastmod: str = ""
    #: A recrawl's unchanged page: its mirror file as the recrawl found it, ``(relative
    #: path, size)`` (:meth:`~larbin_py.output.mirror.MirrorOutput.locate`, on the writer
    #: thread): the mirror indexes it without looking it up again.
    stored_file: tuple[str, int] | None = None


class OutputError(Exception):
    """A page (or the index) could not be stored.

    ``errno`` is the OS error number when there was one (``ENOSPC``,
    ``EACCES``...), ``path`` the file concerned.  ``str()`` is one readable
    line, e.g. ``cannot write save/d00000/f00007: no space left on device
    (ENOSPC)``.
    """

    def __init__(self, message: str, *, errno: int | None = None, path: str | None = None):
        super().__init__(message)
        self.errno = errno
        self.path = path

    @classmethod
    def from_os(cls, action: str, path: str, exc: OSError) -> "OutputError":
        """Wrap ``exc`` raised while doing ``action`` ("write", "create"...) on ``path``."""
        code = exc.errno
        name = _errno.errorcode.get(code, "") if code is not None else ""
        reason = (exc.strerror or str(exc)).lower()
        text = f"cannot {action} {path}: {reason}" + (f" ({name})" if name else "")
        if code == _errno.ENOSPC or code == _errno.EDQUOT:
            text += "; free space on the disk of saveDir or lower the crawl size"
        elif code in (_errno.EACCES, _errno.EPERM, _errno.EROFS):
            text += "; check the permissions of saveDir"
        err = cls(text, errno=code, path=path)
        err.__cause__ = exc
        return err


@dataclass(slots=True)
class OutputStats:
    """Counters of one output: pages written, body bytes stored, files created.

    ``by_status`` counts pages per HTTP status; ``by_content_type`` per media
    type (lower-case, parameters dropped, ``""`` when absent), at most
    :data:`MAX_CONTENT_TYPES` distinct keys plus ``"other"``.
    """

    pages: int = 0
    bytes: int = 0
    files: int = 0
    duplicates: int = 0
    #: Exchanges only archived (``Document.archive_only``: redirects, errors, robots.txt).
    archived: int = 0
    #: revisit records written (a recrawl's unchanged pages, payloads met before).
    revisits: int = 0
    by_status: dict[int, int] = field(default_factory=dict)
    by_content_type: dict[str, int] = field(default_factory=dict)

    def count(self, doc: Document, nbytes: int) -> None:
        """Count one stored page of ``nbytes`` body bytes."""
        self.pages += 1
        self.bytes += nbytes
        if doc.duplicate_of is not None:
            self.duplicates += 1
        by_status = self.by_status
        by_status[doc.status] = by_status.get(doc.status, 0) + 1
        ctype = doc.content_type
        key = ctype.partition(";")[0].strip().lower() if ctype else ""
        by_type = self.by_content_type
        if key in by_type:
            by_type[key] += 1
        elif len(by_type) < MAX_CONTENT_TYPES:
            by_type[key] = 1
        else:
            by_type["other"] = by_type.get("other", 0) + 1

    def as_dict(self) -> dict:
        """A JSON-ready copy (status codes become string keys)."""
        return {
            "pages": self.pages,
            "bytes": self.bytes,
            "files": self.files,
            "duplicates": self.duplicates,
            "archived": self.archived,
            "revisits": self.revisits,
            "by_status": {str(k): v for k, v in sorted(self.by_status.items())},
            "by_content_type": dict(sorted(self.by_content_type.items())),
        }


@runtime_checkable
class Output(Protocol):
    """The interface the engine uses; one implementation per ``outputMode``.

    Called from one thread at a time (the writer thread for disk outputs).
    The engine reaches a threaded output through
    :class:`~larbin_py.output.writer.ThreadedOutput`, which adds
    ``backlog_full()`` (the gate: no request starts while it is True) and
    ``flush_position()`` (``flush()`` then ``position()``, run on the writer
    by a group commit) and ``sync_position()`` (``flush(sync=True)`` then
    ``position()``, run on the writer by a checkpoint, or by every commit
    with ``syncCommits``).
    """

    mode: str
    stats: OutputStats

    def write(self, doc: Document) -> str | None:
        """Store ``doc``; return the path written (relative to saveDir) or None.

        Raises :class:`OutputError` when the page cannot be stored; the
        output stays usable (the next write may succeed).
        """

    def flush(self, sync: bool = False) -> None:
        """Push buffered index/WARC bytes to the kernel; ``sync``: also to disk."""

    def position(self) -> dict:
        """Where this output stands, for a checkpoint (JSON-ready).

        Take it right after ``flush(sync=True)``; pass it back to
        :func:`larbin_py.output.open_output` (``position=``) to continue
        after a crash exactly from that point.
        """

    def close(self) -> None:
        """Flush, sync and release everything (idempotent)."""


_TSV_ESCAPE = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
_TSV_UNESCAPE = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}


def escape_field(text: str) -> str:
    """Escape ``text`` for one index field (no TAB, LF or CR remains)."""
    if "\\" in text or "\t" in text or "\n" in text or "\r" in text:
        return text.translate(_TSV_ESCAPE)
    return text  # the usual case: four searches cost less than one translate


def unescape_field(text: str) -> str:
    """Invert :func:`escape_field`."""
    if "\\" not in text:
        return text
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n:
            out.append(_TSV_UNESCAPE.get(text[i + 1], text[i + 1]))
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def parse_index_line(line: str) -> dict:
    """Parse one index line (without its newline) into a dict.

    Keys: ``url``, ``path``, ``status`` (int), ``content_type`` (str or None),
    ``length`` (int) and ``offset`` (int, WARC only, else None).
    """
    fields = line.split("\t")
    if len(fields) not in (5, 6):
        raise ValueError(f"index line has {len(fields)} fields, expected 5 or 6: {line[:200]!r}")
    url, path, status, ctype, length = (unescape_field(f) for f in fields[:5])
    return {
        "url": url,
        "path": path,
        "status": int(status),
        "content_type": ctype or None,
        "length": int(length),
        "offset": int(fields[5]) if len(fields) == 6 else None,
    }


class IndexWriter:
    """The append-only, buffered ``index.tsv`` of one output.

    ``length`` is the index size in bytes including buffered lines — the
    value to checkpoint.  Opened at ``length=N`` the file is cut back to N
    bytes (lines written after that checkpoint are dropped, since the crawl
    resumes from there); ``length=None`` starts a new, empty index.
    """

    __slots__ = ("path", "_file", "_display", "_final_length")

    def __init__(self, save_dir: str, length: int | None = None, *, buffer_size: int = 1 << 16):
        self.path = os.path.join(save_dir, INDEX_NAME)
        self._display = self.path
        self._final_length = 0
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            try:
                size = os.fstat(fd).st_size
                if length is None:
                    os.ftruncate(fd, 0)
                    length = 0
                elif size < length:
                    raise OutputError(
                        f"cannot resume {self.path}: it holds {size} bytes but the"
                        f" checkpoint says {length}; the index was truncated or replaced",
                        path=self.path,
                    )
                elif size > length:
                    os.ftruncate(fd, length)
                os.lseek(fd, length, os.SEEK_SET)
                self._file = os.fdopen(fd, "wb", buffering=buffer_size)
            except BaseException:
                os.close(fd)
                raise
        except OSError as exc:
            raise OutputError.from_os("open", self.path, exc) from exc

    @property
    def length(self) -> int:
        f = self._file
        return self._final_length if f.closed else f.tell()

    def append(self, url: str, path: str, status: int, content_type: str | None,
               length: int, offset: int | None = None) -> None:
        """Add one line (buffered)."""
        esc = escape_field
        line = f"{esc(url)}\t{esc(path)}\t{status}\t{esc(content_type) if content_type else ''}\t{length}"
        if offset is not None:
            line += f"\t{offset}"
        line += "\n"
        try:
            self._file.write(line.encode("utf-8", "backslashreplace"))
        except OSError as exc:
            raise OutputError.from_os("write", self._display, exc) from exc

    def flush(self, sync: bool = False) -> None:
        try:
            self._file.flush()
            if sync:
                os.fsync(self._file.fileno())
        except OSError as exc:
            raise OutputError.from_os("write", self._display, exc) from exc

    def close(self) -> None:
        if self._file.closed:
            return
        self._final_length = self._file.tell()
        try:
            self.flush(sync=True)
        finally:
            try:
                self._file.close()
            except OSError:
                pass  # already reported by flush()


def position_int(position: dict | None, key: str, default: int | None = None) -> int | None:
    """``position[key]`` as an int (``default`` when there is no position).

    Raises :class:`OutputError` for a position that lacks ``key`` or holds
    something else than an integer there.
    """
    if position is None:
        return default
    try:
        return int(position[key])
    except (KeyError, TypeError, ValueError) as exc:
        raise OutputError(f"bad output position {position!r}: no valid {key!r}") from exc
