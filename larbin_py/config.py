"""The larbin.conf reader: text in, one frozen, typed :class:`Config` out.

The format is Larbin 2.6's, read line by line:

* ``key value...``: a key, then its value words, separated by whitespace.
* ``key`` alone: a switch, which turns the option on.  A switch also takes an
  explicit ``true``/``false`` (``yes``/``no``, ``on``/``off``, ``1``/``0``),
  which is how an option that defaults to on is turned off.
* ``#``: a word that begins with ``#`` starts a comment, on a line of its own
  or after a value (``waitDuration 2  # seconds``).  A ``#`` inside a word is
  kept, so ``http://a.example/#top`` stays a URL.
* Blocks: ``forbiddenExtensions``, ``limitToDomain`` and ``specificSet`` take
  every following word, over as many lines as needed, up to the word ``end``.
* Repetition: ``startUrl``, ``dnsServers`` and the blocks may appear several
  times and accumulate (``startUrl`` may also carry several URLs on a line;
  a ``startUrl`` or ``dnsServers`` line without a value is an error).
  Any other key given twice is an error naming both lines: a configuration
  in which a later line silently wins is a configuration nobody reads.
* Key names: matched case-sensitively, as Larbin did; a key whose spelling
  differs only by case (``useragent``) is accepted as the same key, and so is
  the Config attribute name (``wait_duration``), which reads naturally after
  ``--set``.  Anything else is an unknown key, reported with the closest real
  key (difflib) as a suggestion.

Overrides (``--set KEY=VALUE`` on the command line) come as ``(key, value)``
pairs and replace the file's value, list keys included (``--set
startUrl="http://a/ http://b/"``); for a list key the value's words are the
items, no ``end`` needed.  Extra start URLs (``--seed URL``) are added to the
file's ``startUrl`` instead.  Both are checked exactly as file lines are, and
their errors are located as ``--set:N`` / ``--seed:N`` (the N-th one given).

Every problem raises :class:`ConfigError`, whose ``str()`` is one line naming
the file, the line and the key::

    larbin.conf:12: waitDuraton: unknown key (did you mean waitDuration?)
    larbin.conf:7: pagesConnexions: expected an integer in 1..100000, got 'abc'
    --set:1: outputMode: expected one of none, save, mirror, stats, warc or 0..4, got 'html'
    larbin.conf: cannot read: No such file or directory

``outputMode`` takes a name or Larbin-style number: 0 ``none``, 1 ``save``,
2 ``mirror``, 3 ``stats``, 4 ``warc``.  Times are seconds and take fractions
(``waitDuration 0.2``).  ``startUrl`` values are kept as written (the engine
normalizes them) but must look like ``http://`` or ``https://`` URLs.

Every number has a range (``low..high`` for integers, ``[low, high]`` or
``(low, high]`` for seconds), so no value can overflow a timer or make a
crawl that never ends; nan and inf are refused.  The ranges are written next
to their keys in the shipped larbin.conf.

Secrets are never shown: an error message quotes ``httpToken`` as ``***``
and any URL's password as ``***`` (``redis://:***@host``; larbin_py.redact),
and so does ``format_config(config, redact=True)`` (``--print-config``).

:class:`Config` validates itself on construction, so :meth:`Config.replace`
and direct construction get the same range checks as the file (without a
line number to report).  :func:`format_config` renders a Config back to
larbin.conf text that :func:`parse_config_text` reads to an equal Config.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import ipaddress
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from . import __version__
from .frontier.addresses import POLICIES as PRIVATE_NETWORKS
from .frontier.addresses import is_loopback
from .net.dynamic import parse_rule as _parse_dynamic_rule
from .net.http import PARSERS as HTTP_PARSERS
from .redact import SHOWN, redact_text, redact_url

__all__ = [
    "Config",
    "ConfigError",
    "DEFAULT_FORBIDDEN_EXTENSIONS",
    "DEFAULT_USER_AGENT",
    "DEMO_CONFIG_TEXT",
    "KEYS",
    "OUTPUT_MODES",
    "ZkAuth",
    "demo_config",
    "format_config",
    "load_config",
    "parse_config_text",
    "read_resolv_conf",
    "system_dns_servers",
]

#: ``outputMode`` names, in the order of their numbers (0 none ... 4 warc).
OUTPUT_MODES: tuple[str, ...] = ("none", "save", "mirror", "stats", "warc")

DEFAULT_USER_AGENT = f"larbin_py/{__version__}"

#: Extensions that are almost never HTML: not worth a request by default.
DEFAULT_FORBIDDEN_EXTENSIONS: tuple[str, ...] = (
    ".7z", ".apk", ".avi", ".bin", ".bmp", ".bz2", ".class", ".deb", ".dmg",
    ".doc", ".docx", ".dvi", ".exe", ".flac", ".flv", ".gif", ".gz", ".ico",
    ".iso", ".jar", ".jpeg", ".jpg", ".m4a", ".m4v", ".mkv", ".mov", ".mp3",
    ".mp4", ".mpeg", ".mpg", ".msi", ".ogg", ".pdf", ".png", ".ppt", ".pptx",
    ".ps", ".psd", ".rar", ".rpm", ".svg", ".tar", ".tgz", ".tif", ".tiff",
    ".wav", ".webm", ".webp", ".wmv", ".woff", ".woff2", ".xls", ".xlsx",
    ".xz", ".zip",
)

RESOLV_CONF = "/etc/resolv.conf"
_FALLBACK_DNS: tuple[tuple[str, int], ...] = (("127.0.0.1", 53),)

_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})
_URL_RE = re.compile(r"https?://[^\s/?#@]*[^\s/?#@:][^\s]*\Z", re.IGNORECASE)
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


class ConfigError(Exception):
    """A configuration problem, located: ``str()`` is ``FILE:LINE: key: message``.

    ``filename`` is the file (``--set``/``--seed`` for command-line values,
    None for a Config built in code), ``line`` the 1-based line or None when
    the problem is not on one line (a missing file, a missing key), ``key``
    the larbin.conf key or None.
    """

    def __init__(self, filename: str | None, line: int | None, key: str | None, message: str):
        self.filename = filename
        self.line = line
        self.key = key
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        parts = []
        if self.filename is not None:
            parts.append(f"{self.filename}:{self.line}" if self.line else self.filename)
        if self.key:
            parts.append(self.key)
        parts.append(self.message)
        # the net under every message: a URL's password never shown (the keys hide their own values)
        return redact_text(": ".join(parts).replace("\n", " "))


class _Bad(Exception):
    """A value problem, before it is located (internal)."""


# --------------------------------------------------------------------------
# DNS servers: the resolv.conf default and the host[:port] syntax


def _parse_server(word: str) -> tuple[str, int]:
    """``1.2.3.4``, ``1.2.3.4:5353``, ``::1``, ``[::1]:5353`` -> (address, port)."""
    host, port = word, 53
    if word.startswith("["):
        close = word.find("]")
        rest = word[close + 1:] if close > 0 else "x"
        if close < 0 or (rest and not rest.startswith(":")):
            raise _Bad(f"expected an IP address or [IPv6]:port, got {word!r}")
        host = word[1:close]
        if rest:
            port = _port(rest[1:], word, low=1)
    elif word.count(":") == 1:
        host, _, text = word.partition(":")
        port = _port(text, word, low=1)
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise _Bad(f"expected an IP address[:port] (IPv6 as [addr]:port), got {word!r}") from None
    return str(address), port


def _port(text: str, word: str, low: int) -> int:
    if not text.isdigit() or not low <= int(text) <= 65535:
        raise _Bad(f"expected a port in {low}..65535, got {word!r}")
    return int(text)


def _format_server(server: tuple[str, int]) -> str:
    host, port = server
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def read_resolv_conf(path: str | os.PathLike[str] = RESOLV_CONF) -> tuple[tuple[str, int], ...]:
    """The ``nameserver`` addresses of a resolv.conf, port 53, in order.

    Unreadable files, comments and malformed lines are skipped; duplicates
    are kept once.  Falls back to ``(("127.0.0.1", 53),)`` when none is found.
    """
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            lines = file.read().splitlines()
    except OSError:
        return _FALLBACK_DNS
    servers: list[tuple[str, int]] = []
    for line in lines:
        words = line.split()
        if len(words) >= 2 and words[0] == "nameserver":
            try:
                server = (str(ipaddress.ip_address(words[1])), 53)
            except ValueError:
                continue
            if server not in servers:
                servers.append(server)
    return tuple(servers) or _FALLBACK_DNS


@functools.cache
def default_analysis_workers() -> int:
    """``analysisWorkers``' default: one fewer than the cores this process may use, at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


