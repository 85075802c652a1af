"""The key types: how one larbin.conf key is read, checked, written back and described.

A :class:`Key` knows its larbin.conf ``name`` and its value syntax, in four
methods over the same rule, so that the file, ``--set``, a Config built in
code and the reference table cannot disagree:

* :meth:`Key.parse`: the words after the key on a line -> a value;
* :meth:`Key.coerce`: a value (read, or given in code) -> the checked,
  normalized value (list -> tuple, int -> float), or :class:`Bad`;
* :meth:`Key.format`: a value -> the larbin.conf lines that set it
  (``parse`` of them gives the value back); :meth:`Key.format_hidden`: the
  same for a person to read (``--print-config``), secrets as ``***``;
* :meth:`Key.values` and :meth:`Key.describe`: the values a key takes and a
  value, as docs/configuration.md shows them.

The types: :class:`Switch`, :class:`Int` and :class:`Seconds` (each number
with a range, ``low..high`` or ``[low, high]`` / ``(low, high]``, so no value
overflows a timer or makes a crawl that never ends; nan and inf refused),
:class:`Text` and its kin (one word, a name, a URL, a user), the choices,
and the lists (repeated lines or a block up to ``end`` accumulate).

A key is made inside the schema's declaration of its Config field
(larbin_py.config.schema), which binds ``attr`` (the field's name), ``doc``
(one line) and, for a default that depends on the machine,
``default_text``.  Errors are :class:`Bad` with a sentence about the value
alone; a secret (``httpToken``, a URL's password, ``zkAuth``) is never
quoted in one (:meth:`Key.shown`).

Three keys import a room of larbin_py when, and only when, a value needs
checking: ``redisUrl`` (larbin_py.distributed.sentinel; not for an empty
value or ``auto``, so a single-process crawl never imports the distributed
mode), ``analyzer`` (larbin_py.analysis.analyzers) and ``httpHosts``
(larbin_py.web.guard).
"""

from __future__ import annotations

import math
import re
from typing import Any

from ..net.auth import parse_rule as _parse_auth_rule
from ..net.proxy import ProxyConfig as _ProxyConfig
from ..redact import SHOWN, redact_text, redact_url
from ..scope import UrlPatterns, check_pattern
from ..site_settings import MAX_RULES, SiteRule, format_site_rule, parse_site_line
from .errors import Bad
from .values import CONTROL_RE, ZkAuth, check_zk_hosts, check_zk_path, format_server, parse_server, port

__all__ = [
    "OUTPUT_MODES", "Analyzers", "AuthBlock", "CaFile", "Choice", "Command", "DnsServers", "DynamicPages",
    "Fraction", "HttpHosts", "Int", "Key", "Name", "OutputMode", "Proxy", "RedisUrl", "Replicas", "Seconds",
    "SiteBlock", "StartUrls", "Switch", "Text", "TlsVerify", "UrlPatternBlock", "UserName", "Words", "ZkAuthKey",
    "ZkHosts", "ZkPath",
]

#: ``outputMode`` names, in the order of their numbers (0 none ... 4 warc).
OUTPUT_MODES: tuple[str, ...] = ("none", "save", "mirror", "stats", "warc")

_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})
_URL_RE = re.compile(r"https?://[^\s/?#@]*[^\s/?#@:][^\s]*\Z", re.IGNORECASE)


