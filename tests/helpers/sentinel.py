"""A Redis primary, one replica and three sentinels for the tests, in a temp dir.

Debian's ``redis-server`` runs Sentinel with ``--sentinel`` (the package
``redis-sentinel`` adds only a service unit, /etc/redis/sentinel.conf and a
``redis-sentinel`` command for the same program), so nothing beyond
``redis-server`` is needed.

:class:`SentinelCluster` starts, on free loopback TCP ports:

* the **primary** and the **replica** (``replicaof``), both with
  ``requirepass`` and ``masterauth`` (a promoted replica and a demoted
  primary must still talk), no persistence, diskless sync without its 5 s
  delay;
* three **sentinels**, each from its own ``sentinel.conf`` in its own folder
  (a sentinel rewrites its file), monitoring the primary under
  :data:`MASTER` with quorum 2, ``auth-pass``, ``down-after-milliseconds``
  500 and ``failover-timeout`` 3000.

:meth:`SentinelCluster.start` returns when the replica's link is up on
both sides (the replica has acknowledged what the primary sent: a WAIT
answers at once) and every sentinel sees the master, the replica (not
down) and, when ``peers``, the two other sentinels: a failover needs a
majority of sentinels that know one another, learnt from their hello
messages (every 2 s).  Every wait polls a condition under a deadline;
nothing sleeps to hope.

Options: ``sentinels`` (0 for a primary and its replica alone),
``sentinel_password`` (the sentinels' own ``requirepass``),
``down_after_ms`` (a large value: no failover during the test).

:meth:`kill_primary` is a SIGKILL; :meth:`wait_failover` returns the new
master's address once every live sentinel names it and it answers ROLE
``master``; :meth:`restart_as_replica` brings the killed node back as the
new master's replica (until then ``WAIT 1`` answers 0 on the new master).
``cluster.replica.signal(SIGSTOP)``, ``cluster.sentinels[i].kill()``
and the like make the other faults.  :meth:`stop` kills what is left (each
process also dies with the test process: ``PR_SET_PDEATHSIG``).

Fixtures: ``sentinel_cluster`` (started, the sentinels knowing one another:
ready to fail over; about 2.5 s) and ``make_sentinel_cluster(peers=False,
**options)`` (clusters of the test's own making, about 1 s each without
``peers``).  Import both into the test module.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Callable

import pytest
import redis

from conftest import require_service
from larbin_py.distributed.prctl import set_pdeathsig
from helpers.zookeeper import free_port

MASTER = "larbinmaster"
PASSWORD = "s3cr-t/p@ss word"  # a space, a slash and an '@': percent-encoded in URLs
DOWN_AFTER_MS = 500
FAILOVER_TIMEOUT_MS = 3000
POLL = 0.05  # between two looks at a condition that is expected to turn true


def wait_until(condition: Callable[[], object], timeout: float, what: str) -> object:
    """The first true value of ``condition()``, polled every POLL s; AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        time.sleep(POLL)


class Node:
    """One redis-server process (data node or sentinel) on 127.0.0.1:port."""

    def __init__(self, name: str, directory: str, port: int, binary: str, conf: str, *args: str) -> None:
        self.name, self.directory, self.port = name, directory, port
        os.makedirs(directory, exist_ok=True)
        self.conf = os.path.join(directory, "redis.conf")
        with open(self.conf, "w") as f:
            f.write(conf)
        self.command = [binary, self.conf, *args]
        self.process: subprocess.Popen | None = None

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def start(self, *extra: str) -> "Node":
        log = open(os.path.join(self.directory, "stdout.log"), "ab")
        self.process = subprocess.Popen([*self.command, *extra], stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT, preexec_fn=set_pdeathsig)
        log.close()
        return self

    def alive(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"{self.name} exited with status {self.process.returncode} "
                                 f"(see {self.directory})")
        return self.process is not None

    def client(self, password: str | None = None) -> redis.Redis:
        return redis.Redis("127.0.0.1", self.port, password=password, socket_timeout=1.0,
                           socket_connect_timeout=1.0, decode_responses=True)

    def signal(self, sig: int) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL, then reap (the port is closed once this returns)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)  # a stopped process dies at once either way
            self.process.kill()
            self.process.wait(10)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


def _answer(fn: Callable[[], object]) -> object:
    """``fn()``, or None when the node cannot be reached or refuses."""
    try:
        return fn()
    except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
        return None


