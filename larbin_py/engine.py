"""The crawl engine: the one owner of the event loop, and a router.

It wires the sans-I/O frontier (what may be fetched, when) to the I/O edge
(c-ares DNS, the h11 fetcher, the outputs, the stats server).  Everything
runs on one thread; the engine never blocks the loop and never sleeps: it
reacts to events (a request ended, a name resolved, the frontier's
next-allowed time came) through :meth:`Engine._pump`, which is scheduled at
most once at a time, and starts what the frontier hands out.

Each job is in a module whose name says it: building the parts (the
frontier, the I/O edge) and closing them in :mod:`larbin_py.wiring`, a page
request's outcome rules in :mod:`larbin_py.pages` (applying the table of
:mod:`larbin_py.outcomes`), robots.txt fetching in
:mod:`larbin_py.robots_fetch`, what makes progress durable and what
``--reload`` reads back in :mod:`larbin_py.crawl_state` (a strategy: the
distributed mode swaps it), when it does so in :mod:`larbin_py.checkpoints`,
how the crawl fails in :mod:`larbin_py.failures`, the stats in
:mod:`larbin_py.engine_stats`, the servers in :mod:`larbin_py.servers`;
signals and the event loop's runner are the command line's
(:mod:`larbin_py.runner`, :mod:`larbin_py.cli`).
"""

from __future__ import annotations

import asyncio
import random
import sys

from . import malloc_tuning
from . import robots as robots_mod
from .analysis.stage import AnalysisStage
from .checkpoints import Checkpoints
from .crawl_state import LocalState, StateDirInUse
from .engine_stats import Counters, EngineStats, Summary
from .failures import Failures
from .frontier.protocol import Scheduler
from .frontier.scheduler import PAGE, site_key
from .loopclock import clock_step
from .output import OutputError
from .pages import PageHandler
from .recrawl import Recrawl
from .rules import UrlRules
from .servers import Servers, StartError
from .state import StateError
from .throttle import RttController
from .url import normalize
from .wiring import Edge, build_frontier

__all__ = ["Engine", "Summary", "StartError", "StateDirInUse", "StateError"]

#: How long in-flight requests may finish after a stop was asked, seconds.
STOP_GRACE = 10.0


