"""Fault decisions: rates, stability of permanent faults, targeting, and their effect live."""

from __future__ import annotations

import pytest

from larbin_py.sim import Fault, FaultPlan, Sim, SimConfig
from larbin_py.sim.client import Client

URLS = [f"http://h{i % 50}.sim.test:8080/p{i}.html" for i in range(1000)]


@pytest.mark.parametrize("rate", [0.05, 0.3, 0.8])
def test_transient_rate_within_tolerance(rate):
    plan = FaultPlan([Fault("503", rate)], seed=3)
    hits = sum(plan.decide(URLS[0], "h0.sim.test").fault is not None for _ in range(1000))
    assert abs(hits / 1000 - rate) < 0.05
    # independent draws per request: the same URL does not always fail
    assert 0 < hits < 1000


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_permanent_rate_and_stability(rate):
    plan = FaultPlan([Fault("404", rate, transient=False)], seed=3)
    first = [plan.decide(u, "h").fault is not None for u in URLS]
    assert abs(sum(first) / 1000 - rate) < 0.05
    again = [plan.decide(u, "h").fault is not None for u in URLS]
    assert first == again
    assert [plan.permanent(u, "h") is not None for u in URLS] == first
    other_seed = FaultPlan([Fault("404", rate, transient=False)], seed=4)
    assert [other_seed.decide(u, "h").fault is not None for u in URLS] != first
    # the server's port, which changes from run to run, does not move them
    on_ports = [[plan.permanent(f"http://h.sim.test:{port}/p{i}.html", "h.sim.test") is not None
                 for i in range(300)] for port in (8080, 41234)]
    assert on_ports[0] == on_ports[1] and any(on_ports[0])


def test_same_seed_same_transient_sequence():
    a = FaultPlan([Fault("reset", 0.5), Fault("latency", 0.5, delay=(0.1, 0.2))], seed=9)
    b = FaultPlan([Fault("reset", 0.5), Fault("latency", 0.5, delay=(0.1, 0.2))], seed=9)
    da = [a.decide(u, "h") for u in URLS[:200]]
    assert da == [b.decide(u, "h") for u in URLS[:200]]
    delays = [d.delay for d in da if "latency" in d.applied]
    assert delays and all(0.1 <= x <= 0.2 for x in delays)
    both = [d for d in da if set(d.applied) == {"latency", "reset"}]
    assert both and all(d.fault.kind == "reset" for d in both)


def test_targeting_hosts_urls_and_robots():
    plan = FaultPlan([Fault("500", 1.0, hosts={"h1.sim.test"})], seed=1)
    assert plan.decide("http://h1.sim.test/x", "h1.sim.test").fault.kind == "500"
    assert plan.decide("http://h2.sim.test/x", "h2.sim.test").fault is None
    assert plan.decide("http://h1.sim.test/robots.txt", "h1.sim.test", True).fault is None
    plan = FaultPlan([Fault("500", 1.0, robots=True)], seed=1)
    assert plan.decide("http://h1.sim.test/robots.txt", "h1.sim.test", True).fault is not None
    robots = "http://h2.sim.test/robots.txt"
    plan = FaultPlan([Fault("stall", 1.0, urls={robots}, transient=False)], seed=1)
    assert plan.decide(robots, "h2.sim.test", True).fault.kind == "stall"
    assert plan.decide("http://h2.sim.test/", "h2.sim.test").fault is None
    with pytest.raises(ValueError):
        Fault("explode", 0.5)
    with pytest.raises(ValueError):
        Fault("404", 1.5)


@pytest.mark.async_timeout(30)
async def test_transient_faults_live_rate_and_retry_wins():
    cfg = SimConfig(hosts=2, seed=6, gzip_ratio=0, chunked_ratio=0,
                    faults=[Fault("503", 0.5, hosts={"h0.sim.test"})])
    async with Sim(cfg) as sim:
        h = sim.web.hosts["h0.sim.test"]
        c = await Client.connect(h.ip, sim.port)
        statuses = [(await c.get(h.name, "/")).status for _ in range(400)]
        assert set(statuses) == {200, 503}
        assert abs(statuses.count(503) / 400 - 0.5) < 0.1
        # a retry eventually wins
        assert any(a == 503 and b == 200 for a, b in zip(statuses, statuses[1:]))
        await c.close()
        logged = [r.fault for r in sim.log.requests]
        assert logged.count("503") == statuses.count(503)


@pytest.mark.async_timeout(30)
async def test_robots_fault_applies_when_targeted():
    cfg = SimConfig(hosts=2, seed=6, robots_mix={"rules": 1},
                    faults=[Fault("503", 1.0, hosts={"h1.sim.test"}, robots=True, transient=False)])
    async with Sim(cfg) as sim:
        h = sim.web.hosts["h1.sim.test"]
        c = await Client.connect(h.ip, sim.port)
        assert (await c.get(h.name, "/robots.txt")).status == 503
        await c.close()
        t = sim.truth()
        assert "h1.sim.test" in t.robots_hosts
        assert t.expected_reason[h.root(sim.port)] == "forbiddenRobots"


def test_latency_from_a_distribution():
    plan = FaultPlan([Fault("latency", 1.0, delay=lambda r: r.expovariate(20.0))], seed=2)
    delays = [plan.decide(u, "h").delay for u in URLS]
    assert all(d >= 0 for d in delays) and len(set(delays)) == len(delays)
    assert abs(sum(delays) / len(delays) - 0.05) < 0.01