class Key:
    """One larbin.conf key: its name, its Config attribute and its value syntax."""

    repeatable = False  # may appear several times in a file (values accumulate)
    block = False  # values run up to ``end``
    by_line = False  # a block of one item a line (``item_line(words)``), not of words
    #: The whole value is a secret (httpToken): shown as ``***`` in errors and --print-config.
    secret = False

    def __init__(self, name: str):
        self.name = name
        #: The Config attribute; bound by the schema (the field this key is declared on).
        self.attr = ""
        #: One line: what the key does (docs/configuration.md).
        self.doc = ""
        #: The default as the docs show it, when it is not one value (this machine's resolv.conf).
        self.default_text: str | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} ({self.attr})>"

    def hidden(self, value: Any) -> Any:
        """``value`` as a person may see it: a secret as ``***``, a URL's password as ``***``."""
        if value is None or value == "":
            return value
        if self.secret:
            return SHOWN
        return redacted(value)

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
        """``value`` checked (and normalized: list -> tuple, int -> float); raises Bad."""
        raise NotImplementedError

    def format(self, value: Any) -> list[str]:
        """larbin.conf lines setting ``value`` ([] when absent means the value)."""
        raise NotImplementedError

    def values(self) -> str:
        """The values this key takes, in a few words (docs/configuration.md)."""
        raise NotImplementedError

    def describe(self, value: Any) -> str:
        """``value`` in a few words, as :meth:`format` writes it without the key's name."""
        lines = self.format(value)
        if not lines:
            return "none"
        words = " ".join(lines).split()
        if words and words[0] == self.name:
            words = words[1:]
        if self.block and words and words[-1] == "end":
            words = words[:-1]
        return " ".join(words) or "none"

    def _one(self, words: list[str]) -> str:
        if len(words) != 1:
            got = "nothing" if not words else f"{len(words)} words: {self.shown(' '.join(words))}"
            raise Bad(f"expected one value, got {got}")
        return words[0]


def redacted(value: Any) -> Any:
    """``value`` with every URL's password in it as ``***`` (tuples walked)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, tuple):
        return tuple(redacted(v) for v in value)
    if isinstance(value, list):
        return [redacted(v) for v in value]
    return value


def _num(x: float) -> str:
    """``x`` for a message: 31536000, not 3.1536e+07."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


# --------------------------------------------------------------------------
# Switches and numbers


class Switch(Key):
    """On or off: the key alone (on), or with true/false, yes/no, on/off, 1/0."""

    def parse(self, words: list[str]) -> bool:
        if not words:
            return True
        if len(words) == 1 and words[0].lower() in _TRUE | _FALSE:
            return words[0].lower() in _TRUE
        raise Bad(f"is a switch: expected no value or true/false, got {' '.join(words)!r}")

    def coerce(self, value: Any) -> bool:
        if not isinstance(value, bool):
            raise Bad(f"expected true or false, got {value!r}")
        return value

    def format(self, value: bool) -> list[str]:
        return [self.name] if value else [f"{self.name} false"]

    def values(self) -> str:
        return "switch"

    def describe(self, value: bool) -> str:
        return "on" if value else "off"


class Int(Key):
    """An integer in ``low..high`` (both included): every number has a range, so
    a value that would overflow or never end (``limitTime 1e308``) is refused
    when the file is read, not met as a traceback in the middle of a crawl."""

    def __init__(self, name: str, low: int, high: int):
        super().__init__(name)
        self.low, self.high = low, high
        self.expected = f"an integer in {low}..{high}"

    def parse(self, words: list[str]) -> int:
        word = self._one(words)
        try:
            return self.coerce(int(word, 10))
        except (ValueError, Bad):
            raise Bad(f"expected {self.expected}, got {word!r}") from None

    def coerce(self, value: Any) -> int:
        if (not isinstance(value, int) or isinstance(value, bool) or value < self.low
                or value > self.high):
            raise Bad(f"expected {self.expected}, got {value!r}")
        return value

    def format(self, value: int) -> list[str]:
        return [f"{self.name} {value}"]

    def values(self) -> str:
        return f"integer {self.low}..{self.high}"


class Seconds(Key):
    """A finite number of seconds in ``[low, high]`` (``(low, high]`` with
    ``above``); nan and inf are refused."""

    def __init__(self, name: str, low: float, high: float, above: bool = False,
                 what: str = "a number of seconds"):
        super().__init__(name)
        self.low, self.high, self.above = low, high, above
        self.interval = f"{'(' if above else '['}{_num(low)}, {_num(high)}]"
        self.expected = f"{what} in {self.interval}"
        self.unit = "seconds" if what == "a number of seconds" else "number"

    def parse(self, words: list[str]) -> float:
        word = self._one(words)
        try:
            return self.coerce(float(word))
        except (ValueError, Bad):
            raise Bad(f"expected {self.expected}, got {word!r}") from None

    def coerce(self, value: Any) -> float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise Bad(f"expected {self.expected}, got {value!r}")
        try:
            number = float(value)
        except OverflowError:  # an int beyond any float
            raise Bad(f"expected {self.expected}, got {value!r}") from None
        if (not math.isfinite(number) or number < self.low or (self.above and number == self.low)
                or number > self.high):
            raise Bad(f"expected {self.expected}, got {value!r}")
        return value if type(value) is float else number

    def format(self, value: float) -> list[str]:
        text = repr(value)
        return [f"{self.name} {text[:-2] if text.endswith('.0') else text}"]

    def values(self) -> str:
        return f"{self.unit} {self.interval}"


