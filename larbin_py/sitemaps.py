"""Sitemaps (sitemaps.org protocol 0.9): reading one sitemap file, sans-I/O and bounded.

A site lists its pages in *sitemaps*: XML ``<urlset>`` files of ``<url>``
entries (``<loc>``, ``<lastmod>``...), *index* files (``<sitemapindex>`` of
``<sitemap><loc>`` entries naming more sitemaps), or text files of one URL
a line; any of them may be gzip-compressed.  :class:`SitemapReader` reads
one file fed in pieces, as it came from the network, and
:func:`read_sitemap` one whole body; the result (:class:`Sitemap`) lists
the pages and the sitemaps it names, with what went past a limit counted.
Fetching them (under the site's politeness) and queueing what they list
(through the rules) is :mod:`larbin_py.sitemap_fetch`'s.

Mechanism.  The first bytes say gzip (its magic ``1f 8b``) or not; gzip
is inflated by a streaming ``zlib`` object that never makes more than the
bytes still allowed.  The inflated text is XML when its first non-blank
character is ``<`` (read by lxml's pull parser: no network, no entity
expansion, each entry dropped from the tree once read, so memory holds one
entry, not the file), else text lines (UTF-8; blank lines and lines that
are not http(s) URLs skipped).  Element names are matched by their local
name, whatever namespace (or none) the file declares.  The root says the
kind: ``urlset`` lists pages, ``sitemapindex`` sitemaps; an entry of the
other kind is not read (counted ``badEntry``).

Limits (the protocol's, enforced, never trusted to the file):

* :data:`MAX_ENTRIES` (50,000) URLs a file: later entries are counted
  (``overLimit``), not kept; past the limit the XML is no longer parsed,
  its ``<loc`` tags are only counted (a plain byte search: a file of
  millions of entries costs the parse of 50,000 and a scan of the rest);
* :data:`MAX_BYTES` (50 MiB) of uncompressed text a file: reading stops
  there, and the file is counted ``cut`` (a gzip bomb inflates no further:
  memory and time stay bounded by this, whatever the ratio);
* an entry's ``<loc>`` longer than :data:`MAX_LOC` (8,192 characters) or a
  text line longer than that is skipped (``badEntry``);
* ``<lastmod>`` is kept only when it is a W3C datetime (``2024-05-01``,
  ``2024-05-01T10:00:00+00:00``...), at most 40 characters.

Nesting and loops are the caller's (an index names sitemaps; what depth
they sit at and whether they were read already is the frontier's seen
test, :mod:`larbin_py.sitemap_fetch`).

Errors: none raised.  A file lxml cannot read past some point gives the
entries read before it (``broken`` set); a gzip stream that is damaged
does the same (inflated 1 KiB of input at a time: what the last KiB before
the damage held may be lost with it).
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field


__all__ = ["Sitemap", "SitemapReader", "read_sitemap", "MAX_ENTRIES", "MAX_BYTES", "MAX_LOC", "LASTMOD_RE"]

#: URLs a sitemap file may list (the protocol's limit).
MAX_ENTRIES = 50_000
#: Bytes of uncompressed text a sitemap file may hold (the protocol's limit: 50 MiB).
MAX_BYTES = 50 * 1024 * 1024
#: Longest ``<loc>`` (or text line) read, characters.
MAX_LOC = 8192
#: A W3C datetime, as ``<lastmod>`` is written.
LASTMOD_RE = re.compile(r"\d{4}(?:-\d{2}(?:-\d{2}(?:T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?"
                        r"(?:Z|[+-]\d{2}:\d{2})?)?)?)?\Z")
_GZIP_MAGIC = b"\x1f\x8b"
_SLICE = 1 << 16
_IN_SLICE = 1 << 10


@dataclass(slots=True)
class Sitemap:
    """What one sitemap file lists (see the module docstring)."""

    #: ``urlset``, ``sitemapindex``, ``text``, or ``unknown`` (empty, or an XML root of another kind).
    kind: str = "unknown"
    #: Pages listed: ``(loc, lastmod or "")``, in file order, at most MAX_ENTRIES.
    urls: list[tuple[str, str]] = field(default_factory=list)
    #: Sitemaps an index names: ``(loc, lastmod or "")``, at most MAX_ENTRIES.
    sitemaps: list[tuple[str, str]] = field(default_factory=list)
    #: Entries past MAX_ENTRIES, counted and not kept.
    over_limit: int = 0
    #: Entries skipped: an overlong or empty <loc>, an entry of the other kind.
    bad_entries: int = 0
    #: Reading stopped at MAX_BYTES of text.
    cut: bool = False
    #: The XML or the gzip stream was damaged: what came before the damage was read.
    broken: bool = False
    #: Bytes of text read (after inflating).
    text_bytes: int = 0


def _local(tag) -> str:
    if not isinstance(tag, str):
        return ""
    return tag.rsplit("}", 1)[-1].lower()


class SitemapReader:
    """One sitemap file fed in pieces (:meth:`feed`), read as it comes; :meth:`close` gives the result."""

    def __init__(self, *, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.result = Sitemap()
        self._inflate = None  # a zlib object once the stream is known to be gzip
        self._start = b""  # the first bytes, until the kind of stream is known
        self._sniffed = False  # gzip or not is known
        self._trailing = False  # gzip followed by bytes that are no gzip member: the rest is ignored
        self._mode = None  # "xml" or "text", once the first text is seen
        self._parser = None
        self._line = b""  # text mode: the line so far
        self._skip_line = False  # text mode: the line went past MAX_LOC
        self._done = False  # a limit or damage stopped reading: further pieces are ignored
        self._counting = False  # past max_entries: the XML's <loc tags are counted, not parsed
        self._tail = b""  # counting: the last bytes of the previous piece (a tag cut in two)

    # -- input ------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        """The next bytes of the file as fetched (gzip or not)."""
        if self._done or self._trailing or not data:
            return
        if not self._sniffed:
            self._start += data
            if len(self._start) < 2:
                return
            data, self._start, self._sniffed = self._start, b"", True
            if data[:2] == _GZIP_MAGIC:
                self._inflate = zlib.decompressobj(wbits=47)
        if self._inflate is not None:
            self._inflated(data)
        else:
            self._text(data)

    def _inflated(self, data: bytes) -> None:
        """Inflate ``data`` 1 KiB of input at a time (what precedes a damaged spot is kept), never
        more than the text still allowed; gzip members one after another are one stream."""
        at, end = 0, len(data)
        pending = b""
        while not self._done:
            if not pending:
                if at >= end:
                    return
                pending, at = data[at:at + _IN_SLICE], at + _IN_SLICE
            z = self._inflate
            room = self.max_bytes - self.result.text_bytes + 1  # one byte more: the cut shows
            try:
                out = z.decompress(pending, min(room, _SLICE))
            except zlib.error:
                self.result.broken = True
                self._done = True
                return
            pending = z.unconsumed_tail
            if out:
                self._text(out)
            if z.eof:  # the member ended: another may follow
                pending = z.unused_data  # (its unconsumed_tail may repeat these bytes: not used)
                if len(pending) < 2 and at < end:  # its magic may be cut by the slice
                    pending, at = pending + data[at:at + _IN_SLICE], at + _IN_SLICE
                if pending and pending[:2] != _GZIP_MAGIC[:len(pending)]:
                    self._trailing = True  # trailing bytes that are no gzip member: ignored
                    return
                self._inflate = zlib.decompressobj(wbits=47)

    def _text(self, data: bytes) -> None:
        r = self.result
        room = self.max_bytes - r.text_bytes
        if len(data) > room:
            data = data[:room]
            r.cut = True
            self._done = True
        r.text_bytes += len(data)
        if self._mode is None:
            stripped = data.lstrip(b" \t\r\n\xef\xbb\xbf")
            if not stripped:
                return
            self._mode = "xml" if stripped[:1] == b"<" else "text"
            if self._mode == "xml":
                from lxml import etree  # lxml at the first XML sitemap (a crawl's start is quicker without)

                self._parser = etree.XMLPullParser(
                    events=("end",), tag=("{*}url", "{*}sitemap"), resolve_entities=False, no_network=True,
                    recover=True, remove_comments=True, remove_pis=True, huge_tree=True)
            else:
                r.kind = "text"
        if self._mode == "xml":
            self._xml(data)
        else:
            self._lines(data)

    # -- XML ----------------------------------------------------------------
    def _xml(self, data: bytes) -> None:
        if self._counting:
            text = self._tail + data
            self.result.over_limit += text.count(b"<loc") + text.count(b":loc")  # <loc> or <ns:loc>
            self._tail = text[-4:]
            return
        from lxml import etree

        parser = self._parser
        try:
            parser.feed(data)
            self._events()
        except (etree.LxmlError, ValueError):
            self.result.broken = True
            self._done = True

    def _events(self) -> None:
        r = self.result
        for _event, el in self._parser.read_events():
            name = _local(el.tag)
            parent = el.getparent()
            if parent is None or parent.getparent() is not None:
                continue  # only the root's entries
            if r.kind == "unknown":
                root = _local(parent.tag)
                r.kind = root if root in ("urlset", "sitemapindex") else "other"
            self._entry(name, el)
            el.clear()
            while el.getprevious() is not None:  # the entries read: out of the tree
                del parent[0]

    def _entry(self, name: str, el) -> None:
        r = self.result
        kind = r.kind
        if (name == "url" and kind != "urlset") or (name == "sitemap" and kind != "sitemapindex"):
            r.bad_entries += 1
            return
        loc = lastmod = ""
        for child in el:
            cname = _local(child.tag)
            if cname == "loc" and not loc:
                loc = (child.text or "").strip()
            elif cname == "lastmod" and not lastmod:
                lastmod = (child.text or "").strip()
        self._keep(r.urls if name == "url" else r.sitemaps, loc, lastmod)

    def _keep(self, into: list, loc: str, lastmod: str) -> None:
        r = self.result
        if not loc or len(loc) > MAX_LOC:
            r.bad_entries += 1
            return
        if len(r.urls) + len(r.sitemaps) >= self.max_entries:
            r.over_limit += 1
            self._counting = self._mode == "xml"
            return
        if lastmod and (len(lastmod) > 40 or not LASTMOD_RE.match(lastmod)):
            lastmod = ""
        into.append((loc, lastmod))

    # -- text -----------------------------------------------------------------
    def _lines(self, data: bytes) -> None:
        start = 0
        while True:
            nl = data.find(b"\n", start)
            piece = data[start:] if nl == -1 else data[start:nl]
            if not self._skip_line:
                if len(self._line) + len(piece) > MAX_LOC + 2:
                    self._skip_line = True
                    self._line = b""
                else:
                    self._line += piece
            if nl == -1:
                return
            self._line_end()
            start = nl + 1

    def _line_end(self) -> None:
        if self._skip_line:
            self.result.bad_entries += 1
        else:
            line = self._line.strip().decode("utf-8", "replace").lstrip("\ufeff")
            if line[:7].lower() == "http://" or line[:8].lower() == "https://":
                self._keep(self.result.urls, line, "")
        self._line = b""
        self._skip_line = False

    # -- the end ------------------------------------------------------------------
    def close(self) -> Sitemap:
        """The file ended (or was cut): what it listed."""
        if not self._sniffed and self._start:  # a one-byte file
            self._sniffed = True
            self._text(self._start)
        if self._mode == "text" and (self._line or self._skip_line):
            self._line_end()
        elif self._mode == "xml" and not self._done and not self._counting:
            from lxml import etree

            try:
                self._parser.close()
                self._events()
            except (etree.LxmlError, ValueError):
                self.result.broken = True
        if self.result.kind == "other":
            self.result.kind = "unknown"
        self._done = True
        return self.result


def read_sitemap(body: bytes, *, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> Sitemap:
    """:class:`SitemapReader` on a whole body, fed in 64 KiB slices."""
    reader = SitemapReader(max_entries=max_entries, max_bytes=max_bytes)
    for at in range(0, len(body), _SLICE):
        reader.feed(body[at:at + _SLICE])
        if reader._done:
            break
    return reader.close()