def system_dns_servers() -> tuple[tuple[str, int], ...]:
    """``read_resolv_conf()`` of this machine, read once (Config's default)."""
    return read_resolv_conf(RESOLV_CONF)


# --------------------------------------------------------------------------
# The Config


@dataclass(frozen=True, slots=True)
class Config:
    """Every crawl setting; attribute names are larbin.conf keys in snake_case.

    Times are seconds (float), sizes bytes, 0 means "off" or "no limit" where
    the key's documentation (the shipped larbin.conf) says so.  Construction
    validates every value (raising :class:`ConfigError`); lists may be given
    as any sequence and are stored as tuples.
    """

    from_addr: str = ""
    user_agent: str = DEFAULT_USER_AGENT
    output_mode: str = "mirror"
    http_port: int = 8081
    http_bind: str = "127.0.0.1"
    input_port: int = 0
    print_stats: bool = False
    fetch_info: bool = False
    histograms: bool = True
    can_reload: bool = True
    checkpoint_interval: float = 5.0
    sync_commits: bool = False
    lock_site: bool = False
    private_networks: str = "seeds"
    membership: str = "redis"
    zk_hosts: str = "127.0.0.1:2181"
    zk_path: str = "/larbin_py"
    zk_session_timeout: float = 6.0
    zk_auth: "ZkAuth | None" = None
    pages_connexions: int = 100
    dns_connexions: int = 10
    depth_in_site: int = 5
    depth_by_site: bool = False
    max_redirects: int = 5
    no_external_links: bool = False
    wait_duration: float = 2.0
    wait_jitter: float = 0.05
    proxy: tuple[str, int] | None = None
    bond_width: int = 0
    http_parser: str = "httptools"
    limit_time: float = 0.0
    limit_page: int = 0
    use_cookies: bool = False
    get_cgi: bool = False
    start_urls: tuple[str, ...] = ()
    punycode: bool = True
    ignore_robots: bool = False
    page_no_duplicate: bool = False
    get_image: bool = False
    any_type: bool = False
    specific_search: bool = False
    specific_set: tuple[str, ...] = ()
    limit_to_domain: tuple[str, ...] = ()
    forbidden_extensions: tuple[str, ...] = DEFAULT_FORBIDDEN_EXTENSIONS
    max_urls_by_site: int = 40
    ram_urls: int = 100_000
    prune_after: float = 120.0
    keep_sites: int = 100_000
    seen_store: str = "auto"
    timeout_page: float = 30.0
    timeout_incr: int = 2000
    connect_timeout: float = 10.0
    max_page_size: int = 5_000_000
    max_url_size: int = 512
    dns_valid_time: float = 172_800.0
    dns_timeout: float = 5.0
    dns_servers: tuple[tuple[str, int], ...] = field(default_factory=system_dns_servers)
    save_dir: str = "save"
    state_dir: str = "state"
    files_per_dir: int = 2000
    retries: int = 3
    connexions_per_ip: int = 1
    flow_control: bool = True
    min_connexions: int = 10
    rtt_alpha: float = 0.125
    rtt_interval: float = 5.0
    rtt_min: float = 0.1
    rtt_max: float = 2.0
    conn_increase: int = 1
    conn_decrease: int = 2
    server_rtt_factor: float = 3.0
    url_input: bool = False
    http_token: str | None = None
    http_hosts: tuple[str, ...] = ()
    dynamic_pages: tuple[tuple[str, str], ...] = ()
    dynamic_connexions: int = 2
    dynamic_timeout: float = 10.0
    dynamic_other_hosts: bool = False
    dynamic_user: str = "nobody"
    dynamic_sandbox: bool = True
    redis_url: str = ""
    redis_replicas: int | None = None  # auto: replicas_for()
    crawl_name: str = "larbin"
    worker_id: str = ""
    partitions: int = 256
    seen_buckets: int = 128
    lease_ttl: float = 10.0
    ip_lease_hold: float = 0.0
    redis_flush_interval: float = 0.5
    redis_batch: int = 1000
    respawn: bool = True
    analysis_workers: int = field(default_factory=lambda: default_analysis_workers())  # cores - 1, at least 1
    analyzers: tuple[tuple[str, ...], ...] = ()
    analysis_share: bool = True
    analysis_retries: int = 3
    analysis_timeout: float = 60.0
    analysis_backoff: float = 1.0
    analysis_queue_max: int = 1000
    alert_command: tuple[str, ...] = ()
    analysis_dir: str = "analysis"
    #: The file this configuration was read from (not a setting: ignored by ==).
    source: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        for key in KEYS:
            value = getattr(self, key.attr)
            try:
                coerced = key.coerce(value)
            except _Bad as exc:
                raise ConfigError(None, None, key.name, str(exc)) from None
            if coerced is not value:
                object.__setattr__(self, key.attr, coerced)
        problems = _cross_problems(self)
        if problems:
            name, message = problems[0]
            raise ConfigError(None, None, name, message)

    def replace(self, **changes: Any) -> "Config":
        """A copy with ``changes`` (attribute names), validated like the original."""
        return dataclasses.replace(self, **changes)


# --------------------------------------------------------------------------
# Keys: how each one is read, checked and written back


