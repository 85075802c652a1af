"""The records a crawl keeps for the next one (``--recrawl``), in ``stateDir/records/``.

Each crawl is a *generation* (the first is 1; a recrawl of generation G is
G + 1).  A generation writes two append-only files:

* ``records-GGGGGGGG.log``: one line per page fetched (a 2xx the crawl
  kept), in the URL store's format (larbin_py.frontier.store: CRC, depth,
  hops, URL, how it was found), its ``prev`` field the :class:`Visit`
  token: what the fetch left, so the next crawl can ask again
  conditionally and tell what changed;
* ``links-GGGGGGGG.log``: the links each of those pages offered, one entry
  per page at the offset its record names: a 4-byte length and a CRC32
  (big-endian) of the payload, then the payload, ``zlib`` (level 1) of the
  links joined by ``\\n``, an embed (a frame, an image) behind ``\\x1d``.
  A recrawl that gets a 304 offers those links again without a body to
  parse.

The token (no white space; the ETag last, it may hold commas)::

    checked,captured,last-modified,digest,links,type,etag

``checked``: when the page last answered (wall seconds; ``revisitAfter``
counts from it); ``captured``: when its body was last fetched (a WARC
revisit refers to that capture); ``last-modified``: the Last-Modified
header in seconds, or empty; ``digest``: the base32 SHA-1 of the body as
saved; ``links``: the links entry's offset, ``-`` for a page with no
links to offer (not HTML, nofollow, a duplicate), empty when not known
(the page is asked again without validators); ``type``: its media type
(for the mirror's index when the page is not fetched again; empty when it
holds anything but ``a-z 0-9 . + - /``); ``etag``: the ETag as sent,
kept only when it is a well-formed entity tag (``W/"..."`` or ``"..."``,
printable ASCII, at most 256 bytes) or empty.  In a distributed recrawl's
stream entry (never in a file) ``links`` is ``<worker>@<offset>``: the
worker whose links log holds the entry (``Visit.source``,
larbin_py.distributed.records).

Both files are written by the writer thread in the group commit, before
its journal line (:class:`RecordsWriter`: the loop hands it *ops*, the
writer compresses the links and formats the lines), their lengths are in
every commit and checkpoint, and ``--reload`` cuts them back to the last
commit (:func:`cut_records`), as it does the crawl log: a crash loses no
record of a committed page and writes none twice.

The generation a recrawl revisits is read by :class:`OldRecords` on the
writer thread (a batch of lines; one links entry by offset): the loop never
reads them.  What a recrawl starts from and what it clears is
:func:`prepare_recrawl`'s.

Errors: a damaged line (its CRC) or links entry is skipped and counted
(``damaged``); a state that cannot be recrawled is a :class:`StateError`
with one line saying why.
"""

from __future__ import annotations

import functools
import json
import os
import re
import struct
import zlib
from dataclasses import dataclass

from .frontier.store import UrlRecord, decode_record, encode_record
from .owner_only import makedirs, opener
from .state import CHECKPOINT, StateError, read_checkpoint, remove_crawl_files

__all__ = ["NO_LINKS", "RECORDS_DIR", "OldRecords", "RecordsWriter", "RecrawlStart", "Visit", "clean_etag", "clean_type",
           "cut_records", "decode_links", "decode_token", "encode_links", "encode_token", "links_path",
           "prepare_recrawl", "read_entry", "records_path", "remove_generation", "remove_marker", "stored_links"]

RECORDS_DIR = "records"
#: ``Visit.links`` of a page with no links to offer.
NO_LINKS = -1
#: The marker of a recrawl being started (its first checkpoint not yet written).
MARKER = "recrawl.json"
_EMBED = "\x1d"
_HEADER = struct.Struct(">II")
_ETAG = re.compile(r'(?:W/)?"[\x21\x23-\x7e]*"')
MAX_ETAG = 256


def records_path(state_dir: str, generation: int) -> str:
    return os.path.join(state_dir, RECORDS_DIR, f"records-{generation:08d}.log")


def links_path(state_dir: str, generation: int) -> str:
    return os.path.join(state_dir, RECORDS_DIR, f"links-{generation:08d}.log")


@dataclass(slots=True)
class Visit:
    """What the last fetch of a URL left (the record's token; see the module docstring)."""

    checked: int
    captured: int
    last_modified: int | None = None
    digest: str = ""
    links: int | None = None
    etag: str = ""
    content_type: str = ""
    #: The distributed mode: the worker whose links log holds ``links`` ("" for this
    #: crawl state's own; larbin_py.distributed.records).  Never written in a records file.
    source: str = ""


