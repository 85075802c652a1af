"""Sitemaps in a crawl (``sitemaps on``): which files are read, and what their URLs become.

A sitemap file is a URL record like a page's, marked by its ``via``
(``m<level>@<host>``, :class:`~larbin_py.frontier.store.UrlRecord`): it waits
in the frontier's lanes and its site's FIFO, is fetched when its site's
politeness allows (the host name's and the IP's gaps, one connection per
IP, robots.txt obeyed), is retried, checkpointed and journaled as a page
is, and in the distributed mode is fetched by the owner of its host.  What
differs is the answer's use, :meth:`Sitemaps.answered`: the file is read
(:mod:`larbin_py.sitemaps`), never saved nor parsed for links, and its
outcome is ``sitemap`` (not a page: ``pages fetched`` does not count it,
nor does a site's page budget).

Which files (:meth:`Sitemaps.discover`, when a site's robots.txt is first
known in this run): the ``Sitemap:`` lines of its robots.txt, else
``/sitemap.xml`` on the site.  With ``ignoreRobots`` no robots.txt is read:
the start URLs' sites get ``/sitemap.xml`` (:meth:`Sitemaps.seed`).  Each
file is queued once in a crawl (its seen test, ``URL#sitemap``): a sitemap
that names itself, two index files that name each other, a robots.txt read
again after a day, are each counted ``seen``, never read twice.

What their URLs become:

* a page a sitemap lists goes through the rules as a start URL of its site
  does (depth ``depthInSite``: a sitemap is the site's own list of starts;
  noExternalLinks, lockSite, limitToDomain, forbiddenExtensions, getCGI,
  urlInclude/urlExclude, each refusal counted as for links), then the seen
  test; its record says ``s`` (``s:<lastmod>`` with the entry's
  ``<lastmod>``, kept for the recrawl and written in the outputs: the
  WARC record's ``WARC-Larbin-Found-By``/``WARC-Larbin-Lastmod`` fields,
  fetchInfo's line, the stats' last pages);
* a sitemap an index names is queued one level deeper, up to
  :data:`MAX_LEVEL` (index files nested 3 deep); deeper ones are counted
  ``tooDeep`` and not read;
* either must be on the sitemap file's own host or on the host whose
  robots.txt led to it (the protocol's cross-submission); any other is
  counted ``offSite``;
* a 3xx answer to a sitemap leads to another sitemap file (same level, one
  hop more: ``maxRedirects``); an answer cut at ``maxPageSize`` is read up
  to the cut (``cut``).

Counts (:attr:`Sitemaps.counts`, the summary's ``sitemaps`` line and the
stats' ``sitemaps``): ``files`` read, ``urls`` listed and ``sitemaps`` named,
``queued`` pages queued, ``overLimit`` (entries past 50,000 a file), ``cut``
(files past 50 MiB of text or maxPageSize), ``badEntry``, ``offSite``,
``tooDeep``, ``broken`` (damaged XML or gzip: what came before was read).
URLs the rules or the seen test refuse are counted with the links' refusals.

Errors: none raised; a file that is no sitemap (an HTML 404 page served
with 200) lists nothing.

**Off the loop.**  Reading a file (the XML parse, the URLs' normalization,
:meth:`Sitemaps.read`) touches nothing shared: a file over
:data:`INLINE_MAX` bytes is read on a thread of its own
(:meth:`Sitemaps.read_beside`; 50,000 entries are about a second of CPU,
which held the loop as long), its result then applied on the loop
(:meth:`Sitemaps.apply`: the counts, the rules, the seen test, the queue).
The reader feeds lxml 64 KiB at a time, so the loop gets the interpreter
between two slices.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field

from .frontier.store import UrlRecord
from .sitemaps import read_sitemap
from .url import host_of, normalize

__all__ = ["Sitemaps", "SitemapRead", "INLINE_MAX", "MAX_LEVEL", "is_sitemap", "sitemap_via", "parse_via", "found_by"]

#: Deepest nesting of index files read: robots.txt's sitemap is level 0.
MAX_LEVEL = 3


def sitemap_via(level: int, host: str) -> str:
    """The ``via`` of a sitemap file at ``level``, looked for on behalf of ``host``."""
    return f"m{level}@{host}"


def parse_via(via: str) -> tuple[int, str] | None:
    """``(level, host)`` of a sitemap file's ``via``, None for anything else."""
    if not via.startswith("m"):
        return None
    level, sep, host = via[1:].partition("@")
    if not sep or not level.isdigit():
        return None
    return int(level), host


def is_sitemap(rec: UrlRecord | None) -> bool:
    """True when ``rec`` is a sitemap file to read (not a page)."""
    return rec is not None and rec.via[:1] == "m"


def found_by(rec: UrlRecord | None) -> tuple[str, str]:
    """``(found by, lastmod)`` of a page record: ``("sitemap", lastmod or "")`` or ``("", "")``."""
    if rec is None or rec.via[:1] != "s":
        return "", ""
    return "sitemap", rec.via[2:] if rec.via.startswith("s:") else ""


