"""Redis URLs, and the master behind a set of Redis Sentinels.

``redisUrl`` takes four forms (:func:`parse_redis_url` reads each into a
:class:`RedisTarget`)::

    redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]          plain TCP (port 6379)
    rediss://...                                          the same over TLS
    unix://[[USER]:PASSWORD@]/PATH[?db=N]                 a unix socket
    redis+sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/MASTERNAME[/DB][?sentinelPassword=PW]

The first three mean what they mean to redis-py (they are split the way its
``parse_url`` splits them, and their query parameters are left to it).  In
a sentinel URL the hosts are the **sentinels** (port 26379 when not given,
``[v6addr]:port`` for IPv6), MASTERNAME is the name they monitor
(``sentinel monitor MASTERNAME ...``: letters, digits, '.', '-', '_') and
DB the database (0).  USER and PASSWORD are those of the **data nodes**, the
master and its replicas (``requirepass``/ACL; ``masterauth`` and ``sentinel
auth-pass`` on the servers' side).  Sentinels are asked without a password,
unless ``?sentinelPassword=PW`` gives theirs (a sentinel's own
``requirepass``; AUTH with the default user).  A password's ``%``, ``@``
and any ``/ ? #`` or space in it are percent-encoded (``%40`` for ``@``), as
redis-py reads them.  TLS to sentinels and unix-socket sentinels are not
supported.

**Secrets.**  No message of this module shows a password: errors name the
URL through :func:`shown`, which replaces the password with ``***`` (and a
userinfo without ``:`` wholly, and the value of any query parameter whose
name contains "password"), on a malformed URL too (everything from
``://`` up to the last ``@`` is taken as userinfo, so a mis-split never
reveals part of a secret).  ``repr()`` of a :class:`RedisTarget` leaves the
URL and the passwords out.

**Discovery** (:class:`Sentinels`, :func:`discover_master`) follows Redis's
guidelines for Sentinel clients:

1. ask each sentinel in turn ``SENTINEL get-master-addr-by-name
   MASTERNAME``, each under ``try_timeout`` (a stopped sentinel accepts the
   connection and never answers; the bound moves on from it);
2. a sentinel that cannot be reached, refuses, or answers nil (it does not
   know the name) -> the next one; the one that names an address is moved
   to the front of the list (it answers first next time);
3. connect to that address (AUTH with the URL's password) and ask ``ROLE``:
   ``master`` -> its address is the answer.  Anything else (unreachable: a
   master just killed, still named until the sentinels agree on a
   failover; a replica: not yet promoted) -> the next sentinel (an
   address is checked once a round, however many sentinels name it);
   after a round without a master, wait ``retry_delay`` and start again,
   until ``timeout``.

Asking the next sentinel instead of waiting on the same one (the guidelines
wait and restart at step 1) gets the new master as soon as any sentinel
knows it.  The few commands go over plain asyncio streams, read by one
hiredis ``Reader`` per connection: redis.asyncio's ``Sentinel`` would do
the discovery inside its connection pool (re-asking at each new
connection, no ROLE check by default, its own timeouts per step), while
here every step is bounded by one deadline and each sentinel's failure is
kept for the error message.

The discovered address is used like a plain URL:
:meth:`RedisTarget.data_url` writes ``redis://[USER:PASSWORD@]HOST:PORT/DB``
for it.  A client that loses its connection, or gets ``-READONLY`` (its
master was demoted) or ``-MASTERDOWN``, discovers again: a sentinel that
reconfigures a server also closes its clients' connections (``CLIENT KILL
TYPE normal``).

**Errors.**

==================================  ==========================================
what happens                        what is raised
==================================  ==========================================
a URL of none of the forms; a bad   ``ValueError`` naming what is wrong, the
port, host, master name, DB or      URL shown with ``***`` for its password
sentinel query parameter
no sentinel names a master that     :class:`SentinelError` after ``timeout``:
answers ROLE master within          the master name, and each sentinel with
``timeout`` (all down, stopped,     its last failure ("connection refused",
unknown name, wrong sentinel        "no answer within 1 s", "does not know
password, master unreachable)       'x'", "named 10.0.0.5:6379: a replica")
the master refuses the URL's        :class:`SentinelError` at once (waiting
password, or needs one not given    does not fix a password), naming the
                                    master's address, never the password
==================================  ==========================================

:class:`SentinelError` is a plain ``Exception``: this module imports nothing
of the package (standard library and hiredis only), so ``config``,
``redisio`` and ``resp`` may all import it without a cycle; the client that
calls discovery turns it into its own error (a ``DistError`` for the
command line's one-line exit 2).
"""