class _Key:
    """One larbin.conf key: its Config attribute and value syntax."""

    repeatable = False  # may appear several times in a file (values accumulate)
    block = False  # values run up to ``end``
    #: The whole value is a secret (httpToken): shown as ``***`` in errors and --print-config.
    secret = False

    def __init__(self, name: str, attr: str):
        self.name = name
        self.attr = attr

    def hidden(self, value: Any) -> Any:
        """``value`` as a person may see it: a secret as ``***``, a URL's password as ``***``."""
        if value is None or value == "":
            return value
        if self.secret:
            return SHOWN
        return _redacted(value)

    def shown(self, value: Any) -> str:
        """``value`` quoted for an error message (:meth:`hidden`, then ``repr``)."""
        return repr(self.hidden(value))

    def format_hidden(self, value: Any) -> list[str]:
        """The lines of :meth:`format` for a person to read (``--print-config``): secrets as ``***``."""
        return self.format(self.hidden(value))

    def parse(self, words: list[str]) -> Any:
        """The value of a line's words (everything after the key)."""
        raise NotImplementedError

    def coerce(self, value: Any) -> Any:
        """``value`` checked (and normalized: list -> tuple, int -> float); raises _Bad."""
        raise NotImplementedError

    def format(self, value: Any) -> list[str]:
        """larbin.conf lines setting ``value`` ([] when absent means the value)."""
        raise NotImplementedError

    def _one(self, words: list[str]) -> str:
        if len(words) != 1:
            got = "nothing" if not words else f"{len(words)} words: {self.shown(' '.join(words))}"
            raise _Bad(f"expected one value, got {got}")
        return words[0]


def _redacted(value: Any) -> Any:
    """``value`` with every URL's password in it as ``***`` (tuples walked)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, tuple):
        return tuple(_redacted(v) for v in value)
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    return value


class _Switch(_Key):
    def parse(self, words: list[str]) -> bool:
        if not words:
            return True
        if len(words) == 1 and words[0].lower() in _TRUE | _FALSE:
            return words[0].lower() in _TRUE
        raise _Bad(f"is a switch: expected no value or true/false, got {' '.join(words)!r}")

    def coerce(self, value: Any) -> bool:
        if not isinstance(value, bool):
            raise _Bad(f"expected true or false, got {value!r}")
        return value

    def format(self, value: bool) -> list[str]:
        return [self.name] if value else [f"{self.name} false"]


class _Int(_Key):
    """An integer in ``low..high`` (both included): every number has a range, so
    a value that would overflow or never end (``limitTime 1e308``) is refused
    when the file is read, not met as a traceback in the middle of a crawl."""

    def __init__(self, name: str, attr: str, low: int, high: int):
        super().__init__(name, attr)
        self.low, self.high = low, high
        self.expected = f"an integer in {low}..{high}"

    def parse(self, words: list[str]) -> int:
        word = self._one(words)
        try:
            return self.coerce(int(word, 10))
        except (ValueError, _Bad):
            raise _Bad(f"expected {self.expected}, got {word!r}") from None

    def coerce(self, value: Any) -> int:
        if (not isinstance(value, int) or isinstance(value, bool) or value < self.low
                or value > self.high):
            raise _Bad(f"expected {self.expected}, got {value!r}")
        return value

    def format(self, value: int) -> list[str]:
        return [f"{self.name} {value}"]


def _num(x: float) -> str:
    """``x`` for a message: 31536000, not 3.1536e+07."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


class _Seconds(_Key):
    """A finite number of seconds in ``[low, high]`` (``(low, high]`` with
    ``above``); nan and inf are refused."""

    def __init__(self, name: str, attr: str, low: float, high: float, above: bool = False,
                 what: str = "a number of seconds"):
        super().__init__(name, attr)
        self.low, self.high, self.above = low, high, above
        self.expected = f"{what} in {'(' if above else '['}{_num(low)}, {_num(high)}]"

    def parse(self, words: list[str]) -> float:
        word = self._one(words)
        try:
            return self.coerce(float(word))
        except (ValueError, _Bad):
            raise _Bad(f"expected {self.expected}, got {word!r}") from None

    def coerce(self, value: Any) -> float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise _Bad(f"expected {self.expected}, got {value!r}")
        try:
            number = float(value)
        except OverflowError:  # an int beyond any float
            raise _Bad(f"expected {self.expected}, got {value!r}") from None
        if (not math.isfinite(number) or number < self.low or (self.above and number == self.low)
                or number > self.high):
            raise _Bad(f"expected {self.expected}, got {value!r}")
        return value if type(value) is float else number

    def format(self, value: float) -> list[str]:
        text = repr(value)
        return [f"{self.name} {text[:-2] if text.endswith('.0') else text}"]


class _Fraction(_Seconds):
    """A number in (0, 1], or in [0, 1] with ``zero``."""

    def __init__(self, name: str, attr: str, *, zero: bool = False):
        super().__init__(name, attr, 0.0, 1.0, above=not zero, what="a number")


class _Text(_Key):
    """Free text: the rest of the line, words joined by one space."""

    def __init__(self, name: str, attr: str, *, empty: bool = False, one_word: bool = False,
                 none: bool = False, min_length: int = 1, email: bool = False, secret: bool = False):
        super().__init__(name, attr)
        self.empty, self.one_word, self.none = empty, one_word, none
        self.min_length, self.email, self.secret = min_length, email, secret

    def parse(self, words: list[str]) -> str | None:
        if not words and self.none:
            return None
        text = self._one(words) if self.one_word else " ".join(words)
        if not text:
            raise _Bad("expected a value, got nothing")
        return self.coerce(text)

    def coerce(self, value: Any) -> str | None:
        if value is None and self.none:
            return None
        if not isinstance(value, str):
            raise _Bad(f"expected text, got {self.shown(value)}")
        if value == "" and self.empty:
            return value
        if value != value.strip() or _CONTROL_RE.search(value) or "  " in value:
            raise _Bad(f"expected text without control characters or extra spaces, got {self.shown(value)}")
        if self.one_word and " " in value:
            raise _Bad(f"expected one word, got {self.shown(value)}")
        if any(word.startswith("#") for word in value.split(" ")):
            raise _Bad(f"a word may not begin with '#' (it starts a comment), got {self.shown(value)}")
        if len(value) < self.min_length:
            raise _Bad(f"expected at least {self.min_length} characters, got {len(value)}")
        if self.email and "@" not in value:
            raise _Bad(f"expected an e-mail address, got {self.shown(value)}")
        return value

    def format(self, value: str | None) -> list[str]:
        return [] if not value else [f"{self.name} {value}"]


class _OutputMode(_Key):
    def parse(self, words: list[str]) -> str:
        word = self._one(words)
        if word.isdigit() and int(word) < len(OUTPUT_MODES):
            return OUTPUT_MODES[int(word)]
        return self.coerce(word.lower())

    def coerce(self, value: Any) -> str:
        if value not in OUTPUT_MODES:
            raise _Bad(f"expected one of {', '.join(OUTPUT_MODES)} or 0..{len(OUTPUT_MODES) - 1}, "
                       f"got {value!r}")
        return value

    def format(self, value: str) -> list[str]:
        return [f"{self.name} {value}"]


