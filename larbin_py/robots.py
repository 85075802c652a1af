"""robots.txt rules (RFC 9309), sans-I/O.

Parsing
-------
``RobotsTxt.parse(body)`` never raises.  ``body`` is ``bytes`` (the fetched
octets) or ``str``.  Only the first :data:`MAX_BODY` octets (512000 = 500 KiB)
are read; when the body is cut, the last, incomplete line is dropped too.
A body cut before it reaches the parser (the fetcher stopped at its size
limit, or the engine keeps only what it parses) goes through
:func:`cut_at_cap` first, which drops that line as the parser would: a
``Disallow: /images/`` cut to ``Disallow: /`` must not forbid the whole
site, nor a cut ``Allow:`` allow too much.  A
UTF-8 byte order mark at the very start is skipped, as are its partial forms
(``EF`` or ``EF BB``, as Google's parser does); the rest is decoded as UTF-8
with replacement.  Lines end at CR, LF or CRLF.

A line is ``key: value`` with an optional ``# comment``.  As in Google's
parser, a line without ``:`` is accepted when it is exactly two words
(``disallow /``).  Keys are matched case-insensitively by prefix, with the
typos major crawlers accept: ``user-agent`` (``useragent``, ``user agent``),
``allow``, ``disallow`` (``dissallow``, ``dissalow``, ``disalow``,
``diasllow``, ``disallaw``), ``sitemap`` (``site-map``) and ``crawl-delay``
(``crawldelay``, ``crawl delay``).  Other keys are ignored and do not split a
group.

Groups
------
Consecutive ``user-agent`` lines open one group; an ``allow`` or
``disallow`` line after them closes the list, so the next ``user-agent`` line
opens a new group.  A group's agent value is read as Google does: ``*``
(alone, or followed by a space) is the global group; otherwise the value's
leading run of ``[A-Za-z_-]`` is its product token (``FooBot/1.2`` and
``FooBot Images`` both name ``foobot``).  Rules before any ``user-agent`` line
are ignored.

Matching
--------
``allowed(agent, url)`` takes the crawler's *product token* (see
:func:`product_token`; pass ``product_token(config.user_agent)``, not the
whole User-Agent) and compares it case-insensitively with the groups' tokens.
The rules of every group naming the agent are merged; when no group names it,
the rules of every ``*`` group are merged; with neither, everything is
allowed.  Among the matching rules the longest pattern wins (its length in
octets as Google counts it: the pattern with non-ASCII octets written as
``%XX``), and ``allow`` wins a tie.  ``*`` matches any run of characters and a
final ``$`` anchors the end.  Rule paths and URL paths are compared after the
same normalization: non-ASCII characters become UTF-8 ``%XX``, escapes get
upper-case hex, and escapes of unreserved characters (``A-Z a-z 0-9 - . _ ~``)
are decoded; escapes of reserved characters (``%2F``, ``%3F``, ``%2A``, ...)
stay as they are.  ``/robots.txt`` itself is always allowed.  As in Google's
parser, ``Allow: /dir/index.html`` (or ``index.htm``) also allows ``/dir/``.

The agent's merged rule set is chosen once per (rules, agent) and cached
on the :class:`RobotsTxt`.  It matches plain prefixes by dict lookups and
wildcards by a linear scan at first, then, after :data:`_COMPILE_AFTER`
calls, by regexes compiled from all its rules (about 2.5 us per call, URL
split included, for a typical 50-rule file).

Fetch policy
------------
The engine fetches ``/robots.txt`` and applies :func:`robots_decision` to the
outcome; see the constants and :class:`RobotsDecision` below.
"""

from __future__ import annotations

import enum
import math
import re
from typing import Iterable

__all__ = [
    "CACHE_TTL",
    "MAX_BODY",
    "MAX_ERROR_ATTEMPTS",
    "MAX_REDIRECTS",
    "RETRY_DELAY_CAP",
    "RobotsDecision",
    "RobotsTxt",
    "cut_at_cap",
    "normalize_path",
    "product_token",
    "robots_decision",
    "robots_retry_delay",
]

# --------------------------------------------------------------------------
# Fetch policy
# --------------------------------------------------------------------------

