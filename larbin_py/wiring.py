"""Building a crawl's parts from its configuration: what the engine routes between.

The engine builds nothing itself.  Its parts are made here, in two steps:

* :func:`build_frontier`, when the engine is made: the frontier and its
  parts (larbin_py.frontier.assembly), on the stores and seen store the
  crawl state gives (or injected ones) and with the parts it swaps (a
  journal's replay, a worker's lanes, sink and IP leases), with the
  configuration's limits, politeness, retries and pruning;
* :class:`Edge`, the I/O edge, once the event loop runs: the resolver, the
  fetcher, the output (injected, or built from the configuration), the
  writer thread when anything goes to disk (the output's files, the group
  commits), robots.txt fetching, and with ``dynamicPages`` the renderer on
  a Chromium started first (:meth:`Edge.start_browser`: a missing or
  broken one stops the start, StartError, exit 2).  :meth:`Edge.build`
  also opens the crawl state on them and starts the page handler and the
  analysis stage with them.

Closing is the edge's too, in two halves the engine's shutdown puts in the
order durability needs: :meth:`Edge.close_output` (the pages still queued,
the files' sync, the writer thread) before the crawl state's own files
close, :meth:`Edge.close_network` (the browser, the connections, the
resolver) after.
"""

from __future__ import annotations

import sys

from .frontier.assembly import assemble
from .frontier.budget import SiteBudget
from .net.dns import Resolver
from .net.auth import AuthRules
from .net.http import Fetcher
from .net.proxy import ProxyConfig
from .net.tls import TlsPolicy
from .output import OutputError, make_output
from .output.writer import ThreadedOutput, WriterThread
from .robots_fetch import RobotsFetch
from .servers import StartError
from .site_settings import SiteSettings

__all__ = ["Edge", "build_frontier"]

#: Output modes that write files (behind the writer thread).
DISK_MODES = ("mirror", "save", "warc")


def build_frontier(config, crawl_state, *, rng, agent: str, rules, on_forget, stores=None):
    """The frontier of ``config``, with the parts ``crawl_state`` swaps.

    Built by :func:`larbin_py.frontier.assembly.assemble` with the
    configuration's limits, politeness, retries, ``privateNetworks`` and
    pruning, the state's seen store, and what the state sets
    (``crawl_state.frontier_options()``: a reload's positions and journal, a
    worker's lanes, sink, acks and IP leases).  ``stores``: a
    :data:`~larbin_py.frontier.interfaces.StoreFactory` to use instead of
    stateDir's segment files; ``on_forget``: the hook told each URL
    forgotten (``PageHandler.on_forget``).
    """
    c = config
    options = dict(
        ram_urls=c.ram_urls, max_urls_by_site=c.max_urls_by_site, max_requests=c.pages_connexions,
        wait_duration=c.wait_duration, jitter=c.wait_jitter, conn_per_ip=c.connexions_per_ip, agent=agent,
        obey_robots=not c.ignore_robots, rng=rng, on_forget=on_forget, server_rtt_factor=c.server_rtt_factor,
        private_networks=c.private_networks, stores=stores, seen=crawl_state.seen, rules=rules,
        retries=c.retries, prune_after=c.prune_after, keep_sites=c.keep_sites, ipv6_prefix=c.ipv6_prefix,
        dns_retry_base=c.dns_retry_delay, robots_retry_base=c.robots_retry_delay,
    )
    options["budget"] = site_budget(c)
    options["site_rules"] = SiteSettings(c.site)
    options.update(crawl_state.frontier_options())
    frontier = assemble(c.state_dir + "/frontier", **options)
    crawl_state.attach(frontier)
    return frontier