class Fraction(Seconds):
    """A number in (0, 1], or in [0, 1] with ``zero``."""

    def __init__(self, name: str, *, zero: bool = False):
        super().__init__(name, 0.0, 1.0, above=not zero, what="a number")


class Replicas(Int):
    """``redisReplicas``: ``auto`` (None: see :func:`larbin_py.config.replicas_for`) or 0..16."""

    def __init__(self, name: str):
        super().__init__(name, 0, 16)
        self.expected = "auto or an integer in 0..16"

    def parse(self, words: list[str]) -> int | None:  # type: ignore[override]  # auto is None
        if len(words) == 1 and words[0].lower() == "auto":
            return None
        return super().parse(words)

    def coerce(self, value: Any) -> int | None:  # type: ignore[override]  # auto is None
        return None if value is None else super().coerce(value)

    def format(self, value: int | None) -> list[str]:
        return [f"{self.name} {'auto' if value is None else value}"]

    def values(self) -> str:
        return f"auto, or {super().values()}"


# --------------------------------------------------------------------------
# Text and choices


class Text(Key):
    """Free text: the rest of the line, words joined by one space."""

    def __init__(self, name: str, *, empty: bool = False, one_word: bool = False,
                 none: bool = False, min_length: int = 1, email: bool = False, secret: bool = False):
        super().__init__(name)
        self.empty, self.one_word, self.none = empty, one_word, none
        self.min_length, self.email, self.secret = min_length, email, secret

    def parse(self, words: list[str]) -> str | None:
        if not words and self.none:
            return None
        text = self._one(words) if self.one_word else " ".join(words)
        if not text:
            raise Bad("expected a value, got nothing")
        return self.coerce(text)

    def coerce(self, value: Any) -> str | None:
        if value is None and self.none:
            return None
        if not isinstance(value, str):
            raise Bad(f"expected text, got {self.shown(value)}")
        if value == "" and self.empty:
            return value
        if value != value.strip() or CONTROL_RE.search(value) or "  " in value:
            raise Bad(f"expected text without control characters or extra spaces, got {self.shown(value)}")
        if self.one_word and " " in value:
            raise Bad(f"expected one word, got {self.shown(value)}")
        if any(word.startswith("#") for word in value.split(" ")):
            raise Bad(f"a word may not begin with '#' (it starts a comment), got {self.shown(value)}")
        if len(value) < self.min_length:
            raise Bad(f"expected at least {self.min_length} characters, got {len(value)}")
        if self.email and "@" not in value:
            raise Bad(f"expected an e-mail address, got {self.shown(value)}")
        return value

    def format(self, value: str | None) -> list[str]:
        return [] if not value else [f"{self.name} {value}"]

    def values(self) -> str:
        text = "e-mail address" if self.email else "one word" if self.one_word else "text"
        if self.min_length > 1:
            text += f" of {self.min_length} characters at least"
        return text + (", secret" if self.secret else "")


class Name(Text):
    """A name used in Redis keys and file names: letters, digits, '.', '_', '-'."""

    _RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")

    def __init__(self, name: str, *, empty: bool = False):
        super().__init__(name, empty=empty, one_word=True)

    def coerce(self, value: Any) -> str:
        value = super().coerce(value)
        if value == "" and self.empty:
            return value
        if not self._RE.match(value):
            raise Bad(f"expected a name of letters, digits, '.', '_' or '-' (at most 64, not "
                      f"starting with '.', '_' or '-'), got {value!r}")
        return value

    def values(self) -> str:
        return "name: letters, digits, '.', '_', '-' (at most 64)"