#: Redirects followed when fetching robots.txt (RFC 9309 §2.3.1.2: at least
#: five).  Past that the file counts as unavailable: allow all.
MAX_REDIRECTS = 5

#: Seconds a fetched robots.txt (or an "allow all"/"disallow all" verdict
#: reached from a final status) is reused before it is fetched again
#: (RFC 9309 §2.4: SHOULD NOT be used for more than 24 hours).
CACHE_TTL = 86400.0

#: Octets of a robots.txt body that are read (RFC 9309 §2.5: at least
#: 500 KiB).  The fetcher may stop reading there; :meth:`RobotsTxt.parse`
#: ignores anything after it.
MAX_BODY = 512000

#: Consecutive failed robots.txt fetches (unreachable, 5xx, 429) after which
#: the engine gives up on the site: its queued URLs are forgotten with the
#: reason ``forbiddenRobots``.  Until then the site is treated as
#: "disallow all" and the fetch is retried after :func:`robots_retry_delay`.
MAX_ERROR_ATTEMPTS = 3

#: Upper bound, in seconds, of :func:`robots_retry_delay`.
RETRY_DELAY_CAP = 3600.0


class RobotsDecision(enum.Enum):
    """What the engine does with the outcome of a robots.txt fetch."""

    #: 2xx: parse the body with :meth:`RobotsTxt.parse`.
    PARSE = "parse"
    #: 3xx: follow ``Location`` (at most :data:`MAX_REDIRECTS` times).
    FOLLOW = "follow"
    #: "Unavailable" (4xx except 429, or too many redirects): no
    #: restrictions, use :meth:`RobotsTxt.allow_all`.
    ALLOW_ALL = "allow_all"
    #: "Unreachable" (no answer, 5xx, 429, or a status that is not HTTP):
    #: use :meth:`RobotsTxt.disallow_all` for now and fetch again after
    #: :func:`robots_retry_delay`; give up after :data:`MAX_ERROR_ATTEMPTS`.
    DISALLOW_ALL = "disallow_all"


def robots_decision(status: int | None, redirects: int = 0) -> RobotsDecision:
    """Map the final status of a robots.txt fetch to a :class:`RobotsDecision`.

    ``status`` is the HTTP status code, or None when the server could not be
    reached (DNS failure, connection failure, timeout, broken response).
    ``redirects`` is how many redirects were already followed to get this
    response; a 3xx arriving after :data:`MAX_REDIRECTS` of them means
    ALLOW_ALL (RFC 9309 §2.3.1.2).

    429 (Too Many Requests) is treated like a 5xx, as Google does: the
    server is alive but refuses us now, which is no permission to crawl.
    """
    if status is None:
        return RobotsDecision.DISALLOW_ALL
    if 200 <= status < 300:
        return RobotsDecision.PARSE
    if 300 <= status < 400:
        if redirects >= MAX_REDIRECTS:
            return RobotsDecision.ALLOW_ALL
        return RobotsDecision.FOLLOW
    if status == 429:
        return RobotsDecision.DISALLOW_ALL
    if 400 <= status < 500:
        return RobotsDecision.ALLOW_ALL
    return RobotsDecision.DISALLOW_ALL  # 5xx, and anything that is not HTTP


def robots_retry_delay(attempt: int, base: float) -> float:
    """Seconds to wait before fetching robots.txt again.

    ``attempt`` counts the consecutive failed fetches so far (1 after the
    first failure).  The delay is ``base * 2 ** (attempt - 1)``, capped at
    :data:`RETRY_DELAY_CAP`.  An attempt below 1 counts as 1; a ``base``
    that is not positive (or NaN) gives 0.
    """
    if not base > 0.0:  # negative, zero or NaN
        return 0.0
    if attempt < 1:
        attempt = 1
    if attempt > 64:  # 2**63 * any positive base is past the cap anyway
        return RETRY_DELAY_CAP
    return min(base * (2.0 ** (attempt - 1)), RETRY_DELAY_CAP)


# --------------------------------------------------------------------------
# Agents
# --------------------------------------------------------------------------

_PRODUCT_END = re.compile(r"[/\s]")
_GROUP_TOKEN = re.compile(r"[A-Za-z_-]*")