class SentinelCluster:
    """A primary, a replica and ``sentinels`` sentinels; see the module docstring."""

    def __init__(self, directory: str, *, sentinels: int = 3, password: str = PASSWORD,
                 sentinel_password: str | None = None, down_after_ms: int = DOWN_AFTER_MS) -> None:
        binary = require_service("redis-server", "apt-get install redis-server")
        self.password = password
        self.sentinel_password = sentinel_password
        p, r = free_port(), free_port()
        data = ("bind 127.0.0.1\nprotected-mode no\ndaemonize no\nsave \"\"\nappendonly no\n"
                "repl-diskless-sync yes\nrepl-diskless-sync-delay 0\n"
                f"requirepass \"{password}\"\nmasterauth \"{password}\"\n")
        self.primary = Node("primary", os.path.join(directory, "primary"), p, binary,
                            data + f"port {p}\ndir {os.path.join(directory, 'primary')}\n"
                                   f"logfile {os.path.join(directory, 'primary', 'redis.log')}\n")
        self.replica = Node("replica", os.path.join(directory, "replica"), r, binary,
                            data + f"port {r}\ndir {os.path.join(directory, 'replica')}\n"
                                   f"logfile {os.path.join(directory, 'replica', 'redis.log')}\n"
                                   f"replicaof 127.0.0.1 {p}\n")
        self.sentinels: list[Node] = []
        for i in range(sentinels):
            port = free_port()
            folder = os.path.join(directory, f"sentinel{i + 1}")
            conf = (f"port {port}\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir {folder}\n"
                    f"logfile {os.path.join(folder, 'sentinel.log')}\n"
                    f"sentinel monitor {MASTER} 127.0.0.1 {p} {max(1, sentinels // 2 + 1)}\n"
                    f"sentinel auth-pass {MASTER} \"{password}\"\n"
                    f"sentinel down-after-milliseconds {MASTER} {down_after_ms}\n"
                    f"sentinel failover-timeout {MASTER} {FAILOVER_TIMEOUT_MS}\n"
                    f"sentinel parallel-syncs {MASTER} 1\n")
            if sentinel_password is not None:  # the sentinels' own, and what they use with each other
                conf += f"requirepass \"{sentinel_password}\"\nsentinel sentinel-pass \"{sentinel_password}\"\n"
            self.sentinels.append(Node(f"sentinel{i + 1}", folder, port, binary, conf, "--sentinel"))
        self.master_address = self.primary.address

    @property
    def url(self) -> str:
        """``redis+sentinel://:PASSWORD@S1,S2,S3/MASTER`` (the password percent-encoded)."""
        return self.url_with()

    def url_with(self, *, password: str | None = None, master: str = MASTER, sentinels=None,
                 query: str = "") -> str:
        from urllib.parse import quote

        pw = quote(self.password if password is None else password, safe="")
        hosts = ",".join(f"{h}:{p}" for h, p in (sentinels or [s.address for s in self.sentinels]))
        return f"redis+sentinel://:{pw}@{hosts}/{master}{query}"

    # --- starting and watching -------------------------------------------
    def start(self, *, peers: bool = True, timeout: float = 20.0) -> "SentinelCluster":
        self.primary.start()
        self.replica.start()
        wait_until(lambda: self._replica_linked(self.replica), timeout, "replica linked to the primary")
        wait_until(lambda: self._replica_caught_up(self.primary), timeout, "the primary streaming to its replica")
        for s in self.sentinels:
            s.start()
        for s in self.sentinels:
            wait_until(lambda s=s: self._sentinel_ready(s, peers), timeout,
                       f"{s.name} sees the master, the replica{' and its peers' if peers else ''}")
        return self

    def _replica_linked(self, node: Node) -> bool:
        node.alive()
        info = _answer(lambda: node.client(self.password).info("replication"))
        return bool(info) and info.get("role") == "slave" and info.get("master_link_status") == "up"

    def _replica_caught_up(self, master: Node) -> bool:
        """The master's side: its replica has acknowledged everything it was sent.

        After a diskless sync the master streams to a replica only once that
        replica's first ACK came (INFO already says ``online`` before), so a
        WAIT would count it only at its next ACK, up to 1 s later.  A PUBLISH
        (replicated, no data) moves the offset, and the replica's ACK of it
        shows the stream flowing.
        """
        c = master.client(self.password)
        info = _answer(lambda: c.info("replication"))
        if not info or info.get("slave0", {}).get("state") != "online":
            return False
        if info["slave0"].get("offset") == info["master_repl_offset"] > 0:
            return True
        _answer(lambda: c.publish("sentinel_support", "caught up?"))
        return False

    def _sentinel_ready(self, s: Node, peers: bool) -> bool:
        s.alive()
        c = s.client(self.sentinel_password)
        master = _answer(lambda: c.execute_command("SENTINEL", "get-master-addr-by-name", MASTER))
        replicas = _answer(lambda: c.execute_command("SENTINEL", "replicas", MASTER))
        others = _answer(lambda: c.execute_command("SENTINEL", "sentinels", MASTER)) if peers else []
        if not master or replicas is None or others is None:
            return False
        flags = [_pairs(r).get("flags", "") for r in replicas]
        return (len(flags) >= 1 and all("down" not in f and "disconnected" not in f for f in flags)
                and (not peers or len(others) >= len(self.sentinels) - 1))

    def sentinel_master(self, s: Node) -> tuple[str, int] | None:
        """What sentinel ``s`` answers to get-master-addr-by-name (None: unreachable or nil)."""
        reply = _answer(lambda: s.client(self.sentinel_password).execute_command(
            "SENTINEL", "get-master-addr-by-name", MASTER))
        return (reply[0], int(reply[1])) if reply else None

    def role(self, address: tuple[str, int]) -> str | None:
        """ROLE's first word at ``address`` (None: unreachable)."""
        node = next(n for n in (self.primary, self.replica) if n.address == address)
        reply = _answer(lambda: node.client(self.password).execute_command("ROLE"))
        return reply[0] if reply else None

    # --- faults ------------------------------------------------------------
    def kill_primary(self) -> None:
        """SIGKILL the node that is master now (the primary, before any failover)."""
        node = next(n for n in (self.primary, self.replica) if n.address == self.master_address)
        node.kill()

    def wait_failover(self, timeout: float = 20.0) -> tuple[str, int]:
        """The new master's address, once every live sentinel names it and it answers ROLE master."""
        old = self.master_address

        def done():
            live = [s for s in self.sentinels if s.running]
            named = {self.sentinel_master(s) for s in live}
            if len(named) != 1:
                return None
            (address,) = named
            if address is None or address == old or self.role(address) != "master":
                return None
            return address

        self.master_address = wait_until(done, timeout, f"a failover away from {old[0]}:{old[1]}")
        return self.master_address

    def restart_as_replica(self, timeout: float = 20.0) -> Node:
        """Start the killed data node again as a replica of the master now (as an operator
        brings a node back); returns it once the master streams to it (WAIT 1 can answer 1).

        After a failover the promoted replica has no replica of its own: until
        one is back, ``WAIT 1`` answers 0.  Started as a master instead, the
        node would be converted by the sentinels only after 8 s (four hello
        periods) and a full sync.
        """
        node = next(n for n in (self.primary, self.replica) if not n.running)
        master = next(n for n in (self.primary, self.replica) if n.address == self.master_address)
        node.start("--replicaof", *map(str, self.master_address))
        wait_until(lambda: self._replica_linked(node), timeout, f"{node.name} linked to {master.name}")
        wait_until(lambda: self._replica_caught_up(master), timeout, f"{master.name} streaming to {node.name}")
        return node

    def stop(self) -> None:
        for node in (*self.sentinels, self.replica, self.primary):
            node.kill()


def _pairs(entry) -> dict:
    """One entry of SENTINEL replicas as a dict (redis-py makes it one; the wire has [k1, v1, ...])."""
    return entry if isinstance(entry, dict) else dict(zip(entry[0::2], entry[1::2]))


@pytest.fixture
def sentinel_cluster(tmp_path):
    """A started :class:`SentinelCluster` (sentinels that know one another: a failover can
    happen), stopped after the test."""
    cluster = SentinelCluster(str(tmp_path / "sentinel"))
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture
def make_sentinel_cluster(tmp_path):
    """``make(peers=False, **SentinelCluster options)``: a started cluster (without
    ``peers`` it does not wait for the sentinels to know one another, about
    2 s less, and cannot fail over); all are stopped after the test."""
    made: list[SentinelCluster] = []

    def make(*, peers: bool = False, **options) -> SentinelCluster:
        cluster = SentinelCluster(str(tmp_path / f"sentinel{len(made) + 1}"), **options)
        made.append(cluster)
        return cluster.start(peers=peers)

    try:
        yield make
    finally:
        for cluster in made:
            cluster.stop()