from __future__ import annotations

import asyncio
import re
import socket
from dataclasses import dataclass, field
from typing import Any, Sequence
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import hiredis

__all__ = [
    "RedisTarget", "Sentinels", "SentinelError", "parse_redis_url", "shown", "discover_master",
    "is_sentinel_url", "SENTINEL_SCHEME", "SENTINEL_PORT",
]

SENTINEL_SCHEME = "redis+sentinel"
#: A sentinel's port when the URL gives none.
SENTINEL_PORT = 26379
REDIS_PORT = 6379
_PLAIN = ("redis", "rediss", "unix")
# sentinel.conf: "The valid charset is A-z 0-9 and the three characters '.-_'."
_MASTER_RE = re.compile(r"[A-Za-z0-9._-]{1,256}\Z")
_HOST_RE = re.compile(r"[A-Za-z0-9._-]{1,253}\Z")
_SENTINEL_PARAMS = ("sentinelPassword",)


class SentinelError(Exception):
    """No master found through the sentinels, or it refused the password (one line, no secret)."""


# --------------------------------------------------------------------------
# URLs


def shown(url: str) -> str:
    """``url`` with its passwords as ``***``: ``redis://alice:***@h:6379/0``
    (:func:`larbin_py.redact.redact_url`, the one place that hides secrets)."""
    from ..redact import redact_url

    return redact_url(url)


def is_sentinel_url(url: str) -> bool:
    """True for a ``redis+sentinel://`` URL (any case), whether valid or not."""
    return url[:len(SENTINEL_SCHEME) + 3].lower() == SENTINEL_SCHEME + "://"


@dataclass(frozen=True)
class RedisTarget:
    """Where a ``redisUrl`` points: a server (redis, rediss, unix) or a sentinel set.

    ``repr()`` omits the URL and the passwords.
    """

    scheme: str  # "redis", "rediss", "unix" or "redis+sentinel"
    url: str = field(repr=False)
    host: str | None = None  # redis, rediss
    port: int | None = None
    path: str | None = None  # unix
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    sentinels: tuple[tuple[str, int], ...] = ()  # redis+sentinel
    master_name: str | None = None
    sentinel_password: str | None = field(default=None, repr=False)

    @property
    def is_sentinel(self) -> bool:
        return self.scheme == SENTINEL_SCHEME

    @property
    def shown(self) -> str:
        """The URL with ``***`` for its passwords, for messages."""
        return shown(self.url)

    def sentinels_shown(self) -> str:
        return ", ".join(_address(a) for a in self.sentinels)

    def data_url(self, address: tuple[str, int] | None = None) -> str:
        """The plain URL of a data node: the master found at ``address`` for a
        sentinel target (``redis://[USER:PASSWORD@]HOST:PORT/DB``), else the URL itself."""
        if not self.is_sentinel:
            return self.url
        if address is None:
            raise ValueError(f"{self.shown}: a sentinel URL needs the master's address (discover_master)")
        auth = ""
        if self.password is not None:
            auth = f"{quote(self.username or '', safe='')}:{quote(self.password, safe='')}@"
        elif self.username:
            auth = f"{quote(self.username, safe='')}@"
        return f"redis://{auth}{_address(address)}/{self.db}"


