"""Opening a connection: Happy Eyeballs over a host's addresses, a proxy's CONNECT tunnel, then TLS.

:func:`open_socket` is the fetcher's one way to a connected TCP socket;
the fetcher then hands the socket to ``loop.create_connection(sock=...)``,
with TLS when the URL is https (SNI and verification as
larbin_py.net.tls says, the same with or without a proxy).

Happy Eyeballs (RFC 8305)
    :func:`attempt_order` (sans-I/O) puts the address the frontier chose
    first, then interleaves the others by family, the other family first:
    ``[v6a, v4a, v6b, v4b]``.  :func:`happy_connect` starts the first
    attempt, and the next one when ``delay`` (``happyEyeballsDelay``, 250 ms
    by default) passes or as soon as the previous one fails; the first
    connected socket wins and every other attempt is cancelled and closed.
    At most :data:`MAX_ATTEMPTS` addresses are tried.  An IPv6 address that
    blackholes (no answer, no error) therefore costs ``delay`` before IPv4
    is tried, not the connect timeout.  Only when every attempt failed is
    the first error raised (the primary address's, the one a person would
    look at).

Proxy tunnel
    :func:`tunnel` writes ``CONNECT host:port`` on a socket connected to the
    proxy and reads its answer (larbin_py.net.proxy.ConnectReply): a 2xx
    with nothing after it opens the tunnel; anything else raises
    :class:`~larbin_py.net.proxy.ProxyError`.  The exchange has no timer of
    its own: the fetcher's connect deadline cancels the whole opening, and
    the fetcher names the phase it was in (``proxy`` for a CONNECT never
    answered).

Every socket made here is closed on any failure or cancellation.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket

from .proxy import ConnectReply, ProxyConfig, ProxyError, connect_request

__all__ = ["MAX_ATTEMPTS", "attempt_order", "happy_connect", "open_socket", "tunnel"]

#: Addresses of one host tried per connection (RFC 8305 leaves it to the client).
MAX_ATTEMPTS = 4


def _family(ip: str) -> int:
    return 6 if ":" in ip else 4


def attempt_order(primary: str, addresses=()) -> list[str]:
    """The addresses to try, ``primary`` first, the others interleaved by family (other family first)."""
    rest = [a for a in dict.fromkeys(addresses) if a != primary]
    first = _family(primary)
    other = [a for a in rest if _family(a) != first]
    same = [a for a in rest if _family(a) == first]
    order = [primary]
    while other or same:
        if other:
            order.append(other.pop(0))
        if same:
            order.append(same.pop(0))
    return order[:MAX_ATTEMPTS]


async def _connect_one(loop, ip: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if _family(ip) == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await loop.sock_connect(sock, (ip, port))
    except BaseException:
        sock.close()
        raise
    return sock


async def happy_connect(loop, addresses: list[str], port: int, delay: float) -> tuple[socket.socket, str]:
    """A socket connected to the first of ``addresses`` that answers, and that address (see the module)."""
    if len(addresses) == 1:
        return await _connect_one(loop, addresses[0], port), addresses[0]
    pending = list(addresses)
    tasks: list[tuple[asyncio.Task, str]] = []
    winner: tuple[socket.socket, str] | None = None
    try:
        while winner is None:
            if pending:
                ip = pending.pop(0)
                tasks.append((loop.create_task(_connect_one(loop, ip, port)), ip))
            while winner is None:
                for t, ip in tasks:
                    if t.done() and not t.cancelled() and t.exception() is None:
                        winner = t.result(), ip
                        break
                else:
                    live = [t for t, _ in tasks if not t.done()]
                    if not live:
                        if pending:
                            break  # every attempt so far failed: the next one now
                        raise tasks[0][0].exception()  # all failed: the primary's error
                    finished, _ = await asyncio.wait(live, timeout=delay if pending else None,
                                                     return_when=asyncio.FIRST_COMPLETED)
                    if not finished or (pending and all(t.exception() is not None for t in finished)):
                        break  # the delay passed, or an attempt failed: the next one starts
        return winner
    finally:
        for t, _ in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*(t for t, _ in tasks), return_exceptions=True)
        for t, _ in tasks:  # every other connected socket (one may have connected as it was cancelled)
            if not t.cancelled() and t.exception() is None and (winner is None or t.result() is not winner[0]):
                t.result().close()


async def tunnel(loop, sock: socket.socket, authority: str, proxy: ProxyConfig, *, user_agent: bytes = b"",
                 max_head: int = 64 * 1024) -> None:
    """The CONNECT exchange on ``sock`` (connected to the proxy); raises ProxyError unless it opened."""
    reply = ConnectReply(authority, max_head)
    try:
        await loop.sock_sendall(sock, connect_request(authority, proxy, user_agent))
        while True:
            data = await loop.sock_recv(sock, 65536)
            if reply.feed(data):
                break
    except OSError as exc:
        raise ProxyError(f"proxy connection failed during CONNECT: {exc}") from None
    reply.check()


async def open_socket(loop, addresses: list[str], port: int, *, delay: float,
                      proxy: ProxyConfig | None = None) -> tuple[socket.socket, str]:
    """A connected socket to the first answering address, or to the proxy when ``proxy`` is given.

    The proxy's host is resolved by the loop's ``getaddrinfo`` unless it is
    an address; failing to reach it raises ProxyError.
    """
    if proxy is None:
        return await happy_connect(loop, addresses, port, delay)
    try:
        try:
            ips = [str(ipaddress.ip_address(proxy.host))]
        except ValueError:
            infos = await loop.getaddrinfo(proxy.host, proxy.port, type=socket.SOCK_STREAM)
            ips = list(dict.fromkeys(info[4][0] for info in infos))
        return await happy_connect(loop, attempt_order(ips[0], ips), proxy.port, delay)
    except OSError as exc:
        raise ProxyError(f"proxy {proxy.shown()} unreachable: {exc}") from None