def product_token(user_agent: str) -> str:
    """The product token of a User-Agent: its text up to the first ``/`` or
    whitespace (``"larbin_py/2.0 (+http://x)"`` -> ``"larbin_py"``).

    This is what :meth:`RobotsTxt.allowed` expects.  Groups are keyed by
    ``[A-Za-z_-]`` runs (RFC 9309 §2.2.1), so a token holding other
    characters (``bot2``, ``my.bot``) is named by no group and only ever
    gets the ``*`` rules.
    """
    user_agent = user_agent.strip()
    m = _PRODUCT_END.search(user_agent)
    return user_agent[: m.start()] if m else user_agent


def _group_token(value: str) -> str | None:
    """A user-agent line's value as a group key: ``"*"`` for the global group,
    else the lower-cased leading ``[A-Za-z_-]`` run (None when empty)."""
    if value[:1] == "*" and (len(value) == 1 or value[1] in _WS):
        return "*"
    token = _GROUP_TOKEN.match(value).group()
    return token.lower() or None


# --------------------------------------------------------------------------
# Paths
# --------------------------------------------------------------------------

_UNRESERVED = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
)
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
_PATH_START = re.compile(r"[/?;]")


def _fix_escape(m: re.Match) -> str:
    hexa = m.group(1)
    char = chr(int(hexa, 16))
    return char if char in _UNRESERVED else "%" + hexa.upper()


def _escape_non_ascii(m: re.Match) -> str:
    return "".join(
        "%%%02X" % b for b in m.group().encode("utf-8", "surrogatepass")
    )


def normalize_path(path: str) -> str:
    """Percent-normalize a URL path or a rule pattern for matching.

    Non-ASCII characters become their UTF-8 octets as ``%XX``; every ``%xx``
    escape gets upper-case hex, and escapes of unreserved characters are
    decoded.  Reserved escapes (``%2F``, ``%24``, ``%2A``, ...) are kept, so a
    rule's ``*`` and ``$`` never come from an escape.  Other characters are
    left as they are.
    """
    if not path.isascii():
        path = _NON_ASCII.sub(_escape_non_ascii, path)
    if "%" in path:
        path = _ESCAPE.sub(_fix_escape, path)
    return path


def _path_of(url: str) -> str:
    """Path, params and query of ``url`` (an absolute URL or a path starting
    with ``/``), without the fragment; ``/`` when there is none.  Follows
    Google's ``GetPathParamsQuery``."""
    if url[:1] == "/" and url[1:2] != "/":
        hash_pos = url.find("#")
        return url if hash_pos < 0 else url[:hash_pos]
    if url.startswith("http://"):
        m = _PATH_START.search(url, 7)
    elif url.startswith("https://"):
        m = _PATH_START.search(url, 8)
    else:
        m = False
    if m is not False:
        if m is None:
            return "/"
        hash_pos = url.find("#")
        path_start = m.start()
        if hash_pos < 0:
            path = url[path_start:]
        elif hash_pos < path_start:
            return "/"
        else:
            path = url[path_start:hash_pos]
        return path if path[0] == "/" else "/" + path
    start = 2 if url[:2] == "//" else 0
    scheme_end = url.find("://", start)
    early = _PATH_START.search(url, start)
    if scheme_end < 0 or (early is not None and early.start() < scheme_end):
        scheme_end = start
    else:
        scheme_end += 3
    m = _PATH_START.search(url, scheme_end)
    if m is None:
        return "/"
    path_start = m.start()
    hash_pos = url.find("#", start)
    if 0 <= hash_pos < path_start:
        return "/"
    path = url[path_start:] if hash_pos < 0 else url[path_start:hash_pos]
    return path if path[0] == "/" else "/" + path


# --------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------

# A rule is a tuple (priority, allow, pattern): ``pattern`` is the
# percent-normalized value, ``priority`` its length as Google counts it.
#
# A rule set starts uncompiled: plain prefixes are dict lookups (one per
# distinct pattern length), wildcard rules a Python scan (about 0.2 us per
# wildcard rule per call); no set-up cost.  After _COMPILE_AFTER calls it
# compiles all its rules into regexes matched in C (about 25 us per rule to
# compile, then under 2 us per call for a typical file): ski-rental, so a
# site with few URLs never pays for a compile and a big one soon runs at C
# speed.

