"""One page request, from the fetch to its outcome.

:class:`PageHandler` fetches a page the frontier handed out, feeds the answer's
round-trip time to the flow controllers, and applies the outcome table of
:mod:`larbin_py.outcomes`: a success is written by the output, recorded as
done, and *analysed* (:meth:`PageHandler.analyze`: parsed for links, which go
back to the frontier through its admission's ``offer`` with the page's depth);
a redirect offers its target; a failure is retried or forgotten.

``analyze`` is the seam of the analysis stage: pages go to the analysis
processes (larbin_py.analysis.stage), and their links come back through the
same ``admission.offer``; a page the stage does not take (every process busy,
no user analyzer wants it) is parsed here, as with ``analysisWorkers 0``,
and so is every page when the crawl state keeps the links on the loop
(``links_on_loop``: the distributed mode, whose acks precede an answer).

Every outcome goes to the crawl state's ``done`` with its crawl log line
(larbin_py.crawllog: status, size, how the URL was found, digest...), and
every robots.txt answer to its ``log``; the lines are made here, where the
answer is known, and written by the commit that covers the outcome.

Page-level robots rules (:mod:`larbin_py.page_robots`) come between the
answer and the output: ``X-Robots-Tag: nofollow`` keeps a page's links
unfollowed like the meta tag; with ``respectNoindex`` a page that says
``noindex`` is not saved (forgotten as ``noindex``, not an error of its
site) and its links are still followed unless nofollow; with
``followCanonical`` a page whose ``rel=canonical`` names another URL the
rules accept is not saved (``canonicalised``) and that URL is offered
instead, as a redirect's target is (the page's depth, one hop more: past
``maxRedirects`` it is refused as ``tooManyRedirects``, and the page is
kept).  A canonical the rules refuse, or one leading back to the page
through pages canonicalised before (:class:`~larbin_py.page_robots.CanonicalLoops`,
counted ``canonicalLoop`` among the refused links), leaves the page saved.
Neither kind of page goes to the user analyzers: only its links are read.

It shares the engine's state (its counters, the crawl state's ``done``) the
way an uvicorn protocol shares its server's: passed in, never looked up.
"""

from __future__ import annotations

import time

from . import outcomes
from . import page_robots
from . import parse as parse_mod
from .crawllog import format_line, payload_digest
from .frontier.protocol import Scheduler
from .frontier.scheduler import Request
from .frontier.store import VIA_KINDS, UrlRecord
from .journal import FETCHED
from .output import Document, OutputError
from .page_digests import PageDigests
from .site_settings import SiteSettings
from .sitemap_fetch import Sitemaps, found_by, is_sitemap
from .url import host_of

__all__ = ["PageHandler"]


def _cut(res) -> bool:
    """A 2xx answer cut at maxPageSize (a sitemap file is read up to the cut)."""
    return res.error == "tooBig" and res.status is not None and 200 <= res.status < 300


