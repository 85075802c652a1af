"""The URL library: a FIFO of URL records on disk, with a bounded window in RAM.

Larbin kept the URLs it had not yet loaded into a site in ``URLsDisk``, a
file-backed FIFO, so that a crawl can hold far more URLs than memory.  This is
the same idea, shaped for crash safety:

* Every record pushed is appended to the current *segment* file (a buffered,
  append-only log).  Nothing is ever rewritten in place.
* While the log has no unread backlog, pushed records are also kept in RAM (up
  to ``ram_urls`` of them), so the common case pops without touching the disk.
  Once RAM is full, further records live on disk only; pops refill RAM by
  reading the log sequentially from where the RAM window ends.
* A segment is closed when it reaches ``segment_bytes`` and deleted once every
  record in it has been popped *and* the owner says the pop is durable
  (:meth:`release_through`), which the checkpoint logic of the engine does.

Record format, one per line, ASCII::

    <crc32 of the rest, 8 hex digits> <depth> <retries> <url>\\n
    <crc32 of the rest, 8 hex digits> <depth> <retries> <hops> <url>\\n
    <crc32 of the rest, 8 hex digits> <depth> <retries> <hops> <url> <tag>\\n
    <crc32 of the rest, 8 hex digits> <depth> <retries> <hops> <url> <tag or -> <via>\\n

The second form is a redirect target (``hops`` redirects from the URL first
queued, see the engine's ``maxRedirects``); any other record is written in
the first form, so segments written before hops were counted read as ever.
The third carries a ``tag``: the distributed mode's stream entry id, which
the ack of the URL names (written only in a worker's scratch stores).  The
fourth carries ``via``, how a URL that is no link came (``-`` standing for
no tag): a sitemap file to read, or a page a sitemap listed (see
:class:`UrlRecord`).

Normalized URLs contain no whitespace, so the line is unambiguous.  A line
whose checksum does not match (the torn tail of a segment after a crash) ends
that segment's readable part; the damage is counted in ``corrupt_records``.

The store is synchronous and small-write buffered: it is driven from the
event loop, and a push costs a formatted line appended to a Python buffer.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass
from typing import Iterator

from ..logline import frame, unframe
from ..owner_only import makedirs, opener

__all__ = ["UrlRecord", "UrlStore", "encode_record", "decode_record"]


@dataclass(slots=True)
class UrlRecord:
    """One queued URL: where it points, how deep it may still go, retries left,
    and how many redirects led to it (0 for a URL met as a link or a seed).

    ``tag`` is empty except in the distributed mode, where it is the URL's
    stream entry (``"<partition>/<entry id>"``, no space): its ack finds it.

    ``via`` (no space) is empty for a link, a start URL or a redirect's
    target; ``m<level>@<host>`` for a sitemap *file* to read (not a page:
    ``level`` its nesting, 0 when robots.txt or ``/sitemap.xml`` named it,
    ``host`` the site it was looked for), and ``s`` or ``s:<lastmod>`` for a
    page a sitemap listed (larbin_py.sitemap_fetch).
    """

    url: str
    depth: int
    retries: int
    hops: int = 0
    tag: str = ""
    via: str = ""


def encode_record(rec: UrlRecord) -> bytes:
    if rec.via:
        body = f"{rec.depth} {rec.retries} {rec.hops} {rec.url} {rec.tag or '-'} {rec.via}".encode(
            "utf-8", "surrogateescape")
    elif rec.tag:
        body = f"{rec.depth} {rec.retries} {rec.hops} {rec.url} {rec.tag}".encode("utf-8", "surrogateescape")
    elif rec.hops:
        body = f"{rec.depth} {rec.retries} {rec.hops} {rec.url}".encode("utf-8", "surrogateescape")
    else:
        body = f"{rec.depth} {rec.retries} {rec.url}".encode("utf-8", "surrogateescape")
    return frame(body)


def decode_record(line: bytes) -> UrlRecord | None:
    """Parse one log line (without or with its newline); None when damaged."""
    body = unframe(line, whole=False)
    if body is None or not body:
        return None
    try:
        fields = body.split(b" ", 5)  # a URL holds no space: 3 fields, 4 with hops, 5 with a tag, 6 with via
        if len(fields) == 6:
            depth, retries, hops, url, tag, via = fields
            return UrlRecord(url.decode("utf-8", "surrogateescape"), int(depth), int(retries), int(hops),
                             "" if tag == b"-" else tag.decode("ascii"), via.decode("utf-8", "surrogateescape"))
        if len(fields) == 5:
            depth, retries, hops, url, tag = fields
            return UrlRecord(url.decode("utf-8", "surrogateescape"), int(depth), int(retries), int(hops),
                             tag.decode("ascii"))
        if len(fields) == 4:
            depth, retries, hops, url = fields
            return UrlRecord(url.decode("utf-8", "surrogateescape"), int(depth), int(retries), int(hops))
        depth, retries, url = fields
        return UrlRecord(url.decode("utf-8", "surrogateescape"), int(depth), int(retries))
    except ValueError:
        return None


def segment_path(directory: str, n: int) -> str:
    """The path of segment ``n`` of the store in ``directory``."""
    return os.path.join(directory, f"seg-{n:08d}.log")


def segment_numbers(directory: str) -> list[int]:
    """The numbers of the segment files in ``directory``, in order (none when it is absent)."""
    if not os.path.isdir(directory):
        return []
    return sorted(int(name[4:12]) for name in os.listdir(directory)
                  if name.startswith("seg-") and name.endswith(".log") and name[4:12].isdigit())


def cut_segments(directory: str, position) -> None:
    """Cut the segment log in ``directory`` back to ``(segment, offset)``:
    later segments removed, that one truncated (what a crash must not keep)."""
    seg, off = int(position[0]), int(position[1])
    for n in segment_numbers(directory):
        path = segment_path(directory, n)
        if n > seg:
            os.unlink(path)
        elif n == seg and os.path.getsize(path) > off:
            os.truncate(path, off)


class UrlStore:
    """A disk-backed FIFO of :class:`UrlRecord` with at most ``ram_urls`` in RAM.

    ``directory`` holds the segment files ``seg-NNNNNNNN.log``.  A new store
    starts empty; :meth:`open_existing` (used by ``--reload``) reopens the
    segments left by a previous run from a saved read position.
    """

    def __init__(
        self,
        directory: str,
        *,
        ram_urls: int,
        segment_bytes: int = 64 * 1024 * 1024,
        read_chunk: int = 1 << 16,
    ) -> None:
        if ram_urls < 1:
            raise ValueError("ram_urls must be >= 1")
        self.directory = directory
        self.ram_urls = ram_urls
        self.segment_bytes = segment_bytes
        self.read_chunk = read_chunk
        makedirs(directory)
        self._ram: deque[UrlRecord] = deque()
        # Log positions are (segment number, byte offset).
        self._write_seg = 0
        self._write_off = 0
        self._writer = None
        self._wbuf: list[bytes] = []
        self._wbuf_bytes = 0
        # Records written but not yet in RAM: [backlog start position, write end).
        self._backlog = 0
        self._read_seg = 0
        self._read_off = 0
        self._released_seg = 0  # segments below this number are deleted
        self.pushed = 0
        self.popped = 0
        self.corrupt_records = 0
        self._open_writer()

    @classmethod
    def open_existing(cls, directory: str, position: tuple[int, int], *, ram_urls: int,
                      segment_bytes: int = 64 * 1024 * 1024,
                      truncate_at: tuple[int, int] | None = None) -> "UrlStore":
        """Reopen the log in ``directory`` to read on from ``position``.

        ``position`` is a :meth:`read_position` saved by a checkpoint.  The
        last segment's torn tail (a line cut by a crash, without its
        newline) is cut off and counted in ``corrupt_records``, so that new
        records never glue onto it.  Records with a bad checksum are found
        and counted when read.  The backlog is every line from ``position``
        to the end of the log.  With ``truncate_at`` (a :meth:`write_position`),
        whatever was appended after it is removed first.
        """
        store = cls.__new__(cls)
        store.directory = directory
        store.ram_urls = ram_urls
        store.segment_bytes = segment_bytes
        store.read_chunk = 1 << 16
        makedirs(directory)
        store._ram = deque()
        store._writer = None
        store._wbuf = []
        store._wbuf_bytes = 0
        store.pushed = 0
        store.popped = 0
        store.corrupt_records = 0
        read_seg, read_off = position
        if truncate_at is not None:
            cut_segments(directory, truncate_at)
        segments = segment_numbers(directory)
        segments = [n for n in segments if n >= read_seg] or [read_seg]
        store._released_seg = read_seg
        store._write_seg = segments[-1]
        last = store._seg_path(store._write_seg)
        if os.path.exists(last):
            with open(last, "r+b") as f:
                data = f.read()
                keep = data.rfind(b"\n") + 1
                if keep < len(data):
                    store.corrupt_records += 1
                    f.truncate(keep)
        #: What was found damaged beyond a torn record, one sentence each.
        store.damage = []
        first = store._seg_path(read_seg)
        size = os.path.getsize(first) if os.path.exists(first) else 0
        if size < read_off:
            # The segment was cut (or lost) before the checkpoint's read
            # position: what it held after that point is gone, nothing before
            # it is needed (those records were carried).  Read on from the
            # last whole record: the end of this segment, or the next one.
            store.damage.append(
                f"{first}: {'missing' if not os.path.exists(first) else f'{size} bytes'}, cut before the "
                f"checkpoint's read position (byte {read_off}): whatever was queued after that point is "
                "lost, the rest of the store is kept")
            if read_seg < store._write_seg:
                read_seg = next(n for n in segments if n > read_seg)
                read_off = 0
            else:
                read_off = size
        backlog = 0
        for n in segments:
            try:
                with open(store._seg_path(n), "rb") as f:
                    if n == read_seg:
                        f.seek(read_off)
                    while chunk := f.read(1 << 20):
                        backlog += chunk.count(b"\n")
            except FileNotFoundError:
                continue
        store._backlog = backlog
        store._read_seg, store._read_off = read_seg, read_off
        store._open_writer()
        if (store._read_seg, store._read_off) > (store._write_seg, store._write_off):
            raise ValueError(f"{directory}: read position {position} is past the end of the log")
        return store

    # -- sizes ------------------------------------------------------------
    def __len__(self) -> int:
        """All records queued: in RAM plus on disk only."""
        return len(self._ram) + self._backlog

    @property
    def in_memory(self) -> int:
        return len(self._ram)

    @property
    def on_disk_only(self) -> int:
        return self._backlog

    # -- writing ----------------------------------------------------------
    def _seg_path(self, n: int) -> str:
        return segment_path(self.directory, n)

    def _open_writer(self) -> None:
        self._writer = open(self._seg_path(self._write_seg), "ab", buffering=0, opener=opener)
        self._write_off = self._writer.seek(0, os.SEEK_END)

    def push(self, rec: UrlRecord) -> None:
        """Append ``rec`` to the log; keep it in RAM too when there is room."""
        line = encode_record(rec)
        if self._backlog == 0 and len(self._ram) < self.ram_urls:
            self._ram.append(rec)
            # The reader is caught up: it skips over this record's bytes.
            skip = True
        else:
            self._backlog += 1
            skip = False
        self._wbuf.append(line)
        self._wbuf_bytes += len(line)
        self._write_off += len(line)
        if skip:
            self._read_seg, self._read_off = self._write_seg, self._write_off
        self.pushed += 1
        if self._write_off >= self.segment_bytes:
            self._roll()
        elif self._wbuf_bytes >= 1 << 16:
            self.flush()

    def _roll(self) -> None:
        self.flush()
        self._writer.close()
        caught_up = (self._read_seg, self._read_off) == (self._write_seg, self._write_off)
        self._write_seg += 1
        self._write_off = 0
        self._open_writer()
        if caught_up:
            self._read_seg, self._read_off = self._write_seg, 0

    def flush(self, sync: bool = False) -> None:
        """Write buffered records to the segment file (fsync when ``sync``)."""
        if self._wbuf:
            data = b"".join(self._wbuf)
            self._wbuf.clear()
            self._wbuf_bytes = 0
            view = memoryview(data)
            while view:
                n = self._writer.write(view)
                view = view[n:]
        if sync:
            os.fsync(self._writer.fileno())

    # -- reading ----------------------------------------------------------
    def pop(self) -> UrlRecord | None:
        """The oldest record, or None when the store is empty."""
        if not self._ram:
            if not self._backlog:
                return None
            self._refill()
            if not self._ram:
                return None
        self.popped += 1
        return self._ram.popleft()

    def _refill(self) -> None:
        """Read up to ``ram_urls`` backlog records from the log into RAM."""
        self.flush()
        want = min(self._backlog, max(1, self.ram_urls - len(self._ram)))
        got = 0
        while got < want and self._backlog:
            if (self._read_seg, self._read_off) == (self._write_seg, self._write_off):
                # The log says there is a backlog but nothing is left to read:
                # records were lost to corruption.  Resynchronise the count.
                self.corrupt_records += self._backlog
                self._backlog = 0
                break
            path = self._seg_path(self._read_seg)
            try:
                with open(path, "rb") as f:
                    f.seek(self._read_off)
                    data = f.read(self.read_chunk)
            except FileNotFoundError:
                data = b""
            if not data:
                self._next_read_segment()
                continue
            end = data.rfind(b"\n") + 1
            if end == 0:
                if len(data) < self.read_chunk:
                    # A torn last line without a newline: damage at the tail.
                    self.corrupt_records += 1
                    self._backlog = max(0, self._backlog - 1)
                    self._next_read_segment()
                    continue
                # One enormous line (bigger than a chunk): skip it as damage.
                self.corrupt_records += 1
                self._backlog = max(0, self._backlog - 1)
                self._read_off += len(data)
                continue
            pos = 0
            while pos < end and got < want:
                nl = data.index(b"\n", pos)
                rec = decode_record(data[pos:nl])
                pos = nl + 1
                self._backlog -= 1
                if rec is None:
                    self.corrupt_records += 1
                    continue
                self._ram.append(rec)
                got += 1
                if not self._backlog:
                    break
            self._read_off += pos

    def _next_read_segment(self) -> None:
        if self._read_seg < self._write_seg:
            self._read_seg += 1
            self._read_off = 0
        else:
            self._read_off = self._write_off

    # -- durability -------------------------------------------------------
    def read_position(self) -> tuple[int, int]:
        """Where the first record not yet in RAM starts in the log."""
        return (self._read_seg, self._read_off)

    def write_position(self) -> tuple[int, int]:
        """Where the next record will be appended (the end of the log)."""
        return (self._write_seg, self._write_off)

    def release_through(self, segment: int) -> int:
        """Delete fully consumed segments numbered below ``segment``.

        Returns how many files were removed.  The engine calls this after a
        checkpoint has made the pops from those segments durable.
        """
        segment = min(segment, self._read_seg)
        removed = 0
        for n in range(self._released_seg, segment):
            try:
                os.unlink(self._seg_path(n))
                removed += 1
            except FileNotFoundError:
                pass
        self._released_seg = max(self._released_seg, segment)
        return removed

    def ram_records(self) -> Iterator[UrlRecord]:
        return iter(self._ram)

    def close(self) -> None:
        if self._writer is not None:
            self.flush()
            self._writer.close()
            self._writer = None