class UserName(Text):
    """``dynamicUser``: a user name (letters, digits, '.', '_', '-', a final '$') or a uid."""

    _RE = re.compile(r"(?:[A-Za-z_][A-Za-z0-9._-]{0,31}\$?|[0-9]{1,10})\Z")

    def __init__(self, name: str):
        super().__init__(name, one_word=True)

    def coerce(self, value: Any) -> str:
        value = super().coerce(value)
        if not self._RE.match(value):
            raise Bad(f"expected a user name or uid (letters, digits, '.', '_', '-'), got {value!r}")
        return value

    def values(self) -> str:
        return "user name or uid"


class OutputMode(Key):
    """``outputMode``: a name, or Larbin's number of it (0 none ... 4 warc)."""

    def parse(self, words: list[str]) -> str:
        word = self._one(words)
        if word.isdigit() and int(word) < len(OUTPUT_MODES):
            return OUTPUT_MODES[int(word)]
        return self.coerce(word.lower())

    def coerce(self, value: Any) -> str:
        if value not in OUTPUT_MODES:
            raise Bad(f"expected one of {', '.join(OUTPUT_MODES)} or 0..{len(OUTPUT_MODES) - 1}, "
                      f"got {value!r}")
        return value

    def format(self, value: str) -> list[str]:
        return [f"{self.name} {value}"]

    def values(self) -> str:
        return f"{', '.join(OUTPUT_MODES)} (or 0..{len(OUTPUT_MODES) - 1})"


class Choice(Key):
    """One of a few words (any case)."""

    def __init__(self, name: str, choices: tuple[str, ...]):
        super().__init__(name)
        self.choices = choices

    def parse(self, words: list[str]) -> str:
        return self.coerce(self._one(words).lower())

    def coerce(self, value: Any) -> str:
        if value not in self.choices:
            raise Bad(f"expected one of {', '.join(self.choices)}, got {value!r}")
        return value

    def format(self, value: str) -> list[str]:
        return [f"{self.name} {value}"]

    def values(self) -> str:
        return ", ".join(self.choices)


# --------------------------------------------------------------------------
# Addresses, URLs, identities


class ZkHosts(Text):
    """``host:port[,host:port...]``: the ZooKeeper ensemble (membership zookeeper)."""

    def __init__(self, name: str):
        super().__init__(name, one_word=True)

    def coerce(self, value: Any) -> str:
        try:
            return check_zk_hosts(str(super().coerce(value)))  # one word: never None
        except ValueError as exc:
            raise Bad(str(exc)) from None

    def values(self) -> str:
        return "host:port[,host:port...]"


class ZkPath(Text):
    """An absolute znode path: the prefix of the crawl's nodes in ZooKeeper."""

    def __init__(self, name: str):
        super().__init__(name, one_word=True)

    def coerce(self, value: Any) -> str:
        try:
            return check_zk_path(str(super().coerce(value)))  # one word: never None
        except ValueError as exc:
            raise Bad(str(exc)) from None

    def values(self) -> str:
        return "absolute znode path"


class ZkAuthKey(Key):
    """``zkAuth digest USER:PASSWORD`` (membership zookeeper): see :class:`ZkAuth`.

    Its errors never quote the value.  :meth:`format` writes the password
    (the text :func:`~larbin_py.config.format_config` makes is read back by
    the workers the launcher starts: they need it); :meth:`shown` is the
    line to show a person (``zkAuth digest USER:***``).
    """

    secret = True

    def parse(self, words: list[str]) -> ZkAuth | None:
        if len(words) == 1 and words[0].lower() == "none":
            return None
        try:
            return ZkAuth.parse(words)
        except ValueError as exc:
            raise Bad(str(exc)) from None

    def coerce(self, value: Any) -> ZkAuth | None:
        if value is None:
            return None
        if isinstance(value, ZkAuth):
            self.parse([value.scheme, value.credential])  # built in code: checked as if read
            return value
        if isinstance(value, str):  # Config(zk_auth="digest user:password")
            return self.parse(value.split())
        raise Bad(f"expected 'digest USER:PASSWORD' or None, got a {type(value).__name__}")

    def format(self, value: ZkAuth | None) -> list[str]:
        return [] if value is None else [f"{self.name} {value.scheme} {value.credential}"]

    def shown(self, value: ZkAuth | None) -> list[str]:  # type: ignore[override]
        """What a person is shown: the password as ``***``."""
        return [] if value is None else [f"{self.name} {value}"]

    def format_hidden(self, value: ZkAuth | None) -> list[str]:
        return self.shown(value)

    def values(self) -> str:
        return "digest USER:PASSWORD (a password of 8 characters at least), secret"


