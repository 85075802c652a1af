"""The proxy: its address and credentials, which hosts bypass it, and the CONNECT exchange (sans-I/O).

``proxy http://[USER:PASSWORD@]HOST:PORT`` (or the older ``proxy HOST
PORT``) sends every request through one HTTP proxy:

* **http** URLs go to the proxy as absolute-form requests
  (``GET http://host/path HTTP/1.1``) with a ``Proxy-Authorization: Basic``
  header when the proxy has credentials;
* **https** URLs open a tunnel first: ``CONNECT host:port HTTP/1.1`` (with
  the same ``Proxy-Authorization``), and once the proxy answers 2xx the TLS
  handshake runs to the origin inside the tunnel, with the origin's name as
  SNI and verified as without a proxy (larbin_py.net.tls).  The tunnel
  carries one connection's requests, kept alive like a direct connection.

``noProxy`` names the hosts reached directly: a pattern ``example.com``
matches that host and its subdomains (``.example.com`` only the
subdomains), an address or CIDR range (``10.0.0.0/8``, ``::1``) the hosts
given by such an address, ``*`` every host.

What can go wrong is the proxy's, never the site's: a proxy that cannot be
reached, answers CONNECT with anything but 2xx (407 included: its
credentials are missing or wrong), answers with bytes that are not HTTP, or
does not answer within the connect timeout, ends the request as
``proxyError`` (retried like a connection failure); a 407 to an http
request through the proxy is ``proxyError`` too, never the site's 4xx.

:class:`ConnectReply` reads the CONNECT answer with h11 (a head of at most
``max_size`` bytes; after a 2xx h11 hands back the bytes that follow, which
must be none: the origin's TLS speaks first from our side).  Credentials are
never shown: ``repr`` and :meth:`ProxyConfig.shown` print ``USER:***``.
"""

from __future__ import annotations

import base64
import ipaddress
from dataclasses import dataclass, field
from urllib.parse import unquote

from ..lazyimport import LazyModule

# h11 is imported by the first CONNECT: the configuration reads proxy lines
# with this module and does not need it.
h11 = LazyModule("h11", globals(), "h11")

__all__ = ["ProxyConfig", "ProxyError", "NoProxy", "ConnectReply", "connect_request"]