def _address(a: tuple[str, int]) -> str:
    host, port = a
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_redis_url(url: str) -> RedisTarget:
    """The :class:`RedisTarget` of ``url``; ``ValueError`` (password as ``***``) when malformed."""
    if not isinstance(url, str):
        raise ValueError(f"expected a Redis URL, got {type(url).__name__}")
    if not url or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise ValueError(f"expected a Redis URL without spaces or control characters, got {shown(url)!r}")
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # "Invalid IPv6 URL": a '[' without ']'
        raise ValueError(f"{shown(url)!r}: {exc}") from None
    if parts.scheme not in (*_PLAIN, SENTINEL_SCHEME) or not url.partition("://")[1]:
        raise ValueError(f"expected redis://, rediss://, unix:// or {SENTINEL_SCHEME}:// "
                         f"(see docs/distributed.md), got {shown(url)!r}")
    if "@" in parts.path + parts.query + parts.fragment:
        raise ValueError(f"an '@' after the host in {shown(url)!r}: in a password, write '@' as %40, "
                         "'/' as %2F, '?' as %3F, '#' as %23")
    if parts.scheme == SENTINEL_SCHEME:
        return _parse_sentinel(url, parts)
    return _parse_plain(url, parts)


def _userinfo(netloc: str) -> tuple[str | None, str | None, str]:
    """(username, password, the rest of netloc), percent-decoded like redis-py."""
    info, at, hosts = netloc.rpartition("@")
    if not at:
        return None, None, netloc
    user, _, password = info.partition(":")
    return (unquote(user) or None), (unquote(password) or None), hosts


def _parse_plain(url: str, parts) -> RedisTarget:
    user, password, hosts = _userinfo(parts.netloc)
    if parts.scheme == "unix":
        if hosts or not parts.path.startswith("/") or parts.path == "/":
            raise ValueError(f"expected unix:///path/to/redis.sock, got {shown(url)!r}")
        return RedisTarget("unix", url, path=unquote(parts.path), db=_query_db(url, parts.query),
                           username=user, password=password)
    try:
        port = parts.port
        host = parts.hostname
    except ValueError:
        raise ValueError(f"expected a port in 1..65535, got {shown(url)!r}") from None
    if not host:
        raise ValueError(f"expected {parts.scheme}://HOST[:PORT][/DB], got {shown(url)!r} (no host)")
    if port == 0:
        raise ValueError(f"expected a port in 1..65535, got {shown(url)!r}")
    path = parts.path.strip("/")
    if path and not path.isdigit():
        raise ValueError(f"expected a database number after the host, got {path!r} in {shown(url)!r}")
    db = int(path) if path else _query_db(url, parts.query)
    return RedisTarget(parts.scheme, url, host=host, port=port or REDIS_PORT, db=db, username=user,
                       password=password)


def _query_db(url: str, query: str) -> int:
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name == "db":
            if not value.isdigit():
                raise ValueError(f"expected db=N (a database number), got {value!r} in {shown(url)!r}")
            return int(value)
    return 0


def _parse_sentinel(url: str, parts) -> RedisTarget:
    form = f"{SENTINEL_SCHEME}://[:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTERNAME[/DB]"
    user, password, hosts = _userinfo(parts.netloc)
    sentinels = []
    for item in hosts.split(","):
        sentinels.append(_sentinel_address(item, url))
    if len(set(sentinels)) != len(sentinels):
        raise ValueError(f"a sentinel is named twice in {shown(url)!r}")
    segments = parts.path.split("/")[1:] if parts.path else []
    if not segments or not segments[0]:
        raise ValueError(f"expected {form}: no master name in {shown(url)!r}")
    master = unquote(segments[0])
    if not _MASTER_RE.match(master):
        raise ValueError(f"expected a master name of letters, digits, '.', '-' or '_', got {master!r} "
                         f"in {shown(url)!r}")
    db = 0
    if len(segments) > 1 and (segments[1] or len(segments) > 2):
        if len(segments) > 2 or not segments[1].isdigit():
            raise ValueError(f"expected {form}: {parts.path!r} after the sentinels in {shown(url)!r}")
        db = int(segments[1])
    if parts.fragment:
        raise ValueError(f"expected no '#' fragment in {shown(url)!r}")
    sentinel_password = None
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name == "sentinelPassword":
            sentinel_password = value or None
        else:
            raise ValueError(f"unknown parameter {name!r} in {shown(url)!r} "
                             f"(a sentinel URL takes {', '.join(_SENTINEL_PARAMS)})")
    return RedisTarget(SENTINEL_SCHEME, url, db=db, username=user, password=password,
                       sentinels=tuple(sentinels), master_name=master, sentinel_password=sentinel_password)