class RedisUrl(Text):
    """``redisUrl``: empty (one process, no Redis), ``auto`` (a private
    redis-server under stateDir), ``redis://[[user]:password@]host[:port][/db]``
    (``rediss://`` with TLS; db a number), ``unix:///path/to/socket``, or
    ``redis+sentinel://[[user]:password@]host:port[,host:port...]/master[/db]``
    (the master a set of Redis Sentinels names), checked by
    :func:`larbin_py.distributed.sentinel.parse_redis_url`.  Its password is shown
    as ``***`` (larbin_py.redact.redact_url)."""

    def __init__(self, name: str):
        super().__init__(name, empty=True, one_word=True)

    def parse(self, words: list[str]) -> str:
        if len(words) != 1:
            got = "nothing" if not words else f"{len(words)} words: {redact_url(' '.join(words))!r}"
            raise Bad(f"expected one URL (spaces in a password are written %20), got {got}")
        return self.coerce(words[0])

    def hidden(self, value: Any) -> Any:
        return redact_url(value) if isinstance(value, str) else super().hidden(value)

    def coerce(self, value: Any) -> str:
        if not isinstance(value, str):
            raise Bad(f"expected text, got {type(value).__name__}")
        if value in ("", "auto"):
            return value
        from ..distributed.sentinel import parse_redis_url  # only a distributed crawl imports larbin_py.distributed

        try:
            parse_redis_url(value)
        except ValueError as exc:
            raise Bad(f"expected auto, redis://host:port/db, unix:///path or "
                      f"redis+sentinel://host:port,host:port/master: {exc}") from None
        return value

    def values(self) -> str:
        return "auto, or a redis://, rediss://, unix:// or redis+sentinel:// URL (its password shown as ***)"


class Proxy(Key):
    """``proxy http://[USER:PASSWORD@]HOST:PORT`` or ``proxy HOST PORT`` (larbin_py.net.proxy).

    The value is ``(host, port)``, or ``(host, port, user, password)`` with
    credentials; the password is shown as ``***`` everywhere but in the
    file itself (:meth:`format`), and never quoted in an error.
    """

    def hidden(self, value: Any) -> Any:
        if isinstance(value, str):
            return " ".join(redact_url(word) for word in value.split(" "))
        if isinstance(value, (tuple, list)) and len(value) == 4:
            return (value[0], value[1], value[2], SHOWN)
        if isinstance(value, (tuple, list)) and value and isinstance(value[0], str):
            return (redact_url(value[0]), *value[1:])
        return super().hidden(value)

    def parse(self, words: list[str]) -> tuple | None:
        if len(words) == 1 and words[0].lower() == "none":
            return None
        if len(words) == 1:
            try:
                p = _ProxyConfig.parse(words[0])
            except ValueError as exc:
                raise Bad(f"{exc}, got {self.shown(words[0])}") from None
            return self.coerce((p.host, p.port, p.user, p.password) if p.user else (p.host, p.port))
        if len(words) != 2:
            raise Bad(f"expected http://[USER:PASSWORD@]HOST:PORT, 'host port' or 'none', "
                      f"got {self.shown(' '.join(words))}")
        return self.coerce((words[0], port(words[1], words[1], low=1)))

    def coerce(self, value: Any) -> tuple | None:
        if value is None:
            return None
        if (not isinstance(value, (tuple, list)) or len(value) not in (2, 4) or not isinstance(value[0], str)
                or not value[0] or any(c.isspace() for c in value[0])
                or not isinstance(value[1], int) or not 1 <= value[1] <= 65535
                or not all(isinstance(v, str) for v in value[2:])):
            raise Bad(f"expected (host, port), (host, port, user, password) or None, got {self.shown(value)}")
        if "@" in value[0] or "://" in value[0]:
            raise Bad("expected a host name or address (credentials go as http://USER:PASSWORD@HOST:PORT), "
                      f"got {self.shown(value[0])}")
        if len(value) == 4 and (not value[2] or any(c.isspace() or ord(c) < 32 for c in value[2] + value[3])):
            raise Bad("expected a user name and a password without spaces or control characters")
        return value if isinstance(value, tuple) else tuple(value)

    def format(self, value: tuple | None) -> list[str]:
        if value is None:
            return []
        if len(value) == 4:
            return [f"{self.name} {_ProxyConfig(*value).url()}"]
        return [f"{self.name} {value[0]} {value[1]}"]

    def format_hidden(self, value: tuple | None) -> list[str]:
        if value is not None and len(value) == 4:
            return [f"{self.name} {_ProxyConfig(*value).shown()}"]
        return self.format(value)

    def values(self) -> str:
        return "http://[USER:PASSWORD@]HOST:PORT, host port, or none"


