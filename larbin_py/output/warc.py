"""``warc`` mode: WARC 1.1 files (gzip per record) written with warcio.

Each file ``saveDir/larbin-YYYYmmddHHMMSS-NNNNN.warc.gz`` (UTC time of its
creation, serial number) starts with a ``warcinfo`` record; each HTTP
exchange adds a ``response`` record then a ``request`` record whose
``WARC-Concurrent-To`` names the response.  Every exchange: the pages
saved, and (``Document.archive_only``) the redirects, the 4xx and 5xx
answers, the pages not kept (badType) and every robots.txt answer, which
get no index line.  While a file is being written it is named
``....warc.gz.open``; it is renamed when complete (rolled over after
``max_size`` bytes, or closed), so any file without ``.open`` is whole.
Beside each file, its CDXJ index (larbin_py.output.cdxj): one line per
response and revisit record, sorted when the file is complete, written
before the WARC file loses its ``.open``.

**Revisit records** (WARC 1.1 section 6.7) replace the response of:

* a page whose payload the crawl archived before (a 2xx with a non-empty
  payload, same SHA-1): profile ``identical-payload-digest``, with
  ``WARC-Refers-To`` (the first capture's record), its target URI and
  date.  Its index line names the first capture's response record, so
  the index still leads to the payload.  The table of payload digests
  holds :data:`MAX_DIGESTS` captures (least recently met forgotten) and
  starts empty after ``--reload``: a payload met only before either is
  archived in full again;
* a recrawl's unchanged page (``Document.revisit``): ``server-not-modified``
  for a 304 (the 304's head, no payload), ``identical-payload-digest``
  for a 200 whose body is the last crawl's; they refer to the last
  capture by URI and date (``WARC-Refers-To-Target-URI``,
  ``WARC-Refers-To-Date``) and get no index line (the last crawl's line,
  still in index.tsv, leads to the payload).

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
the response record, whose body stays the one fetched.  A body cut at
maxPageSize (``Document.truncated``) is marked ``WARC-Truncated: length``.

Each exchange's records are written with a single ``write`` at the end of
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
from collections import OrderedDict
from datetime import datetime, timezone
from http import HTTPStatus

from warcio.statusandheaders import StatusAndHeaders
from warcio.timeutils import datetime_to_iso_date
from warcio.warcwriter import WARCWriter

from .. import __version__
from .base import Document, IndexWriter, OutputError, OutputStats, payload_digest, position_int
from .cdxj import CdxjIndex, cdxj_line
from .paths import SafeTree

__all__ = ["MAX_DIGESTS", "WarcOutput", "warc_file_name"]

#: Payload digests whose first capture is remembered (for identical-payload-digest revisits).
MAX_DIGESTS = 50_000
PROFILES = {
    "server-not-modified": "http://netpreserve.org/warc/1.1/revisit/server-not-modified",
    "identical-payload-digest": "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest",
}

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
        #: The open file's CDXJ index (larbin_py.output.cdxj).
        self._cdxj: CdxjIndex | None = None
        #: payload digest -> (URI, WARC-Date, WARC-Record-ID, file, offset) of its first capture.
        self._captures: OrderedDict[str, tuple] = OrderedDict()
        try:
            self._index = IndexWriter(self._tree.root, position_int(position, "index_length"))
            if position is not None and position.get("warc_file"):
                self._resume(str(position["warc_file"]), position_int(position, "warc_offset"),
                             position.get("cdxj_length"))
        except BaseException:
            if self._fd >= 0:
                os.close(self._fd)
            self._tree.close()
            raise

    # -- files -------------------------------------------------------------

    def _resume(self, name: str, offset: int, cdxj_length) -> None:
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
        # A position from before the CDXJ index (no length): made again from the file.
        length = position_int({"n": cdxj_length}, "n") if cdxj_length is not None else 1 << 62
        self._cdxj = CdxjIndex(self._tree, name, length=length, warc_end=offset)

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
            self._cdxj = CdxjIndex(self._tree, name)
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
        fd, name, cdxj = self._fd, self._name, self._cdxj
        self._fd, self._name, self._cdxj = -1, None, None
        self._serial += 1
        root = self._tree.root_fd
        try:
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            if cdxj is not None:  # the index first: a WARC file without .open has its whole index
                cdxj.finish()
            os.rename(name + OPEN_SUFFIX, name, src_dir_fd=root, dst_dir_fd=root)
        except OSError as exc:
            raise OutputError.from_os("finish", os.path.join(self.save_dir, name), exc) from exc

    def _emit(self, records: list) -> int:
        """Append ``records`` (one gzip member each) to the current file; return their offset.

        :attr:`_lengths` then holds each member's length, in order."""
        sink, writer, level = self._sink, self._writer, self._gzip_level
        members = []
        for record in records:
            sink.seek(0)
            sink.truncate()
            writer.write_record(record)
            gz = zlib.compressobj(level, zlib.DEFLATED, 31)
            members.append(gz.compress(sink.getbuffer()) + gz.flush())
        self._lengths = [len(m) for m in members]
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

    def _records(self, doc: Document, digest: str, first: tuple | None) -> tuple:
        """The (response or revisit, request[, conversion]) records of ``doc``, linked by
        WARC-Concurrent-To (and WARC-Refers-To for the rendered DOM of a dynamic page).

        ``digest``: the payload's; ``first``: the capture a duplicate payload refers to."""
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
        if doc.revisit is not None or first is not None:
            # No payload: the HTTP head alone, and what it refers to.
            profile = doc.revisit or "identical-payload-digest"
            headers["WARC-Profile"] = PROFILES[profile]
            if first is not None:
                uri, date, record_id = first[:3]
                headers.update({"WARC-Refers-To": record_id, "WARC-Refers-To-Target-URI": uri,
                                "WARC-Refers-To-Date": date})
            else:
                headers["WARC-Refers-To-Target-URI"] = doc.url
                if doc.refers_to_date:
                    headers["WARC-Refers-To-Date"] = _warc_date(doc.refers_to_date)
            if profile == "identical-payload-digest":
                headers["WARC-Payload-Digest"] = digest
            response = writer.create_warc_record(
                doc.url, "revisit", warc_headers_dict=headers,
                http_headers=_http_headers(doc, len(body), body_is_raw))
        else:
            if doc.truncated:
                headers["WARC-Truncated"] = "length"
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

    def write(self, doc: Document) -> str | None:
        if self._closed:
            raise OutputError("write after close")
        if doc.keep or doc.remove:  # a file of the mirror's: nothing was fetched to archive
            return None
        if self._fd < 0:
            self._open_next()
        body = doc.raw_body if doc.raw_body is not None else doc.body
        digest = payload_digest(body)
        first = None
        if doc.revisit is None and not doc.archive_only and body and 200 <= doc.status < 300:
            first = self._captures.get(digest)
            if first is not None:
                self._captures.move_to_end(digest)
        try:
            records = self._records(doc, digest, first)
            offset = self._emit(list(records))
        except (UnicodeError, ValueError) as exc:  # nothing was written yet
            raise OutputError(f"cannot archive {doc.url[:200]!r}: {exc}") from exc
        name = self._name
        head = records[0]
        revisit = head.rec_type == "revisit"
        self._cdxj.add([cdxj_line(
            doc.url, head.rec_headers.get_header("WARC-Date").replace("-", "").replace(":", "").replace("T", "")[:14],
            mime="warc/revisit" if revisit else (doc.content_type or ""), status=doc.status,
            digest=head.rec_headers.get_header("WARC-Payload-Digest"), length=self._lengths[0], offset=offset,
            filename=name)])
        if doc.archive_only:
            self.stats.archived += 1
        else:
            if revisit:
                self.stats.revisits += 1
            if first is not None:  # the index leads to the payload: the first capture's record
                self._index.append(doc.url, first[3], doc.status, doc.content_type, len(body), first[4])
            elif doc.revisit is None:
                self._index.append(doc.url, name, doc.status, doc.content_type, len(body), offset)
                if body and 200 <= doc.status < 300:
                    self._remember(digest, (doc.url, head.rec_headers.get_header("WARC-Date"),
                                            head.rec_headers.get_header("WARC-Record-ID"), name, offset))
            self.stats.count(doc, len(body))
        if self._size >= self.max_size:
            self._finish()
        return name

    def _remember(self, digest: str, capture: tuple) -> None:
        captures = self._captures
        captures[digest] = capture
        if len(captures) > MAX_DIGESTS:
            captures.popitem(last=False)

    def flush(self, sync: bool = False) -> None:
        self._index.flush(sync)
        if sync:
            if self._cdxj is not None:
                self._cdxj.sync()
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
            "cdxj_length": self._cdxj.length if self._cdxj is not None else 0,
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