class Sitemaps:
    """The sitemaps of a crawl: discovered on robots.txt, read on their answers.

    ``admission`` is the frontier's (its ``offer_sitemap_files`` and
    ``offer_listed``); ``counts`` where the counts go (the engine's, kept in
    its checkpoints; a new Counter when None); ``max_url_size`` the longest
    URL kept.
    """

    def __init__(self, admission, counts: Counter | None = None, *, max_url_size: int) -> None:
        self.admission = admission
        self.max_url_size = max_url_size
        self.counts: Counter[str] = counts if counts is not None else Counter()

    # -- which files ------------------------------------------------------
    def discover(self, robots_url: str, rules) -> int:
        """A site's robots.txt is known (``rules``: its RobotsTxt, or None when absent): queue
        the sitemaps it names, else the site's ``/sitemap.xml``.  How many were queued."""
        site_root = robots_url[: -len("robots.txt")]
        named = list(getattr(rules, "sitemaps", None) or ())
        urls = [u for u in (normalize(s, robots_url, max_length=self.max_url_size) for s in named) if u]
        if named and len(urls) < len(named):
            self.counts["badEntry"] += len(named) - len(urls)
        if not urls:
            urls = [site_root + "sitemap.xml"]
        return self.admission.offer_sitemap_files(urls, sitemap_via(0, host_of(robots_url)))

    def seed(self, url: str) -> int:
        """``ignoreRobots``: a start URL's site gets its ``/sitemap.xml`` looked for."""
        root = normalize("/sitemap.xml", url, max_length=self.max_url_size)
        if root is None:
            return 0
        return self.admission.offer_sitemap_files([root], sitemap_via(0, host_of(url)))

    # -- an answer ------------------------------------------------------------
    def redirected(self, rec: UrlRecord, target: str) -> int:
        """A sitemap file answered 3xx: its target is the same sitemap, one hop more."""
        return self.admission.offer_sitemap_files([target], rec.via, hops=rec.hops + 1)

    def answered(self, rec: UrlRecord, body: bytes, *, cut: bool = False) -> None:
        """Read a sitemap file's body (2xx; ``cut``: the fetch stopped at maxPageSize) and queue
        what it lists (:meth:`read` then :meth:`apply`, both here)."""
        self.apply(rec, self.read(rec, body, cut=cut))

    async def read_beside(self, rec: UrlRecord, body: bytes, *, cut: bool = False) -> "SitemapRead":
        """:meth:`read`, on the sitemaps' thread for a file over :data:`INLINE_MAX` bytes."""
        if len(body) <= INLINE_MAX:
            return self.read(rec, body, cut=cut)
        return await asyncio.get_running_loop().run_in_executor(_reader_thread(), self.read, rec, body, cut)

    def read(self, rec: UrlRecord, body: bytes, cut: bool = False) -> "SitemapRead":
        """(Any thread: nothing shared is touched.)  What the file lists on the hosts it may
        list (normalized, each once) and what it counts."""
        parsed = parse_via(rec.via)
        level, origin = parsed if parsed is not None else (0, host_of(rec.url))
        sm = read_sitemap(body)
        out = SitemapRead(level, origin)
        c = out.counts
        c["files"] += 1
        c["urls"] += len(sm.urls)
        c["sitemaps"] += len(sm.sitemaps)
        c["overLimit"] += sm.over_limit
        c["badEntry"] += sm.bad_entries
        c["cut"] += int(sm.cut or cut)
        c["broken"] += int(sm.broken)
        allowed = {host_of(rec.url), origin}
        if sm.urls:
            out.urls, out.lastmods = self._kept(sm.urls, rec.url, allowed, c)
        if sm.sitemaps:
            if level + 1 > MAX_LEVEL:
                c["tooDeep"] += len(sm.sitemaps)
            else:
                out.sitemaps, _ = self._kept(sm.sitemaps, rec.url, allowed, c)
        return out

    def apply(self, rec: UrlRecord, r: "SitemapRead") -> None:
        """(The loop.)  Count what :meth:`read` found and queue it."""
        c = self.counts
        c.update(r.counts)
        if r.urls:
            c["queued"] += self.admission.offer_listed(rec.url, r.urls,
                                                       [f"s:{m}" if m else "s" for m in r.lastmods])
        if r.sitemaps:
            self.admission.offer_sitemap_files(r.sitemaps, sitemap_via(r.level + 1, r.origin))

    def _kept(self, entries, base: str, allowed: set[str], counts: Counter) -> tuple[list[str], list[str]]:
        """The entries' normalized URLs on an allowed host, and their lastmods; the rest counted."""
        urls, mods = [], []
        seen = set()
        limit = self.max_url_size
        for loc, lastmod in entries:
            url = normalize(loc, base, max_length=limit)
            if url is None:
                counts["badEntry"] += 1
                continue
            if host_of(url) not in allowed:
                counts["offSite"] += 1
                continue
            if url in seen:
                continue
            seen.add(url)
            urls.append(url)
            mods.append(lastmod)
        return urls, mods


#: Bodies up to this size are read on the loop (a thread's round trip costs more than they do).
INLINE_MAX = 64 * 1024
_READER = None


def _reader_thread():
    """The one thread large sitemap files are read on (started at the first)."""
    global _READER
    if _READER is None:
        from concurrent.futures import ThreadPoolExecutor

        from .core_pin import release_thread  # every core of the process, not a pinned loop's one

        _READER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="larbin-sitemaps",
                                     initializer=release_thread)
    return _READER


@dataclass(slots=True)
class SitemapRead:
    """What :meth:`Sitemaps.read` found in one file, for :meth:`Sitemaps.apply` on the loop."""

    level: int
    origin: str
    urls: list = field(default_factory=list)
    lastmods: list = field(default_factory=list)
    sitemaps: list = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
