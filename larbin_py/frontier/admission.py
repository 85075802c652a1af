"""Admission: which URLs enter the frontier's lanes, in one call per page.

A page's links, a start URL or a URL given at run time come in here and
nowhere else.  :meth:`Admission.offer` takes a page's normalized links
through, in this order and in one call:

1. the cache of links met lately (:class:`~larbin_py.frontier.seen.SeenUrls`):
   a link held there is in the seen store already and is refused as
   ``seen`` before anything else is asked of it (a site's navigation links
   come back on every page);
2. the rules (:class:`~larbin_py.rules.UrlRules`, ``admit_many``): depth,
   site locks, extensions... each refusal counted under the rule's reason;
3. either the seen test (a :class:`~larbin_py.frontier.interfaces.SeenStore`,
   one batched ``add_many``) and the main lane, or, in the distributed
   mode, the *sink* (a :class:`~larbin_py.frontier.interfaces.LinkSink`):
   the owner of each link's host tests and queues it in Redis, in one
   atomic step.

A sitemap's URLs come in through :meth:`Admission.offer_sitemap_files`
(sitemap files to read: no rule but the URL's own, their seen test under a
key of their own, ``URL#sitemap``, so a page and a sitemap of one address
never shadow each other) and :meth:`Admission.offer_listed` (the pages a
sitemap lists: the rules as for a start URL, the seen test as for a link);
both mark their records' ``via`` (:class:`~larbin_py.frontier.store.UrlRecord`).

Every refusal is counted in :attr:`Admission.rejected` by reason (``seen``
included): the engine shares that counter for its stats.  :attr:`taken`
counts the records pushed into the main and priority lanes, the left side
of the frontier's conservation (``taken == fetched + forgotten + queued +
in flight``; the frontier subtracts what it hands over).

Sans-I/O but for the stores themselves; no clock.  Errors: a URL the rules
refuse is a counted value, never an exception; an ``OSError`` from a lane
or the seen store (the state cannot be written) propagates to the engine,
which stops the crawl.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from ..rules import UrlRules
from ..url import fingerprint, fingerprints
from .interfaces import LinkSink, SeenStore
from .lanes import Lanes
from .seen import SeenSet, SeenUrls
from .store import UrlRecord

__all__ = ["Admission", "SITEMAP_KEY"]

#: What a sitemap file's URL is seen-tested as, after the URL (a fragment: no normalized URL has one).
SITEMAP_KEY = "#sitemap"


class Admission:
    """The way into ``lanes``: ``seen`` (default: an empty in-memory
    :class:`SeenSet`), ``rules`` (default: every http(s) URL), ``retries`` (the
    retries a new record gets) and, in the distributed mode, ``sink``."""

    def __init__(self, lanes: Lanes, *, seen: SeenStore | None = None, rules: UrlRules | None = None,
                 retries: int = 0, sink: LinkSink | None = None) -> None:
        self.lanes = lanes
        self.seen: SeenStore = seen if seen is not None else SeenSet()
        self.rules = rules if rules is not None else UrlRules()
        self.retries = retries
        self.sink = sink
        #: Links lately met, known to be in :attr:`seen` (checked before the rules).
        self.seen_urls = SeenUrls()
        #: Links refused by :meth:`offer` / :meth:`offer_url`, by reason ("seen" included).
        self.rejected: Counter[str] = Counter()
        #: Records pushed into the main and priority lanes (the frontier's ``taken``, before hand-overs).
        self.taken = 0

    def push(self, url: str, depth: int, retries: int, *, priority: bool = False, hops: int = 0) -> None:
        """Queue a URL that passed the rules and the seen test.

        ``hops``: the redirects that led to it (kept with the record, on disk too).
        """
        lanes = self.lanes
        (lanes.prio if priority else lanes.main).push(UrlRecord(url, depth, retries, hops))
        self.taken += 1

    def push_record(self, rec: UrlRecord, *, priority: bool = False) -> None:
        """Queue a record as it is (the distributed mode: its ``tag`` names its stream entry)."""
        lanes = self.lanes
        (lanes.prio if priority else lanes.main).push(rec)
        self.taken += 1

    def offer(self, page_url: str, depth: int, links: Sequence[str], *, redirect: bool = False,
              hops: int = 0) -> int:
        """Queue those of a page's ``links`` that pass the rules and the seen test.

        ``depth`` is the page's; ``links`` are normalized absolute URLs.
        A link held in :attr:`seen_urls` (met lately, so in the seen store)
        is counted "seen" at once, before the rules.  ``redirect``: the one
        link is a redirect's target (it keeps the page's depth); ``hops``:
        the redirects that led to it, 0 for a page's links.  Returns how
        many were queued; every refusal is counted in :attr:`rejected`.
        """
        rejected = self.rejected
        fresh = self.seen_urls.unknown(links)
        if len(fresh) < len(links):
            rejected["seen"] += len(links) - len(fresh)
        ok_links, depths, refused = self.rules.admit_many(fresh, page_url, depth, redirect=redirect)
        for reason, count in refused.items():
            rejected[reason] += count
        if not ok_links:
            return 0
        if self.sink is not None:
            # The owner of each link's host tests and queues it (exactly, in
            # Redis); remembered here once buffered (see SeenUrls).
            self.seen_urls.remember(ok_links)
            self.sink.add_many(ok_links, depths, hops)
            return len(ok_links)
        new = self.seen.add_many(fingerprints(ok_links))
        self.seen_urls.remember(ok_links)
        push = self.lanes.main.push
        retries = self.retries
        queued = 0
        for link, d, is_new in zip(ok_links, depths, new):
            if is_new:
                push(UrlRecord(link, d, retries, hops))
                queued += 1
        self.taken += queued
        if queued < len(ok_links):
            rejected["seen"] += len(ok_links) - queued
        return queued

    def offer_url(self, url: str, *, priority: bool = True) -> tuple[str, str | None]:
        """Queue a start URL or one given at run time: ``(result, reason)``.

        ``url`` is normalized; it goes through the rules as a seed (depth
        ``depthInSite``) and the seen test.  ``result`` is ``accepted``,
        ``duplicate`` or ``rejected`` (with the rule's reason); a duplicate
        is not counted in :attr:`rejected` (the caller answers it).
        """
        verdict = self.rules.admit(url, None, 0)
        if isinstance(verdict, str):
            return "rejected", verdict
        if self.sink is not None:  # accepted for its owner (a duplicate is dropped there)
            self.sink.add_many((url,), (verdict,), 0)
            return "accepted", None
        if not self.seen.add_many((fingerprint(url),))[0]:
            return "duplicate", None
        self.push(url, verdict, self.retries, priority=priority)
        return "accepted", None

    def offer_sitemap_files(self, urls: Sequence[str], via: str, *, hops: int = 0) -> int:
        """Queue sitemap files to read (``via``: ``m<level>@<host>``): each once in the crawl.

        ``urls`` are normalized; no rule of links applies to them (a sitemap
        is read whatever forbiddenExtensions, getCGI or the URL patterns
        say: robots.txt is still obeyed when it is fetched).  ``hops``: a
        redirect led to them.  Returns how many were queued; a sitemap
        already queued is counted ``seen``.
        """
        urls = list(dict.fromkeys(urls))
        if not urls:
            return 0
        if self.sink is not None:
            self.sink.add_many(urls, [0] * len(urls), hops, via=via, seen_key=SITEMAP_KEY)
            return len(urls)
        new = self.seen.add_many(fingerprints([u + SITEMAP_KEY for u in urls]))
        queued = 0
        for url, is_new in zip(urls, new):
            if is_new:
                self.lanes.main.push(UrlRecord(url, 0, self.retries, hops, via=via))
                queued += 1
        self.taken += queued
        if queued < len(urls):
            self.rejected["seen"] += len(urls) - queued
        return queued

    def offer_listed(self, sitemap_url: str, urls: Sequence[str], vias: Sequence[str]) -> int:
        """Queue the pages a sitemap lists (normalized; ``vias``: each one's ``s[:lastmod]``).

        They go through the rules as start URLs of their sites do (depth
        ``depthInSite``; noExternalLinks, lockSite, the patterns... counted
        as for links), then the seen test as links.  Returns how many were queued.
        """
        rejected = self.rejected
        fresh = self.seen_urls.unknown(urls)
        if len(fresh) < len(urls):
            rejected["seen"] += len(urls) - len(fresh)
        depth = self.rules.depth_in_site
        ok_links, _depths, refused = self.rules.admit_many(fresh, sitemap_url, depth, redirect=True)
        for reason, count in refused.items():
            rejected[reason] += count
        if not ok_links:
            return 0
        via_of = dict(zip(urls, vias))
        self.seen_urls.remember(ok_links)
        if self.sink is not None:
            by_via: dict[str, list[str]] = {}
            for link in ok_links:
                by_via.setdefault(via_of.get(link, "s"), []).append(link)
            for via, links in by_via.items():
                self.sink.add_many(links, [depth] * len(links), 0, via=via)
            return len(ok_links)
        new = self.seen.add_many(fingerprints(ok_links))
        push = self.lanes.main.push
        queued = 0
        for link, is_new in zip(ok_links, new):
            if is_new:
                push(UrlRecord(link, depth, self.retries, 0, via=via_of.get(link, "s")))
                queued += 1
        self.taken += queued
        if queued < len(ok_links):
            rejected["seen"] += len(ok_links) - queued
        return queued
