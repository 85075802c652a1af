"""The crawl engine: the one owner of the event loop.

It wires the sans-I/O frontier (what may be fetched, when) to the I/O edge
(c-ares DNS, the h11 fetcher, the outputs, the stats server) and applies the
outcome rules of every request.  Everything runs on one thread; the engine
never blocks the loop and never sleeps: it reacts to events (a request ended,
a name resolved, the frontier's next-allowed time came) through
:meth:`Engine._pump`, which is scheduled at most once at a time.

The engine routes; each job is in a module whose name says it: the outcome
rules in :mod:`larbin_py.outcomes` (a table), robots.txt fetching in
:mod:`larbin_py.robots_fetch`, pageNoDuplicate's table in
:mod:`larbin_py.page_digests`, the stats in :mod:`larbin_py.engine_stats`,
the servers in :mod:`larbin_py.servers`; signals and the event loop's
runner are the command line's (:mod:`larbin_py.runner`, :mod:`larbin_py.cli`).

Outcomes of a page request (the table of larbin_py.outcomes):

* 2xx: counted as fetched, parsed for links when HTML, written by the output.
  A non-HTML type is ``badType`` unless ``anyType`` (or ``getImage`` for
  images, or ``specificSearch`` for the types of ``specificSet``).
* 3xx with a Location: the target goes through all the rules (keeping the
  depth, one redirect hop more; beyond ``maxRedirects`` hops from the URL
  first queued it is refused as ``tooManyRedirects``); the original URL is
  forgotten as ``err30X``.
* 404/410 and other 4xx: ``err40X``.
* 429, 500, 502, 503, 504 (a server busy or failing for now): retried after
  Retry-After (capped) or a backoff, forgotten as ``err50X`` when retries
  run out.  Any other 5xx (501 Not Implemented, 505, ...) says the request
  itself will not work: ``err50X`` at once.
* DNS failure, connection refused or reset, timeout: back to the tail of the
  site's queue with one retry fewer; forgotten as ``noDNS``, ``noConnection``,
  ``timeout`` (``reset``) when none are left.
* robots.txt forbids: ``forbiddenRobots`` without a request.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time
from collections import Counter, deque

from . import heap
from . import outcomes
from . import parse as parse_mod
from . import robots as robots_mod
from .frontier.scheduler import PAGE, Frontier, Request, site_key
from .frontier.sieve import open_seen
from .frontier.store import UrlRecord
from .net.cookies import CookieJar, load_jar, save_jar
from .net.dns import Resolver
from .net.http import Fetcher
from .journal import Committer, FETCHED, ReplayFrontier, cut_to_commit, read_journals
from .output import Document, OutputError, make_output
from .output.writer import ThreadedOutput, WriterThread
from .engine_stats import EngineStats, Summary
from .page_digests import PageDigests
from .robots_fetch import RobotsFetch
from .rules import UrlRules
from .servers import Servers, StartError
from .state import (ROBOTS_LOG, SEEN_LOG, RobotsLog, StateError, describe_write_error, has_state,
                    read_checkpoint)
from .throttle import RttController
from .url import normalize

__all__ = ["Engine", "Summary", "StartError", "StateDirInUse", "StateError"]

#: How long in-flight requests may finish after a stop was asked, seconds.
STOP_GRACE = 10.0


class StateDirInUse(Exception):
    """A plain start found the state of an earlier crawl in stateDir."""


class Engine:
    """One crawl.  ``await Engine(config).run()`` returns its :class:`Summary`.

    ``resolver``, ``fetcher`` and ``output`` may be injected (tests, benchmarks);
    otherwise they are built from the configuration.  So may the frontier's
    stores: ``stores`` (a :data:`~larbin_py.frontier.interfaces.StoreFactory`)
    and ``seen`` (a :class:`~larbin_py.frontier.interfaces.SeenStore`), for a
    crawl that is not continued with ``--reload`` (``canReload`` off).
    """

    def __init__(
        self,
        config,
        *,
        resolver=None,
        fetcher=None,
        output=None,
        rng: random.Random | None = None,
        out=None,
        err=None,
        reload: bool = False,
        stores=None,
        seen=None,
    ) -> None:
        self.config = config
        heap.limit_retention()  # large freed blocks go back to the kernel (larbin_py.heap)
        self.out = out if out is not None else sys.stdout
        self.err = err if err is not None else sys.stderr
        self.rng = rng or random.Random()
        self.rules = UrlRules.from_config(config)
        self.agent = robots_mod.product_token(config.user_agent)
        #: pageNoDuplicate: the first URL of each page content, bounded, kept across --reload.
        self._bodies = PageDigests()
        self.reload = reload
        state_dir = config.state_dir
        frontier_dir = os.path.join(state_dir, "frontier")
        self._checkpoint_doc: dict | None = None
        self._carry: list[UrlRecord] = []
        self.damaged: dict[str, int] = {}
        self._replay = None
        if reload:
            self._checkpoint_doc, self._carry, bad_carry = read_checkpoint(state_dir)
            # Outcomes committed after that checkpoint; the state is cut back to the last commit.
            self._replay = read_journals(state_dir, int(self._checkpoint_doc["serial"]),
                                         checkpoint=self._checkpoint_doc, save_dir=config.save_dir)
            # URLs found done by an earlier --reload and still waiting in the stores
            pending = {str(url): str(outcome) for url, outcome in self._checkpoint_doc.get("replay", ())}
            if pending:
                pending.update(self._replay.done)
                self._replay.done = pending
            cut_to_commit(state_dir, self._checkpoint_doc, self._replay, os.path.join(state_dir, SEEN_LOG))
            self.seen = open_seen(config.seen_store, state_dir, reload=True)
            self.damaged = {"carry": bad_carry, "seen": self.seen.dropped_bytes,
                            "journal": self._replay.damaged}
        else:
            if has_state(state_dir):
                raise StateDirInUse(
                    f"stateDir {state_dir!r} holds a previous crawl: continue it with --reload, "
                    "or remove that folder to start afresh"
                )
            self.seen = seen if seen is not None else open_seen(config.seen_store, state_dir)
        #: What a fresh stateDir held before this engine: a start that fails
        #: (a server cannot listen) removes what it added, see _abandon_start.
        self._state_before = _entries(state_dir)
        #: A write to stateDir failed: the logs may lack records, so the seen
        #: log must not get ahead of the stores (see _shutdown).
        self._state_broken = False
        os.makedirs(state_dir, exist_ok=True)
        self._robots_log: RobotsLog | None = None
        self._robots_answers: dict[str, tuple[float, bytes | None]] = {}
        if reload:
            self._robots_answers, self.damaged["robots"] = RobotsLog.load(os.path.join(state_dir, ROBOTS_LOG))
        if config.can_reload:
            self.seen.open_log(os.path.join(state_dir, SEEN_LOG))
            self._robots_log = RobotsLog(os.path.join(state_dir, ROBOTS_LOG))
        #: useCookies: the crawl's jar, kept across --reload (None when off: no Cookie header is sent).
        self.cookies: CookieJar | None = None
        self._cookies_saved = 0  # the jar's ``changes`` when last saved
        if config.use_cookies:
            self.cookies, bad = load_jar(state_dir, time.time()) if reload else (CookieJar(), 0)
            self.damaged["cookies"] = bad
        self._checkpoint_serial = int(self._checkpoint_doc["serial"]) if self._checkpoint_doc else 0
        if self._replay is not None:  # above every journal's number
            self._checkpoint_serial = max(self._checkpoint_serial, self._replay.max_serial)
        self._checkpoint_timer: asyncio.TimerHandle | None = None
        self._checkpoint_task: asyncio.Task | None = None
        self.checkpoints = 0
        #: The writer thread (page files, fsyncs) and the group commits (larbin_py.journal).
        self._writer: WriterThread | None = None
        self._committer: Committer | None = None
        self._from_request = False  # an outcome being recorded comes from a request of ours
        self.frontier = (ReplayFrontier if self._replay is not None and self._replay.done else Frontier)(
            frontier_dir,
            ram_urls=config.ram_urls,
            max_urls_by_site=config.max_urls_by_site,
            max_requests=config.pages_connexions,
            wait_duration=config.wait_duration,
            jitter=config.wait_jitter,
            conn_per_ip=config.connexions_per_ip,
            agent=self.agent,
            obey_robots=not config.ignore_robots,
            rng=self.rng,
            on_forget=self._on_forget,
            server_rtt_factor=config.server_rtt_factor,
            positions=self._checkpoint_doc["frontier"]["stores"] if self._checkpoint_doc else None,
            private_networks=config.private_networks,
            stores=stores,
            seen=self.seen,
            rules=self.rules,
            retries=config.retries,
        )
        #: Links lately met, known to be in :attr:`seen` (the frontier's, checked before the rules).
        self.seen_urls = self.frontier.seen_urls
        self.damaged["store"] = self.frontier.corrupt_records
        #: Store segments found cut short on --reload (one sentence each).
        self.store_damage = [message for store in (self.frontier.main, self.frontier.prio, self.frontier.wait)
                             for message in getattr(store, "damage", ())]
        if isinstance(self.frontier, ReplayFrontier):
            self.frontier.replay = dict(self._replay.done)
        #: Adaptive MaxRequestCount (issue 7); None when flowControl is off.
        self.flow: RttController | None = None
        if config.flow_control:
            low = min(config.min_connexions, config.pages_connexions)
            self.flow = RttController(
                alpha=config.rtt_alpha, interval=config.rtt_interval, rtt_min=config.rtt_min,
                rtt_max=config.rtt_max, increase=config.conn_increase, decrease=config.conn_decrease,
                min_requests=low, max_requests=config.pages_connexions, start=low,
            )
            self.frontier.max_requests = self.flow.limit
        #: Round-trip times of the last answers (p50/p95 on the stats page).
        self.rtts: deque[float] = deque(maxlen=512)
        self._resolver = resolver
        self._fetcher = fetcher
        self._output = output
        #: Links refused, by reason (the frontier counts them: see Frontier.offer).
        self.rejected: Counter[str] = self.frontier.rejected
        #: Fetched pages whose links could not be read, by reason (``parseError``: Page.error).
        self.page_errors: Counter[str] = Counter()
        self.bytes = 0
        self.requests = 0
        self.robots_requests = 0
        self.state = "starting"
        self.stop_reason = ""
        self.failed: str | None = None
        self._tasks: set[asyncio.Task] = set()
        self._pump_handle: asyncio.Handle | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")
        self._stopping = False
        self._done: asyncio.Future | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = 0.0
        self._elapsed_before = 0.0  # crawl time of the runs before a --reload
        self._wall_started = 0.0
        self.last: deque[dict] = deque(maxlen=20)
        #: The stats of the crawl: its summary and the stats server's snapshot.
        self.stats = EngineStats(self)
        #: The stats and input servers and the status line (larbin_py.servers).
        self._servers = Servers(config, self, self.err)
        #: Called with the engine once its servers listen (the demo prints the URL).
        self.on_servers_started = None
        #: Peak of :meth:`Frontier.urls_in_memory`, sampled at every pump.
        self.peak_urls_in_memory = 0

    # ------------------------------------------------------------------
    # Components
    # ------------------------------------------------------------------
    @property
    def resolver(self):
        return self._resolver

    @property
    def fetcher(self):
        return self._fetcher

    @property
    def output(self):
        return self._output

    @property
    def http_server(self):
        """The stats server (httpPort), once started; None otherwise."""
        return self._servers.http

    def _build_components(self) -> None:
        c = self.config
        if self._resolver is None:
            self._resolver = Resolver(
                list(c.dns_servers),
                max_in_flight=c.dns_connexions,
                timeout=c.dns_timeout,
                valid_time=c.dns_valid_time,
                negative_ttl=1.0,
            )
        if self._fetcher is None:
            self._fetcher = Fetcher(
                user_agent=c.user_agent,
                from_addr=c.from_addr,
                connect_timeout=c.connect_timeout,
                timeout_page=c.timeout_page,
                timeout_incr=c.timeout_incr,
                max_page_size=c.max_page_size,
                proxy=c.proxy,
                bond_width=c.bond_width,
                keep_alive_idle=max(5.0, 2 * c.wait_duration),
                keep_raw=c.output_mode == "warc",
                parser=c.http_parser,
                clock=self._loop.time,  # the scheduler's clock: send times compare with starts
            )
        self._robots_fetch = RobotsFetch(self.frontier, self._fetcher, self.lookup, now=self._now,
                                         log=self._robots_log, on_answer=self._robots_answered,
                                         rejected=self.rejected)
        if self._output is None:
            position = self._checkpoint_doc.get("output") if self._checkpoint_doc else None
            self._output = make_output(c, position=position)
        disk = getattr(self._output, "mode", None) in ("mirror", "save", "warc")
        if disk or c.can_reload:
            self._writer = WriterThread(self._loop, on_error=self._on_writer_error, on_room=self._pump_soon)
            if disk and not isinstance(self._output, ThreadedOutput):
                self._output = ThreadedOutput(self._output, self._writer, self._loop)
        if c.can_reload:
            state_dir = c.state_dir
            self._committer = Committer(
                self._loop, self._writer, state_dir, frontier=self.frontier, seen=self.seen,
                seen_log=os.path.join(state_dir, SEEN_LOG), robots_log=self._robots_log,
                robots_path=os.path.join(state_dir, ROBOTS_LOG), output=self._output,
                serial=self._checkpoint_serial, on_durable=self._pump_soon, on_error=self._on_commit_error,
                sync_commits=c.sync_commits)

    def _on_writer_error(self, exc: BaseException) -> None:
        """(Loop.) A page could not be stored by the writer thread: the crawl fails."""
        if isinstance(exc, OutputError):
            self._fail(f"output failed: {exc}")
        else:
            self._fail(f"output failed: {type(exc).__name__}: {exc}")

    def _on_commit_error(self, exc: BaseException) -> None:
        if isinstance(exc, OutputError):
            self._fail(f"output failed: {exc}")
        elif isinstance(exc, OSError):
            self._write_failed(exc)
        else:
            self._fail(f"cannot save the crawl state: {type(exc).__name__}: {exc}; the last good "
                       "checkpoint is kept, continue with --reload once the cause is fixed")

    def _disk_held(self) -> bool:
        """The gate between the outputs and the frontier: True while no request may start.

        Held while the writer's queue is full, and while requests running plus
        outcomes not yet durable reach the connection cap (a crash must cost
        at most the requests in flight).
        """
        writer = self._writer
        if writer is not None and writer.full():
            return True
        com = self._committer
        return com is not None and com.holds(self.frontier.requests, self.frontier.max_requests)

    # ------------------------------------------------------------------
    # Input: seeds, links, URLs given at run time
    # ------------------------------------------------------------------
    def add_url(self, href: str, *, priority: bool = True, seed: bool = False) -> tuple[str, str | None]:
        """Queue a seed or a URL given at run time: ``(result, reason)``.

        ``result`` is ``accepted``, ``duplicate`` or ``rejected``.  ``seed``:
        a configured start URL, whose host ``privateNetworks seeds`` lets
        reach private addresses.
        """
        url = normalize(href.strip(), None, max_length=self.config.max_url_size)
        if url is None:
            return "rejected", "notHttpUrl"
        if seed:
            parsed = site_key(url)
            if parsed is not None:
                self.frontier.allow_private(parsed[2])
        if self.config.lock_site and self.state == "starting":
            # Every start URL (and every URL given before the crawl starts)
            # adds its host to those lockSite allows, not only the first.
            self.rules.lock(url)
        result = self.frontier.offer_url(url, priority=priority)
        if result[0] == "accepted":
            self._pump_soon()
        return result

    def submit_urls(self, urls: list[str]) -> list[dict]:
        """The stats server's URL input (StatsSource interface)."""
        answers = []
        for href in urls:
            if self._stopping:
                answers.append({"url": href, "result": "rejected", "reason": "stopping"})
                continue
            result, reason = self.add_url(href)
            answers.append({"url": href, "result": result, "reason": reason})
        return answers

    def _add_links(self, links, page_url: str, depth: int, *, redirect: bool = False, hops: int = 0) -> None:
        """Queue a page's links: :meth:`Frontier.offer` (rules, seen test, queueing)."""
        self.frontier.offer(page_url, depth, links, redirect=redirect, hops=hops)

    # ------------------------------------------------------------------
    # The pump: react to events, start what may start, arm the next timer
    # ------------------------------------------------------------------
    def _pump_soon(self) -> None:
        if self._pump_handle is None and self._loop is not None:
            self._pump_handle = self._loop.call_soon(self._pump_guarded)

    def _pump_guarded(self) -> None:
        """:meth:`_pump`, a failed write to stateDir (a store refilled from
        its log flushes first) stopping the crawl instead of escaping."""
        try:
            self._pump()
        except OSError as exc:
            self._write_failed(exc)
            if self._stopping and not self._tasks:
                self._finish()

    def _now(self) -> float:
        return self._loop.time()

    def _pump(self) -> None:
        self._pump_handle = None
        if self.state == "starting":  # the first checkpoint is being written; run() pumps after it
            return
        fr = self.frontier
        now = self._now()
        fr.tick(now)
        held = False
        if not self._stopping:
            fr.load(now)
            for site in fr.take_dns_requests():
                self._spawn(self._resolve(site))
            limit = self.config.limit_page
            while True:
                if limit and fr.fetched + self._pages_running() >= limit:
                    break
                if self._writer is not None and self._disk_held():
                    # The writer wakes the pump when the gate opens (on_room,
                    # on_durable): a timer for work already due would only spin.
                    held = True
                    break
                req = fr.next_request(now)
                if req is None:
                    break
                self.requests += 1
                if req.kind == PAGE:
                    self._spawn(self._page(req))
                else:
                    self.robots_requests += 1
                    self._spawn(self._robots_fetch.run(req))
            mem = fr.urls_in_memory()
            if mem > self.peak_urls_in_memory:
                self.peak_urls_in_memory = mem
            if limit and fr.fetched >= limit:
                self.request_stop(f"limitPage {limit} reached")
            elif fr.idle() and not self._tasks:
                self.request_stop("end of work")
            elif fr.is_get and (len(fr.main) or len(fr.prio)):
                self._pump_soon()  # the loader stopped at its batch size
        if self._stopping and not self._tasks:
            self._finish()
            return
        if not held:
            self._arm_timer(now)

    def _pages_running(self) -> int:
        return self.frontier.in_flight

    def _arm_timer(self, now: float) -> None:
        t = self.frontier.next_wakeup()
        if t is None or self._stopping:
            return
        if self._timer is not None:
            if self._timer_at <= t:
                return
            self._timer.cancel()
        self._timer_at = t
        self._timer = self._loop.call_at(t, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = float("inf")
        self._pump_guarded()

    def _spawn(self, coro) -> None:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            if isinstance(exc, OSError):  # a write to stateDir (the URL stores) failed
                self._write_failed(exc)
            else:
                self._fail(f"internal error: {type(exc).__name__}: {exc}")
        self._pump_soon()

    # ------------------------------------------------------------------
    # DNS
    # ------------------------------------------------------------------
    async def lookup(self, host: str):
        """Resolve ``host`` (no brackets): the one path from the engine's parts to the resolver."""
        return await self._resolver.resolve(host)

    async def _resolve(self, site) -> None:
        host = site.host
        if host.startswith("["):
            host = host[1:-1]
        answer = await self.lookup(host)
        now = self._now()
        if answer.error is not None or not answer.ips:
            self.frontier.dns_failed(site, answer.error or "noAnswer", now)
        else:
            self.frontier.dns_resolved(site, tuple(answer.ips), answer.ttl, now)

    # ------------------------------------------------------------------
    # robots.txt (larbin_py.robots_fetch)
    # ------------------------------------------------------------------
    def _robots_answered(self, req: Request, res, hop: int) -> None:
        """Count a robots.txt answer; the first of a request feeds the flow controllers.

        A robots.txt request loads the server like a page: a new crawl's
        first answers are all robots.txt, and the cap must not sit at its
        floor meanwhile.  A redirect's later hops are requests of their own.
        """
        self._count_bytes(res)
        if hop:
            self.robots_requests += 1
            self.requests += 1
        else:
            self._observe(req, res, self._now())

    # ------------------------------------------------------------------
    # Pages
    # ------------------------------------------------------------------
    async def _page(self, req: Request) -> None:
        jar = self.cookies
        if jar is None:
            res = await self._fetcher.fetch(req.url, req.ip, req.port)
        else:  # useCookies: the jar's Cookie header out, the answer's Set-Cookie in
            cookie = jar.header_for(req.url, time.time())
            res = await self._fetcher.fetch(req.url, req.ip, req.port, cookie=cookie)
            if res.status is not None:
                jar.receive(req.url, [v for n, v in res.headers if n == b"set-cookie"], time.time())
        self._count_bytes(res)
        self._from_request = True
        try:
            self._on_page(req, res)
        except OutputError as exc:
            self.frontier.forget(req, "outputError", self._now())
            self._fail(f"output failed: {exc}")
        finally:
            self._from_request = False

    def _count_bytes(self, res) -> None:
        self.bytes += res.bytes_read

    def _observe(self, req: Request, res, now: float) -> None:
        """Feed the answer's round-trip time to the flow controllers."""
        self.frontier.sent_late(req, res.sent_at)
        rtt = res.rtt
        if rtt is not None:
            self.rtts.append(rtt)
            if self.flow is not None:
                self.frontier.max_requests = self.flow.observe(rtt, now)
        self.frontier.server_answered(req, rtt, res.status if res.error is None else None, now,
                                      res.retry_after)

    def _on_page(self, req: Request, res) -> None:
        """Apply the outcome rules (larbin_py.outcomes) to a page request's result."""
        fr = self.frontier
        now = self._now()
        self._observe(req, res, now)
        rec = req.record
        c = self.config
        action = outcomes.decide(res.error, res.status, conn_reused=res.conn_reused,
                                 bytes_read=res.bytes_read, retry_after=res.retry_after,
                                 retries=c.retries, retries_left=rec.retries, wait_duration=c.wait_duration)
        kind, reason = action.kind, action.reason
        if kind == outcomes.SUCCESS:
            self._on_success(req, res, now)
        elif kind == outcomes.REDIRECT:
            fr.forget(req, reason, now)
            self._log(req, res, reason)
            target, refused = outcomes.redirect_target(res.location, req.url, rec.hops,
                                                       max_redirects=c.max_redirects,
                                                       max_url_size=c.max_url_size)
            if refused is not None:
                self.rejected[refused] += 1
            elif target is not None:
                self._add_links((target,), req.url, rec.depth, redirect=True, hops=rec.hops + 1)
        elif kind == outcomes.RETRY_FREE:
            # The request never reached the server: again, politely, for free.
            fr.retry(req, reason, now, free=True)
            self._log(req, res, res.error)
        elif kind == outcomes.RETRY:
            retried = fr.retry(req, reason, now, action.delay or 0.0)
            self._log(req, res, res.error if res.error is not None else
                      (f"retry {reason}" if retried else reason))
        else:
            fr.forget(req, reason, now)
            self._log(req, res, res.error if res.error is not None else reason)

    def _on_success(self, req: Request, res, now: float) -> None:
        fr = self.frontier
        c = self.config
        policy = outcomes.content_policy(res.content_type, any_type=c.any_type, get_image=c.get_image,
                                         specific_search=c.specific_search, specific_set=c.specific_set)
        if not policy.wanted:
            fr.forget(req, "badType", now)
            self._log(req, res, "badType")
            return
        duplicate_of = None
        if c.page_no_duplicate:
            duplicate_of = self._bodies.first_of(res.body, req.url)
        if policy.save:
            self._output.write(self._document(req, res, duplicate_of))
        fr.fetched_ok(req, now)
        if self._committer is not None:
            self._committer.done(req.url, FETCHED, True)
        self.last.append({"url": req.url, "status": res.status, "reason": "ok", "bytes": len(res.body), "time": time.time()})
        self._log(req, res, "duplicate" if duplicate_of else "ok")
        if policy.is_html and duplicate_of is None:
            page = parse_mod.extract(
                res.body, req.url, res.charset,
                get_images=c.get_image, max_url_size=c.max_url_size,
            )
            if page.error is not None:
                self.page_errors["parseError"] += 1
            if page.nofollow_links:
                self.rejected["nofollow"] += page.nofollow_links
            if not page.meta_nofollow:
                self._add_links(page.links, req.url, req.record.depth)

    def _document(self, req: Request, res, duplicate_of: str | None) -> Document:
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
        )

    def _on_forget(self, rec: UrlRecord, reason: str) -> None:
        if self._committer is not None:
            self._committer.done(rec.url, reason, self._from_request)
        self.last.append({"url": rec.url, "status": None, "reason": reason, "bytes": 0, "time": time.time()})

    def _log(self, req: Request, res, reason: str) -> None:
        if self.config.fetch_info:
            status = res.status if res.status is not None else "-"
            print(f"{status} {reason} {len(res.body)} {res.elapsed:.3f}s {req.url}", file=self.out)

    # ------------------------------------------------------------------
    # Stopping
    # ------------------------------------------------------------------
    def request_stop(self, reason: str) -> None:
        """Stop taking work; in-flight requests get :data:`STOP_GRACE` s to end."""
        if self._stopping:
            return
        self._stopping = True
        self.state = "stopping"
        self.stop_reason = reason
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._tasks:
            self._loop.call_later(STOP_GRACE, self._cancel_tasks)
        self._pump_soon()

    def _cancel_tasks(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    def _fail(self, message: str) -> None:
        if self.failed is None:
            self.failed = message
            print(f"larbin_py: {message}", file=self.err)
        self.request_stop("failed")

    def _write_failed(self, exc: OSError) -> None:
        """A write to stateDir failed (a full disk...): say which file and why, stop.

        A write() names no file; the URL stores' folder is named then (the
        other state files name themselves, see larbin_py.state).
        """
        self._state_broken = True
        where = f"the URL stores in {os.path.join(self.config.state_dir, 'frontier')}"
        self._fail(describe_write_error(exc, where) + "; the crawl stops, the last good checkpoint "
                   "is kept: continue with --reload once the cause is fixed")

    def _finish(self) -> None:
        if self._done is not None and not self._done.done():
            self._done.set_result(None)

    # ------------------------------------------------------------------
    # Running
    # ------------------------------------------------------------------
    async def run(self) -> Summary:
        self._loop = asyncio.get_running_loop()
        self._started = self._loop.time()
        self._wall_started = time.time()
        self._done = self._loop.create_future()
        # The servers listen first: a port in use or a bad httpBind stops the
        # start before the output or a checkpoint is written (StartError).
        try:
            await self._servers.start()
        except StartError:
            await self._abandon_start()
            raise
        try:
            self._build_components()
        except OutputError as exc:
            self.failed = f"cannot open the output: {exc}"
            print(f"larbin_py: {self.failed}", file=self.err)
            await self._abandon_start()
            return self.summary()
        if self.on_servers_started is not None:
            self.on_servers_started(self)
        try:
            if self.reload:
                self._restore()
            for seed in self.config.start_urls:
                result, reason = self.add_url(seed, seed=True)
                if result == "rejected":
                    print(f"larbin_py: start URL {seed!r} refused: {reason}", file=self.err)
        except OSError as exc:
            self._write_failed(exc)
        if self.config.can_reload and self.failed is None:
            await self._checkpoint()
        self.state = "running"
        if self.config.limit_time:
            self._loop.call_later(self.config.limit_time, self.request_stop, f"limitTime {self.config.limit_time:g} s reached")
        if self.config.can_reload:
            self._checkpoint_timer = self._loop.call_later(self.config.checkpoint_interval,
                                                           self._on_checkpoint_timer)
        self._pump_soon()
        try:
            await self._done
        finally:
            await self._shutdown()
        return self.summary()

    # ------------------------------------------------------------------
    # Crash-safe state (larbin_py.state)
    # ------------------------------------------------------------------
    def _restore(self) -> None:
        """Continue the crawl of the checkpoint read in ``__init__``."""
        doc = self._checkpoint_doc
        now, wall = self._now(), time.time()
        state = doc["frontier"]
        carry = self._carry
        replay = self.frontier.replay if isinstance(self.frontier, ReplayFrontier) else {}
        found_done = len(replay)
        if replay:
            # Carried URLs done after the checkpoint are counted, not queued;
            # those still in the stores are dropped as they come out.
            state = dict(state, forgotten=dict(state["forgotten"]))
            fetched, kept_carry = int(state["fetched"]), []
            for rec in carry:
                outcome = replay.pop(rec.url, None)
                if outcome is None:
                    kept_carry.append(rec)
                elif outcome == FETCHED:
                    fetched += 1
                else:
                    state["forgotten"][outcome] = int(state["forgotten"].get(outcome, 0)) + 1
            state["fetched"] = fetched
            carry = kept_carry
        self.frontier.restore(state, carry, now, wall)
        eng = doc.get("engine", {})
        self.bytes = int(eng.get("bytes", 0))
        self.requests = int(eng.get("requests", 0))
        self.robots_requests = int(eng.get("robots_requests", 0))
        self.rejected.update({k: int(v) for k, v in eng.get("rejected", {}).items()})
        self.page_errors.update({k: int(v) for k, v in eng.get("page_errors", {}).items()})
        self._elapsed_before = float(eng.get("elapsed", 0.0))
        self.damaged["pageDigests"] = self._bodies.restore(eng.get("page_digests", ()))
        kept = 0
        for url, (when, body) in self._robots_answers.items():
            left = when + robots_mod.CACHE_TTL - wall
            if left <= 0:
                continue
            rules = robots_mod.RobotsTxt.parse(body) if body is not None else robots_mod.RobotsTxt.allow_all()
            self.frontier.restore_robots(url, rules, now + left)
            kept += 1
        self._robots_answers = {}
        damage = {k: v for k, v in self.damaged.items() if v}
        print(f"larbin_py: continuing the crawl saved in {self.config.state_dir!r} (checkpoint "
              f"{doc['serial']}): {self.frontier.fetched} pages done, {self.frontier.queued} URLs queued, "
              f"{len(carry)} of them carried from memory, {len(self.seen)} URLs seen, "
              f"robots.txt of {kept} sites kept; {found_done} URLs found done in "
              f"{self._replay.commits} commits of the journal", file=self.err)
        if damage:
            print("larbin_py: damaged state dropped (a crash cut these files): "
                  + ", ".join(f"{k} {v} {'bytes' if k == 'seen' else 'records'}" for k, v in damage.items()),
                  file=self.err)
        for message in self.store_damage:
            print(f"larbin_py: damaged state: {message}", file=self.err)
        if self._replay.unsynced:
            print(f"larbin_py: {self._replay.unsynced} commits of the journal dropped: what they cover is not "
                  "all on disk (the machine stopped before a checkpoint); their pages are fetched again",
                  file=self.err)
        self._carry = []

    async def _checkpoint(self) -> bool:
        """Make the crawl's progress durable; False (and the crawl stops) on failure.

        The snapshot is taken on the loop; the writer thread syncs what it
        covers (pages, index, stores, seen log) and writes the checkpoint
        while the loop goes on (larbin_py.journal).
        """
        if not self.config.can_reload or self._committer is None:
            return True
        try:
            if self.cookies is not None and self.cookies.changes != self._cookies_saved:
                changes = self.cookies.changes
                await self._writer.call(save_jar, self.config.state_dir, self.cookies.to_json())
                self._cookies_saved = changes
            state, carry = self.frontier.checkpoint(self._now(), time.time(), sync=False)
            self._checkpoint_serial += 1
            data = {
                "frontier": state,
                "engine": {
                    "bytes": self.bytes,
                    "requests": self.requests,
                    "robots_requests": self.robots_requests,
                    "rejected": dict(self.rejected),
                    "page_errors": dict(self.page_errors),
                    "elapsed": self._elapsed(),
                    "page_digests": self._bodies.to_state(),
                },
                "time": time.time(),
            }
            replay = getattr(self.frontier, "replay", None)
            if replay:  # found done in a journal, not yet out of the stores: still done
                data["replay"] = [[url, outcome] for url, outcome in replay.items()]
            await self._committer.checkpoint(data, carry, self._checkpoint_serial)
            self.frontier.release_segments(state)
        except OutputError as exc:
            self._fail(f"output failed: {exc}")
            return False
        except OSError as exc:
            self._write_failed(exc)
            return False
        self.checkpoints += 1
        return True

    def _on_checkpoint_timer(self) -> None:
        self._checkpoint_timer = None
        if self._stopping:
            return
        self._checkpoint_task = self._loop.create_task(self._timed_checkpoint())

    async def _timed_checkpoint(self) -> None:
        ok = await self._checkpoint()
        self._checkpoint_task = None
        if ok and not self._stopping:
            self._checkpoint_timer = self._loop.call_later(self.config.checkpoint_interval,
                                                           self._on_checkpoint_timer)

    async def _abandon_start(self) -> None:
        """Undo a start that failed before the crawl began (StartError, or an
        output that cannot be opened).

        Nothing was fetched, queued or checkpointed: the logs are closed as
        they are, and a fresh stateDir loses the empty files and folders this
        start made (so the next plain start does not take it for an earlier
        crawl); a --reload's checkpoint and logs are left intact.
        """
        self.state = "failed"
        await self._servers.stop()
        if self._robots_log is not None:
            self._robots_log.close()
        self.seen.close()
        self.frontier.close()
        if not self.reload:
            _remove_new_empty(self.config.state_dir, self._state_before)

    async def _shutdown(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._checkpoint_timer is not None:
            self._checkpoint_timer.cancel()
        if self._checkpoint_task is not None:
            await asyncio.gather(self._checkpoint_task, return_exceptions=True)
        if self.config.can_reload and self.failed is None:
            await self._checkpoint()
        if self._committer is not None:
            self._committer.close()
        try:
            if isinstance(self._output, ThreadedOutput):
                await self._output.aclose()  # the pages still queued, then the files' sync
            else:
                self._output.close()
        except OutputError as exc:
            if self.failed is None:
                self.failed = f"output failed: {exc}"
        if self._writer is not None:
            await self._writer.aclose()
            if self._committer is not None:
                self._committer.close_journal()
        # A failed write may fail again (the disk is still full): each close
        # is tried once and a failure only reported, so the summary still comes.
        # The stores close before the seen log, which is not written at all
        # once a state write failed: a fingerprint on disk whose URL is not
        # would lose that URL on --reload.
        closes = [self._robots_log.close] if self._robots_log is not None else []
        closes.append(self.frontier.close)
        for close in closes:
            try:
                close()
            except OSError as exc:
                self._write_failed(exc)
        if not self._state_broken:
            try:
                self.seen.close()
            except OSError as exc:
                exc.filename = exc.filename or os.path.join(self.config.state_dir, SEEN_LOG)
                self._write_failed(exc)
        self.state = "failed" if self.failed else "finished"
        await self._fetcher.close()
        self._resolver.close()
        await self._servers.stop()

    def _elapsed(self) -> float:
        """Crawl time so far, the runs before a --reload included."""
        return self._elapsed_before + ((self._loop.time() - self._started) if self._loop else 0.0)

    def summary(self) -> Summary:
        """What the crawl did so far (larbin_py.engine_stats)."""
        return self.stats.summary()

    def snapshot(self) -> dict:
        """The stats snapshot (StatsSource interface; schema in docs/stats.md)."""
        return self.stats.snapshot()


def _entries(path: str) -> set[str] | None:
    """Every file and folder under ``path`` (None when ``path`` is absent)."""
    if not os.path.isdir(path):
        return None
    found = set()
    for root, dirs, files in os.walk(path):
        found.update(os.path.join(root, name) for name in dirs + files)
    return found


def _remove_new_empty(path: str, before: set[str] | None) -> None:
    """Remove the empty files and folders under ``path`` not in ``before``
    (``path`` itself too when it was absent): what a failed start added."""
    for root, dirs, files in os.walk(path, topdown=False):
        for name in files:
            full = os.path.join(root, name)
            if (before is None or full not in before) and os.path.getsize(full) == 0:
                os.unlink(full)
        for name in dirs:
            full = os.path.join(root, name)
            if before is None or full not in before:
                try:
                    os.rmdir(full)
                except OSError:  # not empty: something else is in it
                    pass
    if before is None:
        try:
            os.rmdir(path)
        except OSError:
            pass