def _sentinel_address(item: str, url: str) -> tuple[str, int]:
    """``host``, ``host:port``, ``[v6]``, ``[v6]:port`` -> (host, port)."""
    host, port_text = item, ""
    if item.startswith("["):
        close = item.find("]")
        rest = item[close + 1:] if close > 0 else "x"
        if close < 0 or (rest and not rest.startswith(":")):
            raise ValueError(f"expected a sentinel [IPv6]:PORT, got {item!r} in {shown(url)!r}")
        host, port_text = item[1:close], rest[1:]
        ok = ":" in host
    else:
        host, colon, port_text = item.partition(":")
        ok = bool(_HOST_RE.match(host))
        if colon and not port_text:
            ok = False
    if not ok or (port_text and not (port_text.isdigit() and 1 <= int(port_text) <= 65535)):
        raise ValueError(f"expected a sentinel HOST:PORT (port 1..65535), got {item!r} in {shown(url)!r}")
    return host, int(port_text) if port_text else SENTINEL_PORT


# --------------------------------------------------------------------------
# Discovery


class _ErrorReply(Exception):
    """An error reply (``-ERR ...``), as hiredis builds it."""


def _pack(cmds: Sequence[Sequence[str]]) -> bytes:
    """``cmds`` (text arguments) in the Redis protocol."""
    out = []
    for cmd in cmds:
        out.append(b"*%d\r\n" % len(cmd))
        for arg in cmd:
            b = arg.encode()
            out.append(b"$%d\r\n%b\r\n" % (len(b), b))
    return b"".join(out)


async def _exchange(address: tuple[str, int], cmds: Sequence[Sequence[Any]], timeout: float) -> list[Any]:
    """Connect, send ``cmds`` in one write, read their replies, close; all within ``timeout``."""
    writer = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(*address)
            writer.write(_pack(cmds))
            await writer.drain()
            parser = hiredis.Reader(replyError=_ErrorReply)
            out: list[Any] = []
            while len(out) < len(cmds):
                reply = parser.gets()
                if reply is False:
                    chunk = await reader.read(1 << 16)
                    if not chunk:
                        raise ConnectionError("the connection was closed")
                    parser.feed(chunk)
                else:
                    out.append(reply)
            return out
    finally:
        if writer is not None:
            writer.close()


def _why(exc: BaseException, timeout: float) -> str:
    """A failure in a few words (no traceback, no secret)."""
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout:g} s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the name ({exc.strerror or exc})"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__


def _text(b: Any) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else str(b)


