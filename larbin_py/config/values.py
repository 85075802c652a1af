"""Value syntaxes of larbin.conf that are more than a word or a number (sans-I/O).

* DNS servers: ``1.2.3.4``, ``1.2.3.4:5353``, ``::1``, ``[::1]:5353``
  (:func:`parse_server`, :func:`format_server`).
* ZooKeeper: an ensemble ``host:port[,host:port...]`` (:func:`check_zk_hosts`),
  a znode path (:func:`check_zk_path`), and the crawl's identity
  ``digest USER:PASSWORD`` (:class:`ZkAuth`, a value whose ``str()`` hides
  the password).

The DNS functions raise :class:`~larbin_py.config.errors.Bad`; the ZooKeeper
ones raise ValueError (larbin_py.distributed.membership_zk checks with them
too), with a sentence that never quotes a password.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from .errors import Bad

__all__ = ["CONTROL_RE", "ZkAuth", "check_zk_hosts", "check_zk_path", "format_server", "parse_server", "port"]

#: A control character: refused in every text value (it would forge a line of a log or a file).
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


# --------------------------------------------------------------------------
# DNS servers


def parse_server(word: str) -> tuple[str, int]:
    """``1.2.3.4``, ``1.2.3.4:5353``, ``::1``, ``[::1]:5353`` -> (address, port)."""
    host, number = word, 53
    if word.startswith("["):
        close = word.find("]")
        rest = word[close + 1:] if close > 0 else "x"
        if close < 0 or (rest and not rest.startswith(":")):
            raise Bad(f"expected an IP address or [IPv6]:port, got {word!r}")
        host = word[1:close]
        if rest:
            number = port(rest[1:], word, low=1)
    elif word.count(":") == 1:
        host, _, text = word.partition(":")
        number = port(text, word, low=1)
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise Bad(f"expected an IP address[:port] (IPv6 as [addr]:port), got {word!r}") from None
    return str(address), number


def port(text: str, word: str, low: int) -> int:
    """``text`` as a port in ``low..65535``; ``word`` is what the error quotes."""
    if not text.isdigit() or not low <= int(text) <= 65535:
        raise Bad(f"expected a port in {low}..65535, got {word!r}")
    return int(text)


def format_server(server: tuple[str, int]) -> str:
    """(address, port) -> ``address:port`` (``[address]:port`` for IPv6)."""
    host, number = server
    return f"[{host}]:{number}" if ":" in host else f"{host}:{number}"


# --------------------------------------------------------------------------
# ZooKeeper


def check_zk_hosts(text: str) -> str:
    """``host:port[,host:port...]`` checked; raises ValueError with a sentence."""
    if not isinstance(text, str) or not text or any(c.isspace() for c in text):
        raise ValueError(f"expected host:port[,host:port...], got {text!r}")
    for part in text.split(","):
        host, sep, number = part.rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not sep or not host or "/" in part or not number.isdigit() or not 1 <= int(number) <= 65535:
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


class ZkAuth:
    """``zkAuth digest USER:PASSWORD``: the ZooKeeper identity of the crawl's znodes.

    A value object whose ``str()`` and ``repr()`` hide the password
    (``digest USER:***``): a Config printed in a log or a traceback shows no
    secret.  Equality and hashing include the password (a Config read back
    from :func:`~larbin_py.config.format_config`'s text equals the original).
    """

    __slots__ = ("scheme", "user", "_password")
    scheme: str
    user: str
    _password: str

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
        if CONTROL_RE.search(password) or any(c.isspace() for c in password):
            raise ValueError("the password may not hold spaces or control characters")
        if len(password) < cls.MIN_PASSWORD:
            n = len(password)
            raise ValueError(f"the password is too short ({n} character{'' if n == 1 else 's'}): "
                             f"at least {cls.MIN_PASSWORD}")
        return cls(user, password)
