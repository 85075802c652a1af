"""End-to-end: the real crawler against the synthetic web on loopback.

Every test checks the crawl against the sim's own ground truth and request
log: coverage, politeness, robots.txt obedience and conservation of URLs.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

from larbin_py.config import parse_config_text
from larbin_py.demo import crawl_rules
from larbin_py.engine import Engine
from larbin_py.robots import product_token
from larbin_py.sim import Fault, Sim, SimConfig
from helpers.crawl import (SLACK, check_conservation, check_politeness, check_robots_first, covered_urls, crawl,
                           files_under, make_config, page_requests, read_index)

pytestmark = pytest.mark.slow


@pytest.mark.async_timeout(240)
async def test_exact_coverage_politeness_and_robots(tmp_path):
    agent = "larbin_py"
    sim_cfg = SimConfig(seed=11, hosts=300, pages_per_host=(1, 3), hosts_per_ip=22, dns=True,
                        robots_agent=agent, crawl_delay=(0.3, 0.4), trap=False)
    async with Sim(sim_cfg) as sim:
        assert len(sim.ips) == 15  # 14 for h0..h299, 1 for the extra hosts (IDN, subdomains...)
        config = make_config(tmp_path, sim)
        assert product_token(config.user_agent) == agent
        engine, summary = await crawl(config)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        requested = [r.url for r in page_requests(sim)]
        missing = truth.must_request - set(requested)
        extra = set(requested) - truth.must_request
        assert not missing, sorted(missing)[:20]
        assert not extra, sorted(extra)[:20]
        # nothing fetched twice (no faults here, so no retries either)
        twice = [u for u, n in Counter(requested).items() if n > 1]
        assert not twice, twice[:10]
        assert not (truth.must_not_request & set(requested))
        check_robots_first(sim)
        check_politeness(sim, config.wait_duration)
        # the crawl-delay of robots.txt spaces its host
        for host, delay in truth.crawl_delay.items():
            starts = sim.log.starts_by_host().get(host, [])
            assert sim.log.min_gap(starts) >= delay - SLACK, host
        check_conservation(engine, summary)
        assert summary.pages == len(truth.saved)
        for url, reason in truth.expected_reason.items():
            if url in truth.must_request:
                assert reason in summary.forgotten, (url, reason)
        assert summary.failed is None and summary.stop_reason == "end of work"
        # the sim answers well-formed HTTP/1.1: llhttp reads every answer, on kept-alive connections
        assert summary.h11_handovers == 0 and 0 < summary.connections_opened < summary.requests
        assert summary.reuses == summary.requests - summary.connections_opened
        assert f"{summary.connections_opened} opened, {summary.reuses} requests" in summary.format()


@pytest.mark.async_timeout(240)
async def test_transient_faults_of_every_kind_are_retried(tmp_path):
    kinds = ["reset", "close", "stall", "500", "503", "429"]
    faults = [Fault(kind, 0.02, transient=True, retry_after=1) for kind in kinds]  # 2 % of each kind
    sim_cfg = SimConfig(seed=5, hosts=120, pages_per_host=(2, 6), hosts_per_ip=8, dns=True,
                        robots_agent="larbin_py", trap=False, faults=faults,
                        dns_servfail_rate=0.02, dns_drop_rate=0.02)
    async with Sim(sim_cfg) as sim:
        config = make_config(tmp_path, sim, wait_duration=0.05, dns_timeout=0.5)
        engine = Engine(config)
        misses: dict[str, str] = {}
        record = engine.frontier.on_forget

        def on_forget(rec, reason):
            misses[rec.url] = reason
            record(rec, reason)

        engine.frontier.on_forget = on_forget
        summary = await engine.run()
        truth = sim.truth(crawl_rules(config, sim.seeds))
        # faults were really injected, and really retried
        assert sum(1 for r in sim.log.requests if r.fault) >= 20
        assert sum(engine.frontier.retried.values()) >= 20
        assert sim.dns.queries > len(sim.web.hosts)
        expected_fetch = {u for u in truth.must_request if u not in truth.expected_reason}
        got = covered_urls(sim)
        missed = expected_fetch - got
        # A URL is lost only when every attempt failed: ~11 % of requests
        # are faulted, so 1 + 3 retries all failing is ~0.02 % per URL, more
        # as DNS failures cost retries too: about one run in ten loses one of
        # these ~500 URLs, forgotten with the reason of its last failure.
        assert len(got & expected_fetch) >= 0.99 * len(expected_fetch), sorted(missed)[:10]
        # A lost page's links are never met: a URL that no page answered
        # linked to was not discovered, and has no reason of its own.
        discovered = {lk.target for page in got if (res := sim.web.lookup(page)) is not None for lk in res.links}
        assert len(discovered & expected_fetch) >= 0.9 * len(expected_fetch)
        for url in missed:
            if url not in discovered and url not in sim.seeds:
                continue
            assert url in misses, f"{url} missed without a reason"
            assert misses[url] in {"noConnection", "timeout", "reset", "err50X", "noDNS"}, (url, misses[url])
        check_conservation(engine, summary)
        check_politeness(sim, config.wait_duration)


@pytest.mark.async_timeout(240)
async def test_one_big_site_through_a_tiny_fifo_loses_nothing(tmp_path):
    sim_cfg = SimConfig(seed=3, hosts=1, pages_per_host=(5000, 5000), links_per_page=(12, 20),
                        dns=True, extras=False, trap=False, robots_mix={"absent": 1.0},
                        p_nonhtml=0.0, p_redirect=0.0, p_loop=0.0, p_missing=0.0, p_dup=0.0,
                        p_nofollow=0.0, p_query=0.0, robots_agent="larbin_py")
    async with Sim(sim_cfg) as sim:
        config = make_config(tmp_path, sim, wait_duration=0.0, max_urls_by_site=5, ram_urls=1000,
                             depth_in_site=1000)
        engine, summary = await crawl(config)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        pages = [r.url for r in page_requests(sim)]
        assert len(truth.must_request) >= 5000
        assert set(pages) == truth.must_request
        assert len(pages) == len(set(pages))
        # the wait store really carried the overflow, and RAM stayed bounded
        assert engine.frontier.lanes.wait.pushed > 1000
        bound = config.ram_urls + config.max_urls_by_site * len(engine.frontier.sites) + config.pages_connexions
        assert 0 < engine.peak_urls_in_memory <= bound
        check_conservation(engine, summary)


@pytest.mark.async_timeout(120)
async def test_spider_trap_stops_at_depth_and_redirect_loops_end(tmp_path):
    sim_cfg = SimConfig(seed=9, hosts=6, pages_per_host=(3, 6), dns=True, trap=True,
                        robots_mix={"absent": 1.0}, p_loop=0.3, p_redirect=0.2, robots_agent="larbin_py")
    async with Sim(sim_cfg) as sim:
        depth = sim.web.max_depth(True) + 2
        config = make_config(tmp_path, sim, wait_duration=0.0, depth_in_site=depth)
        engine, summary = await crawl(config)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        requested = {r.url for r in page_requests(sim)}
        trap = [u for u in requested if "/cal/" in u]
        assert trap, "the trap host was not reached"
        assert requested == truth.must_request
        assert summary.stop_reason == "end of work"
        assert summary.forgotten.get("err30X", 0) > 0
        check_conservation(engine, summary)


@pytest.mark.async_timeout(240)
@pytest.mark.parametrize("mode", ["mirror", "save", "warc"])
async def test_outputs_hold_the_exact_bodies_and_hostile_urls_stay_inside(tmp_path, mode):
    from larbin_py.sim.web import HOSTILE_LINKS

    sim_cfg = SimConfig(seed=21, hosts=12, pages_per_host=(3, 8), hosts_per_ip=4, dns=True,
                        robots_agent="larbin_py", trap=False, hostile=True)
    async with Sim(sim_cfg) as sim:
        jail = tmp_path / "jail"
        save = jail / "save"
        config = make_config(tmp_path, sim, output_mode=mode, save_dir=str(save),
                             state_dir=str(jail / "state"), wait_duration=0.0,
                             max_url_size=16000, files_per_dir=7)
        engine, summary = await crawl(config)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        evil = {sim.web.url("evil.sim.test", pq) for _raw, pq in HOSTILE_LINKS}
        # every hostile URL was found, normalized as WHATWG says, and fetched
        assert evil <= truth.saved.keys()
        assert evil <= set(sim.log.urls())
        assert summary.pages == len(truth.saved)
        # nothing outside the jail: only save/ and state/ in it, nothing beside it
        assert sorted(os.listdir(jail)) == ["save", "state"]
        assert sorted(os.listdir(tmp_path)) == ["jail"]
        index = read_index(save)
        assert set(index) == set(truth.saved), sorted(set(truth.saved) ^ set(index))[:5]
        on_disk = files_under(save) - {"index.tsv"}
        if mode in ("mirror", "save"):
            assert {e["path"] for e in index.values()} == on_disk
            for url, entry in index.items():
                full = os.path.realpath(os.path.join(save, entry["path"]))
                assert full.startswith(os.path.realpath(save) + os.sep)
                with open(full, "rb") as f:
                    body = f.read()
                assert body == truth.saved[url], url
                assert entry["length"] == len(body) and entry["status"] == 200
            if mode == "save":
                per_dir = Counter(os.path.dirname(p) for p in on_disk)
                assert max(per_dir.values()) <= config.files_per_dir
        else:
            from warcio.archiveiterator import ArchiveIterator

            bodies, requests, by_id, revisits = {}, set(), {}, {}
            for name in sorted(on_disk):
                if name.endswith(".cdxj"):  # each WARC file's index (tests/test_warc_complete.py)
                    continue
                assert name.endswith(".warc.gz"), name
                with open(save / name, "rb") as f:
                    for record in ArchiveIterator(f):
                        uri = record.rec_headers.get_header("WARC-Target-URI")
                        if record.rec_type == "response":
                            body = record.content_stream().read()
                            by_id[record.rec_headers.get_header("WARC-Record-ID")] = body
                            if record.http_headers.get_statuscode().startswith("2"):
                                bodies[uri] = body
                        elif record.rec_type == "revisit":  # a payload archived before
                            revisits[uri] = record.rec_headers.get_header("WARC-Refers-To")
                        elif record.rec_type == "request":
                            requests.add(uri)
            bodies.update({uri: by_id[first] for uri, first in revisits.items()})
            assert {u: b for u, b in bodies.items() if u in truth.saved} == truth.saved
            assert requests >= set(truth.saved)  # every exchange is archived, redirects and errors too
        check_conservation(engine, summary)


@pytest.mark.parametrize("status, requests, retried", [
    (503, 1 + 1 + 2, True),   # robots.txt, then the page and its 2 retries
    (502, 1 + 1 + 2, True),
    (501, 1 + 1, False),      # Not Implemented: asking again cannot help
    (505, 1 + 1, False),
])
async def test_which_5xx_answers_are_retried(tmp_path, status, requests, retried):
    from helpers.http_server import Server

    async def handler(reader, writer, head):
        if head.startswith(b"GET /robots.txt"):
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        else:
            writer.write(b"HTTP/1.1 %d Nope\r\nContent-Length: 0\r\nRetry-After: 0\r\n\r\n" % status)
        await writer.drain()

    async with Server(handler) as srv:
        config = parse_config_text("", require_start_urls=False).replace(
            start_urls=(f"http://127.0.0.1:{srv.port}/page",), save_dir=str(tmp_path / "save"),
            state_dir=str(tmp_path / "state"), http_port=0, output_mode="stats", wait_duration=0.0,
            retries=2, timeout_page=5.0)
        engine, summary = await crawl(config)
    assert len(srv.heads) == requests
    assert summary.forgotten == {"err50X": 1}
    assert (engine.frontier.retried["err50X"] == 2) is retried
