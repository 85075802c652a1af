"""Per-site budgets (larbin_py.frontier.budget): maxPagesBySite, maxBytesBySite, a site line's own."""

from __future__ import annotations

from collections import Counter

import pytest

from larbin_py.demo import crawl_rules
from larbin_py.frontier import codec
from larbin_py.frontier.budget import SiteBudget
from larbin_py.sim import Fault, Sim, SimConfig
from larbin_py.site_settings import SiteRule
from larbin_py.wiring import site_budget
from helpers.crawl import check_conservation, check_politeness, crawl, make_config, page_requests


def test_pages_running_hold_a_place_and_retries_give_it_back():
    b = SiteBudget(max_pages=2)
    key, host = "http://a:80", "a"
    assert b.allows(key, host)
    b.started(key, host)
    b.started(key, host)
    assert not b.allows(key, host)  # two running: the budget is taken
    b.released(key)  # one ended in a retry
    assert b.allows(key, host)
    b.started(key, host)
    b.ended(key)
    b.ended(key)
    assert not b.allows(key, host) and b.used(key) == (2, 0)
    assert b.allows("http://b:80", "b")  # another site has its own


def test_bytes_and_a_site_lines_own_budget():
    own = {"small": (1, None), "any": (None, 0)}
    b = SiteBudget(max_bytes=1000, limits=lambda host: own.get(host, (None, None)))
    b.started("k1", "any")
    b.spent("k1", "any", 5000)  # a site line with maxBytesBySite=0: no budget at all
    assert b.allows("k1", "any")
    b.spent("k2", "big", 999)
    assert b.allows("k2", "big")
    b.spent("k2", "big", 2)
    assert not b.allows("k2", "big")
    b.started("k3", "small")
    assert not b.allows("k3", "small")  # its own page budget of 1


def test_the_counts_cross_a_checkpoint():
    b = SiteBudget(max_pages=5)
    for _ in range(3):
        b.started("http://a:80", "a")
        b.ended("http://a:80")
    b.spent("http://a:80", "a", 0)
    state = codec.FrontierState(stores={"main": [0, 0], "priority": [0, 0], "wait": [0, 0]}, budgets=b.to_state())
    back = codec.decode(codec.encode(state))
    again = SiteBudget(max_pages=5)
    assert again.restore(back.budgets) == 0 and again.used("http://a:80") == (3, 0)
    with pytest.raises(codec.CheckpointError, match="frontier.budgets"):
        codec.decode(dict(codec.encode(state), budgets={"x": [1]}))


def test_site_lines_reach_the_budget():
    from larbin_py.config import parse_config_text

    config = parse_config_text("startUrl http://a.example/\nmaxPagesBySite 10\nsite\n  *.small.example maxPagesBySite=2"
                               "\n  free.example maxPagesBySite=0\nend\n")
    b = site_budget(config)
    for host, pages in (("x.small.example", 2), ("free.example", 0), ("other.example", 10)):
        key = f"http://{host}:80"
        for _ in range(pages):
            assert b.allows(key, host)
            b.started(key, host)
        assert b.allows(key, host) == (pages == 0), host


@pytest.mark.slow
@pytest.mark.async_timeout(180)
async def test_a_crawl_stops_each_site_at_its_budget(tmp_path):
    faults = [Fault("503", 0.1, transient=True, retry_after=0)]  # retries must not spend the budget
    sim_cfg = SimConfig(seed=8, hosts=6, pages_per_host=(30, 40), hosts_per_ip=2, dns=True, extras=False,
                        trap=False, robots_mix={"absent": 1.0}, p_redirect=0.0, p_loop=0.0, p_missing=0.0,
                        robots_agent="larbin_py", faults=faults)
    async with Sim(sim_cfg) as sim:
        own = "h1.sim.test"
        config = make_config(tmp_path, sim, wait_duration=0.01, max_pages_by_site=7, depth_in_site=50,
                             site=(SiteRule(own, max_pages=3),), retries=5)
        engine, summary = await crawl(config)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        ended = Counter()  # pages of each host the server answered for good (not a fault retried)
        for r in page_requests(sim):
            if not r.fault:
                ended[r.host] += 1
        for host in sim.web.hosts:
            reachable = len([u for u in truth.must_request if f"//{host}:" in u])
            want = min(3 if host == own else 7, reachable)
            assert ended[host] == want, (host, ended[host], want)
        over = sum(max(0, len([u for u in truth.must_request if f"//{h}:" in u]) - (3 if h == own else 7))
                   for h in sim.web.hosts)
        assert summary.forgotten.get("siteBudget", 0) > 0
        assert summary.forgotten["siteBudget"] <= over  # never more than there was past the budgets
        assert sum(engine.frontier.retried.values()) > 0
        check_conservation(engine, summary)
        check_politeness(sim, config.wait_duration)


@pytest.mark.slow
@pytest.mark.async_timeout(120)
async def test_a_byte_budget_keeps_the_page_that_crosses_it(tmp_path):
    sim_cfg = SimConfig(seed=2, hosts=1, pages_per_host=(40, 40), dns=True, extras=False, trap=False,
                        robots_mix={"absent": 1.0}, p_nonhtml=0.0, p_redirect=0.0, p_loop=0.0, p_missing=0.0,
                        body_size=(2000, 2000), gzip_ratio=0.0, robots_agent="larbin_py")
    async with Sim(sim_cfg) as sim:
        config = make_config(tmp_path, sim, wait_duration=0.0, max_bytes_by_site=10_000, depth_in_site=50)
        engine, summary = await crawl(config)
        sizes = [len(sim.web.lookup(r.url).body) for r in page_requests(sim)]
        assert sum(sizes[:-1]) < 10_000 <= sum(sizes)  # the last page read crossed it, none after
        assert summary.forgotten["siteBudget"] > 0
        check_conservation(engine, summary)
