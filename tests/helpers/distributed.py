"""Distributed crawls of the synthetic web: worker processes started by hand
(:class:`Workers`), the launcher (:func:`launched`), a crawl to its end with
its checks (:func:`crawl_with`), and the checks against Redis's counters.

(Moved from tests/test_dist_e2e.py.)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
import uuid
from collections import Counter
from larbin_py.config import format_config
from larbin_py.demo import crawl_rules
from larbin_py.distributed.redisio import RedisIO
from larbin_py.distributed.crawl_worker import merge_index
from larbin_py.output.base import INDEX_NAME
from larbin_py.sim import Sim, SimConfig
from larbin_py.sim.web import DEFAULT_ROBOTS_MIX
from helpers.crawl import SLACK, TEST_CRAWL_DELAY, make_config, page_requests, check_politeness as e2e_politeness
from helpers.zookeeper import TICK_MS


CRAWL = "t"


LEASE_TTL = 2.0


#: zkSessionTimeout of the ZooKeeper runs: below leaseTtl, as docs/membership.md asks.
ZK_SESSION = 1.0


MEMBERSHIPS = ["redis", "zookeeper"]


def membership_keys(request, membership: str, server=None) -> dict:
    """The config changes for ``membership`` (ZooKeeper: the module's server, or ``server``)."""
    if membership == "redis":
        return {}
    server = server or request.getfixturevalue("zk_server")
    return dict(membership="zookeeper", zk_hosts=server.hosts, zk_path=f"/e2e-{uuid.uuid4().hex[:8]}",
                zk_session_timeout=ZK_SESSION)


def takeover_bound(membership: str) -> float:
    """leaseTtl + 2 heartbeats; with ZooKeeper the death is seen at the session's end
    (the timeout plus a server tick), which is below leaseTtl here."""
    seen = LEASE_TTL if membership == "redis" else max(LEASE_TTL, ZK_SESSION + TICK_MS / 1000)
    return seen + 2 * (LEASE_TTL / 5)


#: The sim's robots.txt profiles but those that fail (their retries wait
#: seconds; the single process's tests cover them, nothing here is specific).
ROBOTS_MIX = {k: v for k, v in DEFAULT_ROBOTS_MIX.items() if k not in ("error", "timeout")}


def sim_config(**kw) -> SimConfig:
    base = dict(seed=7, hosts=32, pages_per_host=(2, 5), hosts_per_ip=4, dns=True, robots_agent="larbin_py",
                trap=False, p_dup=0.0, robots_mix=ROBOTS_MIX, crawl_delay=TEST_CRAWL_DELAY)
    base.update(kw)
    return SimConfig(**base)


def worker_config(tmp_path, sim, redis_url: str, worker: str, **changes):
    values = dict(redis_url=redis_url, crawl_name=CRAWL, worker_id=worker, lease_ttl=LEASE_TTL,
                  output_mode="mirror", connexions_per_ip=1, partitions=64, wait_duration=0.1,
                  timeout_page=1.0, connect_timeout=1.0, retries=0)  # (a name that never resolves is not retried for seconds)
    values.update(changes)
    return make_config(tmp_path, sim, **values)


class Workers:
    """Worker processes of one crawl, each with its config file and stderr log."""

    def __init__(self, tmp_path, sim, redis_url: str, n: int, **changes) -> None:
        self.tmp = tmp_path
        self.procs: dict[str, asyncio.subprocess.Process] = {}
        self.configs = {}
        self.sim = sim
        self.redis_url = redis_url
        self.changes = changes
        self.names = [f"w{i}" for i in range(n)]
        self.env_path = ""  # a folder to add to the workers' PYTHONPATH (a python analyzer's module)

    async def start(self, name: str, *, reload: bool = False) -> None:
        """Start worker ``name`` (``reload``: started again, as the launcher's respawn)."""
        config = worker_config(self.tmp, self.sim, self.redis_url, name, **self.changes)
        self.configs[name] = config
        path = self.tmp / f"{name}.conf"
        path.write_text(format_config(config))
        err = open(self.tmp / f"{name}.err", "ab")
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (root, self.env_path))))
        self.procs[name] = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "larbin_py", "-c", str(path), *(["--reload"] if reload else []),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=err, env=env)
        err.close()

    async def start_all(self) -> None:
        for name in self.names:
            await self.start(name)

    async def wait(self, timeout: float) -> dict[str, int]:
        codes = {}
        for name, proc in self.procs.items():
            try:
                codes[name] = await asyncio.wait_for(proc.wait(), timeout)
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()
                raise AssertionError(f"{name} did not end: {self.log(name)[-3000:]}")
        return codes

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.err").read_text(errors="replace")