class TlsVerify(Key):
    """``tlsVerify on`` | ``tlsVerify off HOST...``: the hosts whose certificates are not checked.

    The value is the tuple of host patterns (empty: every certificate is
    checked).  A bare ``off`` is refused: the hosts are the explicit opt-in
    (``*`` for all of them)."""

    def parse(self, words: list[str]) -> tuple[str, ...]:
        if words == ["on"]:
            return ()
        if not words or words[0] != "off":
            raise Bad(f"expected 'on' or 'off HOST...', got {self.shown(' '.join(words))}")
        if len(words) == 1:
            raise Bad("'off' needs the hosts it applies to (tlsVerify off HOST..., or * for every host)")
        return self.coerce(tuple(words[1:]))

    def coerce(self, value: Any) -> tuple[str, ...]:
        if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)):
            raise Bad(f"expected a tuple of host patterns, got {value!r}")
        for host in value:
            if not isinstance(host, str) or not host or CONTROL_RE.search(host) or " " in host \
                    or host.startswith("#") or "/" in host and not _is_net(host):
                raise Bad(f"expected a host, .domain, address, address range or *, got {host!r}")
        return tuple(value)

    def format(self, value: tuple[str, ...]) -> list[str]:
        return [f"{self.name} off {' '.join(value)}"] if value else []

    def values(self) -> str:
        return "on, or off HOST... (the hosts whose certificates are not checked; * for all)"


def _is_net(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_network(text, strict=False)
        return True
    except ValueError:
        return False


class CaFile(Text):
    """``tlsCaFile``: a PEM file of CA certificates, loaded to check it (a file that does not load
    is refused with its reason)."""

    def __init__(self, name: str):
        super().__init__(name, empty=True, one_word=True)

    def coerce(self, value: Any) -> str:
        value = super().coerce(value)
        if value:
            import ssl

            try:
                ssl.create_default_context().load_verify_locations(cafile=value)
            except ssl.SSLError as exc:  # (an OSError too: first)
                raise Bad(f"no CA certificate in {value!r} ({exc.reason or exc})") from None
            except OSError as exc:
                raise Bad(f"cannot read {value!r}: {exc.strerror or exc}") from None
        return value

    def values(self) -> str:
        return "a PEM file of CA certificates, or nothing"


# --------------------------------------------------------------------------
# Lists


class Words(Key):
    """A list of words: repeated lines (or a block) accumulate."""

    repeatable = True

    def __init__(self, name: str, *, block: bool = False, nonempty: bool = False):
        super().__init__(name)
        self.block = block
        self.nonempty = nonempty

    def item(self, word: str) -> Any:
        """One item from its word; raises Bad."""
        if CONTROL_RE.search(word) or not word or word != word.strip() or word.startswith("#") \
                or " " in word or word == "end":
            raise Bad(f"expected a word, got {word!r}")
        return word

    def parse(self, words: list[str]) -> tuple:
        return tuple(self.item(word) for word in words)

    def coerce(self, value: Any) -> tuple:
        if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)):
            raise Bad(f"expected a tuple, got {value!r}")
        items = tuple(self.coerce_item(item) for item in value)
        if self.nonempty and not items:
            raise Bad("expected at least one value")
        return value if items == value and isinstance(value, tuple) else items

    def coerce_item(self, item: Any) -> Any:
        if not isinstance(item, str):
            raise Bad(f"expected a word, got {item!r}")
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

    def values(self) -> str:
        return "a block of words up to end" if self.block else "words"


