"""The servers of one crawl: the stats server, the URL input server, the status line.

They all read one ``StatsSource`` (the engine: ``snapshot()``,
``submit_urls()``) and are started before anything else of a crawl, so a
port in use or a bad ``httpBind`` stops the start (:class:`StartError`, one
line, exit 2) before the output is opened or a checkpoint written.  The
web modules are imported only when their key is on.
"""

from __future__ import annotations

import asyncio
import os
import socket

__all__ = ["StartError", "Servers"]


class StartError(Exception):
    """The crawl could not start (a server could not listen): one line, exit 2.

    Raised by ``Engine.run`` before the crawl wrote anything: stateDir
    is left as it was (a fresh one holds nothing, a checkpoint is intact).
    """


class Servers:
    """Start and stop the servers ``config`` asks for, serving ``source``.

    ``err``: the stream of the status line (``printStats``).
    """

    def __init__(self, config, source, err) -> None:
        self.config = config
        self.source = source
        self.err = err
        self.running: list = []
        #: The stats server (httpPort), once started.
        self.http = None

    async def start(self) -> None:
        """Start the stats and input servers; StartError (one line) when one cannot listen."""
        c = self.config
        if c.http_port:
            from .web.server import StatsServer

            self.http = await self._listen("httpPort", lambda: StatsServer(
                self.source, host=c.http_bind, port=c.http_port, token=c.http_token, hosts=c.http_hosts,
                accept_urls=c.url_input))
        if c.input_port:
            from .web.input import InputServer

            await self._listen("inputPort", lambda: InputServer(
                self.source, host=c.http_bind, port=c.input_port, token=c.http_token))
        if c.print_stats:
            from .web.terminal import StatusLine

            line = StatusLine(self.source, stream=self.err)
            line.start()
            self.running.append(line)

    async def _listen(self, key: str, make):
        """Build and start one server (``key`` names its port in errors)."""
        c = self.config
        port = c.http_port if key == "httpPort" else c.input_port
        host = f"[{c.http_bind}]" if ":" in c.http_bind else c.http_bind
        try:
            server = make()
            await server.start()
        except (OSError, ValueError) as exc:
            raise StartError(f"cannot listen on {host}:{port} ({key}, httpBind): "
                             f"{listen_reason(exc)}") from None
        self.running.append(server)
        return server

    async def stop(self) -> None:
        for server in self.running:
            result = server.stop() if hasattr(server, "stop") else server.close()
            if asyncio.iscoroutine(result):
                await result
        self.running = []


def listen_reason(exc: BaseException) -> str:
    """Why a server could not listen, in words: 'address already in use'."""
    if isinstance(exc, socket.gaierror):
        return f"unknown host name or address ({str(exc.strerror or exc).lower()})"
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno).lower()
    return str(exc)
