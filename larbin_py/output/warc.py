"""``warc`` mode: WARC 1.1 files (gzip per record) written with warcio.

Each file ``saveDir/larbin-YYYYmmddHHMMSS-NNNNN.warc.gz`` (UTC time of its
creation, serial number) starts with a ``warcinfo`` record; each page adds a
``response`` record then a ``request`` record whose ``WARC-Concurrent-To``
names the response.  While a file is being written it is named
``....warc.gz.open``; it is renamed when complete (rolled over after
``max_size`` bytes, or closed), so any file without ``.open`` is whole.

The response record holds the status line and headers as received and the
entity body: ``raw_body`` (still content-encoded) when the engine kept it,
otherwise the decoded ``body`` — then ``Content-Encoding`` is dropped.  The
body is always stored de-chunked, so ``Transfer-Encoding`` is dropped and
``Content-Length`` set to the stored length whenever the headers would
otherwise not describe the stored bytes.  ``WARC-IP-Address`` is set when
the IP is known, ``WARC-Date`` is the fetch time; warcio adds the
``WARC-Block-Digest`` and ``WARC-Payload-Digest`` (sha1).  Records are
gzipped one member each at ``gzip_level`` (6 by default: about twice as fast
as warcio's own level 9 for ~1% larger files).  A page rendered by
the browser (``Document.rendered``, dynamicPages) adds a third record, a
``conversion`` (WARC 1.1: "an alternative version of another record's
content that was created as the result of an archival process") holding the
rendered DOM as ``text/html; charset=utf-8``, its ``WARC-Refers-To`` naming
the response record, whose body stays the one fetched.  A page with ``duplicate_of``
set is archived in full like any other (no revisit record: the original's
payload digest is not kept).

Each page's two records are written with a single ``write`` at the end of
the file; if it fails the file is cut back, so a page is either wholly in
the WARC and in the index, or in neither.  The index line of a page names
the (final) WARC file and the offset of its response record.
"""

from __future__ import annotations

import io
import os
import socket
import time
import zlib
from datetime import datetime, timezone
from http import HTTPStatus

from warcio.statusandheaders import StatusAndHeaders
from warcio.timeutils import datetime_to_iso_date
from warcio.warcwriter import WARCWriter

from .. import __version__
from .base import Document, IndexWriter, OutputError, OutputStats, position_int
from .paths import SafeTree

__all__ = ["WarcOutput", "warc_file_name"]

OPEN_SUFFIX = ".open"
_WRITE_FLAGS = os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_MISLEADING_RAW = frozenset([b"transfer-encoding"])
_MISLEADING_DECODED = frozenset([b"transfer-encoding", b"content-encoding"])


def warc_file_name(serial: int, when: float | None = None) -> str:
    """``larbin-YYYYmmddHHMMSS-NNNNN.warc.gz`` for ``serial`` at ``when`` (UTC)."""
    stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime(when))
    return f"larbin-{stamp}-{serial:05d}.warc.gz"


def _warc_date(ts: float) -> str:
    dt = datetime.fromtimestamp(ts or time.time(), timezone.utc).replace(tzinfo=None)
    return datetime_to_iso_date(dt, use_micros=True)


def _split_head(head: bytes) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """Split a raw response head into its status line and (name, value) pairs."""
    lines = head.replace(b"\r\n", b"\n").split(b"\n")
    status_line = lines[0]
    headers: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        if not line:
            continue
        if line[:1] in (b" ", b"\t") and headers:  # obsolete line folding
            name, value = headers[-1]
            headers[-1] = (name, value + b" " + line.strip())
            continue
        name, sep, value = line.partition(b":")
        if sep:
            headers.append((name.strip(), value.strip()))
    return status_line, headers


def _http_headers(doc: Document, body_len: int, body_is_raw: bool) -> StatusAndHeaders:
    """The response's status line and headers, made to describe the stored body.

    Kept verbatim unless they would mislead a reader: a ``Transfer-Encoding``
    (the body is stored de-chunked), a ``Content-Encoding`` over a decoded
    body, or a ``Content-Length`` that is not the stored length; then those
    are dropped and the true ``Content-Length`` is appended.
    """
    protocol, status = "HTTP/1.1", ""
    if doc.raw_response_head:
        status_line, headers = _split_head(doc.raw_response_head)
        version, _, rest = status_line.decode("latin-1").strip().partition(" ")
        if version.startswith("HTTP/"):
            protocol, status = version, rest.strip()
    else:
        headers = list(doc.headers)
    if not status:
        try:
            status = f"{doc.status} {HTTPStatus(doc.status).phrase}"
        except ValueError:
            status = str(doc.status)
    misleading = _MISLEADING_RAW if body_is_raw else _MISLEADING_DECODED
    length = str(body_len).encode()
    names = [name.lower() for name, _ in headers]
    if any(n in misleading for n in names) or any(
        n == b"content-length" and v.strip() != length for n, (_, v) in zip(names, headers)
    ):
        headers = [h for n, h in zip(names, headers) if n not in misleading and n != b"content-length"]
        headers.append((b"Content-Length", length))
    return StatusAndHeaders(
        status,
        [(n.decode("latin-1"), v.decode("latin-1")) for n, v in headers],
        protocol=protocol,
    )


