"""The crawl engine: the one owner of the event loop, and a router.

It wires the sans-I/O frontier (what may be fetched, when) to the I/O edge
(c-ares DNS, the h11 fetcher, the outputs, the stats server).  Everything
runs on one thread; the engine never blocks the loop and never sleeps: it
reacts to events (a request ended, a name resolved, the frontier's
next-allowed time came) through :meth:`Engine._pump`, which is scheduled at
most once at a time, and starts what the frontier hands out.

Each job is in a module whose name says it: a page request's outcome rules
in :mod:`larbin_py.pages` (applying the table of :mod:`larbin_py.outcomes`),
robots.txt fetching in :mod:`larbin_py.robots_fetch`, what makes progress
durable and what ``--reload`` reads back in :mod:`larbin_py.crawl_state` (a
strategy: the distributed mode swaps it), the stats in
:mod:`larbin_py.engine_stats`, the servers in :mod:`larbin_py.servers`;
signals and the event loop's runner are the command line's
(:mod:`larbin_py.runner`, :mod:`larbin_py.cli`).
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time

from . import heap
from . import robots as robots_mod
from .analysis.stage import AnalysisStage
from .crawl_state import LocalState, StateDirInUse
from .engine_stats import Counters, EngineStats, Summary
from .frontier.scheduler import PAGE, site_key
from .net.dns import Resolver
from .net.browser import Browser, BrowserUnavailable
from .net.dynamic import build_dynamic
from .net.http import Fetcher
from .output import OutputError, make_output
from .output.writer import ThreadedOutput, WriterThread
from .pages import PageHandler
from .robots_fetch import RobotsFetch
from .rules import UrlRules
from .servers import Servers, StartError
from .state import StateError, describe_write_error
from .throttle import RttController
from .url import normalize

__all__ = ["Engine", "Summary", "StartError", "StateDirInUse", "StateError"]

#: How long in-flight requests may finish after a stop was asked, seconds.
STOP_GRACE = 10.0


class Engine:
    """One crawl.  ``await Engine(config).run()`` returns its :class:`Summary`.

    ``resolver``, ``fetcher`` and ``output`` may be injected (tests, benchmarks);
    otherwise they are built from the configuration.  So may the frontier's
    stores: ``stores`` (a :data:`~larbin_py.frontier.interfaces.StoreFactory`)
    and ``seen`` (a :class:`~larbin_py.frontier.interfaces.SeenStore`), for a
    crawl that is not continued with ``--reload`` (``canReload`` off); and
    ``crawl_state``, the :class:`~larbin_py.crawl_state.CrawlState` (by
    default a :class:`~larbin_py.crawl_state.LocalState` in ``stateDir``).
    """

    def __init__(self, config, *, resolver=None, fetcher=None, output=None, rng: random.Random | None = None,
                 out=None, err=None, reload: bool = False, stores=None, seen=None, crawl_state=None) -> None:
        self.config = config
        heap.limit_retention()  # large freed blocks go back to the kernel (larbin_py.heap)
        self.out = out if out is not None else sys.stdout
        self.err = err if err is not None else sys.stderr
        self.rng = rng or random.Random()
        self.rules = UrlRules.from_config(config)
        self.agent = robots_mod.product_token(config.user_agent)
        self.reload = reload
        st = self.crawl_state = crawl_state if crawl_state is not None else \
            LocalState(config, reload=reload, seen=seen)
        self.seen = st.seen
        #: A write to stateDir failed: the logs may lack records, so the seen
        #: log must not get ahead of the stores (LocalState.close).
        self._state_broken = False
        self.pages = PageHandler(config, st, now=self._now, fail=self._fail, out=self.out)
        self.frontier = st.frontier_class()(
            config.state_dir + "/frontier", ram_urls=config.ram_urls, max_urls_by_site=config.max_urls_by_site,
            max_requests=config.pages_connexions, wait_duration=config.wait_duration, jitter=config.wait_jitter,
            conn_per_ip=config.connexions_per_ip, agent=self.agent, obey_robots=not config.ignore_robots,
            rng=self.rng, on_forget=self.pages.on_forget, server_rtt_factor=config.server_rtt_factor,
            positions=st.frontier_positions(), private_networks=config.private_networks, stores=stores,
            seen=self.seen, rules=self.rules, retries=config.retries, prune_after=config.prune_after,
            keep_sites=config.keep_sites,
        )
        st.attach(self.frontier)
        #: Links lately met, known to be in :attr:`seen` (the frontier's, checked before the rules).
        self.seen_urls = self.frontier.seen_urls
        #: Adaptive MaxRequestCount (issue 7); None when flowControl is off.
        self.flow = RttController.from_config(config) if config.flow_control else None
        if self.flow is not None:
            self.frontier.max_requests = self.flow.limit
        #: The engine's counts; links refused by reason are the frontier's (Frontier.offer).
        self.counts = Counters(rejected=self.frontier.rejected)
        self.rejected = self.counts.rejected
        self.pages.attach(self.frontier, self.counts, self.flow)
        #: The analysis stage (issue 22): None when analysisWorkers is 0 (analysis inline, on the loop).
        self.analysis: AnalysisStage | None = None
        if config.analysis_workers > 0 or config.analyzers:  # analyzers need a process: at least one
            self.analysis = AnalysisStage(config, reload=reload, err=self.err, durable=config.can_reload)
            self.analysis.attach(self.frontier, self.counts, self._spawn)
            self.pages.analysis = self.analysis
        #: The edge: injected, or built from the configuration once the loop runs.
        self.resolver, self.fetcher, self.output = resolver, fetcher, output
        #: dynamicPages: Chromium and the fetcher that renders with it (larbin_py.net.dynamic); None when off.
        self.browser: Browser | None = None
        self.dynamic = None
        #: The writer thread (page files, fsyncs, group commits), when anything goes to disk.
        self._writer: WriterThread | None = None
        self.state = "starting"
        self.stop_reason = ""
        self.failed: str | None = None
        self._tasks: set[asyncio.Task] = set()
        self._pump_handle: asyncio.Handle | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")
        self._checkpoint_timer: asyncio.TimerHandle | None = None
        self._checkpoint_task: asyncio.Task | None = None
        self._stopping = False
        self._done: asyncio.Future | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = 0.0
        self._elapsed_before = 0.0  # crawl time of the runs before a --reload
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
    def http_server(self):
        """The stats server (httpPort), once started; None otherwise."""
        return self._servers.http

    def _build_components(self) -> None:
        c = self.config
        if self.resolver is None:
            self.resolver = Resolver(list(c.dns_servers), max_in_flight=c.dns_connexions, timeout=c.dns_timeout,
                                      valid_time=c.dns_valid_time, negative_ttl=1.0)
        if self.fetcher is None:
            self.fetcher = Fetcher(
                user_agent=c.user_agent, from_addr=c.from_addr, connect_timeout=c.connect_timeout,
                timeout_page=c.timeout_page, timeout_incr=c.timeout_incr, max_page_size=c.max_page_size,
                proxy=c.proxy, bond_width=c.bond_width, keep_alive_idle=max(5.0, 2 * c.wait_duration),
                keep_raw=c.output_mode == "warc", parser=c.http_parser,
                clock=self._loop.time,  # the scheduler's clock: send times compare with starts
            )
        st = self.crawl_state
        self._robots_fetch = RobotsFetch(self.frontier, self.fetcher, self.lookup, now=self._now,
                                         log=getattr(st, "robots_log", None), on_answer=self.pages.robots_answered,
                                         rejected=self.rejected)
        if self.output is None:
            self.output = make_output(c, position=st.output_position())
        disk = getattr(self.output, "mode", None) in ("mirror", "save", "warc")
        if disk or c.can_reload:
            self._writer = WriterThread(self._loop, on_error=self._on_writer_error, on_room=self._pump_soon)
            if disk and not isinstance(self.output, ThreadedOutput):
                self.output = ThreadedOutput(self.output, self._writer, self._loop)
        st.open(self._loop, self._writer, self.output, frontier=self.frontier, on_durable=self._pump_soon,
                on_error=self._on_io_error)
        if self.browser is not None:
            self.dynamic = build_dynamic(c, self.fetcher, self.frontier, self.browser, now=self._now,
                                         clock=self._loop.time, on_sub_request=self.pages.sub_request,
                                         jar=self.crawl_state.cookies)
        self.pages.start(self.fetcher, self.output, self.dynamic)
        if self.analysis is not None:
            self.analysis.start(self._loop)
            committer = getattr(st, "committer", None)
            if committer is not None:  # a checkpoint (and syncCommits) fsyncs the analysis queue too
                committer.sync_also = self.analysis.queue.sync_paths

    async def _start_browser(self) -> None:
        """dynamicPages: Chromium starts before the crawl (missing or broken: StartError, exit 2)."""
        if not self.config.dynamic_pages:
            return
        self.browser = Browser(self.config.state_dir)
        try:
            await self.browser.start()
        except BrowserUnavailable as exc:
            await self.browser.close()
            self.browser = None
            raise StartError(str(exc)) from None

    def _on_writer_error(self, exc: BaseException) -> None:
        """(Loop.) A page could not be stored by the writer thread: the crawl fails."""
        self._fail(f"output failed: {exc}" if isinstance(exc, OutputError) else
                   f"output failed: {type(exc).__name__}: {exc}")

    def _on_io_error(self, exc: BaseException) -> None:
        """(Loop.) A group commit or a checkpoint failed: the crawl fails."""
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
        if self.analysis is not None and self.analysis.full():
            return True  # the analysis stage's tasks finishing pump again (_task_done)
        return self.crawl_state.holds(self.frontier.requests, self.frontier.max_requests)

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
                if limit and fr.fetched + fr.in_flight >= limit:
                    break
                if self._disk_held():
                    # The writer wakes the pump when the gate opens (on_room,
                    # on_durable): a timer for work already due would only spin.
                    held = True
                    break
                req = fr.next_request(now)
                if req is None:
                    break
                self.counts.requests += 1
                if req.kind == PAGE:
                    self._spawn(self.pages.run(req))
                else:
                    self.counts.robots_requests += 1
                    self._spawn(self._robots_fetch.run(req))
            mem = fr.urls_in_memory()
            if mem > self.peak_urls_in_memory:
                self.peak_urls_in_memory = mem
            if limit and fr.fetched >= limit:
                self.request_stop(f"limitPage {limit} reached")
            elif fr.idle() and not self._tasks:
                self.request_stop("end of work")
            elif fr.more_to_load():
                self._pump_soon()  # the loader stopped at its batch size
        if self._stopping and not self._tasks:
            self._finish()
            return
        if not held:
            self._arm_timer(now)

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
        return await self.resolver.resolve(host)

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
            self._loop.call_later(STOP_GRACE, lambda: [task.cancel() for task in list(self._tasks)])
        self._pump_soon()

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
        self._done = self._loop.create_future()
        # The servers listen first: a port in use or a bad httpBind stops the
        # start before the output or a checkpoint is written (StartError).
        try:
            await self._servers.start()
            await self._start_browser()
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
        if self.failed is None:
            await self._checkpoint()
        self.state = "running"
        if self.config.limit_time:
            self._loop.call_later(self.config.limit_time, self.request_stop, f"limitTime {self.config.limit_time:g} s reached")
        self._pump_soon()
        try:
            await self._done
        finally:
            await self._shutdown()
        return self.summary()

    # ------------------------------------------------------------------
    # Durable progress (larbin_py.crawl_state)
    # ------------------------------------------------------------------
    def _restore(self) -> None:
        """Continue the crawl saved in the crawl state (``--reload``)."""
        section = self.crawl_state.restore(self.frontier, self._now(), time.time(), self.err)
        self.counts.restore(section)
        self._elapsed_before = float(section.get("elapsed", 0.0))
        self.crawl_state.damaged["pageDigests"] = self.pages.digests.restore(section.get("page_digests", ()))
        self.crawl_state.report_damage(self.err)
        if self.analysis is not None and self.analysis.resume():
            print(f"larbin_py: {self.analysis.resumed} analysis tasks resumed", file=self.err)

    async def _checkpoint(self) -> bool:
        """Make the crawl's progress durable, then arm the next one; False
        (and the crawl stops) on failure."""
        section = dict(self.counts.to_state(), elapsed=self._elapsed(), page_digests=self.pages.digests.to_state())
        analysed = self.analysis.mark() if self.analysis is not None else 0
        try:
            written = await self.crawl_state.checkpoint(self.frontier, self._now(), section)
            if self.analysis is not None:
                # Their links are in the checkpoint (or nothing is kept at all: no --reload to redo them for).
                self.analysis.confirm(analysed)
        except OutputError as exc:
            self._fail(f"output failed: {exc}")
            return False
        except OSError as exc:
            self._write_failed(exc)
            return False
        if written and not self._stopping:
            self._checkpoint_timer = self._loop.call_later(self.config.checkpoint_interval, self._on_checkpoint_timer)
        return True

    def _on_checkpoint_timer(self) -> None:
        self._checkpoint_timer = None
        if not self._stopping:
            self._checkpoint_task = self._loop.create_task(self._checkpoint())

    async def _abandon_start(self) -> None:
        """Undo a start that failed before the crawl began (LocalState.abandon)."""
        self.state = "failed"
        await self._servers.stop()
        self.crawl_state.abandon(self.frontier)

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
        if self.failed is None:
            self._stopping = True  # no timer after the last checkpoint
            await self._checkpoint()
        self.crawl_state.close_commits()
        if self.analysis is not None:
            await self.analysis.close()
        try:
            if isinstance(self.output, ThreadedOutput):
                await self.output.aclose()  # the pages still queued, then the files' sync
            else:
                self.output.close()
        except OutputError as exc:
            if self.failed is None:
                self.failed = f"output failed: {exc}"
        if self._writer is not None:
            await self._writer.aclose()
        for exc in self.crawl_state.close(self.frontier, broken=self._state_broken):
            self._write_failed(exc)
        self.state = "failed" if self.failed else "finished"
        if self.dynamic is not None:
            await self.dynamic.close()
        elif self.browser is not None:
            await self.browser.close()
        await self.fetcher.close()
        self.resolver.close()
        await self._servers.stop()

    def _elapsed(self) -> float:
        """Crawl time so far, the runs before a --reload included."""
        return self._elapsed_before + ((self._loop.time() - self._started) if self._loop else 0.0)

    def summary(self) -> Summary:
        """What the crawl did so far (larbin_py.engine_stats)."""
        return self.stats.summary()

    def snapshot(self) -> dict:
        """The stats snapshot (StatsSource interface; schema in docs/stats.md)."""
        snap = self.stats.snapshot()
        if self.analysis is not None:
            snap["analysis"] = self.analysis.stats()
        return snap

