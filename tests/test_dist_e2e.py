"""End to end: N worker processes (``python -m larbin_py`` with ``redisUrl``)
crawl the synthetic web through a private redis-server.

The sim runs in the test's own process, so its request log sees every
worker's requests on one clock: coverage against the sim's ground truth,
no page requested twice, robots.txt once per host, politeness per host and
per IP across workers, conservation from Redis's counters, one index line
per saved page; and a worker killed with SIGKILL loses nothing.

The crawl of two workers and the SIGKILL test run with both memberships
(``membership redis``, and ``membership zookeeper`` on a private standalone
ZooKeeper, tests/helpers/zookeeper.py); the ZooKeeper server killed mid-crawl and
restarted loses nothing either.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections import Counter

import pytest

from larbin_py.demo import crawl_rules
from larbin_py.distributed.redisio import RedisIO
from larbin_py.distributed.crawl_worker import merge_index
from larbin_py.output.base import INDEX_NAME, parse_index_line
from larbin_py.sim import Sim

from helpers.crawl import page_requests
from helpers.zookeeper import TICK_MS, own_zk_server, zk_server  # noqa: F401 (fixtures)
from helpers.distributed import (CRAWL, MEMBERSHIPS, Workers, ZK_SESSION, check_conservation, check_politeness,
                                 check_politeness_across_stops, crawl_under_way, crawl_with, index_urls, launched,
                                 membership_keys, robots_repeated, sim_config, takeover_bound, totals, wait_logs,
                                 worker_config)

pytestmark = pytest.mark.slow


@pytest.mark.async_timeout(150)
async def test_one_worker_crawls_exactly(tmp_path, redis_server):
    await crawl_with(tmp_path, redis_server, 1)


@pytest.mark.async_timeout(150)
@pytest.mark.parametrize("n,membership", [(2, "redis"), (4, "redis"), (2, "zookeeper")])
async def test_workers_share_the_crawl_politely(tmp_path, redis_server, n, membership, request):
    sim, view, elapsed, held = await crawl_with(tmp_path, redis_server, n, **membership_keys(request, membership))
    # every worker took its share of the partitions (a worker that started late on a loaded
    # machine may find its share crawled already, so its pages are not what is checked)
    assert sorted(held) == [f"w{i}" for i in range(n)] and all(held.values()), held


@pytest.mark.async_timeout(150)
async def test_workers_with_an_analyzer_extract_links_on_their_loop_and_analyse_each_page_once(tmp_path,
                                                                                             redis_server):
    """analysisWorkers 1 and the ``meta`` analyzer on two workers: a page's ack
    reaches Redis before an analysis process would answer, so the links are
    extracted on each worker's loop (coverage exact, checked by crawl_with);
    the processes run ``meta`` only, each worker's tasks in a queue of its own
    (stateDir/analysis-<workerId>, removed once empty: two workers on one
    queue would lose or repeat records)."""
    analysis_dir = tmp_path / "analysis"
    await crawl_with(tmp_path, redis_server, 2, analysis_workers=1, analysis_dir=str(analysis_dir),
                     analyzers=(("meta", "meta"),))
    with open(os.path.join(str(tmp_path / "save"), INDEX_NAME), encoding="utf-8") as f:
        html = {parse_index_line(line.rstrip("\n"))["url"] for line in f
                if (parse_index_line(line.rstrip("\n"))["content_type"] or "").startswith("text/html")}
    with open(analysis_dir / "meta.jsonl", encoding="utf-8") as f:
        analysed = [json.loads(line)["url"] for line in f]
    assert html and sorted(analysed) == sorted(html)  # every HTML page once, nothing else


@pytest.mark.async_timeout(150)
@pytest.mark.parametrize("membership", MEMBERSHIPS)
async def test_kill_9_of_a_worker_loses_nothing_and_its_partitions_are_taken_over(tmp_path, redis_server,
                                                                                  membership, request):
    async with Sim(sim_config(seed=9, hosts=40, pages_per_host=(4, 8))) as sim:
        workers = Workers(tmp_path, sim, redis_server.url, 3, **membership_keys(request, membership))
        await workers.start_all()
        io = await RedisIO(redis_server.url, CRAWL, partitions=64).connect()
        try:
            # kill w1 once it owns partitions with entries read and not acked, and has fetched some
            victim_rows = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                view = await io.view(rows=True)
                victim_rows = [r for r in view.rows if r.owner == "w1"]
                if sum(r.pending for r in victim_rows) >= 3 and sum(r.fetched for r in victim_rows) >= 5:
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("w1 never had pending entries")
            owned = {r.partition for r in victim_rows}
            workers.procs["w1"].send_signal(signal.SIGKILL)
            killed = time.monotonic()
            await workers.procs["w1"].wait()
            # what w1 had read and not acked, frozen by its death (its leases outlive it by leaseTtl)
            view = await io.view(rows=True)
            assert all(view.rows[p].owner == "w1" for p in owned)
            pending_at_kill = sum(view.rows[p].pending for p in owned)
            assert pending_at_kill >= 1
            # takeover: every partition of w1 gets a new owner
            took = None
            while time.monotonic() < killed + 30:
                view = await io.view(rows=True)
                if all(view.rows[p].owner not in ("", "w1") for p in owned):
                    took = time.monotonic() - killed
                    break
                await asyncio.sleep(0.02)
            assert took is not None, "w1's partitions were not taken over"
            assert took <= takeover_bound(membership), (took, takeover_bound(membership))
            print(f"membership {membership}: takeover {took:.2f} s (bound {takeover_bound(membership):.2f} s)")
        finally:
            await io.close()
        codes = await workers.wait(90)
        assert codes["w1"] == -signal.SIGKILL
        assert codes["w0"] == 0 and codes["w2"] == 0, {w: workers.log(w)[-2000:] for w in ("w0", "w2")}
        config = workers.configs["w0"]
        truth = sim.truth(crawl_rules(config, sim.seeds))
        requested = [r.url for r in page_requests(sim)]
        # nothing lost
        assert set(requested) == truth.must_request, sorted(truth.must_request - set(requested))[:10]
        # fetched twice: only what w1 had read and not acked (in flight, done since its last ack, queued)
        twice = [u for u, c in Counter(requested).items() if c > 1]
        assert len(twice) <= pending_at_kill, (len(twice), pending_at_kill)
        check_politeness(sim, config.wait_duration)
        # robots.txt answers are shared in Redis: the new owners do not fetch them again
        # (one fetched in the victim's last flush interval may be)
        robots = robots_repeated(sim)
        print("robots fetched again:", robots)
        await check_conservation(redis_server.url, config, truth)
        print(f"fetched twice {len(twice)} of {pending_at_kill} pending at the kill")


@pytest.mark.async_timeout(150)
async def test_kill_9_of_redis_and_a_restart_from_its_aof_loses_nothing(tmp_path, redis_server):
    async with Sim(sim_config(seed=9, hosts=24, pages_per_host=(3, 7))) as sim:
        workers = Workers(tmp_path, sim, redis_server.url, 2)
        await workers.start_all()
        io = await RedisIO(redis_server.url, CRAWL, partitions=64).connect()
        try:
            await crawl_under_way(io)
        finally:
            await io.close()
        redis_server.kill()
        await wait_logs(workers, workers.names, "fetching paused, retrying", 20)  # both found Redis gone
        # From its AOF, off this loop: the sim runs on it and must log the requests
        # of workers resuming meanwhile on time (a blocked loop logs them in a burst).
        await asyncio.to_thread(redis_server.start)
        codes = await workers.wait(90)
        assert codes == {"w0": 0, "w1": 0}, {w: workers.log(w)[-2000:] for w in codes}
        assert all("Redis is back" in workers.log(w) for w in ("w0", "w1"))
        config = workers.configs["w0"]
        truth = sim.truth(crawl_rules(config, sim.seeds))
        requested = [r.url for r in page_requests(sim)]
        assert set(requested) == truth.must_request, sorted(truth.must_request - set(requested))[:10]
        view = await totals(redis_server.url)
        t = view.totals
        assert t.queued == 0 and t.accepted == t.fetched + sum(t.forgotten.values())
        assert t.fetched == len(truth.saved)
        assert merge_index(config.save_dir) == len(truth.saved)
        check_politeness(sim, config.wait_duration)


@pytest.mark.async_timeout(150)
async def test_zookeeper_killed_mid_crawl_and_restarted_loses_nothing(tmp_path, redis_server, own_zk_server, request):
    async with Sim(sim_config(seed=11, hosts=24, pages_per_host=(3, 7))) as sim:
        workers = Workers(tmp_path, sim, redis_server.url, 2,
                          **membership_keys(request, "zookeeper", server=own_zk_server))
        await workers.start_all()
        io = await RedisIO(redis_server.url, CRAWL, partitions=64).connect()
        try:
            await crawl_under_way(io)
            await asyncio.to_thread(own_zk_server.kill)
            # both stop fetching, then (cut off for zkSessionTimeout) release their partitions
            await wait_logs(workers, workers.names, "fetching paused", 20)
            paused_at = time.monotonic()
            await wait_logs(workers, workers.names, "releasing", 20)
            deadline = time.monotonic() + 20
            while [r for r in (await io.view(rows=True)).rows if r.owner]:  # the drains end
                assert time.monotonic() < deadline, "the partitions were not released"
                await asyncio.sleep(0.05)
            # no request started once both said so (0.1 s: a head sent just before, read just after)
            started = [r.url for r in sim.log.requests if r.t > paused_at + 0.1]
        finally:
            await io.close()
        await asyncio.to_thread(own_zk_server.start)  # on its dataDir (off the sim's loop, as above)
        codes = await workers.wait(90)
        assert codes == {"w0": 0, "w1": 0}, {w: workers.log(w)[-2000:] for w in codes}
        assert all("back in the membership" in workers.log(w) for w in workers.names)
        assert started == [], started
        config = workers.configs["w0"]
        truth = sim.truth(crawl_rules(config, sim.seeds))
        requested = [r.url for r in page_requests(sim)]
        assert set(requested) == truth.must_request, sorted(truth.must_request - set(requested))[:10]
        twice = [u for u, c in Counter(requested).items() if c > 1]
        assert not twice, twice[:10]  # released cleanly (acked first): nothing redone
        await check_conservation(redis_server.url, config, truth)
        check_politeness(sim, config.wait_duration)


@pytest.mark.async_timeout(60)
async def test_zookeeper_unreachable_at_start_exits_2_naming_zkHosts(tmp_path, redis_server):
    from helpers.zookeeper import free_port

    async with Sim(sim_config(hosts=4)) as sim:
        hosts = f"127.0.0.1:{free_port()}"  # nobody listens there
        workers = Workers(tmp_path, sim, redis_server.url, 1, membership="zookeeper", zk_hosts=hosts,
                          zk_session_timeout=ZK_SESSION)
        await workers.start_all()
        codes = await workers.wait(30)
        assert codes == {"w0": 2}, workers.log("w0")
        lines = [line for line in workers.log("w0").splitlines() if line.strip()]
        assert len(lines) == 1 and f"zkHosts {hosts}" in lines[0] and "unreachable" in lines[0], lines
        assert not sim.log.requests  # nothing fetched
        # it left nothing behind: its member key in Redis is gone (a worker of that id may start)
        view = await totals(redis_server.url)
        assert "w0" not in view.members


async def test_a_joiner_with_another_membership_is_refused_naming_the_key(tmp_path, redis_server):
    from larbin_py.distributed.redisio import CrawlMismatch
    from larbin_py.distributed.shared import crawl_meta

    async with Sim(sim_config(hosts=4)) as sim:
        first = worker_config(tmp_path, sim, redis_server.url, "w0")
        joiner = first.replace(membership="zookeeper", zk_path="/other")
        io = await RedisIO(redis_server.url, CRAWL, partitions=64).connect()
        try:
            await io.join_crawl(crawl_meta(first))
            with pytest.raises(CrawlMismatch) as info:
                await io.join_crawl(crawl_meta(joiner))
        finally:
            await io.close()
        message = str(info.value)
        assert "membership (crawl: 'membership redis', here: 'membership zookeeper')" in message, message
        assert "zkPath" in message, message


@pytest.mark.async_timeout(240)
@pytest.mark.parametrize("membership", MEMBERSHIPS)
async def test_workers_paused_past_their_membership_four_times_lose_nothing(tmp_path, redis_server, membership,
                                                                            request):
    """The pause repeated: w1, w0, w1, w0 each stopped (SIGSTOP) until the others see it gone (its
    ZooKeeper session expired; with Redis, its leases lapsed and its partitions taken over), then
    woken, the crawl moving on between pauses; fetches and connects held across each pause,
    partitions released and taken back: every page fetched, nothing forgotten that the sim would
    answer, conservation and politeness across it all (a stopped worker's connection may stay
    open beside the IP's next holder's until it runs again: check_politeness_across_stops).
    With ZooKeeper, kazoo reports LOST: the woken worker releases its partitions at once,
    rejoins under a new session and crawls on, and its log says each step."""
    keys = membership_keys(request, membership)
    zk = None
    if membership == "zookeeper":
        from kazoo.client import KazooClient
        zk = KazooClient(hosts=request.getfixturevalue("zk_server").hosts, timeout=5.0)
        await asyncio.to_thread(zk.start, 10)
    members = f"{keys.get('zk_path')}/{CRAWL}/members"

    async def present(name: str, view) -> bool:
        if zk is not None:
            return name in await asyncio.to_thread(zk.get_children, members)
        return any(r.owner == name for r in view.rows)  # Redis: its leases, until taken over

    # (a crawl paced by politeness, not by the machine: 15 IPs of about 26 pages, 0.25 s apart)
    async with Sim(sim_config(seed=17, hosts=60, pages_per_host=(5, 8))) as sim:
        workers = Workers(tmp_path, sim, redis_server.url, 2, wait_duration=0.25, **keys)
        await workers.start_all()
        io = await RedisIO(redis_server.url, CRAWL, partitions=64).connect()
        paused = 0
        stops: list[tuple[float, float]] = []

        def ended() -> bool:
            return any(p.returncode is not None for p in workers.procs.values())

        try:
            fetched = 0
            for name in ("w1", "w0", "w1", "w0"):
                deadline = time.monotonic() + 60
                while not ended():  # the crawl moved on since the last pause, and ``name`` owns partitions
                    view = await io.view(rows=True)
                    if view.totals.fetched >= fetched + 10 and any(r.owner == name for r in view.rows):
                        break
                    assert time.monotonic() < deadline, (f"the crawl did not move on after {paused} pauses",
                                                         view.totals, {w: workers.log(w)[-1500:] for w in
                                                                       workers.procs})
                    await asyncio.sleep(0.05)
                if ended():
                    break
                workers.procs[name].send_signal(signal.SIGSTOP)
                paused += 1
                stopped = time.monotonic()
                while await present(name, await io.view(rows=True)):  # the others see it gone
                    assert time.monotonic() < stopped + 15, f"{name} was not seen gone"
                    await asyncio.sleep(0.05)
                workers.procs[name].send_signal(signal.SIGCONT)
                stops.append((stopped, time.monotonic()))
                deadline = time.monotonic() + 20
                while not (ended() or await present(name, await io.view(rows=True))):  # it is back
                    assert time.monotonic() < deadline, workers.log(name)[-2000:]
                    await asyncio.sleep(0.05)
                fetched = (await io.view()).totals.fetched
        finally:
            await io.close()
            if zk is not None:
                await asyncio.to_thread(zk.stop)
                zk.close()
        last = time.monotonic()
        codes = await workers.wait(90)
        print(f"the crawl ended {time.monotonic() - last:.1f} s after the last pause")
        assert codes == {"w0": 0, "w1": 0}, {w: workers.log(w)[-2000:] for w in codes}
        assert paused == 4, f"the crawl ended after {paused} pauses"
        if membership == "zookeeper":  # (cut off for the session timeout while stopped, or LOST: either releases)
            for w in ("w0", "w1"):
                log = workers.log(w)
                assert "fetching paused" in log and "releasing" in log and "back in the membership" in log, log[-2000:]
        config = workers.configs["w0"]
        truth = sim.truth(crawl_rules(config, sim.seeds))
        requested = [r.url for r in page_requests(sim)]
        t = (await totals(redis_server.url)).totals
        assert set(requested) == truth.must_request, (sorted(truth.must_request - set(requested))[:10], t.forgotten)
        await check_conservation(redis_server.url, config, truth)
        check_politeness_across_stops(sim, config.wait_duration, stops)


@pytest.mark.async_timeout(150)
async def test_the_launchers_dashboard_shows_the_zookeeper_membership(tmp_path, redis_server, zk_server, request):
    """``--workers 2`` with ``membership zookeeper``: the launcher's /stats.json carries the
    membership the workers use (source, both live workers, a last change), and the crawl
    is exact."""
    import json
    import urllib.request

    from helpers.zookeeper import free_port

    async with Sim(sim_config(seed=5, hosts=16)) as sim:
        port = free_port()
        config = worker_config(tmp_path, sim, redis_server.url, "", http_port=port,
                               **membership_keys(request, "zookeeper", server=zk_server))
        seen = None
        async with launched(tmp_path, config, 2) as proc:
            deadline = time.monotonic() + 60
            while seen is None:
                assert time.monotonic() < deadline and proc.returncode is None, \
                    (tmp_path / "launcher.out").read_text()[-3000:]
                try:
                    body = await asyncio.to_thread(
                        lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/stats.json", timeout=2).read())
                except OSError:
                    body = None
                if body:
                    m = (json.loads(body).get("cluster") or {}).get("membership") or {}
                    if m.get("members") == ["w1", "w2"] and m.get("last_change"):
                        seen = m
                await asyncio.sleep(0.1)
            code = await asyncio.wait_for(proc.wait(), 90)
        log = (tmp_path / "launcher.out").read_text()
        assert code == 0, log[-3000:]
        assert seen["source"] == "zookeeper" and seen["out"] == []
        assert seen["last_change"]["what"] and seen["last_change"]["worker"] in ("w1", "w2")
        truth = sim.truth(crawl_rules(config, sim.seeds))
        requested = [r.url for r in page_requests(sim)]
        assert set(requested) == truth.must_request, sorted(truth.must_request - set(requested))[:10]
        assert sorted(index_urls(config.save_dir)) == sorted(truth.saved)  # merged by the launcher
