"""The distributed mode on the dashboard: the ``cluster`` section of /stats.json
carries the membership (source, live workers, last change) and Redis lost;
the dashboard's JS renders them, as text (headless Chromium).

The ClusterSource test runs on a real redis-server (its workers' snapshots
written as a worker's heartbeat writes them, then the server killed); the
browser test serves a scripted snapshot whose strings are hostile.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from larbin_py.distributed.cluster_stats import ClusterSource
from larbin_py.distributed.redisio import RedisIO
from larbin_py.web import FakeSource, StatsServer, check_snapshot
from larbin_py.web.source import empty_snapshot

from helpers.web import chromium, dump_dom, get, http, running


def worker_snapshot(worker: str, source: str, members: list[str], change: tuple[float, str] | None,
                    alive: bool = True) -> dict:
    """What a worker writes to ``stats:<w>``: its engine snapshot plus ``dist`` (coordinator.stats())."""
    snap = empty_snapshot(time.time())
    snap["state"] = "running"
    snap["pages"]["fetched"] = 5
    snap["dist"] = {"worker": worker, "partitions": 3, "ip_leases": 1, "redis_down": None,
                    "membership": {"source": source, "members": members, "alive": alive,
                                   "last_change": None if change is None
                                   else {"at": change[0], "what": change[1]}}}
    return snap


async def test_the_cluster_section_carries_the_membership_and_redis_lost(redis_server):
    io = await RedisIO(redis_server.url, "web", partitions=8).connect()
    try:
        now = time.time()
        t = io.tick()
        t.put_stats("w1", worker_snapshot("w1", "zookeeper", ["w1", "w2"], (now - 5, "w2 joined")), ttl=30)
        t.put_stats("w2", worker_snapshot("w2", "zookeeper", ["w1", "w2", "w3"], (now - 1, "w3 left (its "
                                          "session ended or it stopped)"), alive=False), ttl=30)
        await t.execute()
        source = ClusterSource(io, workers=["w1", "w2"], membership="zookeeper")
        await source.refresh()
        assert source.error is None
        snap = source.snapshot()
        assert check_snapshot(snap) == [], check_snapshot(snap)
        m = snap["cluster"]["membership"]
        assert m["source"] == "zookeeper"
        assert set(m["members"]) <= {"w1", "w2", "w3"} and {"w1", "w2"} <= set(m["members"])
        assert m["last_change"]["what"] == "w3 left (its session ended or it stopped)"
        assert m["last_change"]["worker"] == "w2" and m["last_change"]["at"] == pytest.approx(now - 1)
        assert m["out"] == ["w2"]  # w2 reports itself out of the membership
        assert snap["cluster"]["redis_down"] == {"launcher": None, "workers": []}
        # the same through /stats.json
        async with running(StatsServer(source, port=0)) as srv:
            status, _h, body = await http(srv.port, get("/stats.json"))
            assert status == 200
            cluster = json.loads(body)["cluster"]
            assert cluster["membership"]["source"] == "zookeeper"
            assert cluster["membership"]["last_change"]["what"].startswith("w3 left")
            # Redis lost: the launcher says so, the figures stay the last ones read
            redis_server.kill()
            await source.refresh()
            status, _h, body = await http(srv.port, get("/stats.json"))
            cluster = json.loads(body)["cluster"]
            assert cluster["redis_down"]["launcher"] and cluster["error"] == cluster["redis_down"]["launcher"]
            assert cluster["membership"]["source"] == "zookeeper" and "w1" in cluster["membership"]["members"]
    finally:
        await io.close()


def cluster_section(**changes) -> dict:
    evil = '<img src=x onerror="alert(1)">'
    section = {
        "crawl": "crawl<b>x</b>",
        "error": "redis://127.0.0.1:1/0: Connection refused <script>alert(2)</script>",
        "redis_down": {"launcher": "redis://127.0.0.1:1/0: Connection refused <script>alert(2)</script>",
                       "workers": ["w1"]},
        "membership": {"source": "zookeeper", "members": ["w0", "w1" + evil], "out": ["w1" + evil],
                       "last_change": {"at": 1764063000.0, "what": "w2 left " + evil, "worker": "w0"}},
        "workers": [
            {"worker": "w0", "live": True, "state": "running", "pages": 12, "rate_now": 1.5, "partitions": 40,
             "ip_leases": 2, "rss_bytes": 1, "cpu_seconds": 1.0, "redis_down": None},
            {"worker": "w1" + evil, "live": False, "state": "respawning", "pages": 3, "rate_now": 0.0,
             "partitions": 0, "ip_leases": 0, "rss_bytes": 1, "cpu_seconds": 1.0,
             "redis_down": "Connection refused"},
        ],
        "totals": {}, "partitions": [], "redis": {},
    }
    section.update(changes)
    return section


def text_of(dom: str, element_id: str) -> str:
    m = re.search(r'id="' + element_id + r'"[^>]*>(.*?)</', dom, re.S)
    assert m, (element_id, dom[:3000])
    return m.group(1)


@pytest.mark.slow
@pytest.mark.async_timeout(200)
async def test_the_dashboard_shows_the_membership_and_a_redis_banner_as_text(tmp_path):
    browser = chromium()
    src = FakeSource()
    src.data["cluster"] = cluster_section()
    async with running(StatsServer(src, port=0)) as srv:
        url = f"http://127.0.0.1:{srv.port}/"
        dom = await dump_dom(browser, url, tmp_path)
        assert 'id="cluster-card" hidden' not in dom and 'id="cluster-card"' in dom
        assert text_of(dom, "cluster-membership") == "zookeeper"
        assert text_of(dom, "cluster-members").startswith("2: w0, w1")
        assert "w2 left" in text_of(dom, "cluster-last-change")
        assert "(seen by w0)" in text_of(dom, "cluster-last-change")
        # the banner: Redis lost, said by the launcher and by a worker
        assert re.search(r'id="redis-banner"[^>]*hidden', dom) is None
        banner = text_of(dom, "redis-banner-text")
        assert "Connection refused" in banner and "workers w1" in banner
        # every string as text: the markup shows escaped, never as elements
        assert "<img src=x" not in dom and "<script>alert(2)" not in dom and "<b>x</b>" not in dom
        assert "&lt;img src=x onerror=" in dom and "&lt;script&gt;alert(2)" in dom
        assert "crawl&lt;b&gt;x&lt;/b&gt;" in dom
        assert "respawning" in dom
        # Redis back, ZooKeeper's view changed: no banner
        src.data["cluster"] = cluster_section(error=None, redis_down={"launcher": None, "workers": []})
        dom = await dump_dom(browser, url, tmp_path)
        assert re.search(r'id="redis-banner"[^>]*hidden', dom), dom[:2000]
        # one process (no cluster section): no card, no banner
        del src.data["cluster"]
        dom = await dump_dom(browser, url, tmp_path)
        assert re.search(r'id="cluster-card"[^>]*hidden', dom) and re.search(r'id="redis-banner"[^>]*hidden', dom)


async def test_a_recrawl_s_verdicts_in_the_cluster_stats_are_redis_s_counted_with_the_acks(redis_server):
    """/stats.json's ``recrawl`` and /metrics' larbin_recrawl_pages_total of the launcher: the
    verdicts counted by lb_ack (a dead worker's included), not the live workers' own counts."""
    io = await RedisIO(redis_server.url, "web", partitions=8).connect()
    try:
        await io.enqueue(3, [(i, b"u") for i in range(1, 4)])
        tok = await io.acquire(3, "w1", 5)
        entries = await io.read(3, "w1", tok, 3)
        await io.ack(3, "w1", tok, [(entries[0].id, "fetched;unchanged,notModified"),
                                    (entries[1].id, "fetched;changed"), (entries[2].id, "err40X;gone")])
        snap = worker_snapshot("w2", "redis", ["w2"], None)
        snap["recrawl"] = {"unchanged": 7}  # a live worker's own count: not the crawl's
        t = io.tick()
        t.put_stats("w2", snap, ttl=30)
        await t.execute()
        source = ClusterSource(io, workers=["w1", "w2"])
        await source.refresh()
        assert source.snapshot()["recrawl"] == {"unchanged": 1, "notModified": 1, "changed": 1, "gone": 1}
        async with running(StatsServer(source, port=0)) as srv:
            status, _h, body = await http(srv.port, get("/metrics"))
            assert status == 200 and b'larbin_recrawl_pages_total{verdict="gone"} 1' in body, body[-2000:]
    finally:
        await io.close()
