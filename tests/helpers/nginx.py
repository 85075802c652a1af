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
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time

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
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