class _Choice(_Key):
    def __init__(self, name: str, attr: str, choices: tuple[str, ...]):
        super().__init__(name, attr)
        self.choices = choices

    def parse(self, words: list[str]) -> str:
        return self.coerce(self._one(words).lower())

    def coerce(self, value: Any) -> str:
        if value not in self.choices:
            raise _Bad(f"expected one of {', '.join(self.choices)}, got {value!r}")
        return value

    def format(self, value: str) -> list[str]:
        return [f"{self.name} {value}"]


class _ZkHosts(_Text):
    """``host:port[,host:port...]``: the ZooKeeper ensemble (membership zookeeper)."""

    def coerce(self, value: Any) -> str:
        try:
            return check_zk_hosts(super().coerce(value))
        except ValueError as exc:
            raise _Bad(str(exc)) from None


class _ZkPath(_Text):
    """An absolute znode path: the prefix of the crawl's nodes in ZooKeeper."""

    def coerce(self, value: Any) -> str:
        try:
            return check_zk_path(super().coerce(value))
        except ValueError as exc:
            raise _Bad(str(exc)) from None


class ZkAuth:
    """``zkAuth digest USER:PASSWORD``: the ZooKeeper identity of the crawl's znodes.

    A value object whose ``str()`` and ``repr()`` hide the password
    (``digest USER:***``): a Config printed in a log or a traceback shows no
    secret.  Equality and hashing include the password (a Config read back
    from :func:`format_config`'s text equals the original).
    """

    __slots__ = ("scheme", "user", "_password")

    #: The shortest password taken: ZooKeeper keeps its SHA-1 digest in every
    #: ACL of the crawl's nodes, which whoever may read an ACL can try to guess.
    MIN_PASSWORD = 8

    def __init__(self, user: str, password: str, scheme: str = "digest") -> None:
        object.__setattr__(self, "scheme", scheme)
        object.__setattr__(self, "user", user)
        object.__setattr__(self, "_password", password)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("ZkAuth is immutable")

    @property
    def password(self) -> str:
        return self._password

    @property
    def credential(self) -> str:
        """``USER:PASSWORD``, as kazoo's ``auth_data`` takes it (a secret: never print it)."""
        return f"{self.user}:{self._password}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ZkAuth) and (self.scheme, self.user, self._password) == \
            (other.scheme, other.user, other._password)

    def __hash__(self) -> int:
        return hash((self.scheme, self.user, self._password))

    def __str__(self) -> str:
        return f"{self.scheme} {self.user}:***"

    def __repr__(self) -> str:
        return f"ZkAuth({self.scheme} {self.user}:***)"

    @classmethod
    def parse(cls, words: list[str]) -> "ZkAuth":
        """``["digest", "USER:PASSWORD"]`` -> ZkAuth; raises ValueError with a sentence
        that never quotes the words (any of them may be the password)."""
        if len(words) != 2:
            raise ValueError(f"expected 'digest USER:PASSWORD' (2 words), got {len(words)} "
                             f"word{'' if len(words) == 1 else 's'} (not shown: one may be the password)")
        scheme, credential = words
        if scheme != "digest":
            raise ValueError("expected 'digest USER:PASSWORD': the first word must be digest "
                             "(ZooKeeper's user:password scheme, the only one supported)")
        user, sep, password = credential.partition(":")
        if not sep or not user or not password:
            raise ValueError("expected 'digest USER:PASSWORD': the second word must be a user name, "
                             "':' and the password")
        if not re.fullmatch(r"[A-Za-z0-9._@-]{1,64}", user):
            raise ValueError("expected a user name of letters, digits, '.', '_', '@' or '-' "
                             "(at most 64) before the ':'")
        if _CONTROL_RE.search(password) or any(c.isspace() for c in password):
            raise ValueError("the password may not hold spaces or control characters")
        if len(password) < cls.MIN_PASSWORD:
            n = len(password)
            raise ValueError(f"the password is too short ({n} character{'' if n == 1 else 's'}): "
                             f"at least {cls.MIN_PASSWORD}")
        return cls(user, password)


class _ZkAuth(_Key):
    """``zkAuth digest USER:PASSWORD`` (membership zookeeper): see :class:`ZkAuth`.

    Its errors never quote the value.  :meth:`format` writes the password
    (the text :func:`format_config` makes is read back by the workers the
    launcher starts: they need it); :meth:`shown` is the line to show a
    person (``zkAuth digest USER:***``).
    """

    secret = True

    def parse(self, words: list[str]) -> ZkAuth | None:
        if len(words) == 1 and words[0].lower() == "none":
            return None
        try:
            return ZkAuth.parse(words)
        except ValueError as exc:
            raise _Bad(str(exc)) from None

    def coerce(self, value: Any) -> ZkAuth | None:
        if value is None:
            return None
        if isinstance(value, ZkAuth):
            self.parse([value.scheme, value.credential])  # built in code: checked as if read
            return value
        if isinstance(value, str):  # Config(zk_auth="digest user:password")
            return self.parse(value.split())
        raise _Bad(f"expected 'digest USER:PASSWORD' or None, got a {type(value).__name__}")

    def format(self, value: ZkAuth | None) -> list[str]:
        return [] if value is None else [f"{self.name} {value.scheme} {value.credential}"]

    def shown(self, value: ZkAuth | None) -> list[str]:
        """What a person is shown: the password as ``***``."""
        return [] if value is None else [f"{self.name} {value}"]

    def format_hidden(self, value: ZkAuth | None) -> list[str]:
        return self.shown(value)


def check_zk_hosts(text: str) -> str:
    """``host:port[,host:port...]`` checked; raises ValueError with a sentence."""
    if not isinstance(text, str) or not text or any(c.isspace() for c in text):
        raise ValueError(f"expected host:port[,host:port...], got {text!r}")
    for part in text.split(","):
        host, sep, port = part.rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not sep or not host or "/" in part or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ValueError(f"expected host:port[,host:port...] (port 1..65535), got {part!r} in {text!r}")
    return text


def check_zk_path(path: str) -> str:
    """An absolute znode path without a trailing slash; raises ValueError."""
    if (not isinstance(path, str) or not path.startswith("/")
            or any(c.isspace() or ord(c) < 32 for c in path)):
        raise ValueError(f"expected an absolute znode path such as /larbin_py, got {path!r}")
    if path != "/" and any(part in ("", ".", "..", "zookeeper") for part in path.split("/")[1:]):
        raise ValueError(f"expected /a/b (no empty, '.', '..' or 'zookeeper' part, no trailing /), got {path!r}")
    return path


