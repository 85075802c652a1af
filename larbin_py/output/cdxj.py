"""The CDXJ index beside each WARC file: what a replay tool opens a crawl with.

Each WARC file ``larbin-DATE-NNNNN.warc.gz`` gets ``larbin-DATE-NNNNN.cdxj``,
one line per ``response`` and ``revisit`` record, in pywb's CDXJ form::

    com,example)/a?b=1&c=2 20240501120000 {"url": "http://example.com/a?c=2&b=1", "mime": "text/html",
    "status": "200", "digest": "sha1:...", "length": "1234", "offset": "5678",
    "filename": "larbin-20240501115900-00000.warc.gz"}

(one line): the SURT key of the URL (:func:`surt`), the record's 14-digit
WARC-Date, and a JSON block: the URL, the media type (``warc/revisit``
for a revisit), the HTTP status, the payload digest, the length and
offset of the record's gzip member in the file, and the file's name.
Lines are sorted bytewise (``LC_ALL=C sort``), as replay tools search
them.

While its WARC file is written, the index is ``NAME.cdxj.open``, appended
to in record order by the writer thread; when the WARC file is complete
the lines are sorted into ``NAME.cdxj`` (a temporary file, fsynced,
renamed) *before* the WARC file loses its ``.open``, so a WARC file
without ``.open`` always has its whole index.  Sorting holds one file's
lines in memory: one line (about 300 bytes) per record of at most one
WARC file (warcMaxSize, 1 GiB: some 10 to 50 MB).

After a crash (``--reload``) the open index is cut back to the length the
checkpoint or commit gave (:meth:`CdxjIndex.resume`); when it is shorter
(a machine crash lost its end) it is rebuilt from the WARC file itself
(:func:`index_warc`, warcio reading the file up to the offset the crawl
continues from), so the index never disagrees with its file.

:func:`surt` is the SURT form pywb's default canonicalizer gives (the
``surt`` package's defaults): lower case, the scheme dropped, a leading
``www.`` dropped, the host's labels reversed and comma-joined, a port
other than the scheme's default kept, ``)`` then the path, the query's
arguments sorted, no fragment.  Its session-id rules are not applied.
"""

from __future__ import annotations

import json
import os

from .base import OutputError
from .paths import SafeTree

__all__ = ["CdxjIndex", "cdxj_line", "cdxj_name", "index_warc", "surt"]

OPEN_SUFFIX = ".open"
_DEFAULT_PORTS = {"http": "80", "https": "443"}


def cdxj_name(warc_name: str) -> str:
    """The index of WARC file ``warc_name`` (``x.warc.gz`` -> ``x.cdxj``)."""
    stem = warc_name[:-len(".warc.gz")] if warc_name.endswith(".warc.gz") else warc_name
    return stem + ".cdxj"


def surt(url: str) -> str:
    """The SURT key of ``url`` (see the module docstring)."""
    text = url.strip().lower()
    scheme, sep, rest = text.partition("://")
    if not sep:
        return text
    rest = rest.partition("#")[0]
    cut = len(rest)
    for ch in "/?":
        i = rest.find(ch)
        if i >= 0:
            cut = min(cut, i)
    authority, tail = rest[:cut], rest[cut:]
    authority = authority.rpartition("@")[2]
    host, port = authority, ""
    if authority.startswith("["):  # an IPv6 literal: kept as it is
        end = authority.find("]")
        host, port = authority[:end + 1], authority[end + 2:] if authority[end + 1:end + 2] == ":" else ""
    elif ":" in authority:
        host, _, port = authority.rpartition(":")
    if port == _DEFAULT_PORTS.get(scheme):
        port = ""
    if host.startswith("www.") and host.count(".") > 1:
        host = host[4:]
    if not host.startswith("["):
        host = ",".join(reversed(host.strip(".").split(".")))
    path, qsep, query = tail.partition("?")
    if not path:
        path = "/"
    if qsep:
        path += "?" + "&".join(sorted(query.split("&")))
    return f"{host}{':' + port if port else ''}){path}"


def cdxj_line(url: str, timestamp: str, *, mime: str, status: int | str | None, digest: str | None,
              length: int, offset: int, filename: str) -> bytes:
    """One index line (with its newline).  ``timestamp``: 14 digits, UTC."""
    block = {"url": url, "mime": mime or "unk"}
    if status is not None:
        block["status"] = str(status)
    if digest:
        block["digest"] = digest
    block.update(length=str(length), offset=str(offset), filename=filename)
    return f"{surt(url)} {timestamp} {json.dumps(block, ensure_ascii=False)}\n".encode("utf-8", "surrogateescape")