async def totals(redis_url: str):
    io = await RedisIO(redis_url, CRAWL, partitions=64).connect()
    try:
        return await io.view(rows=True)
    finally:
        await io.close()


@contextlib.asynccontextmanager
async def launched(tmp_path, config, n: int):
    """``python -m larbin_py -c tmp_path/launch.conf --workers n``, its output in
    ``tmp_path/launcher.out``; killed on the way out if it still runs."""
    path = tmp_path / "launch.conf"
    path.write_text(format_config(config))
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(tmp_path / "launcher.out", "wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "larbin_py", "-c", str(path), "--workers", str(n),
            stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT, env=env)
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def check_politeness(sim, wait: float) -> None:
    """Per host and per IP across workers: >= 0.95 x wait; one connection per IP."""
    e2e_politeness(sim, wait, floor=0.95 * wait - SLACK)


#: How soon a worker woken from SIGSTOP closes its kept-alive connections (its first tick).
STOP_GRACE = 1.0


def check_politeness_across_stops(sim, wait: float, stops: list[tuple[float, float]]) -> None:
    """:func:`check_politeness`, for a crawl whose workers were stopped (SIGSTOP) during
    ``stops`` (``(stopped, continued)``, time.monotonic, the sim's clock).

    A stopped worker cannot close its connections, so the IP's next holder may open
    one beside it (docs/distributed-design.md, IP leases).  Two connections open to an
    IP at once are allowed only when the older one is such a connection and the newer one
    came during that stop: the older opened before the stop, no request on it from the
    stop on, closed within :data:`STOP_GRACE` of the worker running again, and the newer
    opened after the stop began.  Every other overlap fails, as do requests too close.
    """
    e2e_politeness(sim, wait, floor=0.95 * wait - SLACK, connections=False)
    asked: dict[int, list[float]] = {}
    for r in sim.log.requests:
        asked.setdefault(r.conn, []).append(r.t)
    by_ip: dict[str, list] = {}
    for c in sim.log.connections.values():
        by_ip.setdefault(c.server_ip, []).append(c)
    end = time.monotonic()

    def stopped_worker_s(x, y) -> bool:
        closed = x.closed if x.closed is not None else end
        return any(x.opened < s <= y.opened and closed <= e + STOP_GRACE
                   and not any(t >= s for t in asked.get(x.id, ())) for s, e in stops)

    for ip, conns in by_ip.items():
        conns.sort(key=lambda c: c.opened)
        for i, x in enumerate(conns):
            x_closed = x.closed if x.closed is not None else end
            for y in conns[i + 1:]:
                if y.opened >= x_closed - SLACK:
                    break
                assert stopped_worker_s(x, y), (f"two connections open to {ip} at once: {x} and {y}; "
                                             f"stops {stops}")


def robots_repeated(sim) -> list:
    """Hosts whose robots.txt was fetched more than once (those that fail are asked again: left out)."""
    failing = {name for name, h in sim.web.hosts.items() if h.robots.kind in ("error", "timeout")}
    robots = Counter(r.host for r in sim.log.requests if r.path == "/robots.txt" and r.host not in failing)
    assert robots
    return [(h, n) for h, n in robots.items() if n > 1]


def index_urls(save_dir: str) -> list[str]:
    with open(os.path.join(save_dir, INDEX_NAME), "rb") as f:
        return [line.split(b"\t", 1)[0].decode() for line in f.read().splitlines()]


async def membership_seen(redis_url: str, names: list[str], timeout: float = 30) -> dict:
    """The membership section of a worker snapshot (``stats:<w>``) once it lists every worker."""
    io = await RedisIO(redis_url, CRAWL, partitions=64).connect()
    try:
        deadline = time.monotonic() + timeout
        while True:
            t = io.tick()
            i = t.get_stats(names)
            snaps = (await t.execute())[i]
            for snap in snaps.values():
                m = (snap.get("dist") or {}).get("membership") or {}
                if sorted(m.get("members") or []) == sorted(names):
                    return m
            assert time.monotonic() < deadline, f"no worker snapshot lists {names}: {snaps}"
            await asyncio.sleep(0.05)
    finally:
        await io.close()