class _RedisUrl(_Text):
    """``redisUrl``: empty (one process, no Redis), ``auto`` (a private
    redis-server under stateDir), ``redis://[[user]:password@]host[:port][/db]``
    (``rediss://`` with TLS; db a number), ``unix:///path/to/socket``, or
    ``redis+sentinel://[[user]:password@]host:port[,host:port...]/master[/db]``
    (the master a set of Redis Sentinels names), checked by
    :func:`larbin_py.distributed.sentinel.parse_redis_url`.  Its password is shown
    as ``***`` (larbin_py.redact.redact_url)."""

    def __init__(self, name: str, attr: str):
        super().__init__(name, attr, empty=True, one_word=True)

    def parse(self, words: list[str]) -> str:
        if len(words) != 1:
            got = "nothing" if not words else f"{len(words)} words: {redact_url(' '.join(words))!r}"
            raise _Bad(f"expected one URL (spaces in a password are written %20), got {got}")
        return self.coerce(words[0])

    def hidden(self, value: Any) -> Any:
        return redact_url(value) if isinstance(value, str) else super().hidden(value)

    def coerce(self, value: Any) -> str:
        if not isinstance(value, str):
            raise _Bad(f"expected text, got {type(value).__name__}")
        if value in ("", "auto"):
            return value
        from .distributed.sentinel import parse_redis_url  # only a distributed crawl imports larbin_py.distributed

        try:
            parse_redis_url(value)
        except ValueError as exc:
            raise _Bad(f"expected auto, redis://host:port/db, unix:///path or "
                       f"redis+sentinel://host:port,host:port/master: {exc}") from None
        return value


class _Replicas(_Int):
    """``redisReplicas``: ``auto`` (None: see :func:`replicas_for`) or 0..16."""

    def __init__(self, name: str, attr: str):
        super().__init__(name, attr, 0, 16)
        self.expected = "auto or an integer in 0..16"

    def parse(self, words: list[str]) -> int | None:
        if len(words) == 1 and words[0].lower() == "auto":
            return None
        return super().parse(words)

    def coerce(self, value: Any) -> int | None:
        return None if value is None else super().coerce(value)

    def format(self, value: int | None) -> list[str]:
        return [f"{self.name} {'auto' if value is None else value}"]


def replicas_for(config: "Config") -> int:
    """How many replicas a tick waits for (``WAIT N``): ``redisReplicas`` when
    set, else (``auto``) 1 for a ``redis+sentinel://`` redisUrl and 0 otherwise."""
    if config.redis_replicas is not None:
        return config.redis_replicas
    return 1 if config.redis_url[:17].lower() == "redis+sentinel://" else 0


class _Name(_Text):
    """A name used in Redis keys and file names: letters, digits, '.', '_', '-'."""

    _RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")

    def __init__(self, name: str, attr: str, *, empty: bool = False):
        super().__init__(name, attr, empty=empty, one_word=True)

    def coerce(self, value: Any) -> str:
        value = super().coerce(value)
        if value == "" and self.empty:
            return value
        if not self._RE.match(value):
            raise _Bad(f"expected a name of letters, digits, '.', '_' or '-' (at most 64, not "
                       f"starting with '.', '_' or '-'), got {value!r}")
        return value


class _Proxy(_Key):
    """``proxy host port``: no ``user:password@`` (no proxy authentication is
    sent); any credential in a refused value is shown as ``***``."""

    def hidden(self, value: Any) -> Any:
        if isinstance(value, str):
            return " ".join(redact_url(word) for word in value.split(" "))
        if isinstance(value, (tuple, list)) and value and isinstance(value[0], str):
            return (redact_url(value[0]), *value[1:])
        return super().hidden(value)

    def parse(self, words: list[str]) -> tuple[str, int] | None:
        if len(words) == 1 and words[0].lower() == "none":
            return None
        if len(words) != 2:
            raise _Bad(f"expected 'host port' or 'none', got {self.shown(' '.join(words))}")
        return self.coerce((words[0], _port(words[1], words[1], low=1)))

    def coerce(self, value: Any) -> tuple[str, int] | None:
        if value is None:
            return None
        if (not isinstance(value, (tuple, list)) or len(value) != 2 or not isinstance(value[0], str)
                or not value[0] or any(c.isspace() for c in value[0])
                or not isinstance(value[1], int) or not 1 <= value[1] <= 65535):
            raise _Bad(f"expected (host, port) or None, got {self.shown(value)}")
        if "@" in value[0] or "://" in value[0]:
            raise _Bad("expected a host name or address (no scheme, no user:password@: larbin_py sends no "
                       f"proxy authentication), got {self.shown(value[0])}")
        return value if isinstance(value, tuple) else tuple(value)

    def format(self, value: tuple[str, int] | None) -> list[str]:
        return [] if value is None else [f"{self.name} {value[0]} {value[1]}"]


class _List(_Key):
    """A list of words: repeated lines (or a block) accumulate."""

    repeatable = True

    def __init__(self, name: str, attr: str, *, block: bool = False, nonempty: bool = False):
        super().__init__(name, attr)
        self.block = block
        self.nonempty = nonempty

    def item(self, word: str) -> Any:
        """One item from its word; raises _Bad."""
        if _CONTROL_RE.search(word) or not word or word != word.strip() or word.startswith("#") \
                or " " in word or word == "end":
            raise _Bad(f"expected a word, got {word!r}")
        return word

    def parse(self, words: list[str]) -> tuple:
        return tuple(self.item(word) for word in words)

    def coerce(self, value: Any) -> tuple:
        if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)):
            raise _Bad(f"expected a tuple, got {value!r}")
        items = tuple(self.coerce_item(item) for item in value)
        if self.nonempty and not items:
            raise _Bad("expected at least one value")
        return value if items == value and isinstance(value, tuple) else items

    def coerce_item(self, item: Any) -> Any:
        if not isinstance(item, str):
            raise _Bad(f"expected a word, got {item!r}")
        return self.item(item)

    def format(self, value: tuple) -> list[str]:
        if self.block:
            lines, line = [self.name], "   "
            for word in value:
                if len(line) + len(word) > 76 and line.strip():
                    lines.append(line)
                    line = "   "
                line += " " + word
            if line.strip():
                lines.append(line)
            return lines + ["end"]
        return [f"{self.name} {' '.join(value)}"] if value else []


class _StartUrls(_List):
    def item(self, word: str) -> str:
        if not _URL_RE.match(word):
            raise _Bad(f"not an http(s) URL: {word!r}")
        return word

    def format(self, value: tuple[str, ...]) -> list[str]:
        return [f"{self.name} {url}" for url in value]


class _DnsServers(_List):
    def item(self, word: str) -> tuple[str, int]:
        return _parse_server(word)

    def coerce_item(self, item: Any) -> tuple[str, int]:
        if (not isinstance(item, (tuple, list)) or len(item) != 2 or not isinstance(item[0], str)
                or not isinstance(item[1], int) or isinstance(item[1], bool)):
            raise _Bad(f"expected (address, port), got {item!r}")
        server = _parse_server(_format_server((item[0], item[1])))
        if server != tuple(item):
            raise _Bad(f"expected a canonical (address, port), got {item!r}")
        return server

    def format(self, value: tuple[tuple[str, int], ...]) -> list[str]:
        return [f"{self.name} {' '.join(map(_format_server, value))}"]