def site_budget(config) -> SiteBudget:
    """The sites' budgets: maxPagesBySite, maxBytesBySite, and the ``site`` lines that set their own."""
    settings = SiteSettings(config.site)
    limits = None
    if settings.any("max_pages") or settings.any("max_bytes"):
        def limits(host: str) -> tuple[int | None, int | None]:
            rule = settings.for_host(host)
            return (None, None) if rule is None else (rule.max_pages, rule.max_bytes)
    return SiteBudget(config.max_pages_by_site, config.max_bytes_by_site, limits)


def build_fetcher(c, *, clock) -> Fetcher:
    """The fetcher of configuration ``c``: its limits, proxy, TLS policy and auth rules."""
    return Fetcher(
        user_agent=c.user_agent, from_addr=c.from_addr, connect_timeout=c.connect_timeout,
        timeout_page=c.timeout_page, timeout_incr=c.timeout_incr, max_page_size=c.max_page_size,
        proxy=ProxyConfig(*c.proxy) if c.proxy is not None else None, no_proxy=c.no_proxy,
        bond_width=c.bond_width, keep_alive_idle=max(5.0, 2 * c.wait_duration),
        keep_raw=c.output_mode == "warc", parser=c.http_parser,
        tls=TlsPolicy(ca_file=c.tls_ca_file, ca_mode=c.tls_ca_mode, insecure_hosts=c.tls_verify),
        auth=AuthRules(c.auth), happy_eyeballs_delay=c.happy_eyeballs_delay, http_version=c.http_version,
        clock=clock,
    )


