"""A private redis-server on a unix socket: ``redisUrl auto`` and the tests.

The crawler starts Debian's ``redis-server`` as a child process with the
settings the distributed mode needs (docs/distributed-design.md, "Durability"): an append-only file
fsynced every second (a kill -9 of redis-server loses no acknowledged
write), ``noeviction`` (evicting would lose URLs), no RDB snapshots, no TCP
port (``port 0``: only the unix socket, mode 700, in a folder of ours).

:meth:`RedisServer.start` returns once the server answers PING; a missing
binary raises :class:`RedisServerError` with the apt-get hint (the command
line exits 2 with it).  A socket left in the folder is first tried: a server
that still listens there (another launcher on the same stateDir) is never
replaced nor started beside (:class:`RedisServerError`, naming the pid in
its ``redis.pid`` when there is one); a stale one (its server dead) is
removed.  :meth:`RedisServer.stop` asks for a clean SHUTDOWN
(the AOF flushed) and kills the process if it does not end in time.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time

from .prctl import set_pdeathsig

__all__ = ["RedisServer", "RedisServerError", "INSTALL_HINT"]

INSTALL_HINT = "redis-server is not installed: apt-get install redis-server"


class RedisServerError(Exception):
    """redis-server is missing or did not start (a sentence naming why)."""


class RedisServer:
    """One redis-server process whose files live in ``directory``."""

    def __init__(self, directory: str, *, binary: str | None = None, appendonly: bool = True,
                 extra: tuple[str, ...] = ()) -> None:
        self.directory = os.path.abspath(directory)
        self.socket_path = os.path.join(self.directory, "redis.sock")
        self.binary = binary or shutil.which("redis-server") or (
            "/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None)
        self.appendonly = appendonly
        self.extra = extra
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """The ``unix://`` URL redis-py connects to."""
        return f"unix://{self.socket_path}"

    def command(self) -> list[str]:
        return [
            self.binary, "--port", "0", "--unixsocket", self.socket_path, "--unixsocketperm", "700",
            "--dir", self.directory, "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", "everysec", "--save", "", "--maxmemory-policy", "noeviction",
            "--daemonize", "no", "--logfile", os.path.join(self.directory, "redis.log"),
            "--set-max-intset-entries", "4096", "--pidfile", os.path.join(self.directory, "redis.pid"),
            *self.extra,
        ]

    def start(self, timeout: float = 10.0) -> "RedisServer":
        if self.binary is None:
            raise RedisServerError(INSTALL_HINT)
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        if os.path.exists(self.socket_path):
            if self._listening():
                raise RedisServerError(f"a redis-server already serves {self.socket_path}{self._holder()}: "
                                       "is another crawl running on this stateDir?")
            os.unlink(self.socket_path)  # left by a killed server: ours to replace
        # Its own session: a Ctrl-C in the terminal (SIGINT to the foreground
        # process group) must not stop Redis under the workers' last acks; it
        # is stopped by stop() once they are done, or dies with its parent.
        # It dies with the thread that started it by SIGTERM (a clean shutdown,
        # the AOF written), so a killed launcher leaves no server behind.
        self.process = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        start_new_session=True, preexec_fn=set_pdeathsig,
                                        umask=0o077)  # its AOF and log owner-only (larbin_py.owner_only)
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode(errors="replace").strip() if self.process.stderr else ""
                raise RedisServerError(f"redis-server exited with status {self.process.returncode}"
                                       f"{': ' + err if err else ''} (see {self.directory}/redis.log)")
            if self._ping():
                return self
            if time.monotonic() > deadline:
                self.kill()
                raise RedisServerError(f"redis-server did not answer within {timeout:g} s "
                                       f"(see {self.directory}/redis.log)")
            time.sleep(0.01)

    def _listening(self) -> bool:
        """Something accepts connections on the socket (a live server, whatever it answers)."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(1.0)
                s.connect(self.socket_path)
                return True
        except OSError:
            return False

    def _holder(self) -> str:
        try:
            with open(os.path.join(self.directory, "redis.pid"), encoding="ascii") as f:
                return f" (pid {int(f.read().strip())})"
        except (OSError, ValueError):
            return ""

    def _ping(self) -> bool:
        """One PING over the socket, without redis-py: True on +PONG
        (a server still loading its AOF answers -LOADING)."""
        if not os.path.exists(self.socket_path):
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(1.0)
                s.connect(self.socket_path)
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self, timeout: float = 10.0) -> None:
        """A clean SHUTDOWN (the AOF written); SIGKILL if it does not end in ``timeout`` s."""
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(1.0)
                s.connect(self.socket_path)
                s.sendall(b"SHUTDOWN\r\n")
        except OSError:
            proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL (the kill -9 tests), then reap."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def __enter__(self) -> "RedisServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