#: allowed() calls on a rule set before its rules are compiled to regexes.
_COMPILE_AFTER = 128
#: Rules per regex chunk; chunks are compiled lazily, best rules first.
_CHUNK_RULES = 256
#: Above either bound a rule set is never compiled (compiling costs about a
#: microsecond per pattern character, and such files are hostile anyway).
_REGEX_MAX_RULES = 2048
_REGEX_MAX_CHARS = 65536


def _google_length(value: str) -> int:
    """A pattern's length as Google ranks it: octets, each non-ASCII octet
    counting 3 (Google escapes it as ``%XX`` before measuring)."""
    if value.isascii():
        return len(value)
    raw = value.encode("utf-8", "surrogatepass")
    return len(raw) + 2 * sum(1 for b in raw if b >= 0x80)


def _make_rule(value: str, allow: bool) -> tuple | None:
    """The rule of one allow/disallow value; None for an empty pattern, which
    matches nothing (an empty ``Disallow:`` allows everything)."""
    if not value:
        return None
    pattern = normalize_path(value)
    if "**" in pattern:
        pattern = re.sub(r"\*{2,}", "*", pattern)
    return (_google_length(value), allow, pattern)


def _split_pattern(pattern: str) -> tuple[str, tuple[str, ...], bool]:
    """``(lead, segments, anchored)`` of ``lead*seg1*...*segN[$]``.

    Only a final ``$`` anchors; elsewhere ``$`` is literal.  ``segments`` is
    empty for a pattern without ``*``; its last item may be empty (``/a*``).
    """
    anchored = pattern.endswith("$")
    if anchored:
        pattern = pattern[:-1]
    parts = pattern.split("*")
    return parts[0], tuple(parts[1:]), anchored


def _regex_source(pattern: str) -> str:
    """A regex matching at the start of a path exactly when ``pattern`` does.

    Each ``*seg`` becomes an atomic ``(?>.*?seg)``: the leftmost occurrence
    of each segment is always a valid choice for a ``*`` glob, so committing
    to it loses no match and rules out catastrophic backtracking.
    """
    lead, segments, anchored = _split_pattern(pattern)
    out = [re.escape(lead)]
    if anchored and segments:
        out.extend("(?>.*?%s)" % re.escape(s) for s in segments[:-1] if s)
        out.append(".*%s\\Z" % re.escape(segments[-1]))
    else:
        out.extend("(?>.*?%s)" % re.escape(s) for s in segments if s)
        if anchored:
            out.append("\\Z")
    return "".join(out)


def _glob_match(path: str, lead: str, segments: tuple, anchored: bool) -> bool:
    """Match one split pattern against ``path`` without regex: the same
    leftmost-occurrence strategy, with str.find (linear, no backtracking)."""
    if not path.startswith(lead):
        return False
    if not segments:
        return not anchored or len(path) == len(lead)
    pos = len(lead)
    last = len(segments) - 1
    for i, seg in enumerate(segments):
        if i == last and anchored:
            return len(path) - len(seg) >= pos and path.endswith(seg)
        found = path.find(seg, pos)
        if found < 0:
            return False
        pos = found + len(seg)
    return True