_TYPE = re.compile(r"[a-z0-9.+\-]+/[a-z0-9.+\-]+")


def clean_type(value: str | None) -> str:
    """A media type we may keep in a token (``text/html``), else ``""``."""
    return value if value and len(value) <= 100 and _TYPE.fullmatch(value) else ""


def clean_etag(value: str | None) -> str:
    """``value`` when it is a well-formed entity tag we may send back, else ``""``."""
    if not value:
        return ""
    value = value.strip()
    return value if len(value) <= MAX_ETAG and _ETAG.fullmatch(value) else ""


def encode_token(v: Visit) -> str:
    links = "" if v.links is None else ("-" if v.links == NO_LINKS else str(v.links))
    if v.source and v.links is not None and v.links >= 0:
        links = f"{v.source}@{links}"  # (a stream entry's token: whose links log)
    lm = "" if v.last_modified is None else str(v.last_modified)
    return f"{v.checked},{v.captured},{lm},{v.digest},{links},{v.content_type},{v.etag}"


def decode_token(token: str) -> Visit | None:
    """The :class:`Visit` of a record's token (a new one each call: callers change it); None
    when it is not one."""
    fields = _token_fields(token)
    return None if fields is None else Visit(*fields)


@functools.lru_cache(maxsize=4096)
def _token_fields(token: str) -> tuple | None:
    # A page's token is read 4-5 times on its way (its request's validators, the
    # answer, the stored links, the record): parsed once.
    parts = token.split(",", 6)
    if len(parts) != 7:
        return None
    checked, captured, lm, digest, links, ctype, etag = parts
    source, _, links = links.rpartition("@")
    try:
        return (int(checked), int(captured), int(lm) if lm else None, digest,
                None if links == "" else (NO_LINKS if links == "-" else int(links)), clean_etag(etag),
                clean_type(ctype), source)
    except ValueError:
        return None


def encode_links(links, embeds=()) -> bytes:
    """One links entry (header and payload)."""
    text = "\n".join(_EMBED + link if embeds and link in embeds else link for link in links)
    payload = zlib.compress(text.encode("utf-8", "surrogateescape"), 1)
    return _HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def decode_links(payload: bytes) -> tuple[list[str], frozenset]:
    """The links and the embeds among them of an entry's payload."""
    text = zlib.decompress(payload).decode("utf-8", "surrogateescape")
    if not text:
        return [], frozenset()
    if _EMBED not in text:  # most pages' links: no embed among them
        return text.split("\n"), frozenset()
    links, embeds = [], []
    for link in text.split("\n"):
        if link[:1] == _EMBED:
            link = link[1:]
            embeds.append(link)
        links.append(link)
    return links, frozenset(embeds)


def stored_links(entry: bytes) -> tuple[list[str], frozenset, bytes]:
    """An entry's links, the embeds among them, and the entry itself (to copy into another log)."""
    return (*decode_links(entry[_HEADER.size:]), entry)


#: What a links entry's read asks for at once (entries are compressed: most are smaller).
_READ_AHEAD = 4096


def read_entry(fd: int, offset: int) -> bytes | None:
    """The links entry (header and payload, its CRC checked) at ``offset`` of the file ``fd``,
    as it can be copied into another log; None when damaged."""
    data = os.pread(fd, _READ_AHEAD, offset)  # most entries whole in one read
    if len(data) < _HEADER.size:
        return None
    length, crc = _HEADER.unpack_from(data)
    end = _HEADER.size + length
    if len(data) > end:
        data = data[:end]
    elif len(data) < end:
        data += os.pread(fd, end - len(data), offset + len(data))
    if len(data) != end or zlib.crc32(memoryview(data)[_HEADER.size:]) != crc:
        return None
    return data


