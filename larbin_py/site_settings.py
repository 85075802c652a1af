"""Per-site settings: the ``site`` block of larbin.conf, one line per host pattern.

A line names a host pattern, then the settings that differ for the hosts it
matches::

    site
        *.example.org   waitDuration=5 header=Accept-Language:fr
        shop.example.com maxPagesBySite=200 cookies=on
        slow.example.net waitDuration=30 UserAgent="MyBot/2.0 (+https://example.net/bot)"
    end

Host patterns: ``example.org`` is that host alone; ``*.example.org`` its
subdomains at any depth (``a.example.org``, ``b.a.example.org``, not
``example.org`` itself: give it a line of its own); ``*`` every host.  The
port is not part of the pattern.  Names are compared in lower case, in
their ASCII form (an internationalized name is written ``xn--...``).  **The
first line whose pattern matches wins**; a host no line matches has the
crawl's own settings.

Settings (each at most once a line, ``header`` repeatable):

==================  =========================================================
``waitDuration=S``  seconds between two requests to this host name (0..3600);
                    the IP's gap stays the crawl's ``waitDuration``, and a
                    longer robots.txt Crawl-delay still wins
``maxPagesBySite=N`` this host's page budget (0: none), instead of the crawl's
``maxBytesBySite=N`` this host's byte budget (0: none), instead of the crawl's
``header=NAME:VALUE`` a request header sent to this host (replaces one of the
                    same name: ``Accept``, ``Accept-Language``...); framing and
                    connection headers (``Host``, ``Content-Length``,
                    ``Transfer-Encoding``, ``Connection``, ``Cookie``...) are
                    refused, and ``User-Agent`` is set with ``UserAgent=``
``UserAgent=TEXT``  the User-Agent sent to this host; its robots.txt rules are
                    matched against this agent's product token
``cookies=on|off``  keep and send this host's cookies, or not, whatever
                    ``useCookies`` says
``dynamic=off|on|scroll`` render this host's pages in Chromium (``on``: the
                    page as loaded; ``scroll``: scrolled to the end first),
                    or never (``off``), instead of what ``dynamicPages`` says
==================  =========================================================

A value with spaces is quoted with double quotes, as for ``UserAgent``
above (``\\"`` inside a quoted value is a quote).  Values are checked as the
crawl's own keys are: a bad line is a configuration error naming the line.

:class:`SiteRule` is one line (frozen, comparable: it is the Config's
value); :class:`SiteSettings` the lookup, a sans-I/O object: ``for_host``
walks the lines in order (a crawl names a handful), and the answer of each
host is cached in a bounded table (:data:`CACHE_SIZE`, cleared when full).
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass
from typing import Iterable

__all__ = ["SiteRule", "SiteSettings", "parse_site_line", "format_site_rule", "FORBIDDEN_HEADERS",
           "DYNAMIC_CHOICES", "CACHE_SIZE", "MAX_RULES"]

#: Request headers a ``header=`` may not set: the request's framing and
#: connection are the fetcher's, cookies the jar's, the agent ``UserAgent=``'s.
FORBIDDEN_HEADERS = frozenset({
    "host", "content-length", "transfer-encoding", "connection", "keep-alive", "te", "trailer", "upgrade",
    "proxy-authorization", "proxy-connection", "cookie", "user-agent", "expect",
})
DYNAMIC_CHOICES = ("off", "on", "scroll")
#: Hosts whose answer :meth:`SiteSettings.for_host` keeps.
CACHE_SIZE = 4096
#: Lines a ``site`` block may hold.
MAX_RULES = 10_000

_HOST_RE = re.compile(r"(?:\*|(?:\*\.)?[a-z0-9_](?:[a-z0-9_-]{0,62})(?:\.[a-z0-9_](?:[a-z0-9_-]{0,62}))*\.?)\Z")
_TOKEN_RE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")  # an HTTP header name (RFC 9110 token)
_VALUE_BAD = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_BOOL = {"on": True, "true": True, "yes": True, "1": True, "off": False, "false": False, "no": False, "0": False}
#: The settings a line may give, in the order a line is written back.
SETTINGS = ("waitDuration", "maxPagesBySite", "maxBytesBySite", "header", "UserAgent", "cookies", "dynamic")


@dataclass(frozen=True, slots=True)
class SiteRule:
    """One line of the ``site`` block: a host pattern and what differs for it (None: the crawl's)."""

    pattern: str
    wait_duration: float | None = None
    max_pages: int | None = None
    max_bytes: int | None = None
    headers: tuple[tuple[str, str], ...] = ()
    user_agent: str | None = None
    cookies: bool | None = None
    dynamic: str | None = None

    def matches(self, host: str) -> bool:
        """True when ``host`` (lower case, ASCII) is one this line names."""
        p = self.pattern
        if p == "*":
            return True
        host = host.rstrip(".")
        if p.startswith("*."):
            return host.endswith(p[1:])
        return host == p

    @property
    def header_bytes(self) -> tuple[tuple[bytes, bytes], ...]:
        """The request headers this line sends, as the fetcher takes them (User-Agent first)."""
        out = [(b"User-Agent", self.user_agent.encode("latin-1", "replace"))] if self.user_agent else []
        out += [(n.encode("ascii"), v.encode("latin-1", "replace")) for n, v in self.headers]
        return tuple(out)


def _host_pattern(word: str) -> str:
    text = word.lower()
    if not text.isascii():
        raise ValueError(f"a host pattern is ASCII: write an internationalized name as xn--..., got {word!r}")
    if not _HOST_RE.match(text):
        raise ValueError(f"expected a host pattern (example.org, *.example.org or *), got {word!r}")
    return text.rstrip(".") if text != "*" else text


def _number(name: str, value: str, low: float, high: float, integer: bool) -> float | int:
    try:
        number = int(value, 10) if integer else float(value)
    except ValueError:
        number = None
    if number is None or (not integer and not math.isfinite(number)) or not low <= number <= high:
        kind = "an integer" if integer else "a number of seconds"
        raise ValueError(f"{name}: expected {kind} in {low:g}..{high:g}, got {value!r}")
    return number


def parse_site_line(words: Iterable[str]) -> SiteRule:
    """The :class:`SiteRule` of one ``site`` line's words; ValueError (one line) if bad."""
    text = " ".join(words)
    try:
        tokens = shlex.split(text, comments=False, posix=True)
    except ValueError as exc:  # an unclosed quote
        raise ValueError(f"{exc} in {text!r}") from None
    if not tokens:
        raise ValueError("expected a host pattern and settings, got nothing")
    pattern = _host_pattern(tokens[0])
    if len(tokens) == 1:
        raise ValueError(f"{tokens[0]}: no setting given (NAME=VALUE: {', '.join(SETTINGS)})")
    values: dict[str, object] = {}
    headers: list[tuple[str, str]] = []
    by_lower = {s.lower(): s for s in SETTINGS}
    for token in tokens[1:]:
        name, eq, value = token.partition("=")
        key = by_lower.get(name.lower())
        if not eq or key is None:
            raise ValueError(f"expected NAME=VALUE with NAME one of {', '.join(SETTINGS)}, got {token!r}")
        if key != "header" and key in values:
            raise ValueError(f"{key} given twice on one line")
        if key == "waitDuration":
            values[key] = float(_number(key, value, 0, 3600, False))
        elif key == "maxPagesBySite":
            values[key] = _number(key, value, 0, 1_000_000_000_000, True)
        elif key == "maxBytesBySite":
            values[key] = _number(key, value, 0, 1 << 60, True)
        elif key == "header":
            headers.append(_header(value))
        elif key == "UserAgent":
            if not value or value != value.strip() or _VALUE_BAD.search(value) or not value.isascii():
                raise ValueError(f"UserAgent: expected printable ASCII text, got {value!r}")
            values[key] = value
        elif key == "cookies":
            if value.lower() not in _BOOL:
                raise ValueError(f"cookies: expected on or off, got {value!r}")
            values[key] = _BOOL[value.lower()]
        else:  # dynamic
            if value.lower() not in DYNAMIC_CHOICES:
                raise ValueError(f"dynamic: expected one of {', '.join(DYNAMIC_CHOICES)}, got {value!r}")
            values[key] = value.lower()
    names = [n.lower() for n, _ in headers]
    if len(set(names)) != len(names):
        raise ValueError("a header is given twice on one line")
    return SiteRule(pattern, wait_duration=values.get("waitDuration"), max_pages=values.get("maxPagesBySite"),
                    max_bytes=values.get("maxBytesBySite"), headers=tuple(headers),
                    user_agent=values.get("UserAgent"), cookies=values.get("cookies"),
                    dynamic=values.get("dynamic"))


def _header(value: str) -> tuple[str, str]:
    name, colon, text = value.partition(":")
    name, text = name.strip(), text.strip()
    if not colon or not _TOKEN_RE.match(name):
        raise ValueError(f"header: expected NAME:VALUE with NAME an HTTP header name, got {value!r}")
    if name.lower() in FORBIDDEN_HEADERS:
        hint = " (use UserAgent=)" if name.lower() == "user-agent" else ""
        raise ValueError(f"header: {name} may not be set per site{hint}")
    if _VALUE_BAD.search(text) or not text.isascii():
        raise ValueError(f"header: {name}'s value must be printable ASCII, got {text!r}")
    return name, text


def _quote(text: str) -> str:
    return text if re.fullmatch(r"[^\s\"'\\#]+", text) else '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def format_site_rule(rule: SiteRule) -> str:
    """The line of ``rule`` as larbin.conf writes it (:func:`parse_site_line` reads it back)."""
    words = [rule.pattern]
    if rule.wait_duration is not None:
        text = repr(rule.wait_duration)
        words.append(f"waitDuration={text[:-2] if text.endswith('.0') else text}")
    if rule.max_pages is not None:
        words.append(f"maxPagesBySite={rule.max_pages}")
    if rule.max_bytes is not None:
        words.append(f"maxBytesBySite={rule.max_bytes}")
    words += [f"header={_quote(f'{n}:{v}')}" for n, v in rule.headers]
    if rule.user_agent is not None:
        words.append(f"UserAgent={_quote(rule.user_agent)}")
    if rule.cookies is not None:
        words.append(f"cookies={'on' if rule.cookies else 'off'}")
    if rule.dynamic is not None:
        words.append(f"dynamic={rule.dynamic}")
    return " ".join(words)


class SiteSettings:
    """The ``site`` lines of a crawl: :meth:`for_host` is the first that matches, or None."""

    __slots__ = ("rules", "_cache")

    def __init__(self, rules: Iterable[SiteRule] = ()) -> None:
        self.rules = tuple(rules)
        self._cache: dict[str, SiteRule | None] = {}

    def __bool__(self) -> bool:
        return bool(self.rules)

    def for_host(self, host: str) -> SiteRule | None:
        """The first line whose pattern matches ``host``, or None (the crawl's settings)."""
        if not self.rules:
            return None
        cache = self._cache
        try:
            return cache[host]
        except KeyError:
            pass
        lowered = host.lower()
        found = next((r for r in self.rules if r.matches(lowered)), None)
        if len(cache) >= CACHE_SIZE:
            cache.clear()
        cache[host] = found
        return found

    def any(self, attr: str) -> bool:
        """True when some line sets ``attr`` (a SiteRule field) at all."""
        return any(getattr(r, attr) not in (None, ()) for r in self.rules)