class Engine:
    """One crawl.  ``await Engine(config).run()`` returns its :class:`Summary`.

    ``resolver``, ``fetcher`` and ``output`` may be injected (tests, benchmarks);
    otherwise they are built from the configuration (both kinds live in
    :attr:`edge`, a :class:`~larbin_py.wiring.Edge`).  So may the frontier's
    stores: ``stores`` (a :data:`~larbin_py.frontier.interfaces.StoreFactory`)
    and ``seen`` (a :class:`~larbin_py.frontier.interfaces.SeenStore`), for a
    crawl that is not continued with ``--reload`` (``canReload`` off); and
    ``crawl_state``, the :class:`~larbin_py.crawl_state.CrawlState` (by
    default a :class:`~larbin_py.crawl_state.LocalState` in ``stateDir``).
    """

    def __init__(self, config, *, resolver=None, fetcher=None, output=None, rng: random.Random | None = None,
                 out=None, err=None, reload: bool = False, stores=None, seen=None, crawl_state=None,
                 recrawl: bool = False) -> None:
        self.config = config
        malloc_tuning.limit_retention()  # large freed blocks go back to the kernel (larbin_py.malloc_tuning)
        self.out = out if out is not None else sys.stdout
        self.err = err if err is not None else sys.stderr
        self.rng = rng or random.Random()
        self.rules = UrlRules.from_config(config)
        self.agent = robots_mod.product_token(config.user_agent)
        st = self.crawl_state = crawl_state if crawl_state is not None else \
            LocalState(config, reload=reload, seen=seen, recrawl=recrawl)
        # (a --reload of a crawl cut before its first checkpoint starts it again: crawl_state.clear_cut_start)
        reload = self.reload = reload and getattr(st, "reload", True)
        if getattr(st, "cut_start", None):
            print(st.cut_start, file=self.err)
        self.seen = st.seen
        #: The crawl's failure (its message, the state broken), and the stop it asks for.
        self.failures = Failures(config.state_dir, self.err, self.request_stop)
        self.pages = PageHandler(config, st, now=self._now, fail=self.failures.fail, out=self.out)
        #: The frontier (larbin_py.frontier.protocol.Scheduler: all the engine and its parts use of it).
        self.frontier: Scheduler = build_frontier(config, st, rng=self.rng, agent=self.agent, rules=self.rules,
                                                  on_forget=self.pages.on_forget, stores=stores)
        #: Adaptive MaxRequestCount (issue 7); None when flowControl is off.
        self.flow = RttController.from_config(config) if config.flow_control else None
        if self.flow is not None:
            self.frontier.max_requests = self.flow.limit
        #: The engine's counts; links refused by reason are the frontier's admission's.
        self.counts = Counters(rejected=self.frontier.admission.rejected)
        self.rejected = self.counts.rejected
        self.pages.attach(self.frontier, self.counts, self.flow)
        #: The records for the next crawl and a recrawl's revisit (larbin_py.recrawl); None when
        #: the crawl state keeps no records (canReload off, a worker, a test's MemoryState).
        self.recrawl: Recrawl | None = None
        if getattr(st, "keeps_records", False):
            self.recrawl = Recrawl(config, old=st.old_records, seeding=st.seeding)
            self.recrawl.attach(self.frontier, st, self.counts, self.pages)
            self.pages.recrawl = self.recrawl
        #: The analysis stage (issue 22): None when analysisWorkers is 0 (analysis inline, on the loop).
        self.analysis: AnalysisStage | None = None
        if config.analysis_workers > 0 or config.analyzers:  # analyzers need a process: at least one
            self.analysis = AnalysisStage(config, reload=reload, err=self.err, durable=config.can_reload,
                                          links=not st.links_on_loop, queue_dir=st.analysis_queue)
            # The links come back through the records (larbin_py.recrawl) when they are kept.
            self.analysis.attach(self.recrawl or self.frontier.admission, self.counts, self._spawn)
            self.pages.analysis = self.analysis
        #: The I/O edge (larbin_py.wiring): resolver, fetcher, output injected, or built once the loop runs.
        self.edge = Edge(config, resolver=resolver, fetcher=fetcher, output=output, err=self.err)
        #: When progress is made durable, and the engine's section of it (larbin_py.checkpoints).
        self.checkpoints = Checkpoints(st, self.frontier, counts=self.counts, digests=self.pages.digests,
                                       analysis=self.analysis, interval=config.checkpoint_interval,
                                       failures=self.failures, err=self.err)
        self.state = "starting"
        self.stop_reason = ""
        self._tasks: set[asyncio.Task] = set()
        self._pump_handle: asyncio.Handle | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")
        self._clock_step = 0.0
        self._stopping = False
        self._done: asyncio.Future | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = 0.0
        #: The stats of the crawl: its summary and the stats server's snapshot.
        self.stats = EngineStats(self)
        #: The stats and input servers and the status line (larbin_py.servers).
        self._servers = Servers(config, self, self.err)
        #: Called with the engine once its servers listen (the demo prints the URL).
        self.on_servers_started = None
        #: Peak of the frontier's ``urls_in_memory()``, sampled at every pump.
        self.peak_urls_in_memory = 0

    # ------------------------------------------------------------------
    # The parts (built in larbin_py.wiring)
    # ------------------------------------------------------------------
    @property
    def http_server(self):
        """The stats server (httpPort), once started; None otherwise."""
        return self._servers.http

    def _disk_held(self) -> bool:
        """The gate between the outputs and the frontier: True while no request may start.

        Held while the writer's queue is full, and while requests running plus
        outcomes not yet durable reach the connection cap (a crash must cost
        at most the requests in flight).
        """
        if self.edge.full():
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
                self.frontier.dns.addresses.allow_host(parsed[2])
        if self.config.lock_site and self.state == "starting":
            # Every start URL (and every URL given before the crawl starts)
            # adds its host to those lockSite allows, not only the first.
            self.rules.lock(url)
        result = self.frontier.admission.offer_url(url, priority=priority, seed=seed)
        if seed and self.config.sitemaps and self.config.ignore_robots:
            self.pages.sitemaps.seed(url)  # no robots.txt to name them: the site's /sitemap.xml
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
            self.failures.write_failed(exc)
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
            for site in fr.dns.take():
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
                    self._spawn(self.edge.robots.run(req))
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
        # One clock step late: a uvloop timer armed for t fires up to 1 ms before
        # loop.time() reaches t, and the pump would find nothing due and spin
        # (larbin_py.loopclock).
        self._timer = self._loop.call_at(t + self._clock_step, self._on_timer)

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
            self.failures.task_failed(task.exception())
        self._pump_soon()

    # ------------------------------------------------------------------
    # DNS
    # ------------------------------------------------------------------
    async def lookup(self, host: str):
        """Resolve ``host`` (no brackets): the one path from the engine's parts to the resolver."""
        return await self.edge.resolver.resolve(host)

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

    def _finish(self) -> None:
        if self._done is not None and not self._done.done():
            self._done.set_result(None)

    # ------------------------------------------------------------------
    # Running
    # ------------------------------------------------------------------
    async def run(self) -> Summary:
        self._loop = asyncio.get_running_loop()
        self._clock_step = clock_step(self._loop)
        self._started = self._loop.time()
        self._done = self._loop.create_future()
        self.checkpoints.begin(self._loop, stopping=lambda: self._stopping)
        # The servers listen first: a port in use or a bad httpBind stops the
        # start before the output or a checkpoint is written (StartError).
        try:
            await self._servers.start()
            await self.edge.start_browser()
        except StartError:
            await self._abandon_start()
            raise
        try:
            self.edge.build(self._loop, crawl_state=self.crawl_state, frontier=self.frontier, pages=self.pages,
                            analysis=self.analysis, lookup=self.lookup, now=self._now, rejected=self.rejected,
                            failures=self.failures, on_room=self._pump_soon)
        except OutputError as exc:
            self.failures.fail(f"cannot open the output: {exc}", stop=False)
            await self._abandon_start()
            return self.summary()
        if self.on_servers_started is not None:
            self.on_servers_started(self)
        if self.recrawl is not None:
            self.recrawl.start(self.edge.writer, self.edge.output)
        try:
            if self.reload:
                self.checkpoints.restore()
            if self.recrawl is not None and self.recrawl.seeding:  # --recrawl: the last crawl's URLs first
                queued = await self.recrawl.seed()
                print(f"larbin_py: recrawl of the crawl in {self.config.state_dir!r}: {queued} URLs queued "
                      f"again, {self.counts.recrawl['skipped']} younger than revisitAfter kept as they are",
                      file=self.err)
            for seed in self.config.start_urls:
                result, reason = self.add_url(seed, seed=True)
                if result == "rejected":
                    print(f"larbin_py: start URL {seed!r} refused: {reason}", file=self.err)
        except OSError as exc:
            self.failures.write_failed(exc)
        if self.failures.message is None:
            await self.checkpoints.first()  # beside the first requests when the crawl state allows it
        self.state = "running"
        if self.config.limit_time:
            self._loop.call_later(self.config.limit_time, self.request_stop, f"limitTime {self.config.limit_time:g} s reached")
        self._pump_soon()
        if self.analysis is not None and not (self.recrawl is not None and self.recrawl.active):
            # After the first pump: its DNS queries' tasks are scheduled before the
            # processes' start, which holds the loop while it forks and execs.  (A
            # recrawl's pages are mostly unchanged, 304s with their links stored: its
            # processes start when a page to parse waits for one.)
            self._loop.call_soon(self.analysis.warm)
        try:
            await self._done
        finally:
            await self._shutdown()
        return self.summary()

    async def _abandon_start(self) -> None:
        """Undo a start that failed before the crawl began (LocalState.abandon)."""
        self.state = "failed"
        await self._servers.stop()
        self.crawl_state.abandon(self.frontier)

    async def _shutdown(self) -> None:
        """The tasks cancelled, the last checkpoint, then each part closed in
        the order durability needs (see larbin_py.wiring)."""
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._stopping = True  # no checkpoint timer after the last checkpoint
        if self.recrawl is not None:
            self.recrawl.settle()  # pages whose links never came back: recorded with the last commit
        await self.checkpoints.close(last=self.failures.message is None)
        self.crawl_state.close_commits()
        if self.analysis is not None:
            await self.analysis.close()
        await self.edge.close_output(self.failures)
        for exc in self.crawl_state.close(self.frontier, broken=self.failures.state_broken):
            self.failures.write_failed(exc)
        self.state = "failed" if self.failures.message else "finished"
        await self.edge.close_network()
        await self._servers.stop()

    def summary(self) -> Summary:
        """What the crawl did so far (larbin_py.engine_stats)."""
        return self.stats.summary()

    def snapshot(self) -> dict:
        """The stats snapshot (StatsSource interface; schema in docs/stats.md)."""
        snap = self.stats.snapshot()
        if self.analysis is not None:
            snap["analysis"] = self.analysis.stats()
        return snap