def _append(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class OldRecords:
    """The generation a recrawl revisits, read on the writer thread (never the loop).

    ``end``: ``[records bytes, links bytes]``, the lengths its last
    checkpoint gave (what lies beyond was never committed).
    """

    def __init__(self, state_dir: str, generation: int, end, *, links: bool = True) -> None:
        self.generation = generation
        self.records_end, self.links_end = int(end[0]), int(end[1])
        self.damaged = 0
        self._links = -1  # (``links`` False: the records only, as a distributed recrawl's seeding reads them)
        try:
            self._records = os.open(records_path(state_dir, generation), os.O_RDONLY | os.O_CLOEXEC)
            if links:
                self._links = os.open(links_path(state_dir, generation), os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise StateError(f"cannot read the records of the crawl to revisit: {exc}") from None

    def batch(self, offset: int, chunk: int = 1 << 20) -> tuple[list[UrlRecord], int]:
        """The whole records from ``offset`` on (about ``chunk`` bytes of them), and where the next start."""
        if offset >= self.records_end:
            return [], offset
        data = os.pread(self._records, min(chunk, self.records_end - offset), offset)
        end = data.rfind(b"\n") + 1
        if end == 0:  # one line longer than the chunk
            if len(data) < self.records_end - offset:
                return self.batch(offset, chunk * 4)
            self.damaged += 1  # a torn last line: nothing more
            return [], self.records_end
        records = []
        for line in data[:end].split(b"\n")[:-1]:
            rec = decode_record(line + b"\n")
            if rec is None or not rec.prev:
                self.damaged += 1
                continue
            records.append(rec)
        return records, offset + end

    def readable(self, source: str) -> bool:
        """Can the links log of ``source`` be read here (one process: only its own, "")?"""
        return not source

    def links(self, offset: int | None, source: str = "") -> tuple[list[str], frozenset, bytes | None] | None:
        """The links (and embeds) of the entry at ``offset``, and the whole entry to copy
        (:class:`RecordsWriter`'s ``links``): ``([], ..., None)`` for NO_LINKS, None when not
        known or damaged (or in another worker's log: ``source``)."""
        if offset is None or source:
            return None
        if offset == NO_LINKS:
            return [], frozenset(), None
        if offset >= self.links_end:
            return None
        entry = read_entry(self._links, offset)
        if entry is None:
            self.damaged += 1
            return None
        return stored_links(entry)

    def raw(self, offset: int, source: str = "") -> bytes | None:
        """The whole links entry at ``offset`` (header and payload), to copy; None when damaged."""
        if source or offset < 0 or offset >= self.links_end:
            return None
        return read_entry(self._links, offset)

    def close(self) -> None:
        for fd in (self._records, self._links):
            if fd < 0:
                continue
            try:
                os.close(fd)
            except OSError:
                pass


class RecordsWriter:
    """The records of the generation being crawled, written on the writer thread.

    :meth:`apply` runs the ops the loop handed over with a commit, in
    order; each op is ``(record, visit, links)`` where ``links`` is a list
    of links (with ``embeds``: ``(links, embeds)``) to store, an ``int``:
    the offset of an entry of ``old`` (the generation revisited) to copy,
    ``bytes``: such an entry already read (:meth:`OldRecords.links`), or
    None (``visit.links`` stays as it is: unknown or NO_LINKS).  An
    ``OSError`` names the file.
    """

    def __init__(self, state_dir: str, generation: int, old: OldRecords | None = None) -> None:
        makedirs(os.path.join(state_dir, RECORDS_DIR))
        self.generation = generation
        self.old = old
        self.paths = (records_path(state_dir, generation), links_path(state_dir, generation))
        self._fds = []
        self._sizes = []
        for path in self.paths:
            fd = opener(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            self._fds.append(fd)
            self._sizes.append(os.fstat(fd).st_size)
        self.written = 0

    def position(self) -> list[int]:
        """``[records bytes, links bytes]`` (a commit records it)."""
        return list(self._sizes)

    def apply(self, ops: list) -> None:
        if not ops:
            return
        lines, entries = [], []
        links_at = self._sizes[1]
        for rec, visit, links in ops:
            if links is not None:
                if isinstance(links, bytes):
                    entry = links
                elif isinstance(links, int):
                    entry = self.old.raw(links, visit.source) if self.old is not None else None
                else:
                    entry = encode_links(*links) if isinstance(links, tuple) else encode_links(links)
                if entry is None:  # a damaged entry of the old generation: not known any more
                    visit.links = None
                else:
                    visit.links = links_at
                    links_at += len(entry)
                    entries.append(entry)
            visit.source = ""  # the entry is in this writer's own log now (or none is named)
            rec = UrlRecord(rec.url, rec.depth, 0, rec.hops, "", rec.via, rec.found, rec.ref, encode_token(visit))
            lines.append(encode_record(rec))
        self._write(1, b"".join(entries))  # the links first: a record never names a missing entry
        self._write(0, b"".join(lines))
        self.written += len(lines)

    def _write(self, i: int, data: bytes) -> None:
        try:
            _append(self._fds[i], data)
        except OSError as exc:
            if exc.filename is None:
                exc.filename = self.paths[i]
            raise
        self._sizes[i] += len(data)

    def sync(self) -> None:
        for fd, path in zip(self._fds, self.paths):
            try:
                os.fdatasync(fd)
            except OSError as exc:
                if exc.filename is None:
                    exc.filename = path
                raise

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []


def cut_records(state_dir: str, generation: int, position) -> None:
    """Cut the generation's files back to ``position`` (a commit's ``[records, links]``)."""
    for path, size in zip((records_path(state_dir, generation), links_path(state_dir, generation)), position):
        if os.path.exists(path) and os.path.getsize(path) > int(size):
            os.truncate(path, int(size))


@dataclass
class RecrawlStart:
    """What ``--recrawl`` starts from: the generation revisited, how much of its records
    count, and where the output continues (the WARC's index and series; a mirror's index
    starts afresh)."""

    previous: int
    end: list[int]
    output: dict | None


def _write_json(path: str, doc: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8", opener=opener) as f:
        json.dump(doc, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def prepare_recrawl(state_dir: str, output_mode: str) -> RecrawlStart:
    """Make ``state_dir``, which holds a finished crawl, ready for a new crawl revisiting it.

    The finished crawl's checkpoint gives its generation and the length of
    its records; a marker (``records/recrawl.json``) is written with them,
    then every file of that crawl's state is removed but its records (and
    the crawl log, the cookie jar, the browser's profile), so the new crawl
    starts as a fresh one.  A start cut short (the marker without a
    checkpoint) is done again from the marker.  StateError (one line) when
    there is nothing to recrawl: no crawl, a crawl that has not finished
    (continue it with ``--reload``), one that kept no records (canReload
    off), or ``outputMode save`` (its numbered files cannot keep a page
    across crawls).
    """
    if output_mode == "save":
        raise StateError("--recrawl keeps unchanged pages where they are, which outputMode save (files numbered "
                         "in fetch order) cannot: use mirror or warc")
    folder = os.path.join(state_dir, RECORDS_DIR)
    marker = os.path.join(folder, MARKER)
    if os.path.exists(os.path.join(state_dir, CHECKPOINT)):
        doc, _carry, _bad = read_checkpoint(state_dir)
        info = doc.get("records")
        if not isinstance(info, dict):
            raise StateError(f"{state_dir}: the crawl there kept no records to revisit (a larbin_py before "
                             "recrawls, or canReload off)")
        if not info.get("finished"):
            raise StateError(f"{state_dir}: the crawl there has not finished (it was stopped with URLs left): "
                             "continue it with --reload until it ends, then --recrawl")
        start = {"previous": int(info["generation"]), "end": [int(x) for x in info["position"]],
                 "output": doc.get("output")}
        makedirs(folder)
        _write_json(marker, start)
    elif os.path.exists(marker):  # a recrawl's start cut short: the same again
        try:
            with open(marker, encoding="utf-8") as f:
                start = json.load(f)
            int(start["previous"]), [int(x) for x in start["end"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StateError(f"{marker}: unreadable ({exc}): remove stateDir to start afresh") from None
    else:
        raise StateError(f"{state_dir}: no finished crawl to revisit (start one without --recrawl)")
    previous = int(start["previous"])
    remove_crawl_files(state_dir)
    keep = {os.path.basename(records_path(state_dir, previous)), os.path.basename(links_path(state_dir, previous)),
            MARKER}
    for name in os.listdir(folder):
        if name not in keep:
            os.unlink(os.path.join(folder, name))
    cut_records(state_dir, previous, start["end"])
    return RecrawlStart(previous, [int(x) for x in start["end"]], start.get("output"))


def remove_marker(state_dir: str) -> None:
    """The recrawl's first checkpoint is written: its start is done."""
    try:
        os.unlink(os.path.join(state_dir, RECORDS_DIR, MARKER))
    except FileNotFoundError:
        pass


def remove_generation(state_dir: str, generation: int) -> None:
    """A recrawl of ``generation`` finished: its records are not needed any more."""
    for path in (records_path(state_dir, generation), links_path(state_dir, generation)):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
