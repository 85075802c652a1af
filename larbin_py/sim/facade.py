"""``Sim``: the synthetic web, its HTTP server and (optionally) its DNS server.

::

    async with Sim(SimConfig(hosts=50, dns=True)) as sim:
        sim.port, sim.dns_port, sim.seeds     # where to crawl from
        ...                                   # run the crawler
        truth = sim.truth(CrawlRules(depth_in_site=sim.web.max_depth()))
        sim.log.requests                      # what it asked for

The HTTP server binds first (so the port is known), then the web is
generated for that port (canonical URLs carry it unless it is 80).
"""

from __future__ import annotations

from typing import Callable

from .faults import FaultPlan
from .log import RequestLog
from .server import SimServer
from .truth import CrawlRules, Truth, compute_truth
from .web import SimConfig, SimWeb


def plan_ips(config: SimConfig) -> list[str]:
    """The IPs the web of ``config`` will use (cheap: no page generation)."""
    probe = SimConfig(**{**config.__dict__, "pages_per_host": (1, 1), "faults": []})
    return SimWeb.generate(probe, 80).ips()


class Sim:
    """Async context manager running the sim (see the module docstring)."""

    def __init__(self, config: SimConfig | None = None, *,
                 build: Callable[[int], SimWeb] | None = None):
        """``build(port) -> SimWeb`` replaces generation (hand-made webs); it is
        called once with 80 to learn the IPs, then with the bound port."""
        self.config = config or SimConfig()
        self.log = RequestLog()
        self.faults = FaultPlan(self.config.faults, self.config.seed)
        self.server = SimServer(None, self.log, self.faults, self.config.load)
        self._build = build
        self.web: SimWeb | None = None
        self.dns = None
        self.port = 0
        self.dns_port = 0

    async def start(self) -> "Sim":
        ips = self._build(80).ips() if self._build is not None else plan_ips(self.config)
        self.port = await self.server.start(ips, self.config.port)
        if self._build is not None:
            self.web = self._build(self.port)
        else:
            self.web = SimWeb.generate(self.config, self.port)
        self.server.web = self.web
        if self.config.dns:
            from .dns import SimDNSServer
            c = self.config
            self.dns = SimDNSServer(self.web.dns_records(), cnames=self.web.dns_cnames(),
                                    host="127.0.0.1", port=c.dns_port, latency=c.dns_latency,
                                    servfail_rate=c.dns_servfail_rate, drop_rate=c.dns_drop_rate,
                                    seed=c.seed)
            await self.dns.start()
            self.dns_port = self.dns.port
        return self

    async def close(self) -> None:
        await self.server.close()
        if self.dns is not None:
            await self.dns.close()

    async def __aenter__(self) -> "Sim":
        try:
            return await self.start()
        except BaseException:
            await self.close()
            raise

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # -- conveniences ------------------------------------------------------------
    @property
    def seeds(self) -> list[str]:
        return list(self.web.seeds)

    @property
    def peak_in_flight(self) -> dict[str, int]:
        """Most requests each host ever had in flight at once (load-model tests)."""
        return dict(self.server.peak_in_flight)

    @property
    def ips(self) -> list[str]:
        return self.web.ips()

    def resolve_map(self) -> dict[str, str]:
        """host name -> IP for every host (CNAMEs flattened), for DNS-less tests."""
        return {h.name: h.ip for h in self.web.hosts.values()}

    def truth(self, rules: CrawlRules | None = None) -> Truth:
        return compute_truth(self.web, rules or CrawlRules(), self.faults)

    def body(self, url: str) -> bytes:
        """The body a crawler saves for canonical ``url`` (identity-decoded)."""
        res = self.web.lookup(url)
        if res is None:
            raise KeyError(url)
        return res.body
