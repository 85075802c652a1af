"""A small client of the Chrome DevTools Protocol, driven from the event loop.

The transport is a pair of pipes (``--remote-debugging-pipe``: the browser
reads commands on its fd 3 and writes answers and events on its fd 4, one
JSON message each, ended by a NUL byte).  :class:`CDPConnection` owns both
ends: ``send`` writes a command with a fresh id and awaits the answer with the
same id; messages without an id are events, handed to the :class:`Session`
they name (``sessionId``; the browser's own events have none).

Sessions are *flat* (``Target.attachToTarget`` with ``flatten``): every tab's
commands and events go over the one connection, tagged with its session id,
so no second socket or pipe is ever opened.

Failure is a value the caller can act on: a command the browser rejects
raises :class:`CDPError` (its ``code`` and ``message``), a command that gets
no answer in time raises :class:`CDPTimeout`, and when the pipe closes (the
browser exited or crashed) every pending command and every later one raises
:class:`BrowserClosed`; ``closed`` is a future that is then done.  Nothing
here blocks: the pipes are asyncio transports.

Messages are bounded: one longer than :data:`MAX_MESSAGE` is never held
whole.  It is read past in pieces up to its NUL (JSON escapes every control
character, so a NUL always ends a message and the stream stays in step),
counted in ``oversized``, and the command it answers (its ``"id"`` opens
the message) raises :class:`CDPTooLarge`; every other command and event
goes on.  Callers that may get large answers (a rendered DOM) fetch them in
slices (:mod:`larbin_py.net.dynamic`).
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, Callable

__all__ = ["CDPConnection", "Session", "CDPError", "CDPTimeout", "CDPTooLarge", "BrowserClosed", "MAX_MESSAGE"]

#: Largest message held whole; a longer one is skipped (see the module docstring).
MAX_MESSAGE = 32 * 1024 * 1024
_ID_RE = re.compile(rb'\{\s*"id"\s*:\s*(\d+)')


class CDPError(Exception):
    """The browser answered a command with an error."""

    def __init__(self, method: str, code: int, message: str) -> None:
        super().__init__(f"{method}: {message} ({code})")
        self.method = method
        self.code = code
        self.message = message


class CDPTimeout(CDPError):
    """A command got no answer within its timeout."""

    def __init__(self, method: str, timeout: float) -> None:
        super().__init__(method, -1, f"no answer in {timeout:g} s")


class CDPTooLarge(CDPError):
    """A command's answer was longer than MAX_MESSAGE: skipped, never held whole."""

    def __init__(self, method: str, size: int) -> None:
        super().__init__(method, -1, f"answer of {size} bytes is over the {MAX_MESSAGE}-byte limit")


class BrowserClosed(ConnectionError):
    """The DevTools pipe closed: the browser exited or crashed."""


Handler = Callable[[dict], None]


class Session:
    """One attached target (a tab), or the browser itself (``session_id`` None).

    ``on(method, handler)`` registers the handler of an event (one per
    method; handlers are plain functions called from the reader and must not
    block).  ``send`` is :meth:`CDPConnection.send` bound to this session.
    """

    def __init__(self, conn: "CDPConnection", session_id: str | None) -> None:
        self.conn = conn
        self.session_id = session_id
        self.handlers: dict[str, Handler] = {}

    def on(self, method: str, handler: Handler) -> None:
        self.handlers[method] = handler

    async def send(self, method: str, params: dict | None = None, *, timeout: float | None = 10.0) -> dict:
        return await self.conn.send(method, params, session_id=self.session_id, timeout=timeout)

    def detach(self) -> None:
        """Stop dispatching this session's events (its target is being closed)."""
        self.conn.sessions.pop(self.session_id, None)
        self.handlers.clear()


def _expire(fut: asyncio.Future, method: str, timeout: float) -> None:
    if not fut.done():
        fut.set_exception(CDPTimeout(method, timeout))


