"""Debian's tinyproxy, started by a test: an HTTP proxy on loopback with Basic authentication.

:class:`Tinyproxy` writes its configuration in a private folder (listening
on 127.0.0.1 and a free port, CONNECT allowed to every port, ``BasicAuth
USER PASSWORD`` when given, its log at Info level so that CONNECTs are
recorded), starts it in the foreground (``-d``) and waits until the port
accepts.  :meth:`Tinyproxy.log_text` is its log so far.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time

from conftest import require_service
from helpers.nginx import free_port


class Tinyproxy:
    def __init__(self, user: str = "", password: str = "") -> None:
        self.binary = require_service("tinyproxy", "apt-get install tinyproxy")
        self.root = tempfile.mkdtemp(prefix="larbin-tinyproxy-")
        os.chmod(self.root, 0o755)
        self.port = free_port()
        self.user, self.password = user, password
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Tinyproxy":
        log = os.path.join(self.root, "tinyproxy.log")
        lines = [f"Port {self.port}", "Listen 127.0.0.1", "Timeout 30", f"LogFile \"{log}\"", "LogLevel Info",
                 "MaxClients 50", "Allow 127.0.0.1", "DisableViaHeader Yes"]
        if os.geteuid() == 0:
            lines += ["User root", "Group root"]
        if self.user:
            lines.append(f"BasicAuth {self.user} {self.password}")
        conf = os.path.join(self.root, "tinyproxy.conf")
        with open(conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.proc = subprocess.Popen([self.binary, "-d", "-c", conf], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tinyproxy exited: {self.proc.stderr.read().decode()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("tinyproxy does not listen") from None
                time.sleep(0.02)  # poll: tinyproxy gives no readiness signal
        return self

    def log_text(self) -> str:
        try:
            with open(os.path.join(self.root, "tinyproxy.log")) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "Tinyproxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