def _request_bytes(doc: Document) -> bytes:
    """The request as sent, or a minimal equivalent when it was not kept."""
    if doc.raw_request:
        return doc.raw_request
    rest = doc.url.split("://", 1)[-1]
    host, slash, path = rest.partition("/")
    target = ("/" + path.partition("#")[0]) if slash else "/"
    return f"GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode("utf-8", "backslashreplace")


class _Sink(io.BytesIO):
    """Where warcio writes one page's records; its per-record flush is a no-op."""

    def flush(self) -> None:  # noqa: D401 - warcio calls it after every record
        pass


class WarcOutput:
    """Appends request/response records to rolling, gzip-per-record WARC files."""

    mode = "warc"

    def __init__(self, save_dir: str, *, max_size: int = 1 << 30, position: dict | None = None,
                 gzip_level: int = 6):
        if max_size < 1:
            raise OutputError(f"warc max size must be positive, not {max_size}")
        self.save_dir = save_dir
        self.max_size = max_size
        self.stats = OutputStats()
        self._serial = position_int(position, "warc_serial", 0)
        self._name: str | None = None
        self._fd = -1
        self._size = 0
        self._sink = _Sink()
        # warcio gzips at level 9 (about 2x slower than 6 on HTML for <1% smaller files):
        # it writes plain records here and each one becomes its own gzip member.
        self._writer = WARCWriter(self._sink, gzip=False, warc_version="1.1")
        self._gzip_level = gzip_level
        self._closed = False
        self._tree = SafeTree(save_dir)
        try:
            self._index = IndexWriter(self._tree.root, position_int(position, "index_length"))
            if position is not None and position.get("warc_file"):
                self._resume(str(position["warc_file"]), position_int(position, "warc_offset"))
        except BaseException:
            self._tree.close()
            raise

    # -- files -------------------------------------------------------------

    def _resume(self, name: str, offset: int) -> None:
        if "/" in name or name.startswith("."):
            raise OutputError(f"bad output position: WARC file name {name!r}")
        path = name + OPEN_SUFFIX
        root = self._tree.root_fd
        try:
            os.stat(path, dir_fd=root)
        except FileNotFoundError:
            # Completed (renamed) after the checkpoint -- at a clean stop or a
            # roll-over: reopen it, and cut what came after the checkpoint.
            try:
                os.rename(name, path, src_dir_fd=root, dst_dir_fd=root)
            except OSError:
                pass
        try:
            fd = os.open(path, _WRITE_FLAGS, dir_fd=root)
        except OSError as exc:
            raise OutputError.from_os(
                "resume", os.path.join(self.save_dir, path), exc) from exc
        try:
            if os.fstat(fd).st_size < offset:
                raise OutputError(
                    f"cannot resume {self.save_dir}/{path}: shorter than the"
                    f" checkpointed {offset} bytes")
            os.ftruncate(fd, offset)
            os.lseek(fd, offset, os.SEEK_SET)
        except OSError as exc:
            os.close(fd)
            raise OutputError.from_os("resume", os.path.join(self.save_dir, path), exc) from exc
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._name, self._size = fd, name, offset

    def _open_next(self) -> None:
        while True:
            name = warc_file_name(self._serial)
            try:
                fd = os.open(name + OPEN_SUFFIX, _WRITE_FLAGS | os.O_CREAT | os.O_EXCL,
                             0o644, dir_fd=self._tree.root_fd)
                break
            except FileExistsError:
                self._serial += 1
            except OSError as exc:
                raise OutputError.from_os(
                    "create", os.path.join(self.save_dir, name + OPEN_SUFFIX), exc) from exc
        self._fd, self._name, self._size = fd, name, 0
        info = self._writer.create_warcinfo_record(name, {
            "software": f"larbin_py/{__version__} (warcio)",
            "format": "WARC File Format 1.1",
            "conformsTo": "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/",
            "hostname": socket.gethostname(),
        })
        try:
            self._emit([info])
        except BaseException:  # no file without its warcinfo: drop it, retry on next write
            os.close(fd)
            self._fd, self._name = -1, None
            try:
                os.unlink(name + OPEN_SUFFIX, dir_fd=self._tree.root_fd)
            except OSError:
                pass
            raise
        self.stats.files += 1

    def _finish(self) -> None:
        """Sync, close and rename the current file to its final name."""
        fd, name = self._fd, self._name
        self._fd, self._name = -1, None
        self._serial += 1
        root = self._tree.root_fd
        try:
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(name + OPEN_SUFFIX, name, src_dir_fd=root, dst_dir_fd=root)
        except OSError as exc:
            raise OutputError.from_os("finish", os.path.join(self.save_dir, name), exc) from exc

    def _emit(self, records: list) -> int:
        """Append ``records`` (one gzip member each) to the current file; return their offset."""
        sink, writer, level = self._sink, self._writer, self._gzip_level
        members = []
        for record in records:
            sink.seek(0)
            sink.truncate()
            writer.write_record(record)
            gz = zlib.compressobj(level, zlib.DEFLATED, 31)
            members.append(gz.compress(sink.getbuffer()) + gz.flush())
        data = b"".join(members)
        offset = self._size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
        except OSError as exc:
            try:
                os.ftruncate(self._fd, offset)
                os.lseek(self._fd, offset, os.SEEK_SET)
            except OSError:
                pass
            raise OutputError.from_os(
                "write", os.path.join(self.save_dir, self._name + OPEN_SUFFIX), exc) from exc
        self._size = offset + len(data)
        return offset

    # -- Output ------------------------------------------------------------

    def _records(self, doc: Document) -> tuple:
        """The (response, request[, conversion]) records of ``doc``, linked by WARC-Concurrent-To
        (and WARC-Refers-To for the rendered DOM of a dynamic page)."""
        writer = self._writer
        body_is_raw = doc.raw_body is not None
        body = doc.raw_body if body_is_raw else doc.body
        headers = {"WARC-Date": _warc_date(doc.fetched_at)}
        if doc.ip:
            headers["WARC-IP-Address"] = doc.ip
        if doc.found_by:  # how the URL was found, when not by a link (an extension field)
            headers["WARC-Larbin-Found-By"] = doc.found_by
            if doc.lastmod:
                headers["WARC-Larbin-Lastmod"] = doc.lastmod
        response = writer.create_warc_record(
            doc.url, "response",
            payload=io.BytesIO(body), length=len(body),
            warc_headers_dict=headers,
            http_headers=_http_headers(doc, len(body), body_is_raw),
        )
        raw_request = _request_bytes(doc)
        request = writer.create_warc_record(
            doc.url, "request",
            payload=io.BytesIO(raw_request), length=len(raw_request),
            warc_headers_dict={
                "WARC-Date": headers["WARC-Date"],
                "WARC-Concurrent-To": response.rec_headers.get_header("WARC-Record-ID"),
            },
        )
        if not doc.rendered:
            return response, request
        conversion = writer.create_warc_record(
            doc.url, "conversion",
            payload=io.BytesIO(doc.body), length=len(doc.body),
            warc_content_type="text/html; charset=utf-8",
            warc_headers_dict={
                "WARC-Date": headers["WARC-Date"],
                "WARC-Refers-To": response.rec_headers.get_header("WARC-Record-ID"),
            },
        )
        return response, request, conversion

    def write(self, doc: Document) -> str:
        if self._closed:
            raise OutputError("write after close")
        if self._fd < 0:
            self._open_next()
        try:
            offset = self._emit(list(self._records(doc)))
        except (UnicodeError, ValueError) as exc:  # nothing was written yet
            raise OutputError(f"cannot archive {doc.url[:200]!r}: {exc}") from exc
        body = doc.raw_body if doc.raw_body is not None else doc.body
        name = self._name
        self._index.append(doc.url, name, doc.status, doc.content_type, len(body), offset)
        self.stats.count(doc, len(body))
        if self._size >= self.max_size:
            self._finish()
        return name

    def flush(self, sync: bool = False) -> None:
        self._index.flush(sync)
        if sync:
            try:
                if self._fd >= 0:
                    os.fsync(self._fd)
                os.fsync(self._tree.root_fd)  # make the renames of finished files durable
            except OSError as exc:
                raise OutputError.from_os("sync", self.save_dir, exc) from exc

    def position(self) -> dict:
        return {
            "mode": self.mode,
            "index_length": self._index.length,
            "warc_file": self._name,
            "warc_offset": self._size if self._name else 0,
            "warc_serial": self._serial,
        }

    @property
    def current_file(self) -> str | None:
        """Final name of the WARC file being written (it is ``name.open`` on disk)."""
        return self._name

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._index.close()
            if self._fd >= 0:
                self._finish()
            os.fsync(self._tree.root_fd)
        finally:
            self._tree.close()