def index_warc(data, filename: str, end: int) -> list[bytes]:
    """The index lines of the records in the first ``end`` bytes of WARC ``data`` (a binary file)."""
    from warcio.archiveiterator import ArchiveIterator

    lines = []
    data.seek(0)
    records = ArchiveIterator(data)
    for record in records:
        offset = records.get_record_offset()
        if offset >= end:
            break
        kind = record.rec_type
        if kind not in ("response", "revisit"):
            continue
        records.read_to_end(record)
        length = records.get_record_length()
        http = record.http_headers
        status = http.get_statuscode() if http is not None else None
        if kind == "revisit":
            mime = "warc/revisit"
        else:
            mime = (http.get_header("Content-Type") or "").split(";")[0].strip().lower() if http is not None else ""
        date = record.rec_headers.get_header("WARC-Date") or ""
        stamp = "".join(ch for ch in date if ch.isdigit())[:14]
        lines.append(cdxj_line(record.rec_headers.get_header("WARC-Target-URI") or "", stamp, mime=mime,
                               status=status, digest=record.rec_headers.get_header("WARC-Payload-Digest"),
                               length=length, offset=offset, filename=filename))
    return lines


class CdxjIndex:
    """The index of one WARC file being written, in ``tree`` (saveDir's :class:`SafeTree`).

    :meth:`add` appends lines (in record order) to ``NAME.cdxj.open``;
    :attr:`length` is its size, which the output's position keeps;
    :meth:`finish` sorts them into ``NAME.cdxj``.  Failures are
    :class:`OutputError` naming the file.
    """

    def __init__(self, tree: SafeTree, warc_name: str, *, length: int | None = None, warc_end: int = 0) -> None:
        self.tree = tree
        self.warc_name = warc_name
        self.name = cdxj_name(warc_name)
        self.length = 0
        self._display = os.path.join(tree.root, self.name + OPEN_SUFFIX)
        root = tree.root_fd
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            try:  # a complete index of a file being resumed: it is made again at the end
                os.unlink(self.name, dir_fd=root)
            except FileNotFoundError:
                pass
            self._fd = os.open(self.name + OPEN_SUFFIX, flags, 0o644, dir_fd=root)
        except OSError as exc:
            raise OutputError.from_os("create", self._display, exc) from exc
        try:
            size = os.fstat(self._fd).st_size
            if length is None:  # a new file
                os.ftruncate(self._fd, 0)
            elif size >= length:  # resumed: what came after the checkpoint goes
                os.ftruncate(self._fd, length)
                self.length = length
            else:  # resumed, but the index lost its end (a machine crash): made again from the WARC
                os.ftruncate(self._fd, 0)
                warc_fd = os.open(warc_name + OPEN_SUFFIX, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=root)
                with open(warc_fd, "rb") as data:
                    self._append(b"".join(index_warc(data, warc_name, warc_end)))
            os.lseek(self._fd, self.length, os.SEEK_SET)
        except OSError as exc:
            os.close(self._fd)
            raise OutputError.from_os("resume", self._display, exc) from exc

    def _append(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            self.length += n
            view = view[n:]

    def add(self, lines: list[bytes]) -> None:
        """Append ``lines`` (the records just written); cut back to where it was on failure."""
        if not lines:
            return
        start = self.length
        try:
            self._append(b"".join(lines))
        except OSError as exc:
            try:
                os.ftruncate(self._fd, start)
                os.lseek(self._fd, start, os.SEEK_SET)
            except OSError:
                pass
            self.length = start
            raise OutputError.from_os("write", self._display, exc) from exc

    def sync(self) -> None:
        try:
            os.fsync(self._fd)
        except OSError as exc:
            raise OutputError.from_os("sync", self._display, exc) from exc

    def finish(self) -> None:
        """Sort the lines into ``NAME.cdxj`` (temporary file, fsync, rename); remove the open one."""
        root = self.tree.root_fd
        tmp = self.name + ".tmp"
        try:
            lines = os.pread(self._fd, self.length, 0).splitlines(keepends=True) if self.length else []
            lines.sort()
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                         dir_fd=root)
            try:
                view = memoryview(b"".join(lines))
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, self.name, src_dir_fd=root, dst_dir_fd=root)
            os.close(self._fd)
            self._fd = -1
            os.unlink(self.name + OPEN_SUFFIX, dir_fd=root)
        except OSError as exc:
            raise OutputError.from_os("finish", os.path.join(self.tree.root, self.name), exc) from exc

    def close(self) -> None:
        """Close without finishing (the crawl failed: the open index stays for --reload)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
