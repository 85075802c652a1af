"""Which server addresses a crawl may connect to (``privateNetworks``), sans-I/O;
and :func:`is_loopback`, where the crawler's own servers may listen without a token.

It also says which addresses count as one server for politeness
(:func:`polite_key`, :class:`IpTable`): an IPv4 address is itself, an IPv6
address counts with its ``/64`` (``ipv6Prefix``), since one server often
holds a whole /64 and a site spread over it must not get 2^64 times the
pace.

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

__all__ = ["POLICIES", "AddressPolicy", "IpTable", "is_loopback", "is_private_address", "polite_key"]

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


def polite_key(ip: str, v6_prefix: int = 64) -> str:
    """The politeness key of a server address: an IPv4 address itself; an IPv6 address its
    ``/v6_prefix`` network (``2001:db8:0:1::/64``), or itself at 128.  A key is returned unchanged;
    text that is no address is its own key."""
    if ":" not in ip or "/" in ip:
        return ip
    try:
        addr = ipaddress.IPv6Address(ip.split("%", 1)[0])
    except ValueError:
        return ip
    mapped = addr.ipv4_mapped
    if mapped is not None:  # ::ffff:a.b.c.d is that IPv4 server
        return str(mapped)
    if v6_prefix >= 128:
        return str(addr)
    return str(ipaddress.IPv6Network((int(addr) >> (128 - v6_prefix) << (128 - v6_prefix), v6_prefix)))


class IpTable(dict):
    """The frontier's servers by politeness key, looked up by address or by key.

    ``table.get(ip)``, ``table[ip]``, ``ip in table`` and ``table[ip] = ...``
    take an address and use its :func:`polite_key` (with ``v6_prefix``); an
    IPv4 address costs one character test.  Iteration and ``len`` are the
    dict's own (one entry per key).
    """

    __slots__ = ("v6_prefix",)

    def __init__(self, v6_prefix: int = 64) -> None:
        super().__init__()
        self.v6_prefix = v6_prefix

    def key(self, ip: str) -> str:
        return ip if ":" not in ip else polite_key(ip, self.v6_prefix)

    def get(self, ip, default=None):
        return dict.get(self, ip if ":" not in ip else polite_key(ip, self.v6_prefix), default)

    def __getitem__(self, ip):
        return dict.__getitem__(self, ip if ":" not in ip else polite_key(ip, self.v6_prefix))

    def __setitem__(self, ip, value) -> None:
        dict.__setitem__(self, ip if ":" not in ip else polite_key(ip, self.v6_prefix), value)

    def __contains__(self, ip) -> bool:
        return dict.__contains__(self, ip if ":" not in ip else polite_key(ip, self.v6_prefix))

    def pop(self, ip, *default):
        return dict.pop(self, ip if ":" not in ip else polite_key(ip, self.v6_prefix), *default)

    def __delitem__(self, ip) -> None:
        dict.__delitem__(self, ip if ":" not in ip else polite_key(ip, self.v6_prefix))
