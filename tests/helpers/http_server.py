"""A scripted HTTP server on loopback: each connection answered as a test says.

(Moved from tests/test_http.py.)
"""

from __future__ import annotations

import asyncio


class Server:
    """A scripted TCP server: ``handler(reader, writer, request_head)`` per request."""

    def __init__(self, handler, ssl_context=None):
        self.handler = handler
        self.heads: list[bytes] = []
        self.connections = 0
        self.server = None
        self.ssl_context = ssl_context

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.ssl_context)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc):
        self.server.close()

    async def _serve(self, reader, writer):
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                self.heads.append(head)
                if await self.handler(reader, writer, head) is False:
                    return
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


def reply(body: bytes = b"<html>ok</html>", *, status: bytes = b"200 OK", headers: bytes = b"",
          close: bool = False):
    async def handler(reader, writer, head):
        length = b"" if b"content-length" in headers.lower() or b"chunked" in headers.lower() \
            else b"Content-Length: %d\r\n" % len(body)
        writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: text/html\r\n" + length + headers
                     + (b"Connection: close\r\n" if close else b"") + b"\r\n" + body)
        await writer.drain()
        return not close
    return handler