class Edge:
    """The I/O edge of one crawl.

    ``resolver``, ``fetcher`` and ``output`` may be given (tests,
    benchmarks); :meth:`build` makes those missing.  Once built:
    ``writer`` is the writer thread (page files, fsyncs, group commits) or
    None when nothing goes to disk; ``robots`` the
    :class:`~larbin_py.robots_fetch.RobotsFetch` the engine hands
    robots.txt requests to; ``browser`` and ``dynamic`` dynamicPages'
    Chromium and the fetcher that renders with it (None when off).
    """

    def __init__(self, config, *, resolver=None, fetcher=None, output=None, err=None) -> None:
        self.config = config
        self.err = err if err is not None else sys.stderr  # warnings at start (dynamicSandbox off)
        self.resolver, self.fetcher, self.output = resolver, fetcher, output
        self.writer: WriterThread | None = None
        self.robots: RobotsFetch | None = None
        self.browser = None  # a larbin_py.net.browser.Browser
        self.dynamic = None
        self.pin = None  # cpuAffinity auto: a larbin_py.core_pin.CorePin

    async def start_browser(self) -> None:
        """dynamicPages: Chromium starts before the crawl (missing or broken, a sandbox that cannot
        start: StartError, exit 2); with dynamicSandbox off, a warning line first."""
        if not self.config.dynamic_pages and not any(r.dynamic in ("on", "scroll") for r in self.config.site):
            return
        from .net.browser import Browser, BrowserUnavailable  # imported only for dynamicPages

        self.browser = Browser.for_config(self.config)
        if self.browser.warning is not None:
            print(f"larbin_py: warning: {self.browser.warning}", file=self.err)
        try:
            await self.browser.start()
        except BrowserUnavailable as exc:
            await self.browser.close()
            self.browser = None
            raise StartError(str(exc)) from None

    def build(self, loop, *, crawl_state, frontier, pages, analysis, lookup, now, rejected, failures,
              on_room) -> None:
        """Make the missing parts and connect them (OutputError: the output cannot be opened).

        ``pages``: the :class:`~larbin_py.pages.PageHandler`, started with
        the fetcher and output; ``analysis``: the analysis stage or None;
        ``lookup``: the engine's one path to the resolver (robots.txt
        redirects to another host); ``now``: the scheduler's clock;
        ``rejected``: the counter of refused URLs; ``failures``: where the
        writer thread and the commits report (larbin_py.failures);
        ``on_room()``: the writer's queue has room again, or an outcome
        became durable (the engine pumps).
        """
        c, st = self.config, crawl_state
        if self.resolver is None:
            self.resolver = Resolver(list(c.dns_servers), max_in_flight=c.dns_connexions, timeout=c.dns_timeout,
                                     valid_time=c.dns_valid_time, negative_ttl=1.0, ip_version=c.ip_version)
        if self.fetcher is None:
            self.fetcher = build_fetcher(c, clock=loop.time)  # the scheduler's clock: send times compare
            warning = self.fetcher.tls.warning() if self.fetcher.tls is not None else None
            if warning is not None:
                print(f"larbin_py: warning: {warning}", file=self.err)
        self.fetcher.may_send = getattr(st, "may_send", None)  # (a worker's IP leases: net.http)
        self.robots = RobotsFetch(frontier, self.fetcher, lookup, now=now, log=getattr(st, "robots_log", None),
                                  on_answer=pages.robots_answered, rejected=rejected,
                                  on_rules=pages.robots_read if c.sitemaps else None,
                                  headers_for=pages.headers_for if c.site else None)
        if self.output is None:
            self.output = make_output(c, position=st.output_position())
        disk = getattr(self.output, "mode", None) in DISK_MODES
        if disk or c.can_reload or getattr(st, "wants_writer", False):
            self.writer = WriterThread(loop, on_error=failures.on_writer_error, on_room=on_room)
            if disk and not isinstance(self.output, ThreadedOutput):
                self.output = ThreadedOutput(self.output, self.writer, loop)
        st.open(loop, self.writer, self.output, frontier=frontier, on_durable=on_room,
                on_error=failures.on_io_error)
        if c.cpu_affinity == "auto":
            self.pin_threads(loop)
        if self.browser is not None:
            from .net.dynamic import build_dynamic

            self.dynamic = build_dynamic(c, self.fetcher, frontier, self.browser, now=now, clock=loop.time,
                                         on_sub_request=pages.sub_request, jar=st.cookies)
        pages.start(self.fetcher, self.output, self.dynamic)
        if analysis is not None:
            analysis.start(loop)  # its processes start after the first pump (Engine.run: warm)
            committer = getattr(st, "committer", None)
            if committer is not None:  # a checkpoint (and syncCommits) fsyncs the analysis queue too
                committer.sync_also = analysis.queue.sync_paths

    def pin_threads(self, loop) -> None:
        """cpuAffinity auto: the loop's thread and the writer thread on one core (larbin_py.core_pin),
        said in one line; without a writer thread (nothing goes to disk) there is no pair to keep."""
        from .core_pin import CorePin

        if self.writer is None:
            print("larbin_py: cpuAffinity auto: not pinned: no writer thread (nothing goes to disk)",
                  file=self.err)
            return
        pin = CorePin(err=self.err)
        if pin.start(loop, self.writer.native_id):
            self.pin = pin
            print(f"larbin_py: cpuAffinity auto: the event loop and the writer thread on core {pin.cpu}",
                  file=self.err)

    def full(self) -> bool:
        """The writer thread's queue is full (the engine starts no request until it has room)."""
        return self.writer is not None and self.writer.full()

    async def close_output(self, failures) -> None:
        """The output closed (the pages still queued written, then the files'
        sync), then the writer thread; an output that fails is ``failures``' note."""
        try:
            if isinstance(self.output, ThreadedOutput):
                await self.output.aclose()
            else:
                self.output.close()
        except OutputError as exc:
            failures.note(f"output failed: {exc}")
        if self.pin is not None:  # freed while the writer still runs: its thread id is not reused yet
            self.pin.stop()
            self.pin = None
        if self.writer is not None:
            await self.writer.aclose()

    async def close_network(self) -> None:
        """The renderer (and its browser), the fetcher's connections, the resolver."""
        if self.dynamic is not None:
            await self.dynamic.close()
        elif self.browser is not None:
            await self.browser.close()
        await self.fetcher.close()
        self.resolver.close()
