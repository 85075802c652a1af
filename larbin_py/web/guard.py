"""Who may talk to the stats server and the input port: Host, Origin, HTTP lines (sans-I/O).

The stats name every URL and host of the crawl, and ``POST /urls`` steers
it.  On loopback they need no token, so the operator's own web browser is
the way in for a hostile page it visits.  Two attacks, and the rules here
that stop them:

* **DNS rebinding.**  A page at ``http://rebind.attacker.example:8081/``
  makes its name resolve to 127.0.0.1; the browser then sends the page's
  requests to the stats server and lets the page read the answers (same
  origin, as far as the browser knows).  Such a request still names the
  attacker's host in its ``Host`` header.  :class:`HostPolicy` accepts only
  a Host naming this server -- ``localhost``, a loopback address (127/8,
  ``::1``), the bind address (``httpBind``), the address the connection
  came in on, or a name listed in ``httpHosts`` -- and the server answers
  anything else ``421 Misdirected Request``, without crawl data.  A Host
  that is an IP literal can never be a rebound name.  The port of the Host
  is not compared: a rebinding page is stopped by its name, and an ``ssh
  -L`` tunnel or a proxy may reach the server under another port.  A
  request without Host (HTTP/1.0; h11 refuses an HTTP/1.1 one with 400) is
  answered: no browser sends one.
* **Cross-site requests.**  Any page may make the browser send a *simple*
  request (a form, ``fetch`` with ``mode: "no-cors"``) to 127.0.0.1: a
  POST with a ``text/plain`` body, cookies and cached HTTP Basic
  credentials included; it cannot read the answer, but the URL is taken.
  :func:`cross_site_reason` refuses a state-changing request whose
  ``Sec-Fetch-Site`` is not ``same-origin`` or ``none``, or whose
  ``Origin`` is not the server's own (``http://`` and the request's own
  Host; ``null`` included).  Browsers send ``Origin`` with every
  cross-origin POST, so the check holds with or without a token.  The
  server adds the last line: without a token it takes only
  ``application/json``, a type no simple request can carry (the browser
  asks first with a CORS preflight, which the server never grants).

The input port is a raw line protocol; a browser can still POST to it
(``http://127.0.0.1:PORT/`` with a ``text/plain`` form), and the body's
lines would be read as URLs.  Every browser request starts with its
request line (``POST / HTTP/1.1``), followed by header lines:
:func:`looks_like_http` recognises both, and the input server closes the
connection at the first one, before the body.

:class:`RefusalLog` writes one line per refusal, at most one per kind in
``interval`` seconds: a hostile page that retries in a loop cannot flood
the log; the lines it would have written are counted in the next one.

Everything here is plain functions and objects (the clock injected): no
sockets.  Host names are compared lower-cased, with one trailing dot
removed (``localhost.`` is ``localhost``); IPv6 addresses in their
compressed form (``[0:0::1]`` is ``[::1]``), IPv4-mapped ones as IPv4.
A Host that does not parse -- userinfo (``a@127.0.0.1``), a path, a
percent sign, a port over 65535, non-ASCII bytes -- names no host of ours.
"""

from __future__ import annotations

import ipaddress
import re
import time
from typing import Callable, Iterable

from ..frontier.addresses import is_loopback

__all__ = [
    "HostPolicy",
    "RefusalLog",
    "cross_site_reason",
    "host_name",
    "looks_like_http",
    "parse_authority",
    "shown",
]

# A DNS-style name: labels of letters, digits, '-' and '_' (seen in the
# wild), joined by dots, one trailing dot allowed.
_NAME_RE = re.compile(r"[a-z0-9_-]+(?:\.[a-z0-9_-]+)*\.?\Z")
_PORT_RE = re.compile(r"[0-9]{0,5}\Z")