class StartUrls(Words):
    """``startUrl``: http(s) URLs, kept as written (the engine normalizes them)."""

    def item(self, word: str) -> str:
        if not _URL_RE.match(word):
            raise Bad(f"not an http(s) URL: {word!r}")
        return word

    def format(self, value: tuple[str, ...]) -> list[str]:
        return [f"{self.name} {url}" for url in value]

    def values(self) -> str:
        return "http(s) URLs"


class DnsServers(Words):
    """``dnsServers``: ``address[:port]`` words, IPv6 as ``[address]:port``."""

    def item(self, word: str) -> tuple[str, int]:
        return parse_server(word)

    def coerce_item(self, item: Any) -> tuple[str, int]:
        if (not isinstance(item, (tuple, list)) or len(item) != 2 or not isinstance(item[0], str)
                or not isinstance(item[1], int) or isinstance(item[1], bool)):
            raise Bad(f"expected (address, port), got {item!r}")
        server = parse_server(format_server((item[0], item[1])))
        if server != tuple(item):
            raise Bad(f"expected a canonical (address, port), got {item!r}")
        return server

    def format(self, value: tuple[tuple[str, int], ...]) -> list[str]:
        return [f"{self.name} {' '.join(map(format_server, value))}"]

    def values(self) -> str:
        return "IP address[:port] words, IPv6 as [address]:port"


class DynamicPages(Words):
    """``dynamicPages``: one rule a line, ``PATTERN [TRIGGER]`` (larbin_py.net.dynamic.parse_rule);
    the reader hands :meth:`item_line` each line's words."""

    by_line = True

    def __init__(self, name: str):
        super().__init__(name, block=True)

    def item_line(self, words: list[str]) -> tuple[str, str]:
        try:
            from ..net.dynamic import parse_rule  # the browser's modules only when dynamicPages is set

            return parse_rule(words)
        except ValueError as exc:
            raise Bad(str(exc)) from None

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
            raise Bad(f"expected (pattern, trigger), got {item!r}")
        return self.item_line(list(item))

    def format(self, value: tuple) -> list[str]:
        return [self.name, *(f"    {p} {t}" for p, t in value), "end"] if value else []

    def values(self) -> str:
        return "a block up to end, one PATTERN [TRIGGER] a line"


class Analyzers(Words):
    """``analyzer NAME [urls=RE] [types=T,...] KIND ARGS...``: one analyzer a line (larbin_py.analysis)."""

    def parse(self, words: list[str]) -> tuple:
        return (self.coerce_item(tuple(words)),)

    def coerce_item(self, item: Any) -> tuple[str, ...]:
        from ..analysis.analyzers import parse_analyzer

        if not isinstance(item, (tuple, list)) or not all(isinstance(w, str) for w in item):
            raise Bad(f"expected the words of an analyzer line, got {item!r}")
        try:
            parse_analyzer(item)
        except ValueError as exc:
            raise Bad(str(exc)) from None
        return tuple(item)

    def format(self, value: tuple) -> list[str]:
        return [f"{self.name} {' '.join(words)}" for words in value]

    def values(self) -> str:
        return "NAME [urls=RE] [types=T,...] KIND ARGS..., one analyzer a line"


class HttpHosts(Words):
    """``httpHosts``: the names the stats server answers besides loopback and httpBind (one line)."""

    repeatable = False

    def item(self, word: str) -> str:
        from ..web.guard import host_name

        try:
            return host_name(word)
        except ValueError as exc:
            raise Bad(str(exc)) from None

    def values(self) -> str:
        return "host names or addresses, without a port"


class Command(Words):
    """A command and its arguments on one line (alertCommand)."""

    repeatable = False

    def item(self, word: str) -> str:
        if CONTROL_RE.search(word) or not word or word.startswith("#"):
            raise Bad(f"expected a word, got {word!r}")
        return word

    def values(self) -> str:
        return "a command and its arguments"


