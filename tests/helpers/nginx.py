"""A synthetic web exported as static files and served by a real nginx, started by the test.

nginx answers conditional requests for static files as servers do (ETag
from the file's mtime and size, Last-Modified, 304 Not Modified), which is
what recrawls are tested against; its access log (one tab-separated line
per request: host, target, status, If-None-Match, If-Modified-Since) is the
server's own account of what was asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import tempfile

from larbin_py.sim.dns import SimDNSServer
from larbin_py.sim.export import export

from conftest import require_service

LOG_FORMAT = "log_format rc '$host\\t$request_uri\\t$status\\t$http_if_none_match\\t$http_if_modified_since';"


def free_port(ip: str) -> int:
    with socket.socket() as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


class Served:
    """What :func:`served` yields: the DNS server's port, the exported folder, the access log."""

    def __init__(self, site_dir: str, dns_port: int, port: int) -> None:
        self.site_dir, self.dns_port, self.port = site_dir, dns_port, port
        self.log_path = os.path.join(site_dir, "logs", "access.log")

    def requests(self) -> list[tuple[str, str, int, str, str]]:
        """``(url, target, status, If-None-Match, If-Modified-Since)`` of every request so far."""
        out = []
        try:
            with open(self.log_path, encoding="utf-8") as f:
                for line in f:
                    host, target, status, inm, ims = line.rstrip("\n").split("\t")
                    out.append((f"http://{host}:{self.port}{target}", target, int(status),
                                "" if inm == "-" else inm, "" if ims == "-" else ims))
        except FileNotFoundError:
            pass
        return out

    async def wait_requests(self, n: int, timeout: float = 10.0) -> list:
        """The requests once at least ``n`` are logged (nginx logs a request once answered)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while True:
            got = self.requests()
            if len(got) >= n or loop.time() > end:
                return got
            await asyncio.sleep(0.02)  # poll: nginx signals nothing

    def clear(self) -> None:
        """Start the log afresh (nginx appends to the same open file: truncate it)."""
        with open(self.log_path, "r+b") as f:
            f.truncate(0)

    def path_of(self, host: str, pq: str) -> str:
        from larbin_py.sim.export import file_path

        return os.path.join(self.site_dir, "www", host, file_path(pq))


@contextlib.asynccontextmanager
async def served(web, port: int, *, validators: bool = True):
    """``web`` exported to a temporary folder and served by nginx on ``port``; its names by a
    sim DNS server.  ``validators`` False: nginx sends no ETag and ignores If-Modified-Since
    (always 200)."""
    nginx = require_service("nginx", "apt-get install nginx-light")
    # Not under pytest's tmp_path: nginx's workers may run as another user, and its parents are 0700.
    site_dir = tempfile.mkdtemp(prefix="larbin-test-site-")
    os.chmod(site_dir, 0o755)
    export(web, site_dir)
    conf = os.path.join(site_dir, "nginx.conf")
    with open(conf, encoding="utf-8") as f:
        text = f.read()
    log = os.path.join(site_dir, "logs", "access.log")
    text = text.replace("    access_log off;\n", f"    {LOG_FORMAT}\n    access_log \"{log}\" rc;\n")
    if not validators:
        text = text.replace("    server_tokens off;\n", "    server_tokens off;\n    etag off;\n    if_modified_since off;\n")
    with open(conf, "w", encoding="utf-8") as f:
        f.write(text)
    args = ["-p", site_dir, "-e", os.path.join(site_dir, "logs", "error.log"), "-c", conf]
    proc = subprocess.Popen([nginx, *args, "-g", "daemon off;"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    dns = SimDNSServer(web.dns_records(), host="127.0.0.1", port=0)
    await dns.start()
    try:
        first = next(iter(web.hosts.values()))
        for _ in range(500):  # until nginx listens (it gives no readiness signal)
            if proc.poll() is not None:
                raise RuntimeError(f"nginx exited: {proc.stderr.read().decode()[-2000:]}")
            try:
                socket.create_connection((first.ip, port), timeout=1).close()
                break
            except OSError:
                await asyncio.sleep(0.02)
        yield Served(site_dir, dns.port, port)
    finally:
        await dns.close()
        proc.terminate()
        proc.wait()
        shutil.rmtree(site_dir, ignore_errors=True)
