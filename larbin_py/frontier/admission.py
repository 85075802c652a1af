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
from .store import EMBED, INPUT, LINK, REDIRECT, SEED, UrlRecord

__all__ = ["Admission"]


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

    def push(self, url: str, depth: int, retries: int, *, priority: bool = False, hops: int = 0,
             via: str = "", ref: str = "") -> None:
        """Queue a URL that passed the rules and the seen test.

        ``hops``: the redirects that led to it; ``via``, ``ref``: how it was
        found, and from which URL (:data:`~larbin_py.frontier.store.VIA_KINDS`);
        all kept with the record, on disk too.
        """
        lanes = self.lanes
        (lanes.prio if priority else lanes.main).push(UrlRecord(url, depth, retries, hops, via=via, ref=ref))
        self.taken += 1

    def push_record(self, rec: UrlRecord, *, priority: bool = False) -> None:
        """Queue a record as it is (the distributed mode: its ``tag`` names its stream entry)."""
        lanes = self.lanes
        (lanes.prio if priority else lanes.main).push(rec)
        self.taken += 1

    def offer(self, page_url: str, depth: int, links: Sequence[str], *, redirect: bool = False,
              hops: int = 0, embeds=()) -> int:
        """Queue those of a page's ``links`` that pass the rules and the seen test.

        ``depth`` is the page's; ``links`` are normalized absolute URLs.
        A link held in :attr:`seen_urls` (met lately, so in the seen store)
        is counted "seen" at once, before the rules.  ``redirect``: the one
        link is a redirect's target (it keeps the page's depth); ``hops``:
        the redirects that led to it, 0 for a page's links.  ``embeds``: the
        links (a set) the page embeds (images, frames) rather than links to.
        Each record queued says how it was found (a link, an embed, a
        redirect) and from ``page_url``.  Returns how many were queued;
        every refusal is counted in :attr:`rejected`.
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
        via = REDIRECT if redirect else LINK
        queued = 0
        for link, d, is_new in zip(ok_links, depths, new):
            if is_new:
                push(UrlRecord(link, d, retries, hops, "", EMBED if embeds and link in embeds else via, page_url))
                queued += 1
        self.taken += queued
        if queued < len(ok_links):
            rejected["seen"] += len(ok_links) - queued
        return queued

    def offer_url(self, url: str, *, priority: bool = True, seed: bool = True) -> tuple[str, str | None]:
        """Queue a start URL or one given at run time: ``(result, reason)``.

        ``url`` is normalized; it goes through the rules as a seed (depth
        ``depthInSite``) and the seen test; its record says it was a start
        URL (``seed``) or one given at run time.  ``result`` is ``accepted``,
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
        self.push(url, verdict, self.retries, priority=priority, via=SEED if seed else INPUT)
        return "accepted", None
