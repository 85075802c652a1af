"""--workers: the launcher spawns, supervises and sums up workers; auto Redis; exit codes.

The workers here are small real processes (WORKER below) that join the crawl
in Redis as a worker does (meta, membership, an enqueue, a stats snapshot)
and then behave as each test asks (finish, crash once, exit 2, wait for a
signal, die by SIGKILL), so the supervision is tested on real processes and
a real redis-server, without the crawling side.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import sys
import urllib.request

import pytest

from larbin_py import cli
from larbin_py.config import Config, load_config
from larbin_py.distributed import launcher as launcher_mod
from larbin_py.distributed.cluster_stats import merge_snapshots
from larbin_py.distributed.launcher import Launcher, crawl_meta, resolve_redis_url
from larbin_py.distributed.redis_server import RedisServer
from larbin_py.distributed.redisio import CrawlMeta, RedisIO
from larbin_py.web.source import check_snapshot, empty_snapshot

WORKER = r'''
import asyncio, os, signal, sys
from larbin_py.config import load_config
from larbin_py.distributed.launcher import crawl_meta
from larbin_py.distributed.membership_redis import RedisMembership
from larbin_py.distributed.redisio import RedisIO

conf, wid, reload = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
plan = os.environ.get("PLAN_" + wid, "ok")

async def main():
    config = load_config(conf, require_start_urls=False)
    assert config.http_port == 0 and config.worker_id == "", "the launcher's servers are its own"
    io = await RedisIO(config.redis_url, config.crawl_name).connect()
    await io.join_crawl(crawl_meta(config))
    m = RedisMembership(io, config.lease_ttl)
    await m.join(wid)
    t = io.tick()
    t.enqueue(int(wid[1:]) % io.partitions, [(int(wid[1:]) * 1000 + len(os.environ.get("X", "")), b"u")])
    t.put_stats(wid, {"pages": {"fetched": 10 * int(wid[1:])}, "process": {"rss_bytes": 1}}, ttl=60)
    await t.execute()
    print(f"{wid} joined {config.redis_url} reload={reload}", flush=True)
    if plan == "crash-once" and not reload:
        os._exit(3)
    if plan == "usage":
        print("bad key", file=sys.stderr, flush=True)
        return 2
    if plan == "kill-self":
        os.kill(os.getpid(), signal.SIGKILL)
    if plan == "wait":
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        open(os.environ["READY"] + wid, "w").close()
        await stop.wait()
        return 143
    await m.leave()
    await io.close()
    return 0

sys.exit(asyncio.run(main()))
'''


@pytest.fixture
def setup(tmp_path, redis_server):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)

    def make(n=2, env=None, **changes):
        config = Config(dns_servers=(("127.0.0.1", 53),), state_dir=str(tmp_path / "state"),
                        save_dir=str(tmp_path / "save"), http_port=0, **changes)
        out = io.StringIO()
        full_env = {**os.environ, "READY": str(tmp_path / "ready-"), **(env or {})}
        cmd = lambda wid, conf, reload: [sys.executable, str(script), conf, wid, "1" if reload else "0"]  # noqa: E731
        return Launcher(config, n, out=out, command=cmd, env=full_env), out
    return make


def redis_config(redis_server, **kw):
    return {"redis_url": redis_server.url, **kw}


async def test_auto_starts_a_private_redis_and_the_workers_finish(setup, tmp_path):
    launcher, out = setup(n=2)  # no redisUrl and N > 1: auto
    sessions = []
    original = launcher._supervise

    async def supervise():
        # a Ctrl-C goes to the terminal's process group: Redis must not be in it,
        # or it stops before the workers' last acks and the final counters
        sessions.append((os.getsid(launcher.redis.process.pid), os.getsid(0)))
        return await original()
    launcher._supervise = supervise
    assert await launcher.run() == 0
    assert sessions and sessions[0][0] != sessions[0][1]
    text = out.getvalue()
    sock = tmp_path / "state" / "redis" / "redis.sock"
    assert f"[w1] w1 joined unix://{sock} reload=False" in text
    assert f"[w2] w2 joined unix://{sock} reload=False" in text
    assert "crawl 'larbin' on 2 workers: end of work" in text
    assert "URLs accepted   2 = fetched 0 + forgotten 0 + queued 2  (balanced)" in text
    assert "worker w1       exit 0" in text and "worker w2       exit 0" in text
    assert launcher.redis.process.poll() is not None  # stopped with the crawl
    # the workers read their configuration from stateDir, written by the launcher
    written = load_config(tmp_path / "state" / "launcher.conf", require_start_urls=False)
    assert written.redis_url == f"unix://{sock}" and written.http_port == 0


async def test_a_crashed_worker_is_respawned_with_its_id(setup, redis_server):
    launcher, out = setup(n=2, env={"PLAN_w2": "crash-once"}, **redis_config(redis_server))
    assert await launcher.run() == 0
    text = out.getvalue()
    assert "worker w2 exit 3: starting it again" in text
    assert "[w2] w2 joined" in text and "reload=True" in text  # the respawn continues, same workerId
    assert "worker w2       exit 3, exit 0, respawned 1x" in text
    assert launcher.workers[1].exits == [3, 0]


async def test_with_respawn_off_a_killed_worker_stays_dead_and_the_crawl_ends(setup, redis_server):
    launcher, out = setup(n=2, env={"PLAN_w1": "kill-self"}, respawn=False, **redis_config(redis_server))
    assert await launcher.run() == 0
    text = out.getvalue()
    assert "worker w1 killed by SIGKILL (respawn is off): the others take its partitions over" in text
    assert "worker w1       killed by SIGKILL" in text
    assert launcher.workers[0].exits == [-signal.SIGKILL]


async def test_a_worker_exiting_2_stops_the_crawl_with_2(setup, redis_server):
    launcher, out = setup(n=2, env={"PLAN_w1": "usage", "PLAN_w2": "wait"}, **redis_config(redis_server))
    assert await launcher.run() == 2
    text = out.getvalue()
    assert "[w1] bad key" in text
    assert "w1 exited 2 (a usage or configuration error" in text
    assert launcher.workers[1].exits[-1] in (143, -signal.SIGTERM)  # stopped, not respawned
    assert len(launcher.workers[1].starts) == 1


async def test_sigterm_is_forwarded_and_the_exit_code_kept(setup, redis_server, tmp_path):
    launcher, out = setup(n=2, env={"PLAN_w1": "wait", "PLAN_w2": "wait"}, **redis_config(redis_server))
    task = asyncio.ensure_future(launcher.run())
    deadline = asyncio.get_running_loop().time() + 20
    while not all((tmp_path / f"ready-w{k}").exists() for k in (1, 2)):
        assert asyncio.get_running_loop().time() < deadline, out.getvalue()
        await asyncio.sleep(0.02)
    os.kill(os.getpid(), signal.SIGTERM)  # what a service manager sends the launcher
    assert await task == 143
    assert [w.exits for w in launcher.workers] == [[143], [143]]
    assert "stopping the 2 workers (SIGTERM)" in out.getvalue()
    assert "stopped by SIGTERM" in out.getvalue()


async def test_a_fresh_start_refuses_an_existing_crawl_and_reload_continues(setup, redis_server):
    r = await RedisIO(redis_server.url, "news").connect()
    config = Config(dns_servers=(("127.0.0.1", 53),), redis_url=redis_server.url, crawl_name="news")
    await r.create_crawl(crawl_meta(config))
    await r.close()
    launcher, out = setup(n=2, crawl_name="news", **redis_config(redis_server))
    assert await launcher.run() == 2
    assert "a crawl named 'news' already exists" in out.getvalue() and "--reload" in out.getvalue()
    assert launcher.workers[0].starts == []  # nothing started
    launcher, out = setup(n=1, crawl_name="news", **redis_config(redis_server))
    launcher.reload = True
    assert await launcher.run() == 0


async def test_unreachable_redis_is_exit_2_naming_the_url(setup, tmp_path):
    launcher, out = setup(n=2, redis_url=f"unix://{tmp_path}/none.sock")
    assert await launcher.run() == 2
    assert f"cannot reach Redis at unix://{tmp_path}/none.sock" in out.getvalue()


async def test_missing_redis_server_is_exit_2_with_the_apt_hint(setup, monkeypatch):
    class Missing(RedisServer):
        def __init__(self, directory, **kw):
            super().__init__(directory, **kw)
            self.binary = None
    monkeypatch.setattr(launcher_mod, "RedisServer", Missing)
    launcher, out = setup(n=3)
    assert await launcher.run() == 2
    assert "redisUrl auto: redis-server is not installed: apt-get install redis-server" in out.getvalue()


async def test_the_launchers_stats_server_sums_the_workers(setup, redis_server):
    launcher, out = setup(n=2, env={"PLAN_w1": "wait", "PLAN_w2": "wait"}, **redis_config(redis_server))
    launcher.config = launcher.config.replace(http_port=_free_port())
    task = asyncio.ensure_future(launcher.run())
    try:
        async def ready():
            src = launcher.source
            return src is not None and {"w1", "w2"} <= set(src.snapshots)
        await _wait(ready)
        port = launcher.http.port
        body = await asyncio.to_thread(
            lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/stats.json", timeout=5).read())
        snap = json.loads(body)
        assert check_snapshot(snap) == []
        assert snap["pages"]["fetched"] == 30  # 10 + 20 from the workers' snapshots
        cl = snap["cluster"]
        assert [w["worker"] for w in cl["workers"]] == ["w1", "w2"]
        assert cl["totals"]["accepted"] == 2 and cl["totals"]["balanced"]
        assert len(cl["partitions"]) == 256
    finally:
        launcher.request_stop(signal.SIGTERM)
        assert await task == 143


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _wait(pred, timeout=20.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await pred():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


# --- pieces without processes -----------------------------------------------------

def test_merged_snapshots_are_schema_valid_sums():
    a, b = empty_snapshot(), empty_snapshot()
    a["pages"]["fetched"], b["pages"]["fetched"] = 3, 4
    a["urls"]["forgotten"], b["urls"]["forgotten"] = {"err40X": 1}, {"err40X": 2, "timeout": 1}
    a["hosts"]["busiest"] = [{"host": "a", "pages": 3}]
    b["hosts"]["busiest"] = [{"host": "b", "pages": 4}]
    merged = merge_snapshots([a, b])
    assert check_snapshot(merged) == []
    assert merged["pages"]["fetched"] == 7
    assert merged["urls"]["forgotten"] == {"err40X": 3, "timeout": 1}
    assert [h["host"] for h in merged["hosts"]["busiest"]] == ["b", "a"]


def test_resolve_redis_url_and_the_crawl_meta(tmp_path):
    c = Config(dns_servers=(("127.0.0.1", 53),), state_dir=str(tmp_path / "s"), save_dir=str(tmp_path / "v"))
    assert resolve_redis_url(c, 1) == ""  # one process: no Redis
    assert resolve_redis_url(c, 4) == f"unix://{tmp_path}/s/redis/redis.sock"
    assert resolve_redis_url(c.replace(redis_url="redis://h:1/2"), 4) == "redis://h:1/2"
    meta = crawl_meta(c)
    assert meta.partitions == 256 and meta.rules["waitDuration"] == "waitDuration 2"
    other = crawl_meta(c.replace(wait_duration=0.5, partitions=64))
    assert "waitDuration (crawl: 'waitDuration 2', here: 'waitDuration 0.5')" in other.differences(meta)
    assert isinstance(meta, CrawlMeta)


@pytest.mark.parametrize("argv,message", [
    (["--workers", "0"], "expected a number of workers in 1..1024"),
    (["--worker", "--workers", "2"], "--worker and --workers exclude each other"),
    (["--worker-id", "a:b", "--worker"], "--worker-id: workerId: expected a name"),
])
def test_command_line_errors_are_one_line_exit_2(argv, message, capsys, tmp_path):
    conf = tmp_path / "l.conf"
    conf.write_text(f"stateDir {tmp_path}/s\nsaveDir {tmp_path}/v\nhttpPort 0\n")
    assert cli.main(["-c", str(conf), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_worker_without_redis_url_is_exit_2(capsys, tmp_path):
    conf = tmp_path / "l.conf"
    conf.write_text(f"stateDir {tmp_path}/s\nsaveDir {tmp_path}/v\nhttpPort 0\n")
    code = cli.main(["-c", str(conf), "--worker"])
    assert code == 2
    assert "--worker needs redisUrl" in capsys.readouterr().err


async def test_a_huge_output_line_does_not_block_the_worker(setup, redis_server, tmp_path):
    script = tmp_path / "loud.py"
    script.write_text("import sys\nsys.stdout.write('x' * 300000 + '\\n' + 'after\\n')\nsys.stdout.flush()\n")
    launcher, out = setup(n=1, **redis_config(redis_server))
    launcher.command = lambda wid, conf, reload: [sys.executable, str(script)]
    assert await asyncio.wait_for(launcher.run(), 30) == 0
    text = out.getvalue()
    assert "[w1] after" in text and text.count("x") >= 300000
