"""A cookie jar for a crawler (RFC 6265), sans-I/O, with bounded memory.

``useCookies`` makes the engine keep one :class:`CookieJar`: each answer's
``Set-Cookie`` headers go in (:meth:`CookieJar.receive`), and each page
request carries the ``Cookie`` header the jar makes for its URL
(:meth:`CookieJar.header_for`).  Time is the caller's ``now`` (wall-clock
seconds, since ``Expires`` is a date and the jar outlives a process), so
tests drive it.

What is honoured (RFC 6265 section 5):

* **Domain**: without the attribute a cookie is *host-only* (sent to that
  exact host).  With it, the cookie goes to the domain and its subdomains;
  the request host must domain-match it, so a server can only name its own
  host or a parent of it.  A leading dot is ignored.
* **Path**: the cookie goes to request paths that path-match it; without
  the attribute (or with one not starting with ``/``) the default-path of
  the request (its directory) is used.
* **Expires** / **Max-Age** (Max-Age wins): a past date deletes the cookie;
  dates are parsed by the RFC's cookie-date algorithm.  A lifetime is cut
  to 400 days (as RFC 6265bis says).  A cookie without either is a *session*
  cookie; the session is the whole crawl, ``--reload`` included.
* **Secure**: sent over https only, and accepted from https only (an http
  answer may not set a Secure cookie, nor replace one: RFC 6265bis).
* ``HttpOnly`` means nothing to a crawler (no scripts); ``SameSite`` is
  ignored (every request is a top-level one made by the crawler itself).

No public suffix list
    A browser refuses a Domain that is a public suffix (``com``, ``co.uk``,
    ``github.io``) using Mozilla's list.  larbin_py has no copy of it, so it
    refuses only what it can tell without one: a Domain with a single label
    (``com``, ``localhost``) unless it is the request host itself (then the
    cookie is host-only), and a Domain on an IP address unless it is that
    address.  A site under a multi-label suffix (``a.example.co.uk``) *can*
    set a cookie for ``co.uk``, which then goes to every ``*.co.uk`` site the
    crawl visits.  A crawl that must not leak cookies between sites should
    use ``lockSite`` or leave ``useCookies`` off.

Limits (so a hostile server cannot take memory or time)
    ==========================  ===============================================
    ``MAX_COOKIE_SIZE`` 4096    bytes of a cookie's name and value; longer ones
                                are refused (``tooBig``)
    ``MAX_ATTRIBUTE`` 1024      bytes of an attribute's value; a longer one is
                                ignored (as if absent)
    ``MAX_PER_RESPONSE`` 100    Set-Cookie headers read from one answer; the
                                rest are refused (``tooMany``)
    ``MAX_PER_DOMAIN`` 50       cookies kept per domain; past it the least
                                recently used of that domain goes (``evicted``)
    ``MAX_COOKIES`` 3000        cookies in the jar; past it the least recently
                                used of all goes (``evicted``)
    ``MAX_JAR_BYTES`` 1 MiB     bytes of names, values, domains and paths in
                                the jar; past it, the same
    ``MAX_HEADER`` 8192         bytes of one Cookie header: cookies that do not
                                fit (the least specific paths) are not sent
                                (``notSent``)
    ==========================  ===============================================

    Refused cookies are counted by reason in :attr:`CookieJar.refused`:
    ``badSyntax`` (no ``=``, an empty name, control or non-ASCII characters),
    ``tooBig``, ``tooMany``, ``domain`` (a Domain the request host may not
    set), ``secure`` (Secure from http).  Nothing in a header raises.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from typing import Iterable

from ..lazyimport import LazyModule
from ..owner_only import opener

# calendar (and the datetime it imports, 6 ms of a crawl's start) is imported
# by the first cookie with an Expires date.
calendar = LazyModule("calendar", globals(), "calendar")

__all__ = ["CookieJar", "load_jar", "save_jar", "COOKIES_FILE"]

MAX_COOKIE_SIZE = 4096
MAX_ATTRIBUTE = 1024
MAX_PER_RESPONSE = 100
MAX_PER_DOMAIN = 50
MAX_COOKIES = 3000
MAX_JAR_BYTES = 1 << 20
MAX_HEADER = 8192
#: The longest lifetime kept (RFC 6265bis: 400 days).
MAX_AGE = 400 * 86400
#: Expired cookies are swept from the whole jar at most this often (seconds).
PURGE_INTERVAL = 60.0
#: The jar's file in stateDir (written at each checkpoint, read by --reload).
COOKIES_FILE = "cookies.json"
FILE_FORMAT = "larbin_py-cookies"

#: A name: visible ASCII.  A value: visible ASCII and inner spaces.  Both
#: without ``;`` (the pair ends there) -- so every Cookie header the jar
#: makes is a valid header value, and the fetcher can send it unchecked.
_NAME = re.compile(r"[\x21-\x3a\x3c-\x7e]+")
_VALUE = re.compile(r"(?:[\x21-\x3a\x3c-\x7e]+(?: +[\x21-\x3a\x3c-\x7e]+)*)?")
_IPV4 = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
#: A host name as the URL normalizer leaves it (a Domain attribute must be one, with a dot).
_HOST = re.compile(r"[a-z0-9_-]+(?:\.[a-z0-9_-]+)*")
_WSP = " \t"
_MAX_AGE = re.compile(r"-?[0-9]{1,18}")


class Cookie:
    """One stored cookie (RFC 6265 section 5.3's fields a crawler needs)."""

    __slots__ = ("name", "value", "domain", "host_only", "path", "secure", "expires", "created", "size")

    def __init__(self, name: str, value: str, domain: str, host_only: bool, path: str,
                 secure: bool, expires: float | None, created: float) -> None:
        self.name = name
        self.value = value
        self.domain = domain
        self.host_only = host_only
        self.path = path
        self.secure = secure
        self.expires = expires  # wall time; None: a session cookie
        self.created = created
        self.size = len(name) + len(value) + len(domain) + len(path)

    def to_list(self) -> list:
        return [self.name, self.value, self.domain, self.host_only, self.path, self.secure,
                self.expires, self.created]

    def __repr__(self) -> str:
        return f"Cookie({self.name}={self.value!r} {self.domain}{self.path})"


# ----------------------------------------------------------------------
# URLs, domains, paths (RFC 6265 section 5.1)
# ----------------------------------------------------------------------
def _split(url: str) -> tuple[bool, str, str] | None:
    """``(secure, canonical host, path)`` of an http(s) URL, or None."""
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in ("http", "https"):
        return None
    end = len(rest)
    for ch in "/?#":
        i = rest.find(ch, 0, end)
        if i >= 0:
            end = i
    authority = rest[:end].rpartition("@")[2]
    path = rest[end:]
    cut = len(path)
    for ch in "?#":
        i = path.find(ch, 0, cut)
        if i >= 0:
            cut = i
    path = path[:cut] or "/"
    if authority.startswith("["):
        host = authority[:authority.find("]") + 1]
    else:
        host = authority.partition(":")[0]
    host = host.lower().rstrip(".")
    if not host:
        return None
    return scheme == "https", host, path


def _is_ip(host: str) -> bool:
    return host.startswith("[") or _IPV4.fullmatch(host) is not None


def domain_match(host: str, domain: str) -> bool:
    """RFC 6265 5.1.3: ``host`` is ``domain`` or a name under it (never for an IP)."""
    if host == domain:
        return True
    return (host.endswith(domain) and host[-len(domain) - 1] == "." and not _is_ip(host))


def default_path(path: str) -> str:
    """RFC 6265 5.1.4: the request path's directory."""
    if not path.startswith("/"):
        return "/"
    cut = path.rfind("/")
    return path[:cut] if cut > 0 else "/"


def path_match(path: str, cookie_path: str) -> bool:
    """RFC 6265 5.1.4: ``path`` is ``cookie_path`` or under it."""
    if not path.startswith(cookie_path):
        return False
    return (len(path) == len(cookie_path) or cookie_path.endswith("/")
            or path[len(cookie_path)] == "/")


# ----------------------------------------------------------------------
# Dates (RFC 6265 5.1.1)
# ----------------------------------------------------------------------
_DELIM = re.compile(r"[\x09\x20-\x2f\x3b-\x40\x5b-\x60\x7b-\x7e]+")
_TIME = re.compile(r"(\d{1,2}):(\d{1,2}):(\d{1,2})(?:[^\d]|$)")
_DAY = re.compile(r"(\d{1,2})(?:[^\d]|$)")
_YEAR = re.compile(r"(\d{2,4})(?:[^\d]|$)")
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")


def parse_cookie_date(text: str) -> float | None:
    """Seconds since the epoch of a cookie-date, or None when it is not one.

    The RFC's algorithm: the first token that looks like a time, then a day
    of month, a month, a year, in any order; anything else is ignored.
    """
    hms = day = month = year = None
    for token in _DELIM.split(text[:MAX_ATTRIBUTE]):
        if not token:
            continue
        if hms is None:
            m = _TIME.match(token)
            if m:
                hms = tuple(int(x) for x in m.groups())
                continue
        if day is None:
            m = _DAY.match(token)
            if m:
                day = int(m.group(1))
                continue
        if month is None and token[:3].lower() in _MONTHS:
            month = _MONTHS.index(token[:3].lower()) + 1
            continue
        if year is None:
            m = _YEAR.match(token)
            if m:
                year = int(m.group(1))
                continue
    if hms is None or day is None or month is None or year is None:
        return None
    if 70 <= year <= 99:
        year += 1900
    elif 0 <= year <= 69:
        year += 2000
    h, mi, s = hms
    if not (1 <= day <= 31) or year < 1601 or h > 23 or mi > 59 or s > 59:
        return None
    if day > calendar.monthrange(year, month)[1]:
        return None
    return float(calendar.timegm((year, month, day, h, mi, s, 0, 0, 0)))


# ----------------------------------------------------------------------
# The jar
# ----------------------------------------------------------------------
class CookieJar:
    """Cookies by domain; see the module docstring for the rules and limits.

    ``_by_domain`` maps a domain to its cookies keyed ``(name, path)``, and
    ``_lru`` holds every cookie, least recently used (set or sent) first, so
    an eviction costs O(1) whatever a server sends.
    """

    def __init__(self) -> None:
        self._by_domain: dict[str, dict[tuple[str, str], Cookie]] = {}
        self._lru: dict[tuple[str, str, str], Cookie] = {}  # insertion order = use order
        self.bytes = 0
        self.refused: Counter[str] = Counter()
        self.evicted = 0
        self.expired = 0
        self.not_sent = 0
        self.accepted = 0
        #: Bumped at every change; the engine saves the jar only when it moved.
        self.changes = 0
        self._next_purge = 0.0

    def __len__(self) -> int:
        return len(self._lru)

    @property
    def stats(self) -> dict:
        return {"cookies": len(self._lru), "bytes": self.bytes, "accepted": self.accepted,
                "refused": dict(self.refused), "evicted": self.evicted, "expired": self.expired,
                "not_sent": self.not_sent}

    def cookies(self) -> list[Cookie]:
        """Every cookie kept (expired ones included until swept)."""
        return list(self._lru.values())

    # -- receiving -------------------------------------------------------
    def receive(self, url: str, values: Iterable, now: float) -> int:
        """Store the cookies of ``Set-Cookie`` ``values`` (bytes or str) of an answer to ``url``.

        Returns how many were stored (or deleted, by an expiry in the past).
        Never raises on what a server sent.
        """
        parts = _split(url)
        if parts is None:
            return 0
        secure, host, path = parts
        stored = 0
        for i, value in enumerate(values):
            if i >= MAX_PER_RESPONSE:
                self.refused["tooMany"] += 1
                continue
            if isinstance(value, (bytes, bytearray)):
                value = bytes(value).decode("latin-1")
            elif not isinstance(value, str):
                self.refused["badSyntax"] += 1
                continue
            reason = self._receive_one(value, secure, host, path, now)
            if reason is None:
                stored += 1
            else:
                self.refused[reason] += 1
        return stored

    def _receive_one(self, line: str, secure_req: bool, host: str, req_path: str,
                     now: float) -> str | None:
        """Parse and store one set-cookie-string (RFC 6265 5.2, 5.3); the refusal's reason or None."""
        pair, _, attrs = line.partition(";")
        name, eq, value = pair.partition("=")
        if not eq:
            return "badSyntax"
        name = name.strip(_WSP)
        value = value.strip(_WSP)
        if len(name) + len(value) > MAX_COOKIE_SIZE:
            return "tooBig"
        if not name or not _NAME.fullmatch(name) or not _VALUE.fullmatch(value):
            return "badSyntax"
        domain = path = None
        expires = max_age = None
        secure = False
        for attr in attrs.split(";") if attrs else ():
            key, _, aval = attr.partition("=")
            key = key.strip(_WSP).lower()
            aval = aval.strip(_WSP)
            if len(aval) > MAX_ATTRIBUTE:
                continue
            if key == "domain":
                domain = aval  # the last one wins (RFC 6265 5.3 step 4)
            elif key == "path":
                path = aval
            elif key == "expires":
                when = parse_cookie_date(aval)
                if when is not None:
                    expires = when
            elif key == "max-age":
                if _MAX_AGE.fullmatch(aval):  # else ignored (RFC 6265 5.2.2)
                    max_age = int(aval)
            elif key == "secure":
                secure = True
        if secure and not secure_req:
            return "secure"
        # Domain (5.3 steps 4-6), without a public suffix list: see the module docstring.
        host_only = True
        domain = domain.lower().lstrip(".") if domain else ""
        if domain:
            if "." not in domain or _is_ip(domain) or _is_ip(host):
                if domain != host:  # a single label (a TLD?) or an address: only the host itself
                    return "domain"
            elif not _HOST.fullmatch(domain) or not domain_match(host, domain):
                return "domain"
            else:
                host_only = False
        if host_only:
            domain = host
        if path is None or not path.startswith("/"):
            path = default_path(req_path)
        elif not _VALUE.fullmatch(path):
            return "badSyntax"
        if max_age is not None:
            expiry = now + min(max_age, MAX_AGE) if max_age > 0 else -1.0
        elif expires is not None:
            expiry = min(expires, now + MAX_AGE)
        else:
            expiry = None
        key = (name, path)
        cookies = self._by_domain.get(domain)
        old = cookies.get(key) if cookies else None
        if old is not None and old.secure and not secure_req:
            return "secure"
        if expiry is not None and expiry <= now:
            if old is not None:
                self._remove(old)
                self.changes += 1
            return None
        created = old.created if old is not None else now
        if old is not None:
            self._remove(old)
        cookie = Cookie(name, value, domain, host_only, path, secure, expiry, created)
        self._add(cookie, now)
        self.accepted += 1
        return None

    def _add(self, cookie: Cookie, now: float) -> None:
        cookies = self._by_domain.setdefault(cookie.domain, {})
        cookies[(cookie.name, cookie.path)] = cookie
        self._lru[(cookie.domain, cookie.name, cookie.path)] = cookie
        self.bytes += cookie.size
        self.changes += 1
        if len(cookies) > MAX_PER_DOMAIN:
            self._shrink_domain(cookies, now)
        if len(self._lru) > MAX_COOKIES or self.bytes > MAX_JAR_BYTES:
            if now >= self._next_purge:
                self.purge(now)
            while len(self._lru) > MAX_COOKIES or self.bytes > MAX_JAR_BYTES:
                self._remove(next(iter(self._lru.values())))
                self.evicted += 1

    def _shrink_domain(self, cookies: dict, now: float) -> None:
        """One domain has too many: its expired ones go, then its least recently used."""
        for c in [c for c in cookies.values() if c.expires is not None and c.expires <= now]:
            self._remove(c)
            self.expired += 1
        while len(cookies) > MAX_PER_DOMAIN:  # a domain's dict is in use order too
            self._remove(next(iter(cookies.values())))
            self.evicted += 1

    def _remove(self, cookie: Cookie) -> None:
        cookies = self._by_domain.get(cookie.domain)
        if cookies is not None and cookies.get((cookie.name, cookie.path)) is cookie:
            del cookies[(cookie.name, cookie.path)]
            if not cookies:
                del self._by_domain[cookie.domain]
        if self._lru.pop((cookie.domain, cookie.name, cookie.path), None) is not None:
            self.bytes -= cookie.size

    def purge(self, now: float) -> int:
        """Drop every expired cookie; returns how many."""
        self._next_purge = now + PURGE_INTERVAL
        dead = [c for c in self._lru.values() if c.expires is not None and c.expires <= now]
        for c in dead:
            self._remove(c)
        self.expired += len(dead)
        if dead:
            self.changes += 1
        return len(dead)

    # -- sending ---------------------------------------------------------
    def header_for(self, url: str, now: float) -> bytes | None:
        """The ``Cookie`` header value for a request of ``url``, or None (RFC 6265 5.4).

        Cookies with longer paths first, then the older ones; at most
        ``MAX_HEADER`` bytes.  The cookies sent count as used (for eviction).
        """
        if not self._lru:
            return None
        parts = _split(url)
        if parts is None:
            return None
        secure, host, path = parts
        found: list[Cookie] = []
        by_domain = self._by_domain
        for domain in _domains_of(host):
            cookies = by_domain.get(domain)
            if not cookies:
                continue
            for c in list(cookies.values()):
                if c.expires is not None and c.expires <= now:
                    self._remove(c)
                    self.expired += 1
                    self.changes += 1
                    continue
                if c.host_only and domain != host:
                    continue
                if c.secure and not secure:
                    continue
                if path_match(path, c.path):
                    found.append(c)
        if not found:
            return None
        found.sort(key=lambda c: (-len(c.path), c.created))
        out: list[str] = []
        size = 0
        lru = self._lru
        for c in found:
            n = len(c.name) + len(c.value) + 3
            if size + n > MAX_HEADER + 2:
                self.not_sent += 1
                continue
            size += n
            out.append(f"{c.name}={c.value}")
            key = (c.domain, c.name, c.path)
            lru[key] = lru.pop(key)  # now the most recently used, in the jar and in its domain
            mine = by_domain[c.domain]
            mine[key[1:]] = mine.pop(key[1:])
        return "; ".join(out).encode("ascii")

    # -- keeping across --reload ------------------------------------------
    def to_json(self) -> list:
        """The cookies as JSON-able lists (see :meth:`from_json`)."""
        return [c.to_list() for c in self._lru.values()]

    @classmethod
    def from_json(cls, records, now: float) -> tuple["CookieJar", int]:
        """A jar of the saved ``records``, without the expired ones, and how many were damaged.

        Each record is checked as a Set-Cookie would be: a damaged or edited
        file cannot put in the jar what a server could not.
        """
        jar = cls()
        damaged = 0
        for rec in records if isinstance(records, list) else ():
            cookie = _cookie_of(rec)
            if cookie is None:
                damaged += 1
                continue
            if cookie.expires is not None and cookie.expires <= now:
                jar.expired += 1
                continue
            jar._add(cookie, now)
        jar.changes = 0
        jar.evicted = 0
        return jar, damaged


def _domains_of(host: str) -> list[str]:
    """The domains whose cookies may go to ``host``: itself and its parents with a dot."""
    if _is_ip(host):
        return [host]
    out = [host]
    i = host.find(".")
    while i >= 0:
        rest = host[i + 1:]
        if "." not in rest:
            break  # a single label is never a cookie's domain (unless it is the host)
        out.append(rest)
        i = host.find(".", i + 1)
    return out


def _cookie_of(rec) -> Cookie | None:
    """A saved record as a :class:`Cookie`, or None when it is not a valid one."""
    if not isinstance(rec, list) or len(rec) != 8:
        return None
    name, value, domain, host_only, path, secure, expires, created = rec
    if not (isinstance(name, str) and isinstance(value, str) and isinstance(domain, str)
            and isinstance(path, str) and isinstance(host_only, bool) and isinstance(secure, bool)
            and (expires is None or isinstance(expires, (int, float)))
            and isinstance(created, (int, float))):
        return None
    if (not _NAME.fullmatch(name) or not _VALUE.fullmatch(value)
            or len(name) + len(value) > MAX_COOKIE_SIZE or not path.startswith("/")
            or not _VALUE.fullmatch(path) or not domain or not domain.isascii()
            or not (_HOST.fullmatch(domain) or (domain.startswith("[") and domain.endswith("]")))
            or (not host_only and "." not in domain)):
        return None
    return Cookie(name, value, domain, host_only, path, secure,
                  float(expires) if expires is not None else None, float(created))


# ----------------------------------------------------------------------
# At the edge: the jar's file in stateDir
# ----------------------------------------------------------------------
def save_jar(state_dir: str, records: list) -> None:
    """Write a jar's ``records`` (:meth:`CookieJar.to_json`) to ``stateDir/cookies.json`` atomically.

    A temporary file, fsync, rename, fsync of the folder: a crash leaves the
    old jar or the new one.  It takes the records, not the jar, so the
    writing can move off the event loop with the rest of a checkpoint.
    """
    path = os.path.join(state_dir, COOKIES_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="ascii", opener=opener) as f:
        json.dump({"format": FILE_FORMAT, "version": 1, "cookies": records}, f,
                  separators=(",", ":"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(state_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load_jar(state_dir: str, now: float) -> tuple[CookieJar, int]:
    """The jar saved in ``stateDir`` (empty if none), and how many records were damaged.

    An unreadable file counts as one damaged record: the crawl goes on
    without its cookies rather than stopping.
    """
    path = os.path.join(state_dir, COOKIES_FILE)
    if not os.path.exists(path):
        return CookieJar(), 0
    try:
        with open(path, encoding="ascii") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return CookieJar(), 1
    if not isinstance(doc, dict) or doc.get("format") != FILE_FORMAT or doc.get("version") != 1:
        return CookieJar(), 1
    return CookieJar.from_json(doc.get("cookies"), now)