class _RuleSet:
    """The merged rules that apply to one agent, ready for matching.

    The best matching rule decides: higher priority, then allow (rule keys
    ``(priority, allow)`` compare that way); no match means allowed.

    Uncompiled, plain prefix rules sit in a dict by pattern and are found by
    one lookup per distinct pattern length, ``$``-anchored literals by one
    lookup of the whole path, and only wildcard rules are scanned, best first.
    ``use_regex``: True compiles at once, False never, None (the default)
    after :data:`_COMPILE_AFTER` calls when the set is small enough.
    """

    __slots__ = ("rules", "crawl_delay", "_chunks", "_countdown", "_prefix",
                 "_lengths", "_exact", "_globs", "_glob_leads", "_glob_unled")

    def __init__(self, rules: Iterable[tuple], crawl_delay: float | None,
                 use_regex: bool | None = None):
        #: (priority, allow, pattern), best first
        self.rules = tuple(sorted(set(rules), key=lambda r: (-r[0], not r[1], r[2])))
        self.crawl_delay = crawl_delay
        self._prefix: dict[str, tuple] = {}
        self._exact: dict[str, tuple] = {}
        globs = []
        for priority, allow, pattern in self.rules:
            lead, segments, anchored = _split_pattern(pattern)
            key = (priority, allow)
            if segments:
                globs.append((key, lead, segments, anchored))
            elif anchored:  # rules are sorted: the first key stored is the best
                self._exact.setdefault(lead, key)
            else:
                self._prefix.setdefault(lead, key)
        self._lengths = tuple(sorted({len(p) for p in self._prefix}, reverse=True))
        self._globs = tuple(globs)
        # a path starting with none of the wildcard rules' leads can only be
        # matched by those without a lead (patterns starting with '*')
        self._glob_leads = tuple({g[1] for g in globs if g[1]})
        self._glob_unled = tuple(g for g in globs if not g[1])
        # [any-match regex, which-rule regex (both None until compiled),
        #  index of the chunk's first rule]; None while uncompiled
        self._chunks: list[list] | None = None
        if use_regex is None and (
            len(self.rules) > _REGEX_MAX_RULES
            or sum(len(r[2]) for r in self.rules) > _REGEX_MAX_CHARS
        ):
            use_regex = False
        if use_regex:
            self._use_regex()
        # calls left before compiling; -1: never
        self._countdown = _COMPILE_AFTER if use_regex is None else -1

    def _use_regex(self) -> None:
        self._chunks = [[None, None, i] for i in range(0, len(self.rules), _CHUNK_RULES)]

    def _compile(self, chunk: list) -> None:
        """Compile a chunk: a capture-free alternation answers "does any rule
        match?" (sre runs it several times faster than one with groups, and
        most URLs match no rule), then an alternation with one group per
        rule, best first, tells which rule matched first."""
        rules = self.rules[chunk[2]: chunk[2] + _CHUNK_RULES]
        sources = [_regex_source(r[2]) for r in rules]
        chunk[0] = re.compile("|".join(sources), re.S)
        chunk[1] = re.compile("|".join("(%s)" % s for s in sources), re.S)

    def allowed(self, path: str) -> bool:
        if self._chunks is not None:
            for chunk in self._chunks:
                if chunk[0] is None:
                    self._compile(chunk)
                if chunk[0].match(path) is not None:
                    m = chunk[1].match(path)
                    return self.rules[chunk[2] + m.lastindex - 1][1]
            return True
        if self._countdown > 0:
            self._countdown -= 1
            if self._countdown == 0:
                self._use_regex()
        best = self._exact.get(path)
        prefix = self._prefix
        size = len(path)
        for length in self._lengths:
            if length <= size:
                key = prefix.get(path[:length])
                if key is not None and (best is None or key > best):
                    best = key
        globs = self._globs if path.startswith(self._glob_leads) else self._glob_unled
        for key, lead, segments, anchored in globs:
            if best is not None and key < best:
                break
            if _glob_match(path, lead, segments, anchored):
                best = key
                break
        return True if best is None else best[1]


class _Group:
    """One group of the file: its agent tokens and members."""

    __slots__ = ("agents", "rules", "crawl_delays")

    def __init__(self) -> None:
        self.agents: list[str] = []
        self.rules: list[tuple] = []
        self.crawl_delays: list[float] = []


# --------------------------------------------------------------------------
# Lines
# --------------------------------------------------------------------------

_WS = " \t\n\r\x0b\x0c"  # ASCII whitespace, as Google strips it
_BLANKS = re.compile(r"[ \t]+")
_BOM = b"\xef\xbb\xbf"
_CRAWL_DELAY = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)")

_USER_AGENT, _ALLOW, _DISALLOW, _SITEMAP, _CRAWL = range(5)
_KEYS = (
    (("user-agent", "useragent", "user agent"), _USER_AGENT),
    (("allow",), _ALLOW),
    (("disallow", "dissallow", "dissalow", "disalow", "diasllow", "disallaw"), _DISALLOW),
    (("sitemap", "site-map"), _SITEMAP),
    (("crawl-delay", "crawldelay", "crawl delay"), _CRAWL),
)


def _key_kind(key: str) -> int | None:
    """The directive a key names (case-insensitive prefix match), or None."""
    key = key.lower()
    for prefixes, kind in _KEYS:
        if key.startswith(prefixes):
            return kind
    return None