class CDPConnection:
    """Commands and events over the two DevTools pipes; see the module docstring."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.WriteTransport) -> None:
        self._reader = reader
        self._writer = writer
        self._next_id = 0
        self._pending: dict[int, tuple[str, asyncio.Future]] = {}
        loop = asyncio.get_running_loop()
        self.closed: asyncio.Future = loop.create_future()
        self.browser = Session(self, None)
        self.sessions: dict[str | None, Session] = {None: self.browser}
        self.messages_in = 0
        self.messages_out = 0
        self.oversized = 0
        self._read_transport: asyncio.BaseTransport | None = None
        self._task = loop.create_task(self._read())

    @classmethod
    async def over_pipes(cls, read_fd: int, write_fd: int) -> "CDPConnection":
        """A connection on the parent's ends of the two pipes (taken over: closed with it)."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=MAX_MESSAGE)
        read_transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                                         open(read_fd, "rb", buffering=0))
        writer, _ = await loop.connect_write_pipe(asyncio.Protocol, open(write_fd, "wb", buffering=0))
        conn = cls(reader, writer)
        conn._read_transport = read_transport
        return conn

    @property
    def is_closed(self) -> bool:
        return self.closed.done()

    def session(self, session_id: str) -> Session:
        """The :class:`Session` of an attached target (events start flowing to it now)."""
        s = self.sessions.get(session_id)
        if s is None:
            s = self.sessions[session_id] = Session(self, session_id)
        return s

    async def send(self, method: str, params: dict | None = None, *, session_id: str | None = None,
                   timeout: float | None = 10.0) -> dict:
        """Run one command; its ``result``.  Raises CDPError, CDPTimeout or BrowserClosed."""
        if self.closed.done():
            raise BrowserClosed("the browser's DevTools pipe is closed")
        self._next_id += 1
        mid = self._next_id
        msg: dict[str, Any] = {"id": mid, "method": method}
        if params:
            msg["params"] = params
        if session_id is not None:
            msg["sessionId"] = session_id
        fut = asyncio.get_running_loop().create_future()
        self._pending[mid] = (method, fut)
        try:
            self._writer.write(json.dumps(msg, separators=(",", ":")).encode() + b"\0")
            self.messages_out += 1
            if timeout is None:
                return await fut
            # A timer on the future itself (cheaper than wait_for: every command has one).
            timer = fut.get_loop().call_later(timeout, _expire, fut, method, timeout)
            try:
                return await fut
            finally:
                timer.cancel()
        finally:
            self._pending.pop(mid, None)

    def post(self, method: str, params: dict | None = None, *, session_id: str | None = None) -> None:
        """Send a command whose answer nobody waits for (Fetch.continue/fail in an event handler)."""
        if self.closed.done():
            return
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method}
        if params:
            msg["params"] = params
        if session_id is not None:
            msg["sessionId"] = session_id
        self._writer.write(json.dumps(msg, separators=(",", ":")).encode() + b"\0")
        self.messages_out += 1

    async def _read(self) -> None:
        reader = self._reader
        head = b""  # the start of an oversized message being skipped
        skipped = 0
        try:
            while True:
                try:
                    raw = await reader.readuntil(b"\0")
                except asyncio.IncompleteReadError:
                    break
                except asyncio.LimitOverrunError as exc:  # no NUL within the limit: read past it
                    piece = await reader.readexactly(exc.consumed)
                    head = head or piece[:64]
                    skipped += len(piece)
                    continue
                if head:  # the end of the oversized message
                    self._oversized(head, skipped + len(raw))
                    head, skipped = b"", 0
                    continue
                self.messages_in += 1
                try:
                    msg = json.loads(raw[:-1])
                except ValueError:
                    continue
                self._dispatch(msg)
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self._close_all()

    def _oversized(self, head: bytes, size: int) -> None:
        """A message over MAX_MESSAGE was skipped: the command it answered fails."""
        self.oversized += 1
        m = _ID_RE.match(head)
        entry = self._pending.get(int(m.group(1))) if m else None
        if entry is not None and not entry[1].done():
            entry[1].set_exception(CDPTooLarge(entry[0], size))

    def _dispatch(self, msg: dict) -> None:
        mid = msg.get("id")
        if mid is not None:
            entry = self._pending.get(mid)
            if entry is None or entry[1].done():
                return
            method, fut = entry
            err = msg.get("error")
            if err is not None:
                fut.set_exception(CDPError(method, err.get("code", 0), err.get("message", "")))
            else:
                fut.set_result(msg.get("result") or {})
            return
        session = self.sessions.get(msg.get("sessionId"))
        if session is None:
            return
        handler = session.handlers.get(msg.get("method", ""))
        if handler is not None:
            handler(msg.get("params") or {})

    def _close_all(self) -> None:
        if not self.closed.done():
            self.closed.set_result(None)
        for _method, fut in list(self._pending.values()):
            if not fut.done():
                fut.set_exception(BrowserClosed("the browser's DevTools pipe closed"))
        self._pending.clear()
        closed = self.sessions.get(None)
        for s in list(self.sessions.values()):
            handler = s.handlers.get("closed")
            if handler is not None:
                handler({})
        self.sessions = {None: closed} if closed is not None else {}
        for transport in (self._writer, self._read_transport):
            if transport is not None:
                try:
                    transport.close()
                except Exception:  # pragma: no cover - a transport already gone
                    pass

    async def close(self) -> None:
        """Close both pipes (the browser sees EOF and exits)."""
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        self._close_all()
