"""The ticks' own Redis connection: commands packed here, replies parsed by hiredis.

A worker sends one pipeline per tick (:class:`~larbin_py.distributed.redisio.Tick`):
about one function call per page fetched, 25 arguments per page.  Through
redis-py's pipeline each argument passes its encoder and each reply its
parser coroutine under its own timeout; measured under cProfile, that was
the largest cost a worker has and the embedded engine has not.  Here a tick
is packed into one ``bytes`` (:func:`pack`), written once, and its replies
are taken from one `hiredis.Reader` as they arrive, under one timeout for the
whole tick.  Everything else (``INFO``, ``FUNCTION LOAD``, the blocking
``XREAD``) stays on redis-py.

**Connection.**  The URL is read by redis-py's own ``parse_url`` (so
``redis://``, ``rediss://`` and ``unix://`` mean what they mean to the
client), then ``AUTH`` and ``SELECT`` when the URL asks.  It opens on the
first tick and after any failure.  :attr:`Pipe.in_multi` says that the
connection is inside a ``MULTI`` its user opened (False on a new
connection): see :meth:`larbin_py.distributed.redisio.Tick.execute`.

**Errors.**

==============================  ==============================================
what happens                    what :meth:`Pipe.execute` does
==============================  ==============================================
an error reply (``-ERR ...``)   its slot in the results is a
                                ``redis.exceptions.ResponseError`` (as
                                redis-py's ``raise_on_error=False``)
connect refused, reset, EOF     the connection is dropped; ``ConnectionError``
no full answer in ``timeout``   the connection is dropped (the replies still
                                due would be read as the next tick's);
                                ``TimeoutError``
an argument that is not bytes,  ``TypeError`` before anything is sent
str, int or float (None, bool)
==============================  ==============================================
"""

from __future__ import annotations

import asyncio
from typing import Any, Sequence

import hiredis
from redis.exceptions import ResponseError

__all__ = ["pack", "Pipe"]

READ_CHUNK = 1 << 16


def _arg(a: Any) -> bytes:
    t = type(a)
    if t is bytes:
        return a
    if t is str:
        return a.encode()
    if t is int:
        return b"%d" % a
    if t is float:
        return repr(a).encode()
    if isinstance(a, (bytes, bytearray, memoryview)):
        return bytes(a)
    raise TypeError(f"a Redis argument must be bytes, str, int or float, not {t.__name__}: {a!r}")


def pack(cmds: Sequence[Sequence[Any]]) -> bytes:
    """``cmds`` in the Redis protocol: one array of bulk strings each."""
    out: list[bytes] = []
    add = out.append
    for cmd in cmds:
        add(b"*%d\r\n" % len(cmd))
        for a in cmd:
            b = _arg(a)
            add(b"$%d\r\n%b\r\n" % (len(b), b))
    return b"".join(out)


class Pipe:
    """One Redis connection that sends a list of commands and answers their replies, in order."""

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        from redis.connection import parse_url

        self.url = url
        self.timeout = timeout
        self.params = parse_url(url)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._parser: hiredis.Reader | None = None
        #: A MULTI is open on this connection (set by the caller; False when it closes).
        self.in_multi = False

    @property
    def connected(self) -> bool:
        return self._writer is not None

    async def _connect(self) -> None:
        p = self.params
        if "path" in p:
            reader, writer = await asyncio.open_unix_connection(p["path"])
        else:
            ssl = None
            if p.get("connection_class") is not None and "SSL" in p["connection_class"].__name__:
                import ssl as ssl_mod

                ssl = ssl_mod.create_default_context()
            reader, writer = await asyncio.open_connection(p.get("host", "localhost"), p.get("port", 6379),
                                                           ssl=ssl)
        self._reader, self._writer = reader, writer
        self._parser = hiredis.Reader(replyError=ResponseError)
        hello: list[tuple] = []
        if p.get("password") is not None:
            hello.append(("AUTH", p["username"], p["password"]) if p.get("username") else ("AUTH", p["password"]))
        if p.get("db"):
            hello.append(("SELECT", p["db"]))
        for cmd, r in zip(hello, await self._exchange(hello) if hello else []):
            if isinstance(r, ResponseError):
                self.close()
                raise ConnectionError(f"Redis refused {cmd[0]}: {r}")

    async def execute(self, cmds: Sequence[Sequence[Any]]) -> list[Any]:
        """Send ``cmds`` (one write) and answer their replies; see the module's error table."""
        data = pack(cmds)
        try:
            async with asyncio.timeout(self.timeout):
                if self._writer is None:
                    await self._connect()
                return await self._exchange(cmds, data)
        except BaseException:
            self.close()
            raise

    async def _exchange(self, cmds: Sequence[Sequence[Any]], data: bytes | None = None) -> list[Any]:
        self._writer.write(pack(cmds) if data is None else data)
        await self._writer.drain()
        parser, reader = self._parser, self._reader
        out: list[Any] = []
        n = len(cmds)
        while len(out) < n:
            r = parser.gets()
            if r is False:
                chunk = await reader.read(READ_CHUNK)
                if not chunk:
                    raise ConnectionError("Redis closed the connection")
                parser.feed(chunk)
                continue
            out.append(r)
        return out

    def close(self) -> None:
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception:  # closing a broken transport
                pass
        self._reader = self._writer = self._parser = None
        self.in_multi = False