def _canonical(host: str) -> str:
    """``host`` (already lower-case, brackets removed) in the form compared."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host[:-1] if host.endswith(".") else host
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def parse_authority(text: str) -> tuple[str, int | None]:
    """``host[:port]`` -> (canonical host, port or None); ValueError (the reason) if malformed.

    IPv6 in brackets (``[::1]:8081``); the host comes back without them.
    An empty port (``host:``) is no port, as RFC 3986 allows.
    """
    if not text.isascii() or not text.isprintable():
        raise ValueError("not printable ASCII")
    text = text.lower()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError("'[' without ']'")
        host, rest = text[1:end], text[end + 1:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError("not an IPv6 address in brackets") from None
        if rest and not rest.startswith(":"):
            raise ValueError("text after ']'")
        port = rest[1:] if rest else ""
    else:
        host, _, port = text.partition(":")
        if not _NAME_RE.match(host):
            raise ValueError("not a host name or address")
    if not _PORT_RE.match(port) or (port and int(port) > 65535):
        raise ValueError("bad port")
    return _canonical(host), int(port) if port else None


def host_name(word: str) -> str:
    """An ``httpHosts`` entry, canonical; ValueError (one line) unless a name or IP without port."""
    bare = word.strip("[]") if word.startswith("[") else word
    try:
        ipaddress.IPv6Address(bare)  # ::1, [::1]: an IPv6 address alone
        return _canonical(bare.lower())
    except ValueError:
        pass
    try:
        host, port = parse_authority(word)
    except ValueError:
        raise ValueError(f"expected a host name or IP address, got {word!r}") from None
    if port is not None or word.endswith(":"):
        raise ValueError(f"expected a host name without a port (any port is accepted), got {word!r}")
    return host


def shown(value: bytes, limit: int = 100) -> str:
    """Untrusted header bytes for a log line or an answer: printable ASCII, bounded, quoted."""
    text = "".join(chr(b) if 32 <= b < 127 else "?" for b in value[:limit])
    return repr(text + ("..." if len(value) > limit else ""))


class HostPolicy:
    """The ``Host`` values the stats server answers; see the module docstring.

    ``bind``: the listening address (``httpBind``); ``names``: ``httpHosts``.
    """

    def __init__(self, bind: str, names: Iterable[str] = ()) -> None:
        self.names = frozenset({"localhost", *(host_name(n) for n in names)})
        try:
            self.names |= {host_name(bind)}
        except ValueError:  # a bind address no Host can spell (e.g. a zone id): only loopback names
            pass

    def allows(self, host: str, local: str | None = None) -> bool:
        """True when canonical ``host`` names this server; ``local``: the address the connection came in on."""
        if host in self.names or is_loopback(host):
            return True
        return local is not None and host == _canonical(local.lower().split("%", 1)[0])

    def check(self, value: bytes | None, local: str | None = None) -> str | None:
        """None when a request with Host ``value`` (None: absent) may be answered, else why not."""
        if value is None:
            return None
        try:
            host, _port = parse_authority(value.decode("latin-1").strip())
        except ValueError as exc:
            return f"Host {shown(value)} is malformed ({exc})"
        if self.allows(host, local):
            return None
        return (f"Host {shown(value)} is not a name of this server "
                "(it answers to localhost, loopback addresses, httpBind and httpHosts)")


def _origin(value: bytes) -> tuple[str, str, int | None]:
    """(scheme, host, port) of an ``Origin`` value; ValueError if it is not one origin."""
    text = value.decode("latin-1").strip()
    scheme, sep, authority = text.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        raise ValueError("not an http(s) origin")
    host, port = parse_authority(authority)
    return scheme.lower(), host, port


def cross_site_reason(origins: list[bytes], fetch_sites: list[bytes], host: bytes | None) -> str | None:
    """Why a state-changing request comes from a page of another origin, or None.

    ``origins``, ``fetch_sites``: the request's ``Origin`` and
    ``Sec-Fetch-Site`` values (usually zero or one each); ``host``: its
    ``Host`` (already accepted by :class:`HostPolicy`, None if absent).
    No Origin and no Sec-Fetch-Site is an API client (curl, a script):
    None.
    """
    for site in fetch_sites:
        if site.strip().lower() not in (b"same-origin", b"none"):
            return f"Sec-Fetch-Site {shown(site)}: sent by a page of another origin"
    for origin in origins:
        if origin.strip().lower() == b"null":
            return "Origin 'null': sent by a sandboxed page, a file or a redirect"
        try:
            scheme, o_host, o_port = _origin(origin)
        except ValueError as exc:
            return f"Origin {shown(origin)} is unreadable ({exc})"
        if host is None:
            return f"Origin {shown(origin)} without Host: its origin cannot be checked"
        try:
            r_host, r_port = parse_authority(host.decode("latin-1").strip())
        except ValueError:
            return f"Host {shown(host)} is malformed"
        if scheme != "http" or (o_host, o_port or 80) != (r_host, r_port or 80):
            own = host.decode("latin-1").strip()  # parsed above: printable ASCII
            return f"Origin {shown(origin)} is not this server's (http://{own})"
    return None


# An HTTP request line (any method token, a target, the version) or a
# header line (a field name, ':' then a space or the line's end: what
# browsers send).  A URL never matches: no space in it, and after its
# scheme's ':' comes '//' or a non-space.
_REQUEST_LINE_RE = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+ +\S+ +HTTP/[0-9]")
_METHOD_RE = re.compile(rb"(?:GET|HEAD|POST|PUT|DELETE|OPTIONS|PATCH|CONNECT|TRACE|PRI) ")
_HEADER_RE = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+:(?:[ \t]|\Z)")
_BROWSER_HEADERS = re.compile(
    rb"(?:host|origin|referer|user-agent|accept(?:-[a-z]+)?|content-(?:type|length)|cookie|connection"
    rb"|transfer-encoding|upgrade-insecure-requests|authorization|sec-[a-z-]+|cache-control|pragma)"
    rb"[ \t]*:", re.IGNORECASE)


def looks_like_http(line: bytes) -> bool:
    """True when ``line`` (stripped) is an HTTP request or header line, not a URL."""
    return bool(_REQUEST_LINE_RE.match(line) or _METHOD_RE.match(line) or _HEADER_RE.match(line)
                or _BROWSER_HEADERS.match(line))


class RefusalLog:
    """One log line per refusal, at most one per ``kind`` every ``interval`` seconds.

    The refusals met in between are counted and told in the next line of
    their kind (``... (and 41 more like it since)``).
    """

    def __init__(self, log: Callable[[str], None], *, interval: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log = log
        self.interval = interval
        self.clock = clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def refused(self, kind: str, message: str) -> bool:
        """Log ``message`` unless a line of ``kind`` was written lately; True when written."""
        now = self.clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.interval:
            self._held[kind] = self._held.get(kind, 0) + 1
            return False
        held = self._held.pop(kind, 0)
        self._last[kind] = now
        self.log(message + (f" (and {held} more like it since)" if held else ""))
        return True
