"""The frontier's DNS bookkeeping: which names the engine must resolve, and what an answer does to a site.

A site's name is asked for when its first URL arrives, when its address went
stale before a request, and when a failed name's retry timer runs with URLs
waiting (:meth:`DnsQueue.ask`); the engine takes the names to resolve
(:meth:`DnsQueue.take`) and resolves them with its resolver (the frontier
never does I/O).  Its answer comes back to the frontier, which asks this
room what it means for the site:

* :meth:`DnsQueue.answered`: the addresses the ``privateNetworks`` policy
  (:class:`~larbin_py.frontier.addresses.AddressPolicy`) lets the host
  reach, valid ``ttl`` seconds; none left: the site is *refused* until the
  answer expires (the frontier forgets its URLs as ``privateAddress``);
* :meth:`DnsQueue.failed`: no answer; the name is asked again after
  ``retry_base`` seconds, doubling with each failure up to 64 times that.

The site's DNS state changes only through its state machine
(:data:`~larbin_py.frontier.sites.DNS_TRANSITIONS`); :attr:`DnsQueue.pending`
counts the names asked and not answered (the crawl is not over while one
is).  Sans-I/O: time comes in as ``now``.
"""

from __future__ import annotations

from .addresses import AddressPolicy
from .sites import NamedSite

__all__ = ["DnsQueue"]


class DnsQueue:
    """Names to resolve, under ``addresses`` (default: ``privateNetworks allow``);
    ``retry_base``: seconds before a failed name is asked again (doubling)."""

    __slots__ = ("addresses", "retry_base", "wanted", "pending")

    def __init__(self, addresses: AddressPolicy | None = None, *, retry_base: float = 2.0) -> None:
        self.addresses = addresses if addresses is not None else AddressPolicy()
        self.retry_base = retry_base
        self.wanted: list[NamedSite] = []  # asked since the last take()
        self.pending = 0  # asked and not answered

    def ask(self, site: NamedSite) -> None:
        """Resolve ``site``'s name (again)."""
        site.dns_event("ask")
        self.pending += 1
        self.wanted.append(site)

    def take(self) -> list[NamedSite]:
        """Sites whose host name the engine must resolve now."""
        wanted, self.wanted = self.wanted, []
        return wanted

    def answered(self, site: NamedSite, ips, ttl: float, now: float) -> tuple[str, ...]:
        """``site``'s name resolved to ``ips`` for ``ttl`` seconds: the addresses it may reach
        (its state ``ok``), or none (its state ``refused`` until ``now + ttl``)."""
        self.pending -= 1
        site.dns_expiry = now + ttl
        site.dns_failures = 0
        allowed = self.addresses.allowed(site.host, ips)
        site.dns_event("answer" if allowed else "refuse")
        site.ips = allowed
        return allowed

    def failed(self, site: NamedSite, now: float) -> float:
        """``site``'s name did not resolve: when to ask again (also ``site.retry_at``)."""
        self.pending -= 1
        site.dns_event("fail")
        site.dns_failures += 1
        site.retry_at = now + self.retry_base * (2 ** min(site.dns_failures - 1, 6))
        return site.retry_at
