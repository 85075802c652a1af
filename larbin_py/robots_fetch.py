"""Fetching a site's robots.txt: the protocol of RFC 9309 §2.3 over the fetcher.

The frontier hands the engine a robots.txt request as a site's first request;
:class:`RobotsFetch` runs it to its end and tells the frontier the answer:

* 2xx: the body (cut at the 500 KiB cap) is parsed, logged for --reload and
  applied (``Frontier.robots_known``);
* 3xx: the Location is followed, up to :data:`larbin_py.robots.MAX_REDIRECTS`
  hops (``robots_decision(status, redirects=n)`` says when to stop: a 3xx
  past the limit means no restriction).  Every hop is a request like any
  other, spaced politely from the last (``frontier.follow_ups.delay``), and
  started only while the IP's lease allows it (``frontier.follow_ups.allowed``,
  the distributed mode; otherwise unavailable, as no answer).  A hop
  to another host resolves that name through the engine's one lookup method
  (never the resolver directly), and only to addresses the
  ``privateNetworks`` policy allows (``frontier.dns.addresses.allowed``; none
  allowed counts ``privateAddress`` and leaves the rules unreadable).  Not
  through the frontier's per-site DNS state: the hop's host is most often
  no site of the crawl, and would have to become one for a single request
  (docs/architecture.md says more);
* 4xx (429 aside), or a redirect that leads nowhere: no restriction;
* 5xx, 429, or no answer: unavailable, the frontier disallows and retries
  later (``Frontier.robots_unavailable``).  A transport failure that says
  why the site cannot be read as it should -- ``tlsError`` (a refused
  certificate), ``proxyError`` -- is passed on as the reason: should the
  site be given up, its URLs are forgotten under it, never as
  ``forbiddenRobots`` (the site forbade nothing);
* a request that never reached the server -- a kept-alive connection the
  server closed as it was reused (``staleConnection``), a connection opened
  when the IP was no longer ours to ask (``notSent``), a hop the IP's lease
  no longer allows -- is no failure of the site's: asked again at once,
  politely, without counting towards the :data:`larbin_py.robots.MAX_ERROR_ATTEMPTS`
  failures that give the site up (as a page's is retried free).  It
  cannot spin: a stale connection is closed by the fetcher, and a request
  not sent waits for the lease that lets it go out;
* 401: a status like any 4xx (no restriction), whether or not credentials
  were sent (the fetcher's ``authRequired`` keeps its status); a digest
  challenge (``authRetry``) is answered once, by one more request spaced
  like a redirect's hop.

It holds no state between requests: one object serves every site.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Awaitable, Callable

from . import robots as robots_mod
from .frontier.scheduler import Request, site_key
from .outcomes import result_kind
from .url import normalize

__all__ = ["RobotsFetch"]

#: Results whose status is the answer (a body cut at the cap; a 401).
_ANSWERED = frozenset({None, "tooBig", "authRequired", "authRetry"})
#: Transport failures that name a site's URLs when its robots.txt stays unread.
_NAMED_FAILURES = frozenset({"tlsError", "proxyError"})
#: Results whose request never reached the server (larbin_py.outcomes: retried free).
_NOT_SENT = frozenset({"stale", "notSent"})


class RobotsFetch:
    """Run robots.txt requests for the engine.

    ``frontier``: where the answers go (and the politeness of follow-ups);
    ``fetcher``: ``await fetch(url, ip, port)`` -> a FetchResult;
    ``lookup``: ``await lookup(host)`` -> a DNS answer (``.error``, ``.ips``),
    the engine's one path to the resolver; ``now``: the loop's clock;
    ``log``: the robots log kept for --reload (None: not kept);
    ``on_answer(req, res, hop)``: every answer, for the engine's counters
    (hop 0 is the request the frontier started, later hops follow-ups);
    ``rejected``: the counter of refused URLs (``privateAddress``);
    ``on_rules(req, rules)``: a site's rules were read (None: no restriction),
    after the frontier has them (``sitemaps``: larbin_py.sitemap_fetch);
    ``headers_for(host)``: a ``site`` line's request headers for the site
    (its UserAgent: robots.txt is asked for as that agent), or None.
    """

    def __init__(self, frontier, fetcher, lookup: Callable[[str], Awaitable], *, now: Callable[[], float],
                 log=None, on_answer=None, rejected: Counter | None = None,
                 sleep=asyncio.sleep, wall: Callable[[], float] = time.time, on_rules=None,
                 headers_for=None) -> None:
        self.frontier = frontier
        self.fetcher = fetcher
        self.lookup = lookup
        self.now = now
        self.log = log
        self.on_answer = on_answer
        self.rejected = rejected if rejected is not None else Counter()
        self.sleep = sleep
        self.wall = wall
        self.on_rules = on_rules
        self.headers_for = headers_for

    async def run(self, req: Request) -> None:
        """Fetch ``req``'s robots.txt, following redirects, and tell the frontier."""
        fr = self.frontier
        url, ip, port = req.url, req.ip, req.port
        hop = 0
        challenged = False
        while True:
            if hop:  # a redirect: the next hop is a request like any other, politely spaced
                delay = fr.follow_ups.delay(req, self.now())
                if delay > 0:
                    await self.sleep(delay)
                if not fr.follow_ups.allowed(req, self.now()):
                    # The IP's lease lapsed meanwhile (distributed mode): nothing sent, asked
                    # again later, by whoever holds the site then; no failure of the site's.
                    fr.robots_unavailable(req, self.now(), free=True)
                    return
                fr.follow_ups.started(req, self.now())
            extra = self.headers_for(req.site.host) if self.headers_for is not None else ()
            res = await self.fetcher.fetch(url, ip, port, addresses=req.site.ips,
                                           **({"extra_headers": extra} if extra else {}))
            if self.on_answer is not None:
                self.on_answer(req, res, hop)
            if result_kind(res.error, res.conn_reused, res.bytes_read) in _NOT_SENT:
                fr.robots_unavailable(req, self.now(), free=True)
                return
            if res.error == "authRetry" and not challenged:
                challenged = True
                hop += 1  # the same URL again, with the challenge answered: a request like a hop
                continue
            status = res.status if res.error in _ANSWERED else None
            decision = robots_mod.robots_decision(status, redirects=hop)
            if decision is robots_mod.RobotsDecision.PARSE:
                body = robots_mod.cut_at_cap(res.body, res.error == "tooBig")
                self._known(req, body)
                return
            if decision is robots_mod.RobotsDecision.FOLLOW:
                target = normalize(res.location or "", url)
                parsed = site_key(target) if target else None
                if parsed is None:
                    break  # a redirect to nowhere: as a 4xx
                if parsed[0] != req.site.key:
                    ip = await self._address(req, parsed[2])
                    if ip is None:
                        fr.robots_unavailable(req, self.now())
                        return
                url, port = target, parsed[3]
                hop += 1
                continue
            if decision is robots_mod.RobotsDecision.ALLOW_ALL:
                break
            fr.robots_unavailable(req, self.now(), res.error if res.error in _NAMED_FAILURES else None)
            return
        # 4xx, or too many redirects: no restriction (RFC 9309 2.3.1.3).
        self._known(req, None)

    async def _address(self, req: Request, host: str) -> str | None:
        """The address of another host a redirect leads to; None when it has none we may use."""
        answer = await self.lookup(host.strip("[]"))
        if answer.error is not None or not answer.ips:
            return None
        ips = self.frontier.dns.addresses.allowed(host, answer.ips)
        if not ips:  # privateNetworks refuses every address: rules unreadable
            self.rejected["privateAddress"] += 1
            return None
        return ips[0]

    def _known(self, req: Request, body: bytes | None) -> None:
        """Log the answer (None: no restriction) and apply it."""
        if self.log is not None:
            self.log.append(req.url, self.wall(), body)
        rules = robots_mod.RobotsTxt.parse(body) if body is not None else robots_mod.RobotsTxt.allow_all()
        self.frontier.robots_known(req, rules, robots_mod.CACHE_TTL, self.now())
        if self.on_rules is not None:
            self.on_rules(req, rules if body is not None else None)