async def check_conservation(redis_url: str, config, truth) -> None:
    """Global counts from Redis balance, every saved page fetched once, one index line each."""
    t = (await totals(redis_url)).totals
    assert t.queued == 0 and t.accepted == t.fetched + sum(t.forgotten.values())
    assert t.fetched == len(truth.saved)
    assert merge_index(config.save_dir) == len(truth.saved)
    assert sorted(index_urls(config.save_dir)) == sorted(truth.saved)


async def crawl_under_way(io: RedisIO, pages: int = 20, timeout: float = 60) -> None:
    """Until the crawl has fetched ``pages`` pages (Redis's counters, polled)."""
    deadline = time.monotonic() + timeout
    while (await io.view()).totals.fetched < pages:
        assert time.monotonic() < deadline, "the crawl did not start"
        await asyncio.sleep(0.05)


async def partitions_held(redis_url: str, names: list[str], held: dict, stop: asyncio.Event) -> None:
    """Until ``stop``: the most partitions each worker's snapshot (``stats:<w>``,
    written at each heartbeat) said it held, into ``held``."""
    io = await RedisIO(redis_url, CRAWL, partitions=64).connect()
    try:
        while not stop.is_set():
            t = io.tick()
            i = t.get_stats(names)
            for w, snap in (await t.execute())[i].items():
                held[w] = max(held.get(w, 0), int((snap.get("dist") or {}).get("partitions") or 0))
            await asyncio.sleep(0.05)
    finally:
        await io.close()


async def crawl_with(tmp_path, redis_server, n: int, **changes):
    """``n`` workers crawl the sim exactly; ``(sim, view, elapsed, held)``, ``held`` the
    most partitions each worker held at once."""
    async with Sim(sim_config()) as sim:
        workers = Workers(tmp_path, sim, redis_server.url, n, **changes)
        t0 = time.monotonic()
        await workers.start_all()
        held, stop = {}, asyncio.Event()
        watch = asyncio.ensure_future(partitions_held(redis_server.url, workers.names, held, stop))
        try:
            membership = await membership_seen(redis_server.url, workers.names) if n > 1 else None
            codes = await workers.wait(90)
        finally:
            stop.set()
            await watch
        elapsed = time.monotonic() - t0
        assert all(c == 0 for c in codes.values()), {w: workers.log(w)[-2000:] for w in codes}
        config = workers.configs["w0"]
        truth = sim.truth(crawl_rules(config, sim.seeds))
        requested = [r.url for r in page_requests(sim)]
        # exact coverage, nothing requested twice
        assert set(requested) == truth.must_request, (
            sorted(truth.must_request - set(requested))[:10], sorted(set(requested) - truth.must_request)[:10])
        twice = [u for u, c in Counter(requested).items() if c > 1]
        assert not twice, twice[:10]
        robots = robots_repeated(sim)
        assert not robots, robots
        check_politeness(sim, config.wait_duration)
        # conservation, global, from Redis alone
        view = await totals(redis_server.url)
        t = view.totals
        assert t.queued == 0 and t.pending == 0
        assert t.accepted == t.fetched + sum(t.forgotten.values())
        assert t.fetched == len(truth.saved)
        # one index line per saved page
        assert merge_index(config.save_dir) == len(truth.saved)
        lines = index_urls(config.save_dir)
        assert sorted(lines) == sorted(truth.saved)
        if membership is not None:
            assert membership["source"] == changes.get("membership", "redis")
            assert membership["alive"] is True and membership["last_change"]["what"]
        return sim, view, elapsed, held


async def wait_logs(workers: Workers, names, text: str, timeout: float) -> None:
    """Until every worker of ``names`` has said ``text`` on stderr (its log file grows)."""
    deadline = time.monotonic() + timeout
    while not all(text in workers.log(w) for w in names):
        assert time.monotonic() < deadline, {w: workers.log(w)[-1500:] for w in names}
        await asyncio.sleep(0.05)


def requested_urls(sim) -> list[str]:
    """Every page URL the sim was asked for, in order (robots.txt left out)."""
    return [r.url for r in page_requests(sim)]


async def wait_for(pred, timeout: float, what: str, step: float = 0.05):
    """Until ``pred()`` (awaited when it is a coroutine) is truthy: its value;
    failing after ``timeout`` s naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        assert time.monotonic() < deadline, what
        await asyncio.sleep(step)
