"""The floor of a crawl's requests: a bare HTTP/1.1 client that asks the same URLs and does nothing else.

    python bench/floor.py CRAWL_LOG HOSTS_JSON [OUT_JSON]

A reference for the recrawl benchmark (bench/recrawl.py), not a crawler:
it reads the request lines of a crawl log (the lines with an HTTP status,
in order), and asks each URL again over keep-alive connections, one per
server IP as the crawler opens them (``HOSTS_JSON``: ``{"host": "ip"}``,
the sim's DNS answers given up front), with ``If-None-Match: *`` so that
nginx answers every static file 304 as it answers a recrawl's validators
(the files of an unwanted type too, which a recrawl asks plainly: the
floor is a little lower than the crawler's own could be).
Each answer is read by llhttp (httptools, the crawler's own fast reader)
to its end and dropped: no DNS, no robots.txt rules, no frontier, no
output, no records, no log.  Its CPU (measured by the parent with wait4,
the interpreter's start included) is what asking these URLs costs in
Python on uvloop at the least; a crawler's CPU over it is its own work.

Prints one JSON line (or writes it to ``OUT_JSON``): the requests asked,
the connections and the answers' statuses.
"""

from __future__ import annotations

import asyncio
import collections
import json
import sys
from urllib.parse import urlsplit

import httptools
import uvloop


class _Conn(asyncio.Protocol):
    """One connection: asks its URLs one after the other (no pipelining, as the crawler)."""

    def __init__(self, queue: list[tuple[bytes, bytes]], statuses: collections.Counter, done: asyncio.Future):
        self.queue, self.statuses, self.done = queue, statuses, done
        self.transport = None
        self.parser = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        self._next()

    def _next(self) -> None:
        if not self.queue:
            self.transport.close()
            if not self.done.done():
                self.done.set_result(None)
            return
        host, target = self.queue.pop()
        self.parser = httptools.HttpResponseParser(self)
        self.transport.write(b"GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: floor\r\nAccept-Encoding: identity\r\n"
                             b"If-None-Match: *\r\n\r\n" % (target, host))

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_complete(self) -> None:
        self.statuses[self.parser.get_status_code()] += 1
        asyncio.get_running_loop().call_soon(self._next)

    def connection_lost(self, exc) -> None:
        if not self.done.done():
            self.done.set_exception(exc or ConnectionError("closed by the server"))


def requests_of(log: str) -> list[tuple[str, str]]:
    """(host, URL) of each request line of a crawl log (a status of 100 or more), in order."""
    out = []
    with open(log, encoding="utf-8") as f:
        for line in f:
            fields = line.split("\t")
            if len(fields) > 3 and fields[1].isdigit() and int(fields[1]) >= 100:
                out.append(fields[3])
    return out


async def ask(urls: list[str], hosts: dict[str, str]) -> dict:
    by_ip: dict[tuple[str, int], list[tuple[bytes, bytes]]] = collections.defaultdict(list)
    for url in urls:
        parts = urlsplit(url)
        target = (parts.path or "/") + ("?" + parts.query if parts.query else "")
        by_ip[(hosts[parts.hostname], parts.port or 80)].append((parts.netloc.encode(), target.encode()))
    loop = asyncio.get_running_loop()
    statuses: collections.Counter = collections.Counter()
    waits = []
    for (ip, port), queue in by_ip.items():
        queue.reverse()  # popped from the end: the log's order
        done = loop.create_future()
        await loop.create_connection(lambda q=queue, d=done: _Conn(q, statuses, d), ip, port)
        waits.append(done)
    await asyncio.gather(*waits)
    return {"requests": sum(statuses.values()), "connections": len(by_ip), "statuses": dict(statuses)}


def main() -> None:
    log, hosts_json = sys.argv[1:3]
    with open(hosts_json) as f:
        hosts = json.load(f)
    line = json.dumps(uvloop.run(ask(requests_of(log), hosts)), sort_keys=True)
    if len(sys.argv) > 3:
        with open(sys.argv[3], "w") as f:
            f.write(line + "\n")
    else:
        print(line)


if __name__ == "__main__":
    main()