class ProxyError(Exception):
    """The proxy failed a request: refused, unreachable, an answer that is not 2xx, garbage, silence."""


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """One proxy: ``host``, ``port``, and ``user``/``password`` (both empty: no credentials)."""

    host: str
    port: int
    user: str = ""
    password: str = field(default="", repr=False)

    def __repr__(self) -> str:
        return f"ProxyConfig({self.shown()})"

    @classmethod
    def parse(cls, text: str) -> "ProxyConfig":
        """``http://[USER:PASSWORD@]HOST:PORT`` (userinfo percent-decoded); ValueError naming the fault.

        The error never quotes the password.
        """
        rest = text
        if "://" in rest:
            scheme, _, rest = rest.partition("://")
            if scheme.lower() != "http":
                raise ValueError(f"expected an http:// proxy URL, got the scheme {scheme!r}")
        rest = rest.rstrip("/")
        if "/" in rest or "?" in rest or "#" in rest:
            raise ValueError("expected http://[USER:PASSWORD@]HOST:PORT, with no path")
        userinfo, at, hostport = rest.rpartition("@")
        user = password = ""
        if at:
            user, colon, password = userinfo.partition(":")
            if not colon or not user:
                raise ValueError("expected USER:PASSWORD@ before the proxy's host")
            user, password = unquote(user), unquote(password)
        if hostport.startswith("["):
            host, bracket, tail = hostport[1:].partition("]")
            if not bracket or not tail.startswith(":"):
                raise ValueError("expected [IPV6]:PORT")
            port_text = tail[1:]
        else:
            host, colon, port_text = hostport.rpartition(":")
            if not colon:
                raise ValueError("expected HOST:PORT (the proxy's port is required)")
        if not host or any(c.isspace() for c in host):
            raise ValueError("expected a proxy host")
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise ValueError(f"expected a port in 1..65535, got {port_text!r}")
        return cls(host, int(port_text), user, password)

    def shown(self) -> str:
        """The proxy as a person may see it: ``http://USER:***@HOST:PORT``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        creds = f"{self.user}:***@" if self.user else ""
        return f"http://{creds}{host}:{self.port}"

    def url(self) -> str:
        """The proxy as larbin.conf writes it, password included (for the config file only)."""
        from urllib.parse import quote

        host = f"[{self.host}]" if ":" in self.host else self.host
        creds = f"{quote(self.user, safe='')}:{quote(self.password, safe='')}@" if self.user else ""
        return f"http://{creds}{host}:{self.port}"

    def authorization(self) -> bytes | None:
        """The ``Proxy-Authorization`` value (Basic), or None without credentials."""
        if not self.user:
            return None
        token = base64.b64encode(f"{self.user}:{self.password}".encode("utf-8"))
        return b"Basic " + token


class NoProxy:
    """The ``noProxy`` patterns: which hosts are reached without the proxy."""

    __slots__ = ("patterns", "_all", "_names", "_subs", "_nets")

    def __init__(self, patterns=()) -> None:
        self.patterns = tuple(patterns)
        self._all = False
        self._names: set[str] = set()  # example.com: itself and its subdomains
        self._subs: list[str] = []  # .example.com: subdomains only
        self._nets: list = []
        for p in self.patterns:
            p = p.strip().lower()
            if p == "*":
                self._all = True
                continue
            try:
                self._nets.append(ipaddress.ip_network(p.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            if p.startswith("."):
                self._subs.append(p)
            else:
                self._names.add(p)

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def bypass(self, host: str) -> bool:
        """True when ``host`` (a name or an address, brackets allowed) is reached directly."""
        if self._all:
            return True
        host = host.strip("[]").rstrip(".").lower()
        if self._nets:
            try:
                addr = ipaddress.ip_address(host)
            except ValueError:
                addr = None
            if addr is not None:
                return any(addr in net for net in self._nets if net.version == addr.version)
        if host in self._names:
            return True
        dot = host.find(".")
        while dot >= 0:
            tail = host[dot:]
            if tail[1:] in self._names or tail in self._subs:
                return True
            dot = host.find(".", dot + 1)
        return False


def connect_request(authority: str, proxy: ProxyConfig, user_agent: bytes = b"") -> bytes:
    """The bytes of ``CONNECT authority HTTP/1.1`` (``authority``: ``host:port``, IPv6 in brackets)."""
    target = authority.encode("idna" if not authority.isascii() else "ascii")
    lines = [b"CONNECT %s HTTP/1.1" % target, b"Host: %s" % target]
    if user_agent:
        lines.append(b"User-Agent: %s" % user_agent)
    auth = proxy.authorization()
    if auth is not None:
        lines.append(b"Proxy-Authorization: %s" % auth)
    return b"\r\n".join(lines) + b"\r\n\r\n"


class ConnectReply:
    """Reads a proxy's answer to CONNECT: feed bytes until :attr:`done`.

    After :meth:`feed` returns True, :attr:`status` is the answer's status;
    :meth:`check` raises :class:`ProxyError` unless the tunnel is open.
    A head over ``max_size`` bytes, or bytes h11 refuses, raise
    ProxyError at once.
    """

    __slots__ = ("_h", "status", "reason", "done", "extra", "_size", "_max")

    def __init__(self, authority: str, max_size: int = 64 * 1024) -> None:
        self._h = h11.Connection(h11.CLIENT, max_incomplete_event_size=max_size)
        self._h.send(h11.Request(method=b"CONNECT", target=authority.encode("idna" if not authority.isascii()
                                                                            else "ascii"),
                                 headers=[(b"Host", authority.encode("ascii", "replace"))]))
        self._h.send(h11.EndOfMessage())
        self.status: int | None = None
        self.reason = ""
        self.done = False
        self.extra = b""
        self._size = 0
        self._max = max_size

    def feed(self, data: bytes) -> bool:
        """Take the next bytes (``b""``: the proxy closed); True once the answer is read."""
        self._size += len(data)
        if self._size > self._max:
            raise ProxyError(f"proxy's answer to CONNECT over {self._max} bytes")
        h = self._h
        try:
            h.receive_data(data)
            while True:
                ev = h.next_event()
                if ev is h11.NEED_DATA:
                    if not data:
                        raise ProxyError("proxy closed the connection before answering CONNECT")
                    return False
                if isinstance(ev, h11.InformationalResponse):
                    continue
                if isinstance(ev, h11.Response):
                    self.status = ev.status_code
                    self.reason = ev.reason.decode("latin-1", "replace")
                    self.done = True
                    if 200 <= ev.status_code < 300:
                        self.extra = h.trailing_data[0]
                    return True
                if ev is h11.PAUSED:
                    return False
                if isinstance(ev, h11.ConnectionClosed):
                    raise ProxyError("proxy closed the connection before answering CONNECT")
        except h11.RemoteProtocolError as exc:
            if not data:
                raise ProxyError("proxy closed the connection before answering CONNECT") from None
            raise ProxyError(f"proxy answered CONNECT with bytes that are not HTTP ({exc})") from None

    def check(self) -> None:
        """Raise :class:`ProxyError` unless the proxy opened the tunnel (2xx, nothing after the head)."""
        if not self.done:
            raise ProxyError("proxy did not answer CONNECT")
        if self.status == 407:
            raise ProxyError("proxy refused CONNECT: 407 proxy authentication required"
                             " (credentials missing or refused)")
        if not 200 <= self.status < 300:
            raise ProxyError(f"proxy refused CONNECT: {self.status} {self.reason}".rstrip())
        if self.extra:
            raise ProxyError("proxy sent bytes after its answer to CONNECT, before TLS")
