"""A private standalone ZooKeeper for the tests: Debian's jars, a temp dir, a free port.

Debian's ``zookeeper`` package puts the server in /usr/share/java/zookeeper.jar
(its manifest's Class-Path names the netty, slf4j, jute... jars beside it) and
the scripts in /usr/share/zookeeper/bin.  zkServer.sh reads /etc/zookeeper
and writes its pid and logs there, so the tests run the server's main class
straight: ``java -cp zookeeper.jar ZooKeeperServerMain zoo.cfg``, with a
config of ours (tickTime 200 ms: sessions may be as short as 0.4 s; the
admin server off; ``ruok`` allowed) whose dataDir is in the test's temp dir.

:meth:`ZkServer.start` returns once the server answers ``ruok``;
:meth:`ZkServer.kill` is a SIGKILL (the restart test), :meth:`ZkServer.stop`
a SIGTERM then a SIGKILL.  A restart reuses the port and the dataDir, so the
sessions the server had are restored.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time

import pytest

from conftest import require_service

ZK_JAR = "/usr/share/java/zookeeper.jar"
TICK_MS = 200


def free_port() -> int:
    """A loopback port nobody listens on now (probed by binding it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def ruok(port: int, timeout: float = 0.5) -> bool:
    """True when a ZooKeeper on 127.0.0.1:port answers ``imok``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
            conn.sendall(b"ruok")
            return conn.recv(8) == b"imok"
    except OSError:
        return False


class ZkServer:
    """One standalone ZooKeeper whose files live in ``directory``."""

    def __init__(self, directory: str, java: str, *, port: int | None = None) -> None:
        self.directory = directory
        self.java = java
        self.port = port or free_port()
        self.process: subprocess.Popen | None = None
        os.makedirs(os.path.join(directory, "data"), exist_ok=True)
        self.config = os.path.join(directory, "zoo.cfg")
        with open(self.config, "w") as f:
            f.write(f"tickTime={TICK_MS}\ninitLimit=5\nsyncLimit=2\n"
                    f"dataDir={os.path.join(directory, 'data')}\n"
                    f"clientPort={self.port}\nclientPortAddress=127.0.0.1\n"
                    "admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr\n"
                    "maxClientCnxns=0\n")

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> "ZkServer":
        log = open(os.path.join(self.directory, "zookeeper.log"), "ab")
        self.process = subprocess.Popen(
            [self.java, "-Xmx96m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
             "-Dzookeeper.log.dir=" + self.directory, "-cp", ZK_JAR,
             "org.apache.zookeeper.server.ZooKeeperServerMain", self.config],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while not ruok(self.port):
            if self.process.poll() is not None:
                raise RuntimeError(f"zookeeper exited with status {self.process.returncode} "
                                   f"(see {self.directory}/zookeeper.log)")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"zookeeper did not answer ruok within {timeout:g} s")
            time.sleep(0.02)  # polling a port that opens: not a sleep-to-hope
        return self

    def kill(self) -> None:
        """SIGKILL, and wait for the process (the port is free again after it)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None


def zk_binaries() -> str:
    """The java binary; missing zookeeper or java is a skip locally, a failure in CI."""
    require_service("zkServer.sh", "apt-get install zookeeper")
    java = require_service("java", "apt-get install zookeeper (it pulls a JRE)")
    if not os.path.exists(ZK_JAR):
        require_service("zookeeper.jar", "apt-get install zookeeper")
    return java


@pytest.fixture(scope="module")
def zk_server(tmp_path_factory):
    """A standalone ZooKeeper shared by a test module (each test uses its own crawl name)."""
    server = ZkServer(str(tmp_path_factory.mktemp("zk")), zk_binaries()).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def own_zk_server(tmp_path):
    """A ZooKeeper of this test alone (the test may kill and restart it)."""
    server = ZkServer(str(tmp_path / "zk"), zk_binaries()).start()
    try:
        yield server
    finally:
        server.stop()
