"""Which server addresses a crawl may connect to (``privateNetworks``), sans-I/O;
and :func:`is_loopback`, where the crawler's own servers may listen without a token.

A URL given through ``POST /urls``, or found on a public page, must not make
the crawler fetch internal services: cloud metadata at 169.254.169.254, admin
pages on localhost, a router on 192.168.1.1.  The check is on the address a
host name *resolved* to (a public name may resolve to 127.0.0.1), every time
it is resolved again, and for every redirect target and robots.txt redirect,
since each goes through the same resolution.

``privateNetworks`` (see larbin.conf):

* ``allow``: every address may be fetched (a crawl of your own network; the
  synthetic web, the demo and the tests, which run on loopback).
* ``seeds`` (default): a private address is fetched only for the host names
  of the configured start URLs (``startUrl``, ``--seed``).
* ``deny``: no private address is ever fetched.

:class:`AddressPolicy` applies one of them to a crawl: the frontier filters
every DNS answer through it (a site left with no address is refused and its
URLs forgotten as ``privateAddress``), robots.txt redirects too.  A value
that is not one of :data:`POLICIES` is a ValueError naming them.
"""

from __future__ import annotations

import ipaddress

__all__ = ["POLICIES", "AddressPolicy", "is_loopback", "is_private_address"]

#: The values of ``privateNetworks``.
POLICIES: tuple[str, ...] = ("allow", "seeds", "deny")

#: Shared address space for carrier-grade NAT (RFC 6598): not "private" to
#: Python, yet an internal network.
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
#: NAT64's well-known prefix (RFC 6052): the last 32 bits are an IPv4 address.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def is_loopback(host: str) -> bool:
    """True when ``host`` is ``localhost`` or a loopback IPv4/IPv6 literal
    (brackets allowed): where a server of ours may listen without a token."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_private_address(ip: str) -> bool:
    """True unless ``ip`` is an address of the public internet.

    Private: loopback, RFC 1918 and the other special-purpose ranges Python
    counts as private (``0.0.0.0/8``, documentation and benchmark nets...),
    link-local (IPv4 169.254/16, IPv6 fe80::/10), IPv6 unique-local (fc00::/7)
    and site-local (fec0::/10), unspecified, multicast, reserved (240/4),
    carrier-grade NAT (100.64/10), and the IPv4 forms carried in IPv6
    (IPv4-mapped ``::ffff:a.b.c.d``, 6to4, NAT64 ``64:ff9b::a.b.c.d``) when
    their IPv4 address is one of these.  Text that is not an IP address
    (an unexpected DNS answer) counts as private: refused, never fetched.
    """
    try:
        addr = ipaddress.ip_address(ip.strip("[]").split("%", 1)[0])
    except ValueError:
        return True
    if isinstance(addr, ipaddress.IPv6Address):
        embedded = addr.ipv4_mapped or addr.sixtofour
        if embedded is None and addr in _NAT64:
            embedded = ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
        if embedded is not None:
            return _private_v4(embedded)
        return (addr.is_private or addr.is_loopback or addr.is_link_local or addr.is_site_local
                or addr.is_multicast or addr.is_unspecified or addr.is_reserved)
    return _private_v4(addr)


def _private_v4(addr: ipaddress.IPv4Address) -> bool:
    return (addr.is_private or addr.is_loopback or addr.is_link_local or addr.is_multicast
            or addr.is_unspecified or addr.is_reserved or addr in _CGNAT)


class AddressPolicy:
    """``privateNetworks`` for one crawl: ``policy`` is one of :data:`POLICIES`."""

    __slots__ = ("policy", "hosts")

    def __init__(self, policy: str = "allow") -> None:
        if policy not in POLICIES:
            raise ValueError(f"private_networks: expected one of {', '.join(POLICIES)}")
        self.policy = policy
        #: Host names whose private addresses ``seeds`` lets through (see :meth:`allow_host`).
        self.hosts: set[str] = set()

    def allow_host(self, host: str) -> None:
        """Let ``host`` (a start URL's host name) reach private addresses under ``seeds``."""
        self.hosts.add(host.lower())

    def allowed(self, host: str, ips) -> tuple[str, ...]:
        """The addresses of ``ips`` the policy lets ``host`` reach."""
        policy = self.policy
        if policy == "allow" or (policy == "seeds" and host.lower() in self.hosts):
            return tuple(ips)
        return tuple(ip for ip in ips if not is_private_address(ip))