class PageHandler:
    """The outcome rules applied to page requests (and robots.txt answers' counts).

    The frontier is given by :meth:`attach` (it is built with
    :meth:`on_forget` as its hook), the fetcher and the output by
    :meth:`start` once the loop runs; ``now`` is the scheduler's clock;
    ``fail(message)`` stops the crawl.
    """

    def __init__(self, config, crawl_state, *, now, fail, out) -> None:
        self.config = config
        self.crawl_state = crawl_state
        self.frontier: Scheduler | None = None
        self.counts = None
        self.flow = None
        self.now = now
        self.fail = fail
        self.out = out
        self.fetcher = None
        self.output = None
        #: dynamicPages: the fetcher that renders in Chromium (larbin_py.net.dynamic), or None.
        self.dynamic = None
        #: pageNoDuplicate: the first URL of each page content, bounded, kept across --reload.
        self.digests = PageDigests()
        self._from_request = False  # an outcome being recorded comes from a request of ours
        self._answer: tuple = (None, None)  # (record, result) of the answer being applied
        #: Crawl log lines are made (crawlLog is not none).
        self.logging = config.crawl_log_path is not None
        #: The analysis stage (larbin_py.analysis.stage), or None: analysis inline (analysisWorkers 0).
        self.analysis = None
        #: The records for the next crawl and a recrawl's revisit (larbin_py.recrawl), or None.
        self.recrawl = None
        #: The names meta robots and X-Robots-Tag address this crawler by (larbin_py.page_robots).
        self.agents = page_robots.agent_names(config.user_agent)
        #: followCanonical: the pages canonicalised, so that a canonical loop keeps one of them.
        self.canonicals = page_robots.CanonicalLoops()
        #: The sitemap files' answers (larbin_py.sitemap_fetch); made by attach().
        self.sitemaps: Sitemaps | None = None
        #: larbin.conf's site lines: a host's request headers, UserAgent, cookies, rendering.
        self.site_rules = SiteSettings(config.site)

    def attach(self, frontier: Scheduler, counts, flow) -> None:
        """The frontier (built with :meth:`on_forget` as its hook), the counters, the flow controller."""
        self.frontier = frontier
        self.counts = counts
        self.flow = flow
        self.sitemaps = Sitemaps(frontier.admission, counts.sitemaps, max_url_size=self.config.max_url_size)

    def start(self, fetcher, output, dynamic=None) -> None:
        self.fetcher = fetcher
        self.output = output
        self.dynamic = dynamic
        #: outputMode warc: every exchange is archived, not only the pages saved.
        self.archive_all = getattr(output, "mode", None) == "warc"

    # -- the request ------------------------------------------------------
    async def run(self, req: Request) -> None:
        """Fetch ``req`` and apply the outcome rules to the answer.

        The crawl state's ``inflight`` (the distributed mode) hears the
        request's start and the end of its outcome, so that a worker's death
        counts a try against exactly the requests it had running.
        """
        inflight = self.crawl_state.inflight
        rec = req.record
        slot = inflight.start(rec.tag) if inflight is not None and rec is not None and rec.tag else None
        try:
            await self._run(req)
        finally:
            if slot is not None:
                inflight.end(slot)

    def headers_for(self, host: str) -> tuple:
        """A ``site`` line's request headers for ``host`` (UserAgent first), or ()."""
        rule = self.site_rules.for_host(host)
        return rule.header_bytes if rule is not None else ()

    async def _run(self, req: Request) -> None:
        rule = self.site_rules.for_host(req.site.host)
        jar = self.crawl_state.cookies
        if jar is not None and not (rule.cookies if rule is not None and rule.cookies is not None
                                    else self.config.use_cookies):
            jar = None  # cookies off for this host (a site line), or only some site lines want them
        fetcher, extra = self.fetcher, {"addresses": req.site.ips}  # Happy Eyeballs' other addresses
        if rule is not None and rule.header_bytes:
            extra["extra_headers"] = rule.header_bytes
        rc = self.recrawl
        validators = ()
        prefetched = None
        trigger = None
        if self.dynamic is not None and not is_sitemap(req.record):
            if rule is not None and rule.dynamic is not None:
                trigger = {"off": None, "on": "none", "scroll": "scroll"}[rule.dynamic]
            else:
                trigger = self.dynamic.trigger(req.url)
        if trigger is not None:
            fetcher, extra = self.dynamic, {"request": req, "trigger": trigger}  # rendered in Chromium
        elif rc is not None and (validators := rc.request_headers(req.record)):
            # a recrawl asks conditionally (larbin_py.recrawl), after a site line's headers,
            # and reads what it stored of the page meanwhile, for a 304
            extra["extra_headers"] = tuple(extra.get("extra_headers", ())) + validators
            prefetched = rc.prefetch(req.record)
        if jar is None:
            res = await fetcher.fetch(req.url, req.ip, req.port, **extra)
        else:  # useCookies: the jar's Cookie header out, the answer's Set-Cookie in
            cookie = jar.header_for(req.url, time.time())
            res = await fetcher.fetch(req.url, req.ip, req.port, cookie=cookie, **extra)
            if res.status is not None and fetcher is self.fetcher:  # the rendering one keeps its own
                jar.receive(req.url, [v for n, v in res.headers if n == b"set-cookie"], time.time())
        ok = res.error is None and res.status is not None and 200 <= res.status < 300
        digest = payload_digest(res.body) if ok and (self.logging or rc is not None) else None
        stored = None
        if rc is not None and rc.unchanged(req.record, res, bool(validators), digest):
            # its links, read on the writer thread
            stored = await (prefetched if prefetched is not None else rc.prefetch(req.record))
        sitemap = None
        if is_sitemap(req.record) and (ok or _cut(res)):  # read beside the loop (larbin_py.sitemap_fetch)
            sitemap = await self.sitemaps.read_beside(req.record, res.body, cut=_cut(res))
        self.counts.bytes += res.bytes_read
        self.frontier.spent(req, res.bytes_read)
        self._from_request = True
        self._answer = (req.record, res)
        try:
            self.on_answer(req, res, stored, digest, sitemap)
        except OutputError as exc:
            self.frontier.forget(req, "outputError", self.now())
            self.fail(f"output failed: {exc}")
        finally:
            self._from_request = False
            self._answer = (None, None)

    def sub_request(self, req: Request, res) -> None:
        """A request a dynamic page's scripts made (paced by the frontier): counted like any,
        archived like any."""
        self.counts.requests += 1
        self.counts.bytes += res.bytes_read
        self.archive(res)

    def robots_answered(self, req: Request, res, hop: int) -> None:
        """Count a robots.txt answer; the first of a request feeds the flow controllers.

        A robots.txt request loads the server like a page: a new crawl's
        first answers are all robots.txt, and the cap must not sit at its
        floor meanwhile.  A redirect's later hops are requests of their own.
        """
        self.counts.bytes += res.bytes_read
        if hop:
            self.counts.robots_requests += 1
            self.counts.requests += 1
        else:
            self.observe(req, res, self.now())
        self.archive(res)
        if self.logging:
            answered = res.status is not None
            self.crawl_state.log(format_line(
                when=time.time(), status=res.status, url=res.url, reason=res.error or "robots",
                size=len(res.body) if answered else None, via="prerequisite", referrer=req.url if hop else "",
                content_type=res.content_type, duration=res.elapsed if answered else None,
                digest=payload_digest(res.body) if answered else None))

    def robots_read(self, req: Request, rules) -> None:
        """``sitemaps``: a site's robots.txt was read (RobotsFetch's ``on_rules``): its sitemaps queued."""
        self.sitemaps.discover(req.url, rules)

    def observe(self, req: Request, res, now: float) -> None:
        """Feed the answer's round-trip time to the flow controllers."""
        fr = self.frontier
        fr.follow_ups.sent_late(req, res.sent_at)
        rtt = res.rtt
        if rtt is not None:
            self.counts.rtts.append(rtt)
            if self.flow is not None:
                fr.max_requests = self.flow.observe(rtt, now)
        fr.server_answered(req, rtt, res.status if res.error is None else None, now, res.retry_after)

    # -- the outcome table ------------------------------------------------
    def on_answer(self, req: Request, res, stored=None, digest: str | None = None, sitemap=None) -> None:
        """Apply the outcome rules (larbin_py.outcomes) to a page request's result.

        ``stored``: the page has not changed since the last crawl (a recrawl's
        304, or the same body): what that crawl stored of it
        (larbin_py.recrawl.Stored).  ``digest``: the payload digest of a 2xx body.  ``sitemap``:
        a sitemap file's body as read beside the loop (larbin_py.sitemap_fetch.SitemapRead)."""
        fr = self.frontier
        now = self.now()
        self.observe(req, res, now)
        if stored is not None:
            self.recrawl.on_unchanged(req, res, stored, now)
            return
        rec = req.record
        c = self.config
        action = outcomes.decide(res.error, res.status, conn_reused=res.conn_reused,
                                 bytes_read=res.bytes_read, retry_after=res.retry_after,
                                 retries=c.retries, retries_left=rec.retries, wait_duration=c.wait_duration)
        kind, reason = action.kind, action.reason
        if kind != outcomes.SUCCESS or is_sitemap(rec):
            self.archive(res)  # a redirect, an error, a busy answer, a sitemap: the WARC keeps every exchange
        if is_sitemap(rec) and self._sitemap(req, res, kind, reason, now, sitemap):
            return
        if kind == outcomes.SUCCESS:
            self.on_success(req, res, now, digest)
        elif kind == outcomes.REDIRECT:
            fr.forget(req, reason, now)
            self.log(req, res, reason)
            target, refused = outcomes.redirect_target(res.location, req.url, rec.hops,
                                                       max_redirects=c.max_redirects,
                                                       max_url_size=c.max_url_size)
            if refused is not None:
                self.counts.rejected[refused] += 1
            elif target is not None:
                fr.admission.offer(req.url, rec.depth, (target,), redirect=True, hops=rec.hops + 1)
        elif kind == outcomes.RETRY_FREE:
            # The request never reached the server: again, politely, for free.
            fr.retry(req, reason, now, free=True)
            self.log(req, res, res.error)
        elif kind == outcomes.RETRY:
            retried = fr.retry(req, reason, now, action.delay or 0.0)
            self.log(req, res, res.error if res.error is not None else
                     (f"retry {reason}" if retried else reason))
        else:
            fr.forget(req, reason, now)
            self.log(req, res, res.error if res.error is not None else reason)

    def _sitemap(self, req: Request, res, kind: str, reason: str | None, now: float, read=None) -> bool:
        """A sitemap file's answer (larbin_py.sitemap_fetch): read, or its redirect followed; True when
        handled here (a failure is retried or forgotten as a page's is)."""
        fr, rec, c = self.frontier, req.record, self.config
        cut = _cut(res)
        if kind == outcomes.SUCCESS or cut:
            # read by _run beside the loop (here only should the outcome rules call a non-2xx a success)
            self.sitemaps.apply(rec, read if read is not None else self.sitemaps.read(rec, res.body, cut))
            fr.forget(req, "sitemap", now, error=False)
            self.log(req, res, "sitemap")
            return True
        if kind == outcomes.REDIRECT:
            fr.forget(req, reason, now)
            self.log(req, res, reason)
            target, refused = outcomes.redirect_target(res.location, req.url, rec.hops,
                                                       max_redirects=c.max_redirects, max_url_size=c.max_url_size)
            if refused is not None:
                self.counts.rejected[refused] += 1
            elif target is not None:
                self.sitemaps.redirected(rec, target)
            return True
        return False

    def on_success(self, req: Request, res, now: float, digest: str | None = None) -> None:
        fr = self.frontier
        c = self.config
        policy = outcomes.content_policy(res.content_type, any_type=c.any_type, get_image=c.get_image,
                                         specific_search=c.specific_search, specific_set=c.specific_set)
        if not policy.wanted:
            self.archive(res)
            fr.forget(req, "badType", now)
            self.log(req, res, "badType")
            return
        head = policy.is_html and (c.respect_noindex or c.follow_canonical)
        rule = self.site_rules.for_host(req.site.host)
        agents = page_robots.agent_names(rule.user_agent) if rule is not None and rule.user_agent else self.agents
        page = page_robots.read(res.headers, res.body if head else None, req.url, res.charset, agents,
                                max_url_size=c.max_url_size)
        follow = policy.is_html and not page.nofollow
        skip = None
        if page.noindex and c.respect_noindex:
            skip = "noindex"
        elif c.follow_canonical and page.canonical is not None and page.canonical != req.url \
                and self._canonicalise(req, page.canonical):
            skip = "canonicalised"
        if skip is not None:
            # A good answer not kept: its links still go to the frontier, before the outcome
            # is recorded (forget: on_forget, the journal), then it is forgotten under its
            # reason, not as an error of its site.
            self.archive(res)
            if follow:
                self.analyze(req, res, analyzers=False)
            fr.forget(req, skip, now, error=False)
            self.log(req, res, skip)
            return
        duplicate_of = self.digests.first_of(res.body, req.url) if c.page_no_duplicate else None
        if policy.save:
            self.output.write(self.document(req, res, duplicate_of))
        else:
            self.archive(res)
        fr.fetched_ok(req, now)
        links = None
        if policy.is_html and duplicate_of is None:
            # Before the outcome is recorded: a page is never done in the journal
            # without its links offered or its analysis tasks queued (a failed
            # write to the queue stops the crawl with the page still to do).
            links = self.analyze(req, res, links=follow)
        if digest is None:
            digest = payload_digest(res.body)
        verdict = self.recrawl.fetched(req.record, res, digest, links) if self.recrawl is not None else ""
        line = None
        if self.logging:
            line = self.line(req.record, "duplicate" if duplicate_of else "ok", res, digest=digest, recrawl=verdict)
        self.crawl_state.done(req.url, FETCHED, True, line)
        last = {"url": req.url, "status": res.status, "reason": "ok", "bytes": len(res.body), "time": time.time()}
        how, _lastmod = found_by(req.record)
        if how:
            last["found_by"] = how
        self.counts.last.append(last)
        self.log(req, res, "duplicate" if duplicate_of else "ok")

    def _canonicalise(self, req: Request, canonical: str) -> bool:
        """followCanonical: offer ``canonical`` instead of keeping ``req``'s page (True), or keep the
        page (False) when the rules refuse its canonical, or the canonical leads back to it."""
        fr, rec = self.frontier, req.record
        rejected = self.counts.rejected
        if rec.hops >= self.config.max_redirects:
            rejected["tooManyRedirects"] += 1
            return False
        verdict = fr.admission.rules.admit(canonical, host_of(req.url), rec.depth, redirect=True)
        if isinstance(verdict, str):
            rejected[verdict] += 1
            return False
        if not self.canonicals.follow(req.url, canonical):
            rejected["canonicalLoop"] += 1
            return False
        fr.admission.offer(req.url, rec.depth, (canonical,), redirect=True, hops=rec.hops + 1)
        return True

    def analyze(self, req: Request, res, *, links: bool = True, analyzers: bool = True):
        """The page's links to the frontier (the analysis seam: see the module).

        ``links`` False: its links are not followed (X-Robots-Tag nofollow);
        ``analyzers`` False: the user analyzers do not see it (a page not kept).
        Returns what the records of larbin_py.recrawl keep of them: ``(links,
        embeds)`` when they were read here, None when there are none to
        follow (nofollow), or the recrawl's ``pending()`` when the analysis
        processes have them (they come back through ``Recrawl.offer``).
        """
        if not links and not analyzers:
            return None
        st = self.analysis
        if st is not None and st.submit(
                req.url, req.record.depth, res.body, status=res.status, content_type=res.content_type,
                charset=res.charset, headers=res.headers, links=links, analyzers=analyzers) and st.with_links:
            # to the analysis processes; the links come back through offer
            return self.recrawl.pending() if self.recrawl is not None and links else None
        if not links:
            return None
        # Inline: analysisWorkers 0, every analysis process's line is full and no
        # user analyzer wants the page (the loop shares the parse), or the links
        # stay on the loop (the stage's with_links off: the distributed mode).
        c = self.config
        page = parse_mod.extract(res.body, req.url, res.charset, get_images=c.get_image,
                                 max_url_size=c.max_url_size)
        if page.error is not None:
            self.counts.page_errors["parseError"] += 1
        if page.nofollow_links:
            self.counts.rejected["nofollow"] += page.nofollow_links
        if page.meta_nofollow:
            return None
        self.frontier.admission.offer(req.url, req.record.depth, page.links, embeds=page.embeds)
        return page.links, page.embeds

    def on_forget(self, rec: UrlRecord, reason: str) -> None:
        """The frontier forgot a URL (its ``on_forget``): recorded as done, with
        the answer that ended it in its crawl log line when there was one."""
        answered, res = self._answer
        res = res if answered is rec else None
        verdict = self.recrawl.forgotten(rec, res) if self.recrawl is not None else ""
        line = None
        if self.logging:
            line = self.line(rec, reason, res, recrawl=verdict)
        self.crawl_state.done(rec.url, reason, self._from_request, line)
        self.counts.last.append({"url": rec.url, "status": None, "reason": reason, "bytes": 0, "time": time.time()})

    @staticmethod
    def line(rec: UrlRecord, reason: str, res=None, *, digest: str | None = None, recrawl: str = "") -> bytes:
        """The crawl log line of ``rec``'s outcome (``res``: the answer that ended it, if any)."""
        answered = res is not None and res.status is not None
        return format_line(
            when=time.time(), status=res.status if answered else None, url=rec.url, reason=reason,
            size=len(res.body) if answered else None, via=VIA_KINDS.get(rec.found, ""), referrer=rec.ref,
            content_type=res.content_type if answered else None,
            duration=res.elapsed if res is not None else None, digest=digest, recrawl=recrawl)

    def archive(self, res) -> None:
        """outputMode warc: keep the exchange ``res`` (an answer not saved as a page) in the WARC."""
        if self.archive_all and res.status is not None:
            doc = Document(url=res.url, status=res.status, headers=res.headers, body=res.body,
                           content_type=res.content_type, fetched_at=time.time(), ip=res.ip,
                           raw_request=res.raw_request or None, raw_response_head=res.raw_response_head or None,
                           raw_body=getattr(res, "raw_body", None), archive_only=True,
                           truncated=res.error == "tooBig")
            self.output.write(doc)

    @staticmethod
    def document(req: Request, res, duplicate_of: str | None) -> Document:
        how, lastmod = found_by(req.record)
        return Document(
            url=req.url,
            status=res.status,
            headers=res.headers,
            body=res.body,
            content_type=res.content_type,
            fetched_at=time.time(),
            ip=req.ip,
            duplicate_of=duplicate_of,
            raw_request=getattr(res, "raw_request", None) or None,
            raw_response_head=getattr(res, "raw_response_head", None) or None,
            raw_body=getattr(res, "raw_body", None),
            rendered=getattr(res, "rendered", False),
            found_by=how,
            lastmod=lastmod,
        )

    def log(self, req: Request, res, reason: str) -> None:
        if self.config.fetch_info:
            status = res.status if res.status is not None else "-"
            how, lastmod = found_by(req.record)
            tail = f" (found by {how}{', lastmod ' + lastmod if lastmod else ''})" if how else ""
            print(f"{status} {reason} {len(res.body)} {res.elapsed:.3f}s {req.url}{tail}", file=self.out)