class _DynamicPages(_List):
    """``dynamicPages``: one rule a line, ``PATTERN [TRIGGER]`` (larbin_py.net.dynamic.parse_rule)."""

    lines = True  # the reader hands item_line() each line's words

    def __init__(self, name: str, attr: str):
        super().__init__(name, attr, block=True)

    def item_line(self, words: list[str]) -> tuple[str, str]:
        try:
            return _parse_dynamic_rule(words)
        except ValueError as exc:
            raise _Bad(str(exc)) from None

    def parse(self, words: list[str]) -> tuple:
        """``--set dynamicPages=...``: the words in order, a trigger after its pattern."""
        rules, i = [], 0
        while i < len(words):
            n = 2 if i + 1 < len(words) and (words[i + 1] in ("none", "scroll")
                                              or words[i + 1].startswith("call:")) else 1
            rules.append(self.item_line(words[i:i + n]))
            i += n
        return tuple(rules)

    def coerce_item(self, item: Any) -> tuple[str, str]:
        if not isinstance(item, (tuple, list)) or len(item) != 2 or not all(isinstance(w, str) for w in item):
            raise _Bad(f"expected (pattern, trigger), got {item!r}")
        return self.item_line(list(item))

    def format(self, value: tuple) -> list[str]:
        return [self.name, *(f"    {p} {t}" for p, t in value), "end"] if value else []


class _UserName(_Text):
    """``dynamicUser``: a user name (letters, digits, '.', '_', '-', a final '$') or a uid."""

    _RE = re.compile(r"(?:[A-Za-z_][A-Za-z0-9._-]{0,31}\$?|[0-9]{1,10})\Z")

    def __init__(self, name: str, attr: str):
        super().__init__(name, attr, one_word=True)

    def coerce(self, value: Any) -> str:
        value = super().coerce(value)
        if not self._RE.match(value):
            raise _Bad(f"expected a user name or uid (letters, digits, '.', '_', '-'), got {value!r}")
        return value


class _Analyzer(_List):
    """``analyzer NAME [urls=RE] [types=T,...] KIND ARGS...``: one analyzer a line (larbin_py.analysis)."""

    def parse(self, words: list[str]) -> tuple:
        return (self.coerce_item(tuple(words)),)

    def coerce_item(self, item: Any) -> tuple[str, ...]:
        from .analysis.analyzers import parse_analyzer

        if not isinstance(item, (tuple, list)) or not all(isinstance(w, str) for w in item):
            raise _Bad(f"expected the words of an analyzer line, got {item!r}")
        try:
            parse_analyzer(item)
        except ValueError as exc:
            raise _Bad(str(exc)) from None
        return tuple(item)

    def format(self, value: tuple) -> list[str]:
        return [f"{self.name} {' '.join(words)}" for words in value]


class _HttpHosts(_List):
    """``httpHosts``: the names the stats server answers besides loopback and httpBind (one line)."""

    repeatable = False

    def item(self, word: str) -> str:
        from .web.guard import host_name

        try:
            return host_name(word)
        except ValueError as exc:
            raise _Bad(str(exc)) from None


class _Command(_List):
    """A command and its arguments on one line (alertCommand)."""

    repeatable = False

    def item(self, word: str) -> str:
        if _CONTROL_RE.search(word) or not word or word.startswith("#"):
            raise _Bad(f"expected a word, got {word!r}")
        return word


#: Every key, in larbin.conf order.
KEYS: tuple[_Key, ...] = (
    _Text("From", "from_addr", empty=True, email=True),
    _Text("UserAgent", "user_agent"),
    _OutputMode("outputMode", "output_mode"),
    _Int("httpPort", "http_port", 0, 65535),
    _Text("httpBind", "http_bind", one_word=True),
    _Int("inputPort", "input_port", 0, 65535),
    _Switch("urlInput", "url_input"),
    _Text("httpToken", "http_token", one_word=True, none=True, min_length=8, secret=True),
    _HttpHosts("httpHosts", "http_hosts"),
    _Switch("printStats", "print_stats"),
    _Switch("fetchInfo", "fetch_info"),
    _Switch("histograms", "histograms"),
    _Switch("canReload", "can_reload"),
    _Seconds("checkpointInterval", "checkpoint_interval", 0, 86_400, above=True),
    _Switch("syncCommits", "sync_commits"),
    _Text("saveDir", "save_dir"),
    _Text("stateDir", "state_dir"),
    _Int("filesPerDir", "files_per_dir", 1, 1_000_000),
    _Int("pagesConnexions", "pages_connexions", 1, 100_000),
    _Int("dnsConnexions", "dns_connexions", 1, 10_000),
    _Int("connexionsPerIP", "connexions_per_ip", 1, 100_000),
    _Switch("flowControl", "flow_control"),
    _Int("minConnexions", "min_connexions", 1, 100_000),
    _Fraction("rttAlpha", "rtt_alpha"),
    _Seconds("rttInterval", "rtt_interval", 0, 3600, above=True),
    _Seconds("rttMin", "rtt_min", 0, 600),
    _Seconds("rttMax", "rtt_max", 0, 600, above=True),
    _Int("connIncrease", "conn_increase", 0, 100_000),
    _Int("connDecrease", "conn_decrease", 0, 100_000),
    _Seconds("serverRttFactor", "server_rtt_factor", 0, 100, what="a number"),
    _DnsServers("dnsServers", "dns_servers", nonempty=True),
    _Seconds("dnsTimeout", "dns_timeout", 0, 600, above=True),
    _Seconds("dnsValidTime", "dns_valid_time", 0, 31_536_000),
    _Seconds("waitDuration", "wait_duration", 0, 3600),
    _Fraction("waitJitter", "wait_jitter", zero=True),
    _Seconds("connectTimeout", "connect_timeout", 0, 600, above=True),
    _Seconds("timeoutPage", "timeout_page", 0, 3600, above=True),
    _Int("timeoutIncr", "timeout_incr", 0, 1_000_000_000),
    _Int("retries", "retries", 0, 20),
    _Int("maxPageSize", "max_page_size", 1, 1_000_000_000),
    _Int("maxUrlSize", "max_url_size", 16, 65_536),
    _Int("maxUrlsBySite", "max_urls_by_site", 1, 1_000_000),
    _Int("ramUrls", "ram_urls", 1, 100_000_000),
    _Seconds("pruneAfter", "prune_after", 0, 86_400, above=True),
    _Int("keepSites", "keep_sites", 0, 100_000_000),
    _Choice("seenStore", "seen_store", ("auto", "array", "disk")),
    _Proxy("proxy", "proxy"),
    _Int("bondWidth", "bond_width", 0, 1_000_000_000_000),
    _Choice("httpParser", "http_parser", HTTP_PARSERS),
    _Seconds("limitTime", "limit_time", 0, 31_536_000),
    _Int("limitPage", "limit_page", 0, 1_000_000_000_000),
    _Int("depthInSite", "depth_in_site", 0, 10_000),
    _Switch("depthBySite", "depth_by_site"),
    _Int("maxRedirects", "max_redirects", 0, 100),
    _Switch("noExternalLinks", "no_external_links"),
    _Switch("lockSite", "lock_site"),
    _Choice("privateNetworks", "private_networks", PRIVATE_NETWORKS),
    _Choice("membership", "membership", ("redis", "zookeeper")),
    _ZkHosts("zkHosts", "zk_hosts", one_word=True),
    _ZkPath("zkPath", "zk_path", one_word=True),
    _Seconds("zkSessionTimeout", "zk_session_timeout", 0, 600, above=True),
    _ZkAuth("zkAuth", "zk_auth"),
    _Switch("useCookies", "use_cookies"),
    _Switch("getCGI", "get_cgi"),
    _Switch("punycode", "punycode"),
    _Switch("ignoreRobots", "ignore_robots"),
    _Switch("pageNoDuplicate", "page_no_duplicate"),
    _Switch("getImage", "get_image"),
    _Switch("anyType", "any_type"),
    _Switch("specificSearch", "specific_search"),
    _List("specificSet", "specific_set", block=True),
    _List("limitToDomain", "limit_to_domain", block=True),
    _List("forbiddenExtensions", "forbidden_extensions", block=True),
    _DynamicPages("dynamicPages", "dynamic_pages"),
    _Int("dynamicConnexions", "dynamic_connexions", 1, 64),
    _Seconds("dynamicTimeout", "dynamic_timeout", 0, 600, above=True),
    _Switch("dynamicOtherHosts", "dynamic_other_hosts"),
    _UserName("dynamicUser", "dynamic_user"),
    _Switch("dynamicSandbox", "dynamic_sandbox"),
    _Int("analysisWorkers", "analysis_workers", 0, 256),
    _Switch("analysisShare", "analysis_share"),
    _Analyzer("analyzer", "analyzers"),
    _Int("analysisRetries", "analysis_retries", 0, 100),
    _Seconds("analysisTimeout", "analysis_timeout", 0, 86_400, above=True),
    _Seconds("analysisBackoff", "analysis_backoff", 0, 3600),
    _Int("analysisQueueMax", "analysis_queue_max", 1, 10_000_000),
    _Command("alertCommand", "alert_command"),
    _Text("analysisDir", "analysis_dir"),
    _StartUrls("startUrl", "start_urls"),
    _RedisUrl("redisUrl", "redis_url"),
    _Replicas("redisReplicas", "redis_replicas"),
    _Name("crawlName", "crawl_name"),
    _Name("workerId", "worker_id", empty=True),
    _Int("partitions", "partitions", 1, 65_536),
    _Int("seenBuckets", "seen_buckets", 1, 65_536),
    _Seconds("leaseTtl", "lease_ttl", 0.2, 3600),
    _Seconds("ipLeaseHold", "ip_lease_hold", 0, 3600),
    _Seconds("redisFlushInterval", "redis_flush_interval", 0, 60, above=True),
    _Int("redisBatch", "redis_batch", 1, 1_000_000),
    _Switch("respawn", "respawn"),
)

