"""Raw HTTP to the stats server, a running crawl with its servers, headless Chromium.

(Moved from tests/test_web.py.)
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import pytest


async def http(port: int, request: bytes, *, read_timeout: float = 5.0) -> tuple[int, dict, bytes]:
    """Send raw ``request``; (status, headers, body) of the answer (connection closed by us)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), read_timeout)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    body = b""
    if "content-length" in headers:
        body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), read_timeout)
    writer.close()
    return status, headers, body


def get(path: str, extra: bytes = b"") -> bytes:
    return b"GET " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra + b"\r\n"


def post(path: str, body: bytes, ctype: bytes = b"text/plain", extra: bytes = b"") -> bytes:
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: " + ctype
            + b"\r\nContent-Length: %d\r\n" % len(body) + extra + b"\r\n" + body)


class running:
    """``async with running(StatsServer(...)) as srv``."""

    def __init__(self, server):
        self.server = server

    async def __aenter__(self):
        await self.server.start()
        return self.server

    async def __aexit__(self, *exc):
        await self.server.close()


AUTH = b"Authorization: Bearer s3cret-token\r\n"


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("headless Chromium is needed for the dashboard test: apt-get install chromium "
                "(.ci/run installs it)")


async def dump_dom(browser: str, url: str, tmp_path, screenshot: str | None = None) -> str:
    profile = tmp_path / f"profile-{os.urandom(4).hex()}"
    args = [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            f"--user-data-dir={profile}", "--virtual-time-budget=4000", "--window-size=1280,1000"]
    args += [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
    proc = await asyncio.create_subprocess_exec(*args, url, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.DEVNULL)
    out, _ = await asyncio.wait_for(proc.communicate(), 90)
    return out.decode("utf-8", "replace")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