class Sentinels:
    """The sentinels of one target, in the order to ask them; :meth:`master` finds the master.

    Keep one per client: the sentinel that last answered is asked first.
    ``try_timeout`` bounds each connection (to a sentinel or the master),
    ``retry_delay`` the wait between two rounds that found no master.
    """

    def __init__(self, target: RedisTarget, *, try_timeout: float = 1.0, retry_delay: float = 0.1) -> None:
        if not target.is_sentinel:
            raise ValueError(f"{target.shown} is not a {SENTINEL_SCHEME}:// URL")
        self.target = target
        self.order: list[tuple[str, int]] = list(target.sentinels)
        self.try_timeout = try_timeout
        self.retry_delay = retry_delay

    def _hello(self, password: str | None, username: str | None = None) -> list[tuple]:
        if password is None:
            return []
        return [("AUTH", username, password) if username else ("AUTH", password)]

    async def _ask_sentinel(self, sentinel: tuple[str, int], timeout: float) -> tuple[str, int] | str:
        """The address ``sentinel`` names, or why it named none."""
        hello = self._hello(self.target.sentinel_password)
        cmd = ("SENTINEL", "get-master-addr-by-name", self.target.master_name)
        try:
            replies = await _exchange(sentinel, [*hello, cmd], timeout)
        except (OSError, TimeoutError) as exc:
            return _why(exc, timeout)
        for reply in replies:
            if isinstance(reply, _ErrorReply):
                return f"answered {_text(reply)}"
        reply = replies[-1]
        if reply is None:
            return f"does not know {self.target.master_name!r}"
        try:
            host, port = _text(reply[0]), int(reply[1])
        except (TypeError, ValueError, IndexError):
            return f"answered {reply!r}"
        return host, port

    async def _role(self, address: tuple[str, int], timeout: float) -> str:
        """ROLE's first word at ``address`` ("master", "slave"), or why there is none."""
        t = self.target
        hello = self._hello(t.password, t.username)
        try:
            replies = await _exchange(address, [*hello, ("ROLE",)], timeout)
        except (OSError, TimeoutError) as exc:
            return f"unreachable ({_why(exc, timeout)})"
        for reply in replies:
            if isinstance(reply, _ErrorReply):
                message = _text(reply)
                if message.startswith(("WRONGPASS", "NOAUTH")) or "invalid password" in message \
                        or "without any password configured" in message:
                    raise SentinelError(f"the Redis master {_address(address)} of {t.master_name!r} "
                                        f"(redisUrl {t.shown}) refused its login: {message}")
                return f"answered {message}"
        role = replies[-1]
        return _text(role[0]) if isinstance(role, list) and role else f"answered {role!r}"

    def _to_front(self, sentinel: tuple[str, int]) -> None:
        self.order.remove(sentinel)
        self.order.insert(0, sentinel)

    async def master(self, timeout: float) -> tuple[str, int]:
        """The master's (host, port); :class:`SentinelError` when none is found within ``timeout`` s."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        failures: dict[tuple[str, int], str] = {}
        while True:
            roles: dict[tuple[str, int], str] = {}  # this round's ROLE answers: each address asked once
            for sentinel in list(self.order):
                left = deadline - loop.time()
                if left <= 0:
                    break
                step = min(self.try_timeout, left)
                found = await self._ask_sentinel(sentinel, step)
                if isinstance(found, str):
                    failures[sentinel] = found
                    continue
                self._to_front(sentinel)
                left = deadline - loop.time()
                if left <= 0:
                    failures[sentinel] = f"named {_address(found)}, not checked in time"
                    break
                role = roles.get(found) or await self._role(found, min(self.try_timeout, left))
                roles[found] = role
                if role == "master":
                    return found
                failures[sentinel] = f"named {_address(found)}: " + (
                    "a replica" if role == "slave" else role)
            if deadline - loop.time() <= self.retry_delay:
                break
            await asyncio.sleep(self.retry_delay)
        t = self.target
        why = "; ".join(f"{_address(s)}: {failures.get(s, 'not asked in time')}" for s in t.sentinels)
        raise SentinelError(f"no Redis master {t.master_name!r} found through the sentinels of "
                            f"redisUrl {t.shown} within {timeout:g} s ({why})")


async def discover_master(target: RedisTarget, timeout: float, *, try_timeout: float = 1.0) -> tuple[str, int]:
    """The master's (host, port) behind ``target``'s sentinels (one :class:`Sentinels`, used once)."""
    return await Sentinels(target, try_timeout=try_timeout).master(timeout)