def _split_line(line: str) -> tuple[str, str] | None:
    """``(key, value)`` of one line, or None when it holds no directive.

    The comment is cut, whitespace trimmed, and the key ends at the first
    ``:``.  Without a ``:`` the line is accepted only when it is exactly two
    whitespace-separated words (Google's tolerance for a forgotten colon).
    """
    hash_pos = line.find("#")
    if hash_pos >= 0:
        line = line[:hash_pos]
    line = line.strip(_WS)
    sep = line.find(":")
    if sep < 0:
        blank = _BLANKS.search(line)
        if blank is None or _BLANKS.search(line, blank.end()) is not None:
            return None  # one word, or more than two
        sep = blank.start()
    key = line[:sep].strip(_WS)
    if not key:
        return None
    return key, line[sep + 1 :].strip(_WS)


def _crawl_delay_value(value: str) -> float | None:
    """A Crawl-delay value in seconds (digits, optional fraction), else None."""
    if _CRAWL_DELAY.fullmatch(value) is None:
        return None
    delay = float(value)
    return delay if math.isfinite(delay) else None


def _decode(body: bytes | bytearray | memoryview | str) -> tuple[str, bool]:
    """The body as text (BOM skipped, cut at :data:`MAX_BODY` octets) and
    whether it was cut."""
    if isinstance(body, str):
        # a character is at least one octet: this prefix holds enough octets
        raw = body[: MAX_BODY + len(_BOM)].encode("utf-8", "surrogatepass")
    else:
        raw = bytes(body[: MAX_BODY + len(_BOM)])
    skip = _bom_length(raw)
    cut = len(raw) - skip > MAX_BODY
    raw = raw[skip : skip + MAX_BODY]
    text = raw.decode("utf-8", "replace")
    if cut:
        end = max(text.rfind("\n"), text.rfind("\r"))
        text = text[: end + 1] if end >= 0 else ""
    return text, cut


def _bom_length(raw: bytes) -> int:
    """Octets of a UTF-8 byte order mark (or its partial forms) at the start."""
    skip = 0
    while skip < len(_BOM) and raw[skip : skip + 1] == _BOM[skip : skip + 1]:
        skip += 1
    return skip


def cut_at_cap(body: bytes, truncated: bool = False) -> bytes:
    """``body`` as the parser reads it: whole if it fits in :data:`MAX_BODY`
    octets (a BOM not counted) and nothing was cut before, else its first
    :data:`MAX_BODY` octets without the last, partial line.

    ``truncated`` says the body is already cut (the fetcher stopped at its
    size limit: ``tooBig``), so its last line may be partial too.  What is
    returned is what to keep (in the robots log, say): parsing it gives
    the same rules as parsing ``body``, without the cut line.
    """
    body = bytes(body)
    cap = MAX_BODY + _bom_length(body[: len(_BOM)])
    if len(body) > cap:
        body = body[:cap]
    elif not truncated:
        return body
    end = max(body.rfind(b"\n"), body.rfind(b"\r"))
    return body[: end + 1]


# --------------------------------------------------------------------------
# RobotsTxt
# --------------------------------------------------------------------------