_BY_NAME: dict[str, _Key] = {key.name: key for key in KEYS}
_BY_ATTR: dict[str, _Key] = {key.attr: key for key in KEYS}
_BY_LOWER: dict[str, _Key] = {key.name.lower(): key for key in KEYS}
assert {f.name for f in dataclasses.fields(Config)} == set(_BY_ATTR) | {"source"}


def _cross_problems(config: Config) -> list[tuple[str, str]]:
    """Problems between keys, as (key name, message); [] when consistent."""
    problems = []
    if config.url_input:
        if config.http_port == 0:
            problems.append(("urlInput", "needs the stats server: httpPort is 0 (off)"))
        elif config.http_token is None and not is_loopback(config.http_bind):
            problems.append(("urlInput", f"httpBind {config.http_bind} is not a loopback address, "
                                         "so an httpToken is required"))
    if config.rtt_min > config.rtt_max:
        problems.append(("rttMin", f"{config.rtt_min:g} s is above rttMax ({config.rtt_max:g} s)"))
    if config.specific_search and not config.specific_set:
        problems.append(("specificSearch", "needs a specificSet block (the types or extensions to keep)"))
    if config.http_port and config.http_port == config.input_port:
        problems.append(("inputPort", f"same port as httpPort ({config.http_port})"))
    if not is_loopback(config.http_bind) and config.http_token is None:
        # Beyond loopback, whoever reaches the address could feed the crawl
        # URLs, or read every URL and host of it: a token, or no server.
        if config.input_port:
            problems.append(("inputPort", f"httpBind {config.http_bind} is not a loopback address, so the "
                                          "input port needs an httpToken (or inputPort 0)"))
        if config.http_port:
            problems.append(("httpBind", f"{config.http_bind} is not a loopback address, so the stats "
                                         f"server (httpPort {config.http_port}) needs an httpToken "
                                         "(or httpPort 0)"))
    if config.redis_replicas and config.redis_url in ("", "auto"):
        problems.append(("redisReplicas", f"{config.redis_replicas} needs a Redis with replicas (redisUrl "
                                          "redis://... or redis+sentinel://...), but " + (
                                              "redisUrl auto starts one redis-server without any"
                                              if config.redis_url else "redisUrl is not set")))
    problems.extend(_nesting_problems(config))
    return problems


def _nesting_problems(config: Config) -> list[tuple[str, str]]:
    """saveDir and stateDir must be apart: neither inside the other.

    A mirror writes ``saveDir/HOST/PATH``: with stateDir inside saveDir, a
    crawled host named like it overwrites the crawl's own state.  Compared
    as real paths (symbolic links resolved), so two spellings of one folder
    are caught too.
    """
    save = os.path.realpath(config.save_dir)
    state = os.path.realpath(config.state_dir)
    if save == state:
        return [("stateDir", f"must differ from saveDir ({config.save_dir!r})")]
    if _inside(state, save):
        return [("stateDir", f"{config.state_dir!r} is inside saveDir {config.save_dir!r} (crawled pages "
                             "could overwrite the crawl's state): keep stateDir and saveDir apart")]
    if _inside(save, state):
        return [("saveDir", f"{config.save_dir!r} is inside stateDir {config.state_dir!r}: "
                            "keep saveDir and stateDir apart")]
    return []


def _inside(path: str, folder: str) -> bool:
    """True when real path ``path`` lies under real path ``folder``."""
    return path.startswith(folder.rstrip(os.sep) + os.sep)


def _lookup(word: str) -> _Key | None:
    return _BY_NAME.get(word) or _BY_ATTR.get(word) or _BY_LOWER.get(word.lower())


def _unknown(word: str) -> str:
    if word == "end":
        return "'end' without a block to close"
    lowered = {name.lower(): name for name in _BY_NAME}
    close = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
    return f"unknown key (did you mean {lowered[close[0]]}?)" if close else "unknown key"


# --------------------------------------------------------------------------
# Reading


def _words(line: str) -> list[str]:
    """A line's words, up to a comment (a word beginning with '#')."""
    words = line.split()
    for i, word in enumerate(words):
        if word.startswith("#"):
            return words[:i]
    return words


Location = tuple[str, int | None]