class UrlPatternBlock(Words):
    """``urlInclude`` / ``urlExclude``: a block of regular expressions, one a line (RE2 syntax,
    larbin_py.scope); a pattern RE2 refuses is an error on its line."""

    by_line = True

    def __init__(self, name: str):
        super().__init__(name, block=True)

    def item_line(self, words: list[str]) -> str:
        if len(words) != 1:
            raise Bad(f"expected one regular expression a line (no white space: write \\s or %20), "
                      f"got {len(words)} words: {' '.join(words)!r}")
        return self.item(words[0])

    def item(self, word: str) -> str:
        try:
            return check_pattern(word)
        except ValueError as exc:
            raise Bad(str(exc)) from None

    def coerce(self, value: Any) -> tuple:
        items = super().coerce(value)
        try:
            UrlPatterns(items)  # joined into one alternation: it must fit RE2's memory too
        except ValueError as exc:
            raise Bad(f"the patterns together: {exc}") from None
        return items

    def format(self, value: tuple) -> list[str]:
        return [self.name, *(f"    {p}" for p in value), "end"] if value else []

    def values(self) -> str:
        return "a block up to end, one regular expression (RE2) a line"


class SiteBlock(Words):
    """``site``: one line per host pattern, ``PATTERN NAME=VALUE...`` (larbin_py.site_settings);
    the value is a tuple of :class:`~larbin_py.site_settings.SiteRule`."""

    by_line = True

    def __init__(self, name: str):
        super().__init__(name, block=True)

    def item_line(self, words: list[str]) -> SiteRule:
        try:
            return parse_site_line(words)
        except ValueError as exc:
            raise Bad(str(exc)) from None

    def item(self, word: str) -> SiteRule:  # --set site=...: the whole value is one line
        return self.item_line(word.split())

    def parse(self, words: list[str]) -> tuple:
        """``--set site=LINE``: one line (the block then holds that line alone)."""
        return (self.item_line(words),)

    def coerce(self, value: Any) -> tuple:
        if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)):
            raise Bad(f"expected a tuple of site lines, got {value!r}")
        items = tuple(self.coerce_item(item) for item in value)
        if len(items) > MAX_RULES:
            raise Bad(f"at most {MAX_RULES} site lines, got {len(items)}")
        return value if items == value and isinstance(value, tuple) else items

    def coerce_item(self, item: Any) -> SiteRule:
        if isinstance(item, SiteRule):
            return parse_site_line([format_site_rule(item)])  # built in code: checked as if read
        if isinstance(item, str):
            return self.item_line(item.split())
        raise Bad(f"expected a site line, got {item!r}")

    def format(self, value: tuple) -> list[str]:
        return [self.name, *(f"    {format_site_rule(r)}" for r in value), "end"] if value else []

    def values(self) -> str:
        return "a block up to end, one HOST-PATTERN NAME=VALUE... a line"


class AuthBlock(Words):
    """``auth``: one rule a line, ``PREFIX basic USER PASSWORD``, ``PREFIX bearer FILE`` or
    ``PREFIX digest USER PASSWORD`` (larbin_py.net.auth); passwords shown as ``***``."""

    by_line = True

    def __init__(self, name: str):
        super().__init__(name, block=True)

    def item_line(self, words: list[str]) -> tuple[str, str, str, str]:
        for w in words:
            if CONTROL_RE.search(w):
                raise Bad("expected words without control characters")
        try:
            return _parse_auth_rule(words)
        except ValueError as exc:
            raise Bad(str(exc)) from None

    def parse(self, words: list[str]) -> tuple:
        """``--set auth=...``: one rule (its words)."""
        return (self.item_line(words),)

    def coerce_item(self, item: Any) -> tuple[str, str, str, str]:
        if not isinstance(item, (tuple, list)) or not all(isinstance(w, str) for w in item):
            raise Bad("expected the words of an auth rule")
        words = [w for w in item if w] if len(item) == 4 and item[1] == "bearer" else list(item)
        return self.item_line(words)

    def hidden(self, value: Any) -> Any:
        if isinstance(value, (tuple, list)):
            return tuple((r[0], r[1], r[2], SHOWN) if isinstance(r, (tuple, list)) and len(r) == 4
                         and r[1] != "bearer" else r for r in value)
        return SHOWN if isinstance(value, str) and value else value

    def format(self, value: tuple) -> list[str]:
        if not value:
            return []
        return [self.name, *("    " + " ".join(w for w in rule if w) for rule in value), "end"]

    def values(self) -> str:
        return "a block up to end, one PREFIX basic|bearer|digest ... a line"
