"""Building a frontier from plain settings: its parts made, then passed in at construction.

:class:`~larbin_py.frontier.scheduler.Frontier` takes its parts ready-made
(lanes, admission, DNS queue, pruning, IP-lease gate); :func:`assemble`
makes the usual ones from the figures larbin.conf gives, so that the
crawl's wiring (larbin_py.wiring.build_frontier), the crawl states that
swap a part (a ``--reload``'s positions and journal, a worker's inbox, sink
and leases) and the tests build a frontier one way.  Nothing is assembled
after construction: every callback is an argument here.

Errors: a ``private_networks`` that is not a policy, or neither a
``state_dir`` nor a ``stores`` factory, is a ValueError naming it; an
``OSError`` opening the lanes' segments propagates (stateDir not writable).
"""

from __future__ import annotations

import random
from typing import Callable

from ..rules import UrlRules
from .addresses import AddressPolicy
from .admission import Admission
from .budget import SiteBudget
from .dns_queue import DnsQueue
from .interfaces import LinkSink, SeenStore, StoreFactory, UrlQueue
from .ip_leases import IpLeaseGate
from .lanes import Lanes, disk_stores
from .pruning import KEEP_SITES, PRUNE_AFTER, Pruning
from .scheduler import Frontier, Settings
from .store import UrlRecord

__all__ = ["assemble"]


def assemble(
    state_dir: str | None = None,
    *,
    ram_urls: int,
    max_urls_by_site: int,
    max_requests: int,
    wait_duration: float,
    conn_per_ip: int = 1,
    jitter: float = 0.05,
    agent: str = "*",
    obey_robots: bool = True,
    server_rtt_factor: float = 0.0,
    dns_retry_base: float = 2.0,
    robots_retry_base: float = 1.0,
    ipv6_prefix: int = 64,
    park_urls: int | None = None,
    private_networks: str = "allow",
    prune_after: float | None = PRUNE_AFTER,
    keep_sites: int = KEEP_SITES,
    stores: StoreFactory | None = None,
    positions: dict | None = None,
    segment_bytes: int = 64 * 1024 * 1024,
    main: UrlQueue | None = None,
    seen: SeenStore | None = None,
    rules: UrlRules | None = None,
    retries: int = 0,
    sink: LinkSink | None = None,
    ip_leases: IpLeaseGate | None = None,
    rng: random.Random | None = None,
    on_forget: Callable[[UrlRecord, str], None] | None = None,
    on_done: Callable[[UrlRecord, str], None] | None = None,
    replay: dict[str, str] | None = None,
    frontier_class: Callable[..., Frontier] = Frontier,
    budget: SiteBudget | None = None,
    site_rules=None,
) -> Frontier:
    """A frontier and its parts.

    The figures are :class:`~larbin_py.frontier.scheduler.Settings`' (``park_urls``
    None: a quarter of ``ram_urls``);
    ``private_networks`` and ``dns_retry_base`` the
    :class:`~larbin_py.frontier.dns_queue.DnsQueue`'s; ``prune_after`` (None:
    never) and ``keep_sites`` the :class:`~larbin_py.frontier.pruning.Pruning`'s.
    The lanes come from ``stores`` (default: :func:`disk_stores` in
    ``state_dir``, reopened at ``positions`` on a reload), ``main`` replacing
    the main lane; ``seen``, ``rules``, ``retries`` and ``sink`` are the
    :class:`~larbin_py.frontier.admission.Admission`'s; ``ip_leases`` the
    gate (default: always open); ``on_forget``, ``on_done`` and ``replay``
    the frontier's own (see :class:`~larbin_py.frontier.scheduler.Frontier`).
    ``frontier_class`` builds it (a worker's ``DistFrontier``); ``budget``
    the sites' budgets (:class:`~larbin_py.frontier.budget.SiteBudget`; none by default);
    ``site_rules`` larbin.conf's ``site`` lines (:class:`~larbin_py.site_settings.SiteSettings`).
    """
    dns = DnsQueue(AddressPolicy(private_networks), retry_base=dns_retry_base)
    if stores is None:
        if state_dir is None:
            raise ValueError("a frontier needs a state_dir or a stores factory")
        stores = disk_stores(state_dir, positions=positions, segment_bytes=segment_bytes)
    lanes = Lanes(stores, ram_urls, main=main, reopened=positions is not None)
    settings = Settings(ram_urls=ram_urls, max_urls_by_site=max_urls_by_site, max_requests=max_requests,
                        wait_duration=wait_duration, conn_per_ip=conn_per_ip, jitter=jitter, agent=agent,
                        obey_robots=obey_robots, server_rtt_factor=server_rtt_factor,
                        robots_retry_base=robots_retry_base, ipv6_prefix=ipv6_prefix,
                        park_urls=ram_urls // 4 if park_urls is None else park_urls)
    return frontier_class(
        settings, lanes=lanes, admission=Admission(lanes, seen=seen, rules=rules, retries=retries, sink=sink),
        dns=dns, pruning=Pruning(prune_after, keep_sites), ip_leases=ip_leases, rng=rng,
        on_forget=on_forget, on_done=on_done, replay=replay, budget=budget, site_rules=site_rules)