def _read_lines(text: str, filename: str, values: dict[str, Any], where: dict[str, Location]) -> None:
    """Fill ``values`` (by key name) and ``where`` from larbin.conf ``text``."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        lineno = i + 1
        words = _words(lines[i])
        i += 1
        if not words:
            continue
        key = _lookup(words[0])
        if key is None:
            raise ConfigError(filename, lineno, words[0], _unknown(words[0]))
        if key.name in where and not key.repeatable:
            raise ConfigError(filename, lineno, key.name,
                              f"set twice (first on line {where[key.name][1]}); only startUrl, "
                              "dnsServers and the blocks may repeat")
        if key.block:
            items: list[tuple[str, int]] = []
            rest, at = words[1:], lineno
            while "end" not in rest:
                items.extend((word, at) for word in rest)
                if i >= len(lines):
                    hint = next((f" (is line {n} '{w}' a key? close the block before it)"
                                 for w, n in items if w in _BY_NAME), "")
                    raise ConfigError(filename, lineno, key.name,
                                      f"block begun on this line has no 'end'{hint}")
                rest, at = _words(lines[i]), i + 1
                i += 1
            end = rest.index("end")
            items.extend((word, at) for word in rest[:end])
            if rest[end + 1:]:
                raise ConfigError(filename, at, key.name,
                                  f"unexpected text after 'end': {' '.join(rest[end + 1:])!r}")
            value = []
            if getattr(key, "lines", False):  # one item a line (dynamicPages)
                by_line: dict[int, list[str]] = {}
                for word, n in items:
                    by_line.setdefault(n, []).append(word)
                for n, line_words in by_line.items():
                    try:
                        value.append(key.item_line(line_words))
                    except _Bad as exc:
                        raise ConfigError(filename, n, key.name, str(exc)) from None
            else:
                for word, n in items:
                    try:
                        value.append(key.item(word))
                    except _Bad as exc:
                        raise ConfigError(filename, n, key.name, str(exc)) from None
            value = tuple(value)
        elif key.repeatable and len(words) == 1:
            raise ConfigError(filename, lineno, key.name, "expected at least one value, got nothing")
        else:
            try:
                value = key.parse(words[1:])
            except _Bad as exc:
                raise ConfigError(filename, lineno, key.name, str(exc)) from None
        if key.repeatable and key.name in values:
            value = values[key.name] + value
        values[key.name] = value
        where.setdefault(key.name, (filename, lineno))


def parse_config_text(
    text: str,
    filename: str = "<string>",
    overrides: Iterable[tuple[str, str]] = (),
    *,
    require_start_urls: bool = True,
    extra_start_urls: Iterable[str] = (),
    resolv_conf: str | os.PathLike[str] | None = None,
) -> Config:
    """The Config of larbin.conf ``text`` (``filename`` names it in errors).

    ``overrides``: ``(key, value)`` pairs (``--set``) replacing the file's
    values.  ``extra_start_urls`` (``--seed``) are added after the file's
    ``startUrl``s.  ``require_start_urls``: no start URL at all is an error.
    ``resolv_conf``: where the default ``dnsServers`` come from when the text
    sets none (default: this machine's /etc/resolv.conf, read once).
    Raises :class:`ConfigError`.
    """
    values: dict[str, Any] = {}
    where: dict[str, Location] = {}
    _read_lines(text, filename, values, where)

    for n, (name, raw) in enumerate(overrides, 1):
        key = _lookup(name)
        if key is None:
            raise ConfigError("--set", n, name, _unknown(name))
        try:
            values[key.name] = key.parse(raw.split())
        except _Bad as exc:
            raise ConfigError("--set", n, key.name, str(exc)) from None
        where[key.name] = ("--set", n)

    seeds = []
    for n, url in enumerate(extra_start_urls, 1):
        try:
            seeds.append(_BY_NAME["startUrl"].item(url))
        except _Bad as exc:
            raise ConfigError("--seed", n, "startUrl", str(exc)) from None
        where.setdefault("startUrl", ("--seed", n))
    if seeds:
        values["startUrl"] = values.get("startUrl", ()) + tuple(seeds)

    if require_start_urls and not values.get("startUrl"):
        raise ConfigError(filename, None, "startUrl",
                          "no start URL (add a 'startUrl URL' line, or pass --seed URL)")
    if "dnsServers" not in values and resolv_conf is not None:
        values["dnsServers"] = read_resolv_conf(resolv_conf)

    kwargs = {_BY_NAME[name].attr: value for name, value in values.items()}
    try:
        config = Config(**kwargs, source=filename)
    except ConfigError as exc:
        # Only cross-key problems get here (each value was checked when read):
        # locate them on the line that set the key, or the file if a default.
        file, line = where.get(exc.key or "", (filename, None))
        raise ConfigError(file, line, exc.key, exc.message) from None
    return config


def load_config(
    path: str | os.PathLike[str],
    overrides: Iterable[tuple[str, str]] = (),
    *,
    require_start_urls: bool = True,
    extra_start_urls: Iterable[str] = (),
    resolv_conf: str | os.PathLike[str] | None = None,
) -> Config:
    """The Config of the larbin.conf at ``path``; see :func:`parse_config_text`.

    An unreadable file raises ``ConfigError``: ``PATH: cannot read: REASON``.
    """
    filename = os.fspath(path)
    try:
        with open(filename, "rb") as file:
            data = file.read()
    except OSError as exc:
        raise ConfigError(filename, None, None,
                          f"cannot read: {exc.strerror or exc.__class__.__name__}") from None
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark is tolerated
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(filename, line, None, f"cannot read: not UTF-8 text (byte {exc.start})") from None
    return parse_config_text(text, filename, overrides, require_start_urls=require_start_urls,
                             extra_start_urls=extra_start_urls, resolv_conf=resolv_conf)


def format_config(config: Config, *, redact: bool = False) -> str:
    """larbin.conf text for ``config``: every key, in the shipped file's order.

    ``parse_config_text(format_config(c), require_start_urls=False) == c``.
    Unset optional values (an empty ``From``, no ``proxy``, no
    ``httpToken``, no ``startUrl``) are written as comments.

    ``redact``: for a person to read (``--print-config``): ``httpToken`` and
    every URL's password are ``***`` (the text no longer reads back to
    ``config``).  Without it the text holds the secrets: write it only to a
    file of mode 0600 (larbin_py.owner_only), as the launcher does.
    """
    out = [f"# larbin_py {__version__} configuration"]
    if config.source:
        out[0] += f" (read from {config.source})"
    for key in KEYS:
        value = getattr(config, key.attr)
        lines = key.format_hidden(value) if redact else key.format(value)
        out.extend(lines or [f"# {key.name} (not set)"])
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------
# The demo

#: The built-in configuration of ``--demo`` when no larbin.conf exists: the
#: engine serves a synthetic web on loopback and supplies the seeds.
DEMO_CONFIG_TEXT = """\
# larbin_py --demo: crawl the built-in synthetic web on loopback.
From         demo@localhost.invalid
outputMode   stats
httpPort     8081
waitDuration 0.5
saveDir      demo-save
stateDir     demo-state
"""


def demo_config(overrides: Iterable[tuple[str, str]] = (), extra_start_urls: Iterable[str] = ()) -> Config:
    """The Config of :data:`DEMO_CONFIG_TEXT` with ``overrides`` applied."""
    return parse_config_text(DEMO_CONFIG_TEXT, "<demo>", overrides, require_start_urls=False,
                             extra_start_urls=extra_start_urls)