class RobotsTxt:
    """The parsed rules of one robots.txt.  Build with :meth:`parse`,
    :meth:`allow_all` or :meth:`disallow_all`; query with :meth:`allowed`,
    :meth:`crawl_delay` and :attr:`sitemaps`."""

    __slots__ = ("_groups", "sitemaps", "truncated", "_cache")

    #: Cached agents per instance; beyond this the cache is emptied (an
    #: engine asks for one agent, so this only bounds misuse).
    _CACHE_LIMIT = 32

    def __init__(self, groups: list[_Group], sitemaps: list[str], truncated: bool = False):
        self._groups = groups
        #: ``Sitemap:`` URLs in file order, duplicates removed, wherever they
        #: appear (inside or outside groups).
        self.sitemaps: list[str] = sitemaps
        #: True when the body was longer than :data:`MAX_BODY` octets.
        self.truncated = truncated
        self._cache: dict[str, _RuleSet] = {}

    # ---- construction ---------------------------------------------------

    @classmethod
    def parse(cls, body: bytes | bytearray | memoryview | str) -> RobotsTxt:
        """Parse a robots.txt body; never raises (anything unreadable is
        ignored line by line).  Only the first :data:`MAX_BODY` octets count."""
        try:
            text, truncated = _decode(body)
        except Exception:  # not bytes-like nor str: treat as an empty file
            return cls([], [])
        groups: list[_Group] = []
        sitemaps: dict[str, None] = {}
        group: _Group | None = None
        in_rules = False  # an allow/disallow line closed the agent list
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        for line in text.split("\n"):
            if not line:
                continue
            kv = _split_line(line)
            if kv is None:
                continue
            kind = _key_kind(kv[0])
            value = kv[1]
            if kind == _USER_AGENT:
                if group is None or in_rules:
                    group = _Group()
                    groups.append(group)
                    in_rules = False
                token = _group_token(value)
                if token is not None:
                    group.agents.append(token)
            elif kind == _ALLOW or kind == _DISALLOW:
                if group is None:
                    continue
                in_rules = True
                allow = kind == _ALLOW
                rule = _make_rule(value, allow)
                if rule is not None:
                    group.rules.append(rule)
                    if allow:
                        group.rules.extend(_index_rules(value))
            elif kind == _SITEMAP:
                if value:
                    sitemaps[value] = None
            elif kind == _CRAWL:
                if group is not None:
                    delay = _crawl_delay_value(value)
                    if delay is not None:
                        group.crawl_delays.append(delay)
        return cls(groups, list(sitemaps), truncated)

    @classmethod
    def allow_all(cls) -> RobotsTxt:
        """Rules that allow everything (robots.txt unavailable, e.g. 404)."""
        return cls([], [])

    @classmethod
    def disallow_all(cls) -> RobotsTxt:
        """Rules that forbid everything but ``/robots.txt`` itself, for every
        agent (robots.txt unreachable, e.g. 5xx)."""
        group = _Group()
        group.agents.append("*")
        group.rules.append(_make_rule("/", False))
        return cls([group], [])

    # ---- queries --------------------------------------------------------

    def allowed(self, user_agent: str, url: str) -> bool:
        """Whether the agent with product token ``user_agent`` may fetch
        ``url`` (an absolute URL, or a path starting with ``/``)."""
        rules = self._cache.get(user_agent)
        if rules is None:
            rules = self._select(user_agent)
        path = _path_of(url)
        if path == "/robots.txt":
            return True
        if not path.isascii() or "%" in path:
            path = normalize_path(path)
        return rules.allowed(path)

    def crawl_delay(self, user_agent: str) -> float | None:
        """The ``Crawl-delay`` (seconds) of the agent's groups, chosen like
        its rules; the largest when several are given; None when none is
        given or none is a valid non-negative number."""
        rules = self._cache.get(user_agent)
        if rules is None:
            rules = self._select(user_agent)
        return rules.crawl_delay

    def _select(self, user_agent: str) -> _RuleSet:
        """Merge the groups that apply to ``user_agent`` and cache the result."""
        agent = user_agent.lower()
        chosen = [g for g in self._groups if agent in g.agents]
        if not chosen:
            chosen = [g for g in self._groups if "*" in g.agents]
        delays = [d for g in chosen for d in g.crawl_delays]
        rules = _RuleSet(
            (r for g in chosen for r in g.rules), max(delays) if delays else None
        )
        if len(self._cache) >= self._CACHE_LIMIT:
            self._cache.clear()
        self._cache[user_agent] = rules
        return rules

    def __repr__(self) -> str:
        agents = sorted({a for g in self._groups for a in g.agents})
        return "<RobotsTxt groups=%d agents=%r sitemaps=%d>" % (
            len(self._groups), agents, len(self.sitemaps)
        )


def _index_rules(value: str) -> list[tuple]:
    """Google's ``index.html`` rule: ``Allow: /d/index.htm[l]`` also allows
    exactly ``/d/`` (compiled as ``Allow: /d/$``)."""
    slash = value.rfind("/")
    if slash < 0 or not value.startswith("/index.htm", slash):
        return []
    rule = _make_rule(value[: slash + 1] + "$", True)
    return [rule] if rule is not None else []
