"""Debian's nginx, started by a test: TLS, HTTP/2, listeners on 127.0.0.1 and [::1], a log per request.

:class:`Nginx` writes a whole nginx.conf in a private folder (mode 0755: the
workers may run as another user) from the ``server`` blocks a test gives,
starts ``nginx -g 'daemon off;'``, and waits until every port it listens on
accepts (nginx has no readiness signal: a bounded poll).  The access log
(:meth:`Nginx.log`, :meth:`Nginx.wait_log`) has one JSON object a line: the server's port, the
request, the status, the protocol, and the ``Authorization`` and
``Proxy-Authorization`` headers as received -- what a test checks to prove
what was, or was not, sent.  Stopped (TERM, then waited for) by ``stop``
or the context manager.

:func:`served` serves a synthetic web instead (larbin_py.sim.export writes
its files and its nginx.conf, one server per sim address), with a sim DNS
server for its names: nginx answers conditional requests for static files
as servers do (ETag from the file's mtime and size, Last-Modified, 304 Not
Modified), which is what recrawls are tested against; its access log (one
tab-separated line per request: host, target, status, If-None-Match,
If-Modified-Since) is the server's own account of what was asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time

from larbin_py.sim.dns import SimDNSServer
from larbin_py.sim.export import export

from conftest import require_service

LOG_FORMAT = ('log_format t escape=json \'{"port":"$server_port","host":"$host","request":"$request",'
              '"status":"$status","protocol":"$server_protocol","authorization":"$http_authorization",'
              '"proxy_authorization":"$http_proxy_authorization","accept_encoding":"$http_accept_encoding"}\';')


def free_port(host: str = "127.0.0.1") -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Nginx:
    """nginx serving ``servers`` (the text of ``server { ... }`` blocks; ``{root}`` is the folder)."""

    def __init__(self, servers: str, *, ports: list[tuple[str, int]]) -> None:
        self.binary = require_service("nginx", "apt-get install nginx-light")
        self.root = tempfile.mkdtemp(prefix="larbin-nginx-")
        os.chmod(self.root, 0o755)
        self.ports = ports
        self.servers = servers
        self.proc: subprocess.Popen | None = None

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def write(self, rel: str, data: bytes) -> str:
        """A file under the folder (made world-readable for the workers)."""
        path = self.path(rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, 0o644)
        for d in (os.path.dirname(path),):
            os.chmod(d, 0o755)
        return path

    def start(self) -> "Nginx":
        os.makedirs(self.path("logs"), exist_ok=True)
        conf = f"""
worker_processes 1;
pid {self.path('nginx.pid')};
error_log {self.path('logs', 'error.log')} warn;
events {{ worker_connections 256; }}
http {{
    {LOG_FORMAT}
    access_log {self.path('logs', 'access.log')} t;
    client_body_temp_path {self.path('tmp')};
    proxy_temp_path {self.path('tmp')};
    fastcgi_temp_path {self.path('tmp')};
    uwsgi_temp_path {self.path('tmp')};
    scgi_temp_path {self.path('tmp')};
    default_type text/html;
    keepalive_requests 10000;
    {self.servers.replace('{root}', self.root)}
}}
"""
        with open(self.path("nginx.conf"), "w") as f:
            f.write(conf)
        self.proc = subprocess.Popen([self.binary, "-p", self.root, "-e", self.path("logs", "error.log"),
                                      "-c", self.path("nginx.conf"), "-g", "daemon off;"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        for host, port in self.ports:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"nginx exited: {self.proc.stderr.read().decode()}")
                try:
                    socket.create_connection((host, port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"nginx does not listen on {host}:{port}") from None
                    time.sleep(0.02)  # poll: nginx gives no readiness signal
        return self

    def log(self) -> list[dict]:
        """The access log's lines so far (nginx writes each as the request ends)."""
        try:
            with open(self.path("logs", "access.log")) as f:
                return [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []

    def wait_log(self, ready, timeout: float = 5.0) -> list[dict]:
        """The access log once ``ready(lines)`` is true (nginx writes a line after sending the
        answer, so a client may read the log before it is there): polled, bounded by ``timeout``
        (then the log as it is, for the test's assertion to show)."""
        deadline = time.monotonic() + timeout
        while True:
            log = self.log()
            if ready(log) or time.monotonic() > deadline:
                return log
            time.sleep(0.01)  # poll: nginx signals no log write

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "Nginx":
        # ``with nginx.start():`` started it already: a second start would leave the first
        # one running after the test (the second could not bind, and stop() ended only it)
        return self if self.proc is not None else self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


SIM_LOG_FORMAT = "log_format rc '$host\\t$request_uri\\t$status\\t$http_if_none_match\\t$http_if_modified_since';"


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
    text = text.replace("    access_log off;\n", f"    {SIM_LOG_FORMAT}\n    access_log \"{log}\" rc;\n")
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
